"""The dual-path reward model: one causal LM, two heads (Yang et al. 2024, "Regularizing Hidden
States Enables Learning Generalizable Reward Model").

A causal LM's backbone reads each conversation once; its hidden states feed

- the scalar head ``score`` (Linear hidden -> 1, no bias, initialised as transformers
  initialises a ``*ForSequenceClassification`` head), read at each sequence's last token: the
  rewards, trained by Bradley-Terry;
- the LM head, applied only at the positions whose next token is a token of a prompt's best
  response (position t predicts token t + 1; `generation_targets`), never to the whole row:
  the logits of the LM loss that keeps the hidden states good at generating text.

The loss is ``(1 - lm_coef) * BT + lm_coef * L_gen`` (:func:`cheems.training.loss.dual_loss`).

- `DualModel`: the wrapped model the trainer runs (a peft model inside when training LoRA);
  ``forward`` returns the rewards, and with ``lm_at`` the LM logits at those positions too.
- `dual_outputs`: rewards, logits and targets of a batch of token sequences (packed or padded).
- `load_causal_lm`, `new_score_head`: the starting model and its new head.
- `write_value_head`: the head beside a checkpoint's causal LM, as the official v-head layout
  keeps it (``cheems score`` and ``cheems convert`` read such a folder).
- `export_dual_model`: the final model, written as a standard ``*ForSequenceClassification``
  checkpoint (the scalar path, through :func:`cheems.models.convert.convert_v_head_checkpoint`)
  with the causal LM and its tokenizer in ``generative/`` (the generative path).

Imports torch at the top: only the trainer's functions import this module, once torch is
known to be installed.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Sequence

import torch

from cheems.models.checkpoints import quiet_transformers, unwrap_peft, weights_that_fit
from cheems.models.packing import pack_sequences, packed_backend, rewards_at
from cheems.models.sequences import device_tensor, pad_right, reward_at_last_token
from cheems.records import CheemsInputError

__all__ = ["GENERATIVE_DIR", "VALUE_HEAD_FILE", "DualModel", "dual_outputs", "export_dual_model",
           "generation_targets", "load_causal_lm", "new_score_head", "write_value_head"]

GENERATIVE_DIR = "generative"
"""The folder inside a dual run's output that holds the causal LM (the generative path)."""
VALUE_HEAD_FILE = "value_head.safetensors"
"""The file beside a checkpoint's causal LM that holds the scalar head (``v_head.weight``)."""


