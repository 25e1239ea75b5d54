"""Token budgets that fit the GPU, found rather than guessed, and running out of memory said in one line.

A forward batch's token budget (``--token-budget``) sets most of the memory a step takes: the
activations grow with the tokens of the batch. Too small a budget wastes the GPU, too large a
one ends in ``torch.OutOfMemoryError``. With ``--token-budget auto``:

- :func:`probe_token_budget` finds the largest budget whose worst-case batch runs (the caller's
  ``run(budget)`` builds and runs one: a forward and backward pass for training, a forward pass
  for scoring), doubling from ``start`` until a probe fails or ``ceiling`` is reached, then
  bisecting between the last budget that ran and the first that did not, to within ``granule``
  tokens; the budget used is that one times ``headroom`` (the allocator's fragmentation and the
  optimizer's state come on top of one step's peak), rounded down to ``granule``. Probes assume
  that what runs at b tokens runs at fewer: O(log(ceiling / granule)) probes.
- :func:`out_of_memory_error` turns an out-of-memory error at any later point into one
  :class:`~cheems.records.CheemsInputError` naming the budget that failed and the one to try.

The standard library only at import: torch is imported inside the functions that need it.
"""

from __future__ import annotations

import contextlib
import gc
from typing import Callable, Iterator

from cheems.records import CheemsInputError

__all__ = ["AUTO", "GRANULE", "HEADROOM", "free_cached_memory", "is_out_of_memory", "out_of_memory_error",
           "out_of_memory_said", "probe_sequences", "probe_token_budget", "smaller_budget"]

AUTO = "auto"
"""The ``--token-budget`` value that asks for a probe."""

HEADROOM = 0.85
"""The share of the largest budget that ran which is used: one step's peak is not the whole story
(fragmentation over steps of different shapes, the optimizer's state allocated at its first step)."""

GRANULE = 256
"""Budgets are multiples of this many tokens."""


def is_out_of_memory(error: BaseException) -> bool:
    """Whether ``error`` is the accelerator running out of memory (``torch.OutOfMemoryError``, or
    the plain ``RuntimeError`` some kernels raise with the same words)."""
    try:
        import torch
    except ImportError:  # the core install: no accelerator to run out of
        return False
    oom = getattr(torch, "OutOfMemoryError", None) or getattr(torch.cuda, "OutOfMemoryError", ())
    if isinstance(error, oom):
        return True
    return isinstance(error, RuntimeError) and "out of memory" in str(error).lower()


def free_cached_memory() -> None:
    """Drop what a failed or finished probe left: Python's garbage, then the CUDA cache."""
    gc.collect()
    try:
        import torch
    except ImportError:
        return
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def probe_sequences(budget: int, longest: int, vocab_size: int, generator) -> list[list[int]]:
    """A probe's worst-case batch: ``budget`` random token ids (below ``vocab_size``, drawn from
    the torch ``generator``) as sequences of ``longest`` tokens, the last one shorter."""
    import torch

    ids = torch.randint(0, vocab_size, (budget,), generator=generator).tolist()
    return [ids[i:i + longest] for i in range(0, budget, longest)]


def smaller_budget(budget: int) -> int:
    """The budget to try after ``budget`` ran out of memory: three quarters of it, rounded down
    to whole granules (to 16 tokens below four granules)."""
    step = GRANULE if budget >= 4 * GRANULE else 16
    return max(1, int(budget * 0.75) // step * step) if budget >= 2 * step else max(1, budget * 3 // 4)


def probe_token_budget(run: Callable[[int], None], *, start: int, ceiling: int, headroom: float = HEADROOM,
                       granule: int = GRANULE, release: Callable[[], None] = free_cached_memory
                       ) -> tuple[int, list[tuple[int, bool]]]:
    """``(budget, probes)``: the budget to use, found by calling ``run(b)`` for budgets ``b``
    (see the module docs), and each probe's ``(b, ran)`` in order. ``run`` must raise an
    out-of-memory error (:func:`is_out_of_memory`) when ``b`` does not fit; any other error goes
    through. ``release()`` runs after each probe (the GPU's cache emptied). When not even
    ``granule`` tokens run, one CheemsInputError says so."""
    if not 0 < headroom <= 1:
        raise ValueError(f"headroom must be in (0, 1], got {headroom}")
    ceiling = max(granule, ceiling // granule * granule)
    probes: list[tuple[int, bool]] = []

    def fits(b: int) -> bool:
        try:
            run(b)
            ran = True
        except Exception as e:  # noqa: BLE001  (only out-of-memory errors are answers)
            if not is_out_of_memory(e):
                raise
            ran = False
        release()
        probes.append((b, ran))
        return ran

    b = min(ceiling, max(granule, start // granule * granule))
    ran_at, failed_at = 0, None
    while True:  # doubling: find a budget that fails, or the ceiling running
        if fits(b):
            ran_at = b
            if b >= ceiling:
                break
            b = min(ceiling, b * 2)
        else:
            failed_at = b
            break
    if ran_at == 0:  # the first probe failed: halve down to one granule
        b = failed_at
        while b > granule and ran_at == 0:
            b = max(granule, b // 2 // granule * granule)
            if fits(b):
                ran_at = b
            else:
                failed_at = b
        if ran_at == 0:
            raise CheemsInputError(f"out of GPU memory even at {granule} tokens in a forward batch: the model "
                                   "does not fit; try gradient checkpointing, LoRA (lora_r) or a larger GPU",
                                   field="token_budget")
    while failed_at is not None and failed_at - ran_at > granule:  # bisection between ran and failed
        mid = (ran_at + failed_at) // 2 // granule * granule
        if mid <= ran_at:
            break
        if fits(mid):
            ran_at = mid
        else:
            failed_at = mid
    return max(granule, int(ran_at * headroom) // granule * granule), probes


def out_of_memory_error(budget: int | None, tokens: int, *, auto: bool = False) -> CheemsInputError:
    """The one-line error for a forward batch of ``tokens`` tokens that ran out of memory under
    token budget ``budget`` (None: no budget was set), naming the budget to try."""
    if budget is None:
        fix = f"set {{}} {smaller_budget(max(GRANULE, tokens))} or {{}} auto"
        said = "no token budget"
    else:
        fix = f"try {{}} {smaller_budget(budget)}" + ("" if auto else " or {} auto")
        said = f"token budget {budget}" + (", found by probing" if auto else "")
    return CheemsInputError(f"out of GPU memory on a forward batch of {tokens} tokens ({said})",
                            field="token_budget", remedy=("token_budget", fix))


@contextlib.contextmanager
def out_of_memory_said(where: Callable[[], tuple[int | None, int]], *, auto: bool = False) -> Iterator[None]:
    """Running out of GPU memory inside the block becomes `out_of_memory_error`'s one line;
    ``where()``, called then, gives (the token budget, the tokens of the batch that failed).
    Any other error goes through."""
    try:
        yield
    except Exception as e:  # noqa: BLE001  (only out-of-memory errors are turned into a line)
        if not is_out_of_memory(e):
            raise
        budget, tokens = where()
        raise out_of_memory_error(budget, tokens, auto=auto) from None
