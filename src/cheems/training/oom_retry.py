"""Going on after running out of GPU memory in the middle of a run (``--token-budget auto``, one process).

Before the first step an out-of-memory error makes the trainer probe again under the budget
that failed (:func:`cheems.training.trainer.train`). Later, with ``auto`` and one process, the
run is not lost: the failed attempt's memory is freed, its gradients are dropped, the run's
token budget is lowered (`smaller_budget` of the smaller of the budget and the failing batch's
tokens, so the batch that failed is always cut) and the optimizer step is done again from its
first forward batch, on the same pairs, each forward batch over the lowered budget cut into
`Piece` s that fit it (`split_batch`). `notify` gets one note per lowering.

Why the step's gradient stays the same: a forward batch's loss is the mean over its pairs of
``-log sigmoid(r_w - r_l)`` plus ``reg_coef`` times the mean of ``r^2`` over its sequences
(for dual, plus the LM loss, a mean over its target tokens), and a step sums its batches'
losses over ``gradient_accumulation``. A piece carries its share of the batch's loss: the sum
over its pairs divided by the batch's pair count, the sum of ``r^2`` over the sequences it
counts divided by the batch's sequence count (each sequence counted in the first piece that
holds it), and for dual its counted sequences' LM terms divided by the batch's target count
(`bradley_terry_terms` with the batch's counts). The pieces' losses add up to the batch's loss, term by term, so their
gradients add up to its gradient (up to float rounding). A pair's two sequences are always in
one piece; a sequence in pairs of two pieces is forwarded in both, with the same weights and
tokens, so it gets the same reward.

The batches stay the ones planned with the run's first budget (`MemoryCap.planned`): the step
count, the learning-rate schedule and ``--resume`` do not change. A checkpoint keeps the
planned budget as ``token_budget`` and, after a lowering, the budget the run went on with as
``lowered_token_budget`` (`cheems.training.output_folder.save_checkpoint`); a resumed run reads it back
(`resumed_budget`) and cuts its batches as the interrupted run did.

When a forward batch holding one pair (or one sequence) runs out of memory, nothing is left
to cut: that ends in the usual one line (`out_of_memory_error`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

from cheems.models.memory_budget import is_out_of_memory, out_of_memory_error, smaller_budget

__all__ = ["LOWERED_KEY", "MemoryCap", "Piece", "batch_cost", "pieces_forward_backward",
           "resumed_budget", "split_batch"]

LOWERED_KEY = "lowered_token_budget"
"""The key of ``trainer_state.json`` that holds the budget a run went on with after running out of memory."""


@dataclass(frozen=True)
class Piece:
    """Part of a forward batch run on its own: ``rows`` (indices into the training items) are
    forwarded together; ``better`` / ``worse`` are positions in ``rows`` of each pair it trains;
    ``counted`` the positions whose reward's square (and LM loss) it counts; ``units`` the
    pairs and unpaired sequences it holds (one: it cannot be cut further)."""

    rows: tuple[int, ...]
    better: tuple[int, ...]
    worse: tuple[int, ...]
    counted: tuple[int, ...]
    units: int


def batch_cost(rows: Sequence[int], lengths: Sequence[int], packed: bool) -> int:
    """The tokens a forward batch of ``rows`` takes as the planner counts them: the sum of
    the lengths in one packed row, else the longest length times the number of rows."""
    if not rows:
        return 0
    return sum(lengths[i] for i in rows) if packed else max(lengths[i] for i in rows) * len(rows)


def split_batch(rows: Sequence[int], pairs: Sequence[tuple[int, int]], lengths: Sequence[int], budget: int,
                packed: bool) -> list[Piece]:
    """A forward batch of ``rows`` whose training ``pairs`` (``(better, worse)`` rows) are
    ``pairs``, cut into pieces of at most ``budget`` tokens (`batch_cost`), keeping each pair
    whole. The units are the pairs in order, then each row in no pair; a unit joins the
    current piece while the piece stays within ``budget`` with it, else it starts the next
    piece (a unit over ``budget`` stands alone). Every pair lands in exactly one piece, every
    row's reward square is counted in the first piece holding it. O(units x piece size)."""
    paired = {i for pair in pairs for i in pair}
    units: list[tuple[tuple[int, ...], tuple[int, int] | None]] = [(tuple(dict.fromkeys(p)), p) for p in pairs]
    units += [((i,), None) for i in rows if i not in paired]
    groups: list[tuple[list[int], list[tuple[int, int]], int]] = []
    for unit, pair in units:
        if groups:
            members, in_pairs, n = groups[-1]
            grown = members + [i for i in unit if i not in members]
            if batch_cost(grown, lengths, packed) <= budget:
                groups[-1] = (grown, in_pairs + ([pair] if pair else []), n + 1)
                continue
        groups.append((list(unit), [pair] if pair else [], 1))
    seen: set[int] = set()
    pieces = []
    for members, in_pairs, n in groups:
        at = {i: k for k, i in enumerate(members)}
        counted = tuple(k for k, i in enumerate(members) if i not in seen)
        seen.update(members)
        pieces.append(Piece(tuple(members), tuple(at[a] for a, _ in in_pairs), tuple(at[b] for _, b in in_pairs),
                            counted, n))
    return pieces


