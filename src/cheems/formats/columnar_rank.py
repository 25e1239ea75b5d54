"""``cheems rank`` on columns: files of cheems rows ranked without Prompt objects
(:func:`rank_columns`), a big input in two processes.

Each :class:`~cheems.formats.columnar.ColumnarBatch` of rows is resolved by
:func:`cheems.graph.resolve_comparisons` and its rows written back with their ``rank``, the bytes
the object path writes. The work is parsing, coding and writing rows, one batch after another
with nothing shared between prompts but the checks at the end (distinct ids, the report's sums);
so an input of more than :data:`PARALLEL_BYTES` of JSONL is cut in two halves by line, the
second ranked by a child process (``os.fork``, on Linux, with two cores or more for this
process and no other thread running) while this process ranks the first. The child sends back
its written lines, ids, subsets and counts; the output holds the same bytes in the same order
as one process writes. Should the child fail for any reason, this process ranks its half
itself, so an error is raised here as it would be without the child.
"""

from __future__ import annotations

import os
import pickle
import signal
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator, Sequence

from cheems.formats.columnar import (CHUNK_ROWS, NOT_COLUMNAR_SUFFIXES, ColumnarBatch, batches_of,
                                     columnar_batches, dump_row)
from cheems.formats.rows import NotPlain, jsonl_lines, parse_lines

__all__ = ["PARALLEL_BYTES", "RankedColumns", "rank_columns"]

PARALLEL_BYTES = 8 << 20
"""Inputs of at least this many bytes (all files together) are ranked in two processes."""

_COUNTS = ("n_comparisons", "n_conflicts", "n_merged", "n_tie_groups", "n_uncompared")

Segment = tuple[Path, str, list[bytes]]
"""Some consecutive lines of one file: its path, its stem (the rows' default subset), the lines."""


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

    halves = _halves(annotations)
    if halves is None:
        parts = [_rank_batches(columnar_batches(annotations, default_subsets=True, keep_rows=True,
                                                keep_comparisons=keep_comparisons))]
    else:
        parts = _in_two_processes(lambda segments: _rank_segments(segments, keep_comparisons), *halves)
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


def _rank_segments(segments: list[Segment], keep_comparisons: bool) -> _Part:
    def chunks() -> Iterator[tuple[list, str]]:
        for path, stem, lines in segments:
            for lo in range(0, len(lines), CHUNK_ROWS):
                yield parse_lines(path, lines[lo:lo + CHUNK_ROWS]), stem

    return _rank_batches(batches_of(chunks(), keep_rows=True, keep_comparisons=keep_comparisons))


def _halves(annotations: Sequence[str | os.PathLike]) -> tuple[list[Segment], list[Segment]] | None:
    """The lines of the files cut in two halves of (nearly) as many lines, when two processes
    may rank them (:func:`_may_fork`) and they hold at least :data:`PARALLEL_BYTES`; None to
    rank them in this process (JSON-list files, other formats, a small input)."""
    paths = [Path(p) for p in annotations]
    if not _may_fork() or any(p.suffix.lower() in NOT_COLUMNAR_SUFFIXES for p in paths):
        return None
    try:
        if sum(p.stat().st_size for p in paths) < PARALLEL_BYTES:
            return None
        files = [(p, p.stem, jsonl_lines(p)) for p in paths]
    except (OSError, NotPlain):
        return None
    half = sum(len(lines) for _, _, lines in files) // 2
    first: list[Segment] = []
    second: list[Segment] = []
    before = 0
    for path, stem, lines in files:
        cut = min(max(half - before, 0), len(lines))
        if cut:
            first.append((path, stem, lines[:cut]))
        if cut < len(lines):
            second.append((path, stem, lines[cut:]))
        before += len(lines)
    return first, second


def _may_fork() -> bool:
    """Whether a child process may take half the work: Linux, two cores or more for this
    process, and no other thread (a lock one holds would stay locked in the child)."""
    if not sys.platform.startswith("linux") or threading.active_count() > 1:
        return False
    try:
        return len(os.sched_getaffinity(0)) >= 2
    except (AttributeError, OSError):
        return False


def _in_two_processes(work: Callable[[list[Segment]], _Part], first: list[Segment],
                      second: list[Segment]) -> list[_Part]:
    """``[work(first), work(second)]``, the second done by a forked child while this process
    does the first, its result sent back pickled through a pipe. A child that fails (whatever
    the reason, a kill included) sends nothing whole back, and this process does its work itself."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns
        try:
            os.close(read_end)
            try:
                payload = pickle.dumps((True, work(second)), protocol=pickle.HIGHEST_PROTOCOL)
            except BaseException:  # noqa: BLE001  (the parent does this half again and raises)
                payload = pickle.dumps((False, None))
            with os.fdopen(write_end, "wb") as pipe:
                pipe.write(payload)
        finally:
            os._exit(0)
    os.close(write_end)
    pipe = os.fdopen(read_end, "rb")
    try:
        mine = work(first)
        done, theirs = _sent_back(pipe.read())
    except BaseException:
        os.kill(pid, signal.SIGKILL)
        raise
    finally:
        pipe.close()
        os.waitpid(pid, 0)
    return [mine, theirs if done else work(second)]


def _sent_back(payload: bytes) -> tuple[bool, _Part | None]:
    """What the child sent: ``(True, its part)``, or ``(False, None)`` when it failed, or was
    killed before it sent all of it (an empty or cut payload)."""
    try:
        return pickle.loads(payload)
    except (EOFError, pickle.UnpicklingError, ValueError):
        return False, None