class DualModel(torch.nn.Module):
    """A causal LM ``inner`` (or a peft model around one) and the scalar head ``score``.

    ``forward(input_ids, attention_mask)`` returns the rewards (n,) at each row's last real
    token; with ``packing`` (the `PackedBatch` of ``input_ids``) one reward per packed
    sequence, as :class:`cheems.training.reward_model.RewardModel` does. With ``lm_at`` (long
    (m,), positions in the hidden states flattened to (rows x width, hidden)) it returns
    ``(rewards, logits)``, the LM head applied at those m positions only: (m, vocab)."""

    def __init__(self, inner, score: torch.nn.Linear):
        super().__init__()
        self.inner = inner
        self.score = score

    @property
    def causal_lm(self):  # the *ForCausalLM (LoRA layers inside when peft)
        return unwrap_peft(self.inner)

    def forward(self, input_ids, attention_mask=None, packing=None, lm_at=None):
        core = self.causal_lm
        base = getattr(core, core.base_model_prefix)
        if packing is not None:  # one packed row (1, T)
            hidden = base(input_ids=input_ids, position_ids=packing.position_ids,
                          cheems_packing=packing).last_hidden_state
            rewards = rewards_at(hidden, packing, self.score).float()  # (n,)
        else:
            hidden = base(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
            rewards = reward_at_last_token(hidden, attention_mask, self.score).float()  # (n,)
        if lm_at is None:
            return rewards
        picked = hidden.reshape(-1, hidden.shape[-1])[lm_at]  # (m, hidden)
        return rewards, core.get_output_embeddings()(picked)  # (m, vocab)


def new_score_head(config, seed: int) -> torch.nn.Linear:
    """A new scalar head for a model of ``config``: Linear(hidden, 1) without bias, its weight
    drawn from N(0, initializer_range^2) as transformers draws a sequence-classification
    head's, by a generator of its own seeded with ``seed``."""
    head = torch.nn.Linear(config.hidden_size, 1, bias=False)
    with torch.no_grad():
        head.weight.normal_(0.0, getattr(config, "initializer_range", 0.02),
                            generator=torch.Generator().manual_seed(seed))
    return head


def load_causal_lm(path: str | os.PathLike, tokenizer):
    """The ``AutoModelForCausalLM`` at ``path`` in float32, ``config.pad_token_id`` set to the
    tokenizer's: where dual and generative training start. A checkpoint without the weights of
    a causal LM (a ``*ForSequenceClassification`` has no LM head: it would train a random one),
    or whose config transformers has no causal LM for, is one CheemsInputError naming the
    folder. (`TrainConfig.validate` refuses a reward model from its config.json before this.)"""
    from transformers import AutoModelForCausalLM

    try:
        with quiet_transformers(), weights_that_fit(path):
            model, info = AutoModelForCausalLM.from_pretrained(path, output_loading_info=True, dtype=torch.float32)
    except ValueError as e:  # a config transformers has no causal LM for
        raise CheemsInputError(f"not a causal language model ({str(e).splitlines()[0]})", file=str(path)) from None
    missing = sorted(info["missing_keys"])
    if missing:
        raise CheemsInputError(f"training starts from a causal LM; {len(missing)} of its weights are not in this "
                               f"checkpoint (e.g. {', '.join(missing[:3])})", file=str(path))
    if not hasattr(model, getattr(model, "base_model_prefix", "") or "-") or model.get_output_embeddings() is None:
        raise CheemsInputError("expected a decoder *ForCausalLM model with an LM head", file=str(path))
    model.config.pad_token_id = tokenizer.pad_token_id
    return model


def generation_targets(seqs: Sequence[Sequence[int]], starts: Sequence[int | None],
                       offsets: Sequence[int]) -> tuple[list[int], list[int]]:
    """``(positions, targets)`` of the LM loss for sequences ``seqs``: for each sequence i whose
    response starts at ``starts[i]`` (None: no LM loss), the hidden-state positions
    ``offsets[i] + t`` for t = max(start, 1) - 1 .. len - 2, each predicting token t + 1 of the
    sequence. The first token predicted is the response's first (the sequence's first token
    has no position before it), so a prompt token is never a target. O(targets)."""
    positions: list[int] = []
    targets: list[int] = []
    for seq, start, offset in zip(seqs, starts, offsets):
        if start is None:
            continue
        first = max(start, 1)
        positions.extend(range(offset + first - 1, offset + len(seq) - 1))
        targets.extend(seq[first:])
    return positions, targets


def dual_outputs(model, seqs: list[list[int]], starts: Sequence[int | None], *, packing: bool, pad_id: int,
                 device):
    """``(rewards (n,), logits (m, vocab), targets (m,))`` of token sequences ``seqs`` in one
    forward pass of ``model`` (a `DualModel`, possibly wrapped): one packed row, or one
    right-padded batch; the logits and targets as `generation_targets` lists them."""
    if packing:
        batch = pack_sequences(seqs, device, backend=packed_backend(device))
        offsets = [g.members[0][0] for g in batch.groups]  # each sequence a group of its own
    else:
        input_ids, mask = pad_right(seqs, pad_id, device)
        offsets = [i * input_ids.shape[1] for i in range(len(seqs))]
    positions, targets = generation_targets(seqs, starts, offsets)
    lm_at = device_tensor(positions, device)
    if packing:
        rewards, logits = model(batch.input_ids, packing=batch, lm_at=lm_at)
    else:
        rewards, logits = model(input_ids, mask, lm_at=lm_at)
    return rewards, logits, device_tensor(targets, device)


def write_value_head(folder: Path, weight) -> Path:
    """``folder/value_head.safetensors`` holding ``weight`` (1, hidden) as ``v_head.weight``:
    with a causal LM beside it, the official v-head layout (no bias)."""
    from safetensors.torch import save_file

    f = Path(folder) / VALUE_HEAD_FILE
    save_file({"v_head.weight": weight.detach().to("cpu", torch.float32).reshape(1, -1).contiguous()}, str(f),
              metadata={"format": "pt"})
    return f


def export_dual_model(accelerator, output: Path, dual_model, tokenizer, *, merge_lora: bool) -> None:
    """The trained dual model in ``output`` (an empty folder): the scalar path as a standard
    one-label ``*ForSequenceClassification`` checkpoint with its tokenizer (its backbone the
    causal LM's, its ``score`` the trained head: it scores as the trained model does), and
    the causal LM with its tokenizer in ``output/generative``. LoRA adapters are merged in when
    ``merge_lora``. Called by every process (gathering the weights is a collective)."""
    from cheems.models.convert import convert_v_head_checkpoint

    accelerator.wait_for_everyone()
    # LoRA is refused under ZeRO-3, so its weights are whole on every process: merge them
    state = None if merge_lora else accelerator.get_state_dict(dual_model)
    if accelerator.is_main_process:
        unwrapped = accelerator.unwrap_model(dual_model)
        inner, head = unwrapped.inner, unwrapped.score.weight
        if merge_lora:
            inner, inner_state = inner.merge_and_unload(), None
        else:
            inner_state = {k[len("inner."):]: v for k, v in state.items() if k.startswith("inner.")}
            head = state["score.weight"]
        generative = output / GENERATIVE_DIR
        inner.save_pretrained(generative, state_dict=inner_state)
        tokenizer.save_pretrained(generative)
        write_value_head(generative, head)
        scalar = output / ".scalar.tmp"
        try:
            convert_v_head_checkpoint(generative, scalar, dtype=None)
            for f in sorted(scalar.iterdir()):
                os.replace(f, output / f.name)
        finally:
            (generative / VALUE_HEAD_FILE).unlink(missing_ok=True)
            shutil.rmtree(scalar, ignore_errors=True)
    accelerator.wait_for_everyone()
