"""From annotation files to a ranked benchmark: what ``cheems rank`` does, as one call.

Annotation rows (one per prompt, or one per triple-wise task) are read, rows of one prompt
joined, and every prompt's comparisons resolved into a partial ranking by conflict
resolution (paper Algorithm 1, :func:`cheems.graph.resolve_conflicts`). The ranked rows and
the conflict report (paper Table 5) are written atomically.

JSONL and JSON-list input takes the columnar path (:func:`cheems.formats.rank_columns`), which
builds no :class:`~cheems.records.Prompt` objects for cheems rows: they are read a chunk at a
time, straight into arrays, resolved by the same array core and written by placing ``rank``
among each parsed row's values, byte for byte what ``Prompt.to_dict`` writes. The few rows that
need the general readers (another format, a bad row skipped, rows of one prompt to join) are
read by them one at a time, in their place. Other files (Parquet, TSV), ``--format``, and every
error message go through the general readers.

Core module: no torch.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Callable, Iterator

from cheems.formats import (NotPlain, ReadResult, RepeatedRows, RewordedQuestions, key_repeated_rows, rank_columns,
                            rankable_prompts, read_many)
from cheems.graph import resolve_conflicts
from cheems.io import check_outputs, gc_paused, outputs_together, write_json, write_jsonl
from cheems.records import CheemsInputError, Prompt

__all__ = ["LazyPrompts", "RankedBenchmark", "rank_annotations", "read_benchmark"]


class LazyPrompts(Sequence):
    """A list of ``n`` prompts that ``build()`` makes on first use of an item; ``len()`` and
    truth need no build. Compares equal to a list of the same prompts."""

    def __init__(self, n: int, build: Callable[[], list[Prompt]]):
        self._n, self._build, self._items = n, build, None

    def _list(self) -> list[Prompt]:
        if self._items is None:
            self._items = self._build()
        return self._items

    def __len__(self) -> int:
        return self._n

    def __getitem__(self, i):
        return self._list()[i]

    def __iter__(self) -> Iterator[Prompt]:
        return iter(self._list())

    def __eq__(self, other: object) -> bool:
        return self._list() == (list(other) if isinstance(other, LazyPrompts) else other)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"LazyPrompts({self._n} prompts{'' if self._items is None else ', built'})"


@dataclass
class RankedBenchmark:
    """What :func:`rank_annotations` made: the ranked prompts (empty when no row could be
    ranked; then nothing was written), the conflict report per subset and in total, and the
    rows skipped with their errors, and the questions whose scored rows word them differently
    (joined: :attr:`cheems.formats.ReadResult.reworded`). After the fast path ``prompts`` is a
    :class:`LazyPrompts`: its length is known, the prompts are read again from the annotation
    files when used."""

    prompts: Sequence[Prompt]
    report: dict
    errors: list[CheemsInputError] = field(default_factory=list)
    reworded: RewordedQuestions = field(default_factory=RewordedQuestions)


def rank_annotations(annotations: Sequence[str | os.PathLike], output: str | os.PathLike, *,
                     report: str | os.PathLike | None = None, keep_comparisons: bool = False,
                     skip_invalid: bool = False, fmt: str | None = None) -> RankedBenchmark:
    """Resolve annotation files into a benchmark written to ``output`` (JSONL rows with
    ``rank``), and the conflict report to ``report`` when given: both files or neither, and
    an output that is one of the inputs is refused before anything is read.

    A prompt without any comparison cannot be ranked: an error naming its first row, or a
    skipped row with ``skip_invalid``. ``keep_comparisons`` keeps the input comparisons in
    the output rows. O(rows + comparisons x longest chain); see :mod:`cheems.graph`.
    """
    check_outputs([output, report], annotations)
    with gc_paused():  # hundreds of thousands of small long-lived objects, no cycles
        if fmt is None:
            try:
                return _rank_plain(annotations, output, report, keep_comparisons, skip_invalid)
            except NotPlain:  # read whole by the general readers, or refused: they read it or name the fault
                pass
        prompts, errors, reworded = _rankable(annotations, skip_invalid, fmt)
        if not prompts:
            return RankedBenchmark([], {}, errors, reworded)
        resolution = resolve_conflicts(prompts)
        for p, r in zip(prompts, resolution.ranks):
            p.rank = r
        stats = resolution.report(prompts)
        with outputs_together(output, report) as (ranked_tmp, report_tmp):  # both files or neither
            write_jsonl(ranked_tmp, (p.to_dict(comparisons=keep_comparisons) for p in prompts))
            if report_tmp is not None:
                write_json(report_tmp, stats)
    return RankedBenchmark(prompts, stats, errors, reworded)


def _rank_plain(annotations: Sequence[str | os.PathLike], output: str | os.PathLike,
                report: str | os.PathLike | None, keep_comparisons: bool, skip_invalid: bool) -> RankedBenchmark:
    """:func:`rank_annotations` by :func:`cheems.formats.rank_columns` (rows read straight into
    arrays, the few others as the general path reads them); the prompts are read again by the
    general readers only when used. Raises NotPlain, having written nothing, for input the
    general path reads whole or refuses. O(bytes + comparisons x longest chain)."""
    ranked = rank_columns(annotations, output, report=report, keep_comparisons=keep_comparisons,
                          skip_invalid=skip_invalid)
    if ranked is None:
        raise NotPlain("rows the general readers read")
    prompts = LazyPrompts(ranked.n_prompts, partial(_ranked_prompts, list(annotations), skip_invalid))
    return RankedBenchmark(prompts, ranked.report, ranked.errors, ranked.reworded)


def _ranked_prompts(annotations: list[str | os.PathLike], skip_invalid: bool) -> list[Prompt]:
    """The ranked prompts of annotation files, read again by the general readers."""
    prompts, _, _ = _rankable(annotations, skip_invalid, None)
    with gc_paused():
        for p, r in zip(prompts, resolve_conflicts(prompts).ranks):
            p.rank = r
    return prompts


def _rankable(annotations: Sequence[str | os.PathLike], skip_invalid: bool,
              fmt: str | None) -> tuple[list[Prompt], list, RewordedQuestions]:
    """The prompts of the files, rows of one prompt joined, those without comparisons set aside
    (:func:`cheems.formats.rankable_prompts`), the errors of the rows skipped, and the questions
    whose scored rows word them differently."""
    res = read_many(annotations, skip_invalid=skip_invalid, fmt=fmt)
    prompts, errors = rankable_prompts(res, skip_invalid)
    return prompts, res.errors + errors, res.reworded


def read_benchmark(paths: Sequence[str | os.PathLike], *, skip_invalid: bool = False, require_rank: bool = False,
                   fmt: str | None = None, empty: str | None = None,
                   dedupe: bool = False) -> tuple[ReadResult, RepeatedRows]:
    """The prompts of benchmark (or candidate) files, as ``eval``, ``score`` and ``bon`` read them:
    each file's stem names the subset of its rows without one (:func:`cheems.formats.read_many`),
    and every row is an item, as the benchmarks' own evaluators count them: a row under an
    earlier row's prompt id (an exact repeat, or a row that differs in other keys or content) is
    keyed ``id#n``, its n-th occurrence in file order (:func:`cheems.formats.key_repeated_rows`),
    so scores of every row key apart. ``dedupe`` removes the rows that repeat an earlier row
    exactly, the others keeping their keys. ``empty``: the message when no valid row is left
    (None: an empty result is fine). Returns the read result and how the repeated rows were
    counted."""
    res = read_many(paths, skip_invalid=skip_invalid, require_rank=require_rank, fmt=fmt)
    if empty is not None and not res.prompts:
        raise CheemsInputError(empty)
    return res, key_repeated_rows(res, dedupe=dedupe)
