"""Scoring the reward model while it trains: the rewards of a batch of token sequences (what
the training loop's forward and the evaluation both run) and the CheemsBench metrics of the
current weights on the eval set, every process scoring its share.

Imports torch and accelerate inside the functions that need them, so the trainer imports
without them.
"""

from __future__ import annotations

import math

from cheems.metrics import evaluate
from cheems.models.packing import pack_sequences, packed_backend
from cheems.models.sequences import default_token_budget, pad_right, plan_batches
from cheems.training.training_data import EvalSet

__all__ = ["batch_rewards", "evaluate_weights", "score_in_shares", "train_outputs"]


def batch_rewards(reward_model, seqs: list[list[int]], *, packing: bool, pad_id: int, device,
                  groups: list[list[int]] | None = None):
    """The rewards (n,) of token sequences ``seqs``: one packed row (each of ``groups``, lists
    of indices into ``seqs``, laying its common prefix down once), or one right-padded batch."""
    if packing:
        batch = pack_sequences(seqs, device, groups=groups, backend=packed_backend(device))
        return reward_model(batch.input_ids, packing=batch)
    return reward_model(*pad_right(seqs, pad_id, device))


def train_outputs(run, seqs: list[list[int]], lm_starts: list[int | None], groups: list[list[int]] | None = None):
    """One training forward of ``run``'s reward model under its autocast: ``(rewards, logits,
    targets)``. For the dual objective the LM logits and targets of the sequences whose
    ``lm_starts`` entry is not None (`cheems.training.dual.dual_outputs`); otherwise the rewards
    alone (`batch_rewards`, ``groups`` sharing their prefixes), logits and targets None."""
    config, device, pad_id = run.config, run.accelerator.device, run.tokenizer.pad_token_id
    with run.accelerator.autocast():
        if config.objective == "dual":
            from cheems.training.dual import dual_outputs

            return dual_outputs(run.reward_model, seqs, lm_starts, packing=config.packing, pad_id=pad_id,
                                device=device)
        rewards = batch_rewards(run.reward_model, seqs, packing=config.packing, groups=groups, pad_id=pad_id,
                                device=device)
        return rewards, None, None


def score_in_shares(accelerator, model, seqs: list[list[int]], score_batch, *, batch_size: int,
                    packing: bool) -> dict[int, float]:
    """``{index: value}`` of every sequence of ``seqs``, ``score_batch(batch)`` giving a batch's
    values (a list or tensor, one per sequence of ``batch``, a list of indices). Every process
    scores every n-th batch, padded to the same number of batches (ZeRO-3 gathers weights
    collectively; a repeat scores again, the dict keeps one), with the model in eval mode and
    no gradients; the values are gathered on every process."""
    import torch
    from accelerate.utils import gather_object

    budget = default_token_budget(accelerator.device.type)
    batches = plan_batches([len(x) for x in seqs], token_budget=budget, max_batch_size=batch_size, packed=packing)
    n = accelerator.num_processes
    mine = batches[accelerator.process_index::n]
    mine = mine + [batches[0]] * (math.ceil(len(batches) / n) - len(mine))
    scored = []
    was_training = model.training
    model.eval()
    with torch.no_grad():
        for batch in mine:
            scored.extend(zip(batch, [float(v) for v in score_batch(batch)]))
    model.train(was_training)
    if n > 1:
        scored = gather_object(scored)
    return dict(scored)


def evaluate_weights(accelerator, reward_model, eval_set: EvalSet, pad_id: int, batch_size: int,
                     packing: bool) -> dict:
    """CheemsBench Accuracy / Exact Match / Overall of the current weights on the eval set,
    every process scoring its share (`score_in_shares`)."""
    def rewards(batch: list[int]):
        return batch_rewards(reward_model, [eval_set.ids[i] for i in batch], packing=packing, pad_id=pad_id,
                             device=accelerator.device).tolist()

    values = score_in_shares(accelerator, reward_model, eval_set.ids, rewards, batch_size=batch_size, packing=packing)
    scores = {eval_set.keys[i]: v for i, v in values.items()}
    report = evaluate(eval_set.prompts, scores, n_bootstrap=0)
    subsets = {name: {"accuracy": e["accuracy"], "exact_match": e["exact_match"], "score": e["score"]}
               for name, e in report["subsets"].items() if e["score"] is not None}
    means = {k: sum(s[k] for s in subsets.values()) / len(subsets) if subsets else None
             for k in ("accuracy", "exact_match")}
    return {"overall": report["overall"], **means, "subsets": subsets}
