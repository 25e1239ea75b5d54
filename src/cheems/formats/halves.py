"""Big inputs read by two processes: the rows cut in two halves, the second half's work done
by a forked child while this process does the first.

The columnar commands (:mod:`cheems.formats.columnar_rank`, ``curate resolve``) parse, code and
write rows one batch after another, with nothing shared between prompts but what is joined at
the end (the report's sums, the rows left to the general readers, repeated ids). An input of at
least :data:`PARALLEL_BYTES` is cut by :func:`source_halves` into two halves of (nearly) as many
rows; :func:`in_two_processes` runs the work on the second half in a child process
(``os.fork``: on Linux, with two cores or more for this process and no other thread running,
whose locks would stay locked in the child) while this process works on the first, and the
child sends its result back pickled through a pipe. :func:`batch_parts` does both for work on
columnar batches. The caller joins the results in order, so its output is what one process
writes. Should the child fail for any reason (an error, a kill), this process does its half
itself, so an error is raised here as it would be without the child.
"""

from __future__ import annotations

import os
import pickle
import signal
import sys
import threading
from typing import Any, Callable, Iterator, Sequence, TypeVar

from cheems.formats.columnar import ColumnarBatch
from cheems.formats.columnar_input import RowSource, batches_of, source_chunks

__all__ = ["PARALLEL_BYTES", "batch_parts", "in_two_processes", "source_halves"]

PARALLEL_BYTES = 8 << 20
"""Inputs of at least this many bytes (all files together) are read by two processes."""

T = TypeVar("T")


def batch_parts(sources: Sequence[RowSource], work: Callable[[Iterator[ColumnarBatch]], T], *,
                keep_comparisons: bool = False) -> list[T]:
    """``work`` over the :class:`~cheems.formats.columnar.ColumnarBatch` es (rows kept, rows of
    other formats converted: :func:`~cheems.formats.columnar_input.batches_of`) of the sources'
    rows: ``[work(every batch)]`` in this process, or for a big input (:func:`source_halves`)
    ``[work(the first half's batches), work(the second half's)]`` in two processes
    (:func:`in_two_processes`)."""
    def batches(part: Sequence[RowSource]) -> Iterator[ColumnarBatch]:
        return batches_of(source_chunks(part), keep_rows=True, keep_comparisons=keep_comparisons)

    halves = source_halves(sources)
    if halves is None:
        return [work(batches(sources))]
    return in_two_processes(lambda part: work(batches(part)), *halves)


def source_halves(sources: Sequence[RowSource]) -> tuple[list[RowSource], list[RowSource]] | None:
    """The sources' rows cut in two halves of (nearly) as many rows, when two processes may share
    them (:func:`_may_fork`) and their files hold at least :data:`PARALLEL_BYTES`; None to read
    them in this process."""
    if not _may_fork():
        return None
    try:
        if sum(os.stat(s.path).st_size for s in sources) < PARALLEL_BYTES:
            return None
    except OSError:
        return None
    half = sum(len(s.rows) for s in sources) // 2
    first: list[RowSource] = []
    second: list[RowSource] = []
    for src in sources:
        cut = min(max(half - src.first, 0), len(src.rows))
        if cut:
            first.append(src.part(0, cut))
        if cut < len(src.rows):
            second.append(src.part(cut, len(src.rows)))
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


def in_two_processes(work: Callable[[list[RowSource]], T], first: list[RowSource],
                     second: list[RowSource]) -> list[T]:
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
