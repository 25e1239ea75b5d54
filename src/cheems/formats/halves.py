"""Big JSONL inputs read by two processes: the lines cut in two halves, the second half's work
done by a forked child while this process does the first.

The columnar commands (:mod:`cheems.formats.columnar_rank`, ``curate resolve``) parse, code and
write rows one batch after another, with nothing shared between prompts but checks at the end
(distinct ids, the report's sums). An input of at least :data:`PARALLEL_BYTES` of JSONL is cut
by :func:`line_halves` into two halves of (nearly) as many lines; :func:`in_two_processes` runs
the work on the second half in a child process (``os.fork``: on Linux, with two cores or more
for this process and no other thread running, whose locks would stay locked in the child) while
this process works on the first, and the child sends its result back pickled through a pipe.
:func:`batch_parts` does both for work on columnar batches. The caller joins the results in
order, so its output is what one process writes. Should the
child fail for any reason (an error, a kill), this process does its half itself, so an error is
raised here as it would be without the child.
"""

from __future__ import annotations

import os
import pickle
import signal
import sys
import threading
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence, TypeVar

from cheems.formats.columnar import (CHUNK_ROWS, NOT_COLUMNAR_SUFFIXES, ColumnarBatch, batches_of,
                                     columnar_batches)
from cheems.formats.rows import NotPlain, jsonl_lines, parse_lines

__all__ = ["PARALLEL_BYTES", "Segment", "batch_parts", "in_two_processes", "line_halves", "segment_chunks"]

PARALLEL_BYTES = 8 << 20
"""Inputs of at least this many bytes (all files together) are read by two processes."""

Segment = tuple[Path, "str | None", list[bytes]]
"""Some consecutive lines of one file: its path, the rows' default subset (its stem, or None), the lines."""

T = TypeVar("T")


def batch_parts(paths: Sequence[str | os.PathLike], work: Callable[[Iterator[ColumnarBatch]], T], *,
                default_subsets: bool, keep_comparisons: bool = False) -> list[T]:
    """``work`` over the :class:`~cheems.formats.columnar.ColumnarBatch` es (rows kept) of the
    files: ``[work(every batch)]`` in this process, or for a big input (:func:`line_halves`)
    ``[work(the first half's batches), work(the second half's)]`` in two processes
    (:func:`in_two_processes`). ``work`` raises NotPlain for rows it leaves to the object path."""
    halves = line_halves(paths, default_subsets=default_subsets)
    if halves is None:
        return [work(columnar_batches(paths, default_subsets=default_subsets, keep_rows=True,
                                      keep_comparisons=keep_comparisons))]
    return in_two_processes(
        lambda segments: work(batches_of(segment_chunks(segments), keep_rows=True, keep_comparisons=keep_comparisons)),
        *halves)


def segment_chunks(segments: list[Segment]) -> Iterator[tuple[list, str | None]]:
    """The rows of the segments parsed (:func:`~cheems.formats.rows.parse_lines`),
    :data:`~cheems.formats.columnar.CHUNK_ROWS` at a time, each chunk with its default subset:
    what :func:`~cheems.formats.columnar.batches_of` takes."""
    for path, stem, lines in segments:
        for lo in range(0, len(lines), CHUNK_ROWS):
            yield parse_lines(path, lines[lo:lo + CHUNK_ROWS]), stem


def line_halves(paths: Sequence[str | os.PathLike], *,
                default_subsets: bool) -> tuple[list[Segment], list[Segment]] | None:
    """The lines of the JSONL files cut in two halves of (nearly) as many lines (each line's
    file stem its default subset with ``default_subsets``), when two processes may share them
    (:func:`_may_fork`) and they hold at least :data:`PARALLEL_BYTES`; None to read them in this
    process (JSON-list files, other formats, a small input)."""
    paths = [Path(p) for p in paths]
    if not _may_fork() or any(p.suffix.lower() in NOT_COLUMNAR_SUFFIXES for p in paths):
        return None
    try:
        if sum(p.stat().st_size for p in paths) < PARALLEL_BYTES:
            return None
        files = [(p, p.stem if default_subsets else None, jsonl_lines(p)) for p in paths]
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


def in_two_processes(work: Callable[[list[Segment]], T], first: list[Segment], second: list[Segment]) -> list[T]:
    """``[work(first), work(second)]``, the second done by a forked child while this process
    does the first, its result sent back pickled through a pipe. A child that fails (whatever
    the reason, a kill included) sends nothing whole back, and this process does its work itself;
    so it does when no child can be started."""
    try:
        read_end, write_end = os.pipe()
    except OSError:  # no file descriptor left: one process does it all
        return [work(first), work(second)]
    try:
        pid = os.fork()
    except OSError:  # no process or memory to be had: one process does it all
        os.close(read_end)
        os.close(write_end)
        return [work(first), work(second)]
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


def _sent_back(payload: bytes) -> tuple[bool, Any]:
    """What the child sent: ``(True, its result)``, or ``(False, None)`` when it failed, or was
    killed before it sent all of it (an empty or cut payload)."""
    try:
        return pickle.loads(payload)
    except (EOFError, pickle.UnpicklingError, ValueError):
        return False, None
