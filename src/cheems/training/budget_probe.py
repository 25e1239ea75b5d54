"""``--token-budget auto`` for training: the largest forward batch that fits, probed before the first step.

:func:`training_token_budget` resolves a run's token budget per process. A number is used as
given (`token_budget_per_process`); ``auto`` on a GPU runs
:func:`cheems.models.memory_budget.probe_token_budget` with the run's own model, settings and
objective: each probe is one forward and backward pass of a worst-case batch of that many
tokens (sequences as long as the longest training sequence, random token ids) under the run's
autocast, gradient checkpointing and LoRA, while memory for AdamW's two moments of every
trainable weight is held aside (they are allocated at the first optimizer step, after the
probe). The budget never exceeds what the planner could put in one batch (micro batch size x
the longest sequence). On CPU, ``auto`` is the default (the micro batch size alone). A resumed
run reuses the budget its checkpoint recorded, so its batches are the ones it was planned with.

Under DDP every process probes its own GPU and all use the smallest budget found; DeepSpeed
and FSDP shard the model, so one unsharded probe would not measure their memory: there a
number is asked for.
"""

from __future__ import annotations

from typing import Callable, Sequence

from cheems.models.memory_budget import AUTO, probe_sequences, probe_token_budget, smaller_budget
from cheems.models.sequences import DEFAULT_TOKEN_BUDGET
from cheems.records import CheemsInputError
from cheems.training.config import TrainConfig

__all__ = ["PROBE_START", "token_budget_per_process", "training_token_budget"]

PROBE_START = 16384
"""The first budget probed (then doubled or bisected): the default budget on a GPU."""


def token_budget_per_process(config: TrainConfig, device) -> int | None:
    """A forward batch's token cap on one process: ``config.token_budget``, else on a GPU
    ``DEFAULT_TOKEN_BUDGET["cuda"]``, else none (the micro batch size alone)."""
    if config.token_budget and config.token_budget != AUTO:  # auto: `training_token_budget`
        return config.token_budget
    return DEFAULT_TOKEN_BUDGET["cuda"] if str(device).startswith("cuda") else None


def training_token_budget(config: TrainConfig, accelerator, module, lengths: Sequence[int], *,
                          step_loss: Callable, recorded: int | None = None,
                          below: int | None = None, notify: Callable[[str], None] | None = None) -> int | None:
    """The run's forward-batch token cap per process (see the module docs). ``module`` is the
    unprepared module the trainer wraps (moved to the device here when probing);
    ``step_loss(module, seqs)`` the objective's scalar loss of a batch of token sequences (AdamW's
    state is held aside for the module's trainable weights); ``recorded``
    the budget a resumed checkpoint was trained with; ``below`` a budget that ran out of memory in
    training (a second probe then stays under it)."""
    if config.token_budget != AUTO:
        return token_budget_per_process(config, accelerator.device)
    if recorded is not None:
        return recorded
    if accelerator.device.type != "cuda" or not lengths:
        return None  # CPU: memory is seldom the bound; the micro batch size caps a batch
    kind = accelerator.distributed_type.value
    if kind in ("DEEPSPEED", "FSDP"):
        raise CheemsInputError(f"the automatic token budget probes one unsharded GPU; under {kind} give a number",
                               field="token_budget")
    trainable = sum(p.numel() for p in module.parameters() if p.requires_grad)
    budget, probes = _probe(accelerator, module, max(lengths), config.micro_batch_size, step_loss, trainable, below)
    if accelerator.num_processes > 1:
        import torch

        budget = int(accelerator.gather(torch.tensor([budget], device=accelerator.device)).min())
    if notify is not None and accelerator.is_main_process:
        ran = max((b for b, ok in probes if ok), default=budget)
        notify(f"token budget auto: {budget} tokens per forward batch per process (the largest batch that ran was "
               f"{ran} tokens, {len(probes)} probe(s); {budget / ran:.0%} of it is used)")
    return budget


def _probe(accelerator, module, longest: int, micro_batch_size: int, step_loss: Callable,
           trainable: int, below: int | None) -> tuple[int, list[tuple[int, bool]]]:
    import torch

    device = accelerator.device
    module.to(device)
    vocab = int(getattr(_config_of(module), "vocab_size", 0) or 32000)
    generator = torch.Generator().manual_seed(0)
    ceiling = max(1, micro_batch_size) * longest
    if below is not None:
        ceiling = min(ceiling, smaller_budget(below))

    def run(budget: int) -> None:
        seqs = probe_sequences(budget, longest, vocab, generator)
        try:
            with accelerator.autocast():
                loss = step_loss(module, seqs)
            loss.backward()
        finally:
            module.zero_grad(set_to_none=True)

    optimizer_state = torch.empty(2 * trainable * 4, dtype=torch.uint8, device=device)  # AdamW's moments, fp32
    try:
        with torch.random.fork_rng(devices=[device]):  # dropout in the probes leaves the run's RNG as it was
            return probe_token_budget(run, start=min(PROBE_START, ceiling), ceiling=ceiling)
    finally:
        del optimizer_state


def _config_of(module):
    """The transformers config inside a trainer's module (RewardModel, DualModel, peft-wrapped)."""
    for m in module.modules():
        config = getattr(m, "config", None)
        if config is not None and hasattr(config, "vocab_size"):
            return config
    return None
