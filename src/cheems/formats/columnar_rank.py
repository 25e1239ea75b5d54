"""``cheems rank`` on columns: files of cheems rows ranked without Prompt objects
(:func:`rank_columns`), a big input in two processes.

Each :class:`~cheems.formats.columnar.ColumnarBatch` of rows is resolved by
:func:`cheems.graph.resolve_comparisons` and its rows written back with their ``rank``, the bytes
the object path writes. The work is parsing, coding and writing rows, one batch after another
with nothing shared between prompts but the checks at the end (distinct ids, the report's sums);
so a big input is cut in two halves by line (:mod:`cheems.formats.halves`), the second ranked by
a child process while this process ranks the first. The child sends back its written lines,
ids, subsets and counts; the output holds the same bytes in the same order as one process
writes.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Iterator, Sequence

from cheems.formats.columnar import ColumnarBatch, dump_row
from cheems.formats.halves import batch_parts
from cheems.formats.rows import NotPlain

__all__ = ["RankedColumns", "rank_columns"]

_COUNTS = ("n_comparisons", "n_conflicts", "n_merged", "n_tie_groups", "n_uncompared")


@dataclass
class RankedColumns:
    """What :func:`rank_columns` wrote: how many ranked prompts, and the conflict report per
    subset and in total (:func:`cheems.graph.conflict_report`)."""

    n_prompts: int
    report: dict


@dataclass
class _Part:
    """Some rows ranked: their lines as written, their ids and subsets, and the per-prompt
    counts of :data:`_COUNTS` (arrays per batch)."""

    written: list[bytes] = field(default_factory=list)
    ids: list[str] = field(default_factory=list)
    subsets: list = field(default_factory=list)
    counts: dict = field(default_factory=lambda: {k: [] for k in _COUNTS})


def rank_columns(annotations: Sequence[str | os.PathLike], output: str | os.PathLike, *,
                 report: str | os.PathLike | None = None, keep_comparisons: bool = False) -> RankedColumns | None:
    """``cheems rank`` (:func:`cheems.benchmark.rank_annotations`) for files of columnar rows with
    distinct ids: each batch's comparisons resolved by :func:`cheems.graph.resolve_comparisons`
    and its rows written back with their ``rank``, the same bytes as the object path; the
    conflict report to ``report`` when given (both files or neither). None, having written
    nothing, for any other input (a row to join, a row without comparisons, anything
    :class:`ColumnarBatch` refuses): the general path then reads it. An output that is one of
    the inputs is refused before anything is read. O(bytes + comparisons x longest chain),
    in two processes for a big input (module docs).
    """
    from cheems.io import check_outputs, gc_paused

    check_outputs([output, report], annotations)
    with gc_paused():  # hundreds of thousands of small long-lived objects, no cycles
        try:
            return _rank_columns(annotations, output, report, keep_comparisons)
        except NotPlain:
            return None


def _rank_columns(annotations: Sequence[str | os.PathLike], output: str | os.PathLike,
                  report: str | os.PathLike | None, keep_comparisons: bool) -> RankedColumns:
    """:func:`rank_columns`; NotPlain for input it leaves to the general path."""
    import numpy as np

    from cheems.graph import conflict_report
    from cheems.io import atomic_open, outputs_together, write_json

    parts = batch_parts(annotations, _rank_batches, default_subsets=True, keep_comparisons=keep_comparisons)
    ids = [i for part in parts for i in part.ids]
    subsets = [s for part in parts for s in part.subsets]
    if len(set(ids)) != len(ids):
        raise NotPlain("a prompt id repeats: its rows are joined by merge_prompts")
    if not subsets:
        raise NotPlain("no rows")
    stats = conflict_report(subsets, *(np.concatenate([c for part in parts for c in part.counts[k]])
                                       for k in _COUNTS))
    with outputs_together(output, report) as (ranked_tmp, report_tmp):  # both files or neither
        with atomic_open(ranked_tmp) as f:
            for part in parts:
                f.writelines(part.written)
        if report_tmp is not None:
            write_json(report_tmp, stats)
    return RankedColumns(len(subsets), stats)


def _rank_batches(batches: Iterator[ColumnarBatch]) -> _Part:
    """The batches' rows ranked; NotPlain for a prompt without comparisons."""
    from cheems.graph import resolve_comparisons

    part = _Part()
    for batch in batches:
        if 0 in batch.counts:
            raise NotPlain("a prompt without comparisons")
        res = resolve_comparisons(*batch.arrays(), batch.response_ids)
        part.written.append(b"".join(map(dump_row, batch.ranked_rows(res.ranks))))
        part.ids += batch.ids
        part.subsets += batch.subsets
        for k in _COUNTS:
            part.counts[k].append(getattr(res, k))
    return part
