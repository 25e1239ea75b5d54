"""How many optimizer steps a run plans, and the note it gives before step 1 when they are few.

A run takes ``epochs x ceil(forward batches of an epoch / gradient_accumulation)`` optimizer
steps (`step_groups` extends an epoch's batches to fill its last step); a forward batch holds
at most ``micro_batch_size`` sequences per process (and the token budget's tokens). With the
paper's defaults, 8 x 32 = 256 sequences a step, a few hundred pairs make only a few steps an
epoch. A scalar head (bt, dual) learns a plain preference in that many; a generative judge,
which has to move one verdict token, mostly learns the position of the answer instead
(docs/training.md, "How many steps", measured with ``benchmarks/bench_step_needs.py``).

`few_steps_note` is the line said when a plan has fewer than its objective's `FEW_STEPS` (100
for bt and dual, 200 for generative): the step count and,
for each flag that gives more (``--gradient-accumulation``, ``--micro-batch-size``,
``--epochs``), the value to try and the steps it would give, counted as the run counts them.
`say_few_steps` hands it to the run's ``notify`` (the CLI prints it) or, for a caller who
passed none, to ``warnings.warn`` as a `FewStepsWarning`.
"""

from __future__ import annotations

import math
import warnings
from typing import Callable

from cheems.records import Notice, Setting
from cheems.training.config import TrainConfig

__all__ = ["FEW_STEPS", "FewStepsWarning", "few_steps_note", "planned_steps", "say_few_steps"]

FEW_STEPS = {"bt": 100, "dual": 100, "generative": 200}
"""Per objective, a plan with fewer optimizer steps than this gets a note before it starts. On
the marker task (docs/training.md, "How many steps") bt and dual learn in 20 steps; a harder
preference takes more, hence 100. The generative judge learns only the position of the answer
in 100 steps and the preference in 150 or more, hence 200."""

_WHY = {
    "bt": "a scalar head learns an easy preference in fewer, a harder one needs more",
    "dual": "a scalar head learns an easy preference in fewer, a harder one needs more",
    "generative": "in fewer a generative judge mostly learns to favour one position, not the better answer",
}


class FewStepsWarning(UserWarning):
    """A training run plans fewer than `FEW_STEPS` optimizer steps."""


def planned_steps(batches: int, gradient_accumulation: int, epochs: int) -> int:
    """Optimizer steps of ``epochs`` epochs of ``batches`` forward batches each, as
    :func:`cheems.training.recipe_setup.step_groups` groups them: the last step of an epoch is
    filled from the epoch's start."""
    return math.ceil(batches / gradient_accumulation) * epochs


def _accumulation_for_more(config: TrainConfig, batches: int, enough: int) -> tuple[int, int] | None:
    """``(gradient_accumulation, steps)``: the largest accumulation under the run's that plans
    ``enough`` steps or more (1 when none does); None when the run's is already 1."""
    for ga in range(config.gradient_accumulation - 1, 0, -1):
        steps = planned_steps(batches, ga, config.epochs)
        if steps >= enough or ga == 1:
            return ga, steps
    return None


def _micro_batch_for_more(config: TrainConfig, batches_at: Callable[[int], int], steps: int, enough: int,
                          smallest: int) -> tuple[int, int] | None:
    """``(micro_batch_size, steps)``: halving the run's micro batch until the plan reaches
    ``enough`` steps (or ``smallest`` sequences); None when no smaller micro batch gives more
    steps (the token budget may be what cuts the batches). ``batches_at(m)``: the first epoch's
    forward batches planned with micro batch ``m``."""
    best = None
    m = config.micro_batch_size // 2
    while m >= max(1, smallest):
        more = planned_steps(batches_at(m), config.gradient_accumulation, config.epochs)
        if more > steps:
            best = (m, more)
            if more >= enough:
                break
        m //= 2
    return best


def few_steps_note(config: TrainConfig, batches: int, batches_at: Callable[[int], int],
                   smallest_micro_batch: int = 1) -> str | None:
    """The note for a run whose first epoch has ``batches`` forward batches, or None when it
    plans its objective's `FEW_STEPS` or more. ``batches_at(m)`` plans the first epoch again
    with micro batch ``m`` (called only for a note, a few times); no micro batch under
    ``smallest_micro_batch`` is proposed (bt and dual: a prompt's responses, so that its pairs
    still meet in one forward batch)."""
    enough = FEW_STEPS[config.objective]
    per_epoch = planned_steps(batches, config.gradient_accumulation, 1)
    steps = per_epoch * config.epochs
    if steps >= enough:
        return None
    ways: list[tuple[str, str]] = []  # (setting, "value (steps)")
    found = _accumulation_for_more(config, batches, enough)
    if found is not None:
        ways.append(("gradient_accumulation", f" {found[0]} ({found[1]} steps)"))
    found = _micro_batch_for_more(config, batches_at, steps, enough, smallest_micro_batch)
    if found is not None:
        ways.append(("micro_batch_size", f" {found[0]} ({found[1]} steps)"))
    epochs = math.ceil(enough / per_epoch)
    ways.append(("epochs", f" {epochs} ({epochs * per_epoch} steps)"))
    pieces = [f"note: {steps} optimizer step(s) planned ({config.epochs} epoch(s) x {per_epoch}, each step "
              f"{config.gradient_accumulation} forward batch(es) of up to {config.micro_batch_size} sequences), "
              f"under about {enough} for ", Setting("objective"), f" {config.objective}: "
              f"{_WHY[config.objective]} (docs/training.md, \"How many steps\"). More steps: "]
    for i, (name, value) in enumerate(ways):
        pieces += [", " if 0 < i < len(ways) - 1 else " or " if i else "", Setting(name), value]
    return Notice(*pieces)


def say_few_steps(config: TrainConfig, batches: int, batches_at: Callable[[int], int],
                  notify: Callable[[str], None] | None, smallest_micro_batch: int = 1) -> None:
    """Say `few_steps_note` when there is one: to ``notify``, else as a `FewStepsWarning`."""
    note = few_steps_note(config, batches, batches_at, smallest_micro_batch)
    if note is None:
        return
    if notify is not None:
        notify(note)
    else:
        warnings.warn(note, FewStepsWarning, stacklevel=4)