@dataclass
class MemoryCap:
    """A run's memory cap against its batch plan: ``planned`` is the budget the epochs'
    batches are planned with (it never changes, so neither do the steps); the cap itself is
    the run's ``token_budget``, lowered after an out-of-memory error when ``auto`` (``--token-budget
    auto`` and one process). ``lowered``: whether it was; ``units``: the pairs and unpaired
    sequences of the forward batch last started."""

    planned: int | None
    auto: bool
    notify: Callable[[str], None] | None = None
    lowered: bool = False
    units: int = 0

    def pieces(self, budget: int | None, rows: Sequence[int], pairs: Sequence[tuple[int, int]],
               lengths: Sequence[int], packed: bool) -> list[Piece] | None:
        """The pieces a forward batch runs as after a lowering (`split_batch`), or None to run
        it whole (no lowering yet, or it fits ``budget``)."""
        self.units = len(pairs) + len(set(rows) - {i for pair in pairs for i in pair})
        if not self.lowered or budget is None or batch_cost(rows, lengths, packed) <= budget:
            return None
        return split_batch(rows, pairs, lengths, budget, packed)

    def can_go_on(self, error: BaseException, first_step: bool) -> bool:
        """Whether ``error`` is one this cap answers by lowering: out of memory, with ``auto``,
        after the first step (before it, the trainer probes again)."""
        return self.auto and not first_step and is_out_of_memory(error)

    def lower(self, budget: int | None, tokens: int, step: int) -> int:
        """The budget to go on with after a forward batch of ``tokens`` tokens ran out of
        memory at ``budget`` in optimizer step ``step``, said in a note; the one-line error
        (`out_of_memory_error`) when that batch held a single pair or sequence."""
        if self.units <= 1:
            raise out_of_memory_error(budget, tokens, auto=True)
        new = smaller_budget(min(budget, tokens) if budget else tokens)
        self.lowered = True
        if self.notify is not None:
            at = f"at token budget {budget} (found by probing)" if budget else "with no token budget"
            self.notify(f"note: out of GPU memory on a forward batch of {tokens} tokens {at} at step {step}; going on "
                        f"at token budget {new} (the step is done again in smaller forward batches, on the same pairs)")
        return new


def pieces_forward_backward(run, rows: Sequence[int], pieces: list[Piece], n_pairs: int,
                            cap: MemoryCap) -> tuple[dict, int]:
    """Forward and backward of one forward batch (one process: ``rows``, its ``n_pairs``
    pairs) as ``pieces``, each on its own with its share of the batch's loss (`bradley_terry_terms` with the batch's counts;
    for dual `dual_loss` with the LM loss weighted by the piece's share of the batch's target
    tokens). Returns what `_forward_backward` returns for the whole batch: its ``loss``,
    ``pair_loss``, ``reg``, ``right`` (dual: ``lm_loss``) as detached device tensors, and
    ``n_pairs``."""
    data, accelerator, n_lm = run.data, run.accelerator, 0
    if run.config.objective == "dual":
        from cheems.training.dual import generation_targets

        n_lm = len(generation_targets([data.ids[i] for i in rows], [data.response_starts[i] for i in rows],
                                      [0] * len(rows))[1])
    sums: dict = {}
    with accelerator.accumulate(run.reward_model):  # one forward batch of the step, as unsplit
        for piece in pieces:
            cap.units = piece.units
            terms = _piece_forward_backward(run, piece, n_pairs=n_pairs, n_rows=len(rows), n_lm=n_lm)
            for k, v in terms.items():
                sums[k] = sums[k] + v if k in sums else v
    run.trained_tokens += sum(run.lengths[i] for i in rows)
    return sums, n_pairs


def _piece_forward_backward(run, piece: Piece, *, n_pairs: int, n_rows: int, n_lm: int) -> dict:
    """Forward and backward of one piece with its share of the batch's loss; its terms (and
    ``loss``) as detached device tensors. Its activations go when it returns."""
    from cheems.models.sequences import device_tensor
    from cheems.training.evaluation import train_outputs
    from cheems.training.loss import bradley_terry_terms, dual_loss, lm_loss

    config, data, device = run.config, run.data, run.accelerator.device
    dual = config.objective == "dual"
    seqs = [data.ids[i] for i in piece.rows]
    run.batch_tokens = sum(map(len, seqs))  # named if the piece runs out of memory
    counted = set(piece.counted) if dual else ()
    starts = [data.response_starts[i] if k in counted else None for k, i in enumerate(piece.rows)] if dual else []
    rewards, logits, targets = train_outputs(run, seqs, starts)
    loss, terms = bradley_terry_terms(rewards, device_tensor(list(piece.better), device),
                                      device_tensor(list(piece.worse), device), config.reg_coef,
                                      counted=device_tensor(list(piece.counted), device), n_pairs=n_pairs,
                                      n_rows=n_rows)
    if dual:
        gen = lm_loss(logits, targets) * (targets.numel() / n_lm if n_lm else 1.0)
        loss = dual_loss(loss, gen, config.lm_coef)
        terms = {**terms, "lm_loss": gen.detach()}
    run.accelerator.backward(loss)  # scaled by 1 / gradient_accumulation
    return {**terms, "loss": loss.detach()}


def _checkpoint_at(output: Path, step: int) -> Path | None:
    from cheems.training.output_folder import list_checkpoints

    return next((folder for at, folder in list_checkpoints(Path(output)) if at == step), None)


def resumed_budget(output: Path, step: int) -> int | None:
    """The lowered budget the checkpoint of ``step`` in ``output`` recorded, or None."""
    from cheems.training.output_folder import read_state

    folder = _checkpoint_at(output, step)
    value = read_state(folder).get(LOWERED_KEY) if folder is not None else None
    return value if isinstance(value, int) and value > 0 else None
