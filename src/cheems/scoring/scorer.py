"""The scorer interface: what every scoring back-end offers, read as plain attributes.

A scorer is what :func:`cheems.scoring.run.load_scorer` returns and what the server's engine,
:func:`cheems.scoring.run.score_to_file` and the batching of :mod:`cheems.scoring.batching`
work with: the transformers and vLLM reward models, a running ``cheems serve``
(:class:`~cheems.scoring.remote_scorer.RemoteScorer`), the length and random baselines and the
local judges. Each names itself and its limits the same way:

- ``name``: the model folder's name (or the baseline's, or the server's model);
- ``layout``: the checkpoint layout (``seq-cls``, ``v-head``), None where it is not known here;
- ``max_length``: most tokens in one sequence, None where no tokenizer runs here;
- ``token_budget``: most tokens in one forward batch, resolved when the model loaded (a number
  given, the device's default, or with ``auto`` the largest batch that fits the GPU), None
  where no forward batch runs here; ``token_budget_auto`` says it came from ``auto``;
- ``packing``, ``share_prefix``, ``fixed_shapes``: how forward batches are laid out;
- ``stats`` (:class:`~cheems.models.sequences.EncodeStats`) and ``row_stats`` (:class:`RowStats`):
  what encoding and packed rows counted, None where nothing is counted here.

:class:`ScorerDefaults` gives each attribute its "does not apply" value, so a back-end declares
only what it has and callers never probe. :class:`RewardScorer` adds the scoring call every
reward scorer answers (``score_prompts``); :class:`SequenceScorer` what the batching needs of a
model that runs here (``score_ids``, ``score_packed``, ``max_batch``).

The standard library only: the core install imports this without torch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterator, Protocol, Sequence, runtime_checkable

__all__ = ["Progress", "RewardScorer", "RowStats", "ScoredRows", "Scorer", "ScorerDefaults", "SequenceScorer"]

Progress = Callable[[int, int], None]
ScoredRows = Iterator[list[tuple[str, str, float]]]
"""Batches of (prompt id, response id, score), as a scorer's ``score_prompts`` yields them."""


@dataclass
class RowStats:
    """What the packed rows computed: ``rows`` forward rows, ``real_tokens`` the sequences'
    tokens (whole), ``row_tokens`` the rows' lengths (shared prefixes once, padding included),
    ``padding_tokens`` the fixed shapes' padding among them."""

    rows: int = 0
    real_tokens: int = 0
    row_tokens: int = 0
    padding_tokens: int = 0


@runtime_checkable
class Scorer(Protocol):
    """What every scoring back-end says about itself (see the module docs)."""

    name: str
    layout: str | None
    max_length: int | None
    token_budget: int | None
    token_budget_auto: bool
    packing: bool
    share_prefix: bool
    fixed_shapes: bool
    stats: object
    row_stats: RowStats | None


@runtime_checkable
class RewardScorer(Scorer, Protocol):
    """A scorer of responses: one float per (prompt, response)."""

    def score_prompts(self, prompts: Sequence, *, batch_size: int = 64, done: set | None = None,
                      progress: Progress | None = None) -> ScoredRows:
        """Score every response of ``prompts`` not in ``done`` (pairs (prompt id, response id)),
        yielding (prompt id, response id, score) batch by batch; ``progress(done, total)``
        after each batch."""
        ...


@runtime_checkable
class SequenceScorer(Scorer, Protocol):
    """A model run here on encoded sequences, what :func:`cheems.scoring.batching.scored_batches`
    batches: one value (or one row of values) per sequence."""

    def score_ids(self, batch: Sequence[Sequence[int]]) -> list:
        """The values of already-encoded sequences, as one right-padded batch."""
        ...

    def score_packed(self, seqs: Sequence[Sequence[int]], groups: Sequence[Sequence[int]] | None = None) -> list:
        """The values of already-encoded sequences packed into one row, each group of ``groups``
        (indices into ``seqs``) sharing its common prefix."""
        ...

    def max_batch(self, asked: int) -> int:
        """Most sequences in one call of ``score_ids``/``score_packed`` when ``asked`` were asked."""
        ...


class ScorerDefaults:
    """The value of each :class:`Scorer` attribute where it does not apply; a back-end inherits
    them and sets (or declares as dataclass fields) what it has."""

    name: str = ""
    layout: str | None = None
    max_length: int | None = None
    token_budget: int | None = None
    token_budget_auto: bool = False
    packing: bool = False
    share_prefix: bool = False
    fixed_shapes: bool = False
    stats: object = None
    row_stats: RowStats | None = None

    def max_batch(self, asked: int) -> int:
        """Most sequences in one forward batch: ``asked``."""
        return asked
