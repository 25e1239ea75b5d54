"""``cheems rank`` on columns: annotation files ranked with no :class:`~cheems.records.Prompt`
made but for the few rows that need one (:func:`rank_columns`), a big input in two processes.

Each :class:`~cheems.formats.columnar.ColumnarBatch` of rows (:mod:`cheems.formats.columnar_input`:
rows of other formats in their cheems form) is resolved by :func:`cheems.graph.resolve_comparisons`
and its rows written back with their ``rank``, the bytes the object path writes. What the object
path decides across rows is decided for the rows it concerns by the object path's own steps
(:func:`rankable_prompts`) on just those rows: the rows no batch took (read, or skipped with
their errors, by the general readers) and every row whose prompt id another row holds too
(joined into one prompt at the place of the first, :func:`~cheems.formats.join.merge_prompts`).
Rows of one id are all among them, so each step gives on them what it gives on all the rows. A
row without comparisons is refused, or skipped, as there. The ranked prompts are written in
input order, each in the place of its first row, and the report is summed over all of them.

A big input is cut in two halves by row (:mod:`cheems.formats.halves`), the second ranked by a
child process while this process ranks the first; the child sends back its written lines, ids,
subsets, positions and counts, and the positions of the rows it left to the general readers.
"""

from __future__ import annotations

import os
from array import array
from dataclasses import dataclass, field
from itertools import compress
from typing import TYPE_CHECKING, Iterator, Sequence

from cheems.formats.columnar import ColumnarBatch, dump_row
from cheems.formats.columnar_input import RowSource, locate, read_positions, row_sources
from cheems.formats.halves import batch_parts
from cheems.formats.join import join_scored_rows, merge_prompts
from cheems.formats.result import ReadResult, RewordedQuestions
from cheems.formats.rows import NotPlain
from cheems.records import CheemsInputError, Prompt

if TYPE_CHECKING:
    import numpy as np

__all__ = ["RankedColumns", "rank_columns", "rankable_prompts"]

_COUNTS = ("n_comparisons", "n_conflicts", "n_merged", "n_tie_groups", "n_uncompared")


@dataclass
class RankedColumns:
    """What :func:`rank_columns` wrote: how many ranked prompts, the conflict report per subset
    and in total (:func:`cheems.graph.conflict_report`), the rows skipped with their errors, and
    the questions whose scored rows word them differently (joined, :attr:`ReadResult.reworded`)."""

    n_prompts: int
    report: dict
    errors: list[CheemsInputError] = field(default_factory=list)
    reworded: RewordedQuestions = field(default_factory=RewordedQuestions)


@dataclass
class _Ranked:
    """Ranked prompts in input order: their lines as written (``written``, one bytes per batch,
    ``lengths`` the length of each prompt's line; or one line per prompt, ``lengths`` empty),
    ids, subsets, positions (of their first rows) and per-prompt counts of :data:`_COUNTS`
    (arrays, one per batch); and the positions of the rows left to the general readers."""

    written: list[bytes] = field(default_factory=list)
    lengths: array = field(default_factory=lambda: array("q"))
    ids: list[str] = field(default_factory=list)
    subsets: list = field(default_factory=list)
    positions: array = field(default_factory=lambda: array("q"))
    counts: dict = field(default_factory=lambda: {k: [] for k in _COUNTS})
    refused: array = field(default_factory=lambda: array("q"))
    reworded: RewordedQuestions = field(default_factory=RewordedQuestions)  # of the rows the general readers read

    def add(self, lines: list[bytes], ids: list[str], subsets: list, positions, resolution, *, joined: bool) -> None:
        """Add some ranked prompts (``joined``: their lines as one bytes), ``resolution``
        (:class:`cheems.graph.Resolution`) holding their counts."""
        if joined:
            self.written.append(b"".join(lines))
            self.lengths.extend(map(len, lines))
        else:
            self.written += lines
        self.ids += ids
        self.subsets += subsets
        self.positions.extend(positions)
        for k in _COUNTS:
            self.counts[k].append(getattr(resolution, k))

    def count(self, name: str) -> np.ndarray:
        import numpy as np

        return np.concatenate(self.counts[name]) if self.counts[name] else np.zeros(0, np.int64)


def rankable_prompts(res: ReadResult, skip_invalid: bool) -> tuple[list[Prompt], list[CheemsInputError]]:
    """What ``cheems rank`` ranks of the prompts read (scored rows joined): rows of one prompt id
    joined (:func:`~cheems.formats.join.merge_prompts`), each prompt without any comparison refused
    by an error naming its first row, or, with ``skip_invalid``, set aside with it. Returns the
    prompts and the errors of those set aside."""
    locations, first_seen, errors, prompts = res.locations(), {}, [], []
    for p, loc in zip(res.prompts, locations):
        first_seen.setdefault(p.id, loc)
    for p in merge_prompts(res.prompts, locations):  # rows of one prompt (one per task) become one
        if not p.comparisons:
            e = _no_comparisons(*first_seen[p.id])
            if not skip_invalid:
                raise e
            errors.append(e)
            continue
        prompts.append(p)
    return prompts, errors


def _no_comparisons(file: str, line: int) -> CheemsInputError:
    return CheemsInputError("no comparisons or triples to rank from", file=file, line=line, field="comparisons")


def rank_columns(annotations: Sequence[str | os.PathLike], output: str | os.PathLike, *,
                 report: str | os.PathLike | None = None, keep_comparisons: bool = False,
                 skip_invalid: bool = False) -> RankedColumns | None:
    """``cheems rank`` (:func:`cheems.benchmark.rank_annotations`) for JSONL or JSON-list files: the
    same output bytes, conflict report (to ``report`` when given: both files or neither) and
    skipped rows (``skip_invalid``), the columnar rows ranked in batches and the others as the
    module says. None, having written nothing, for an input the general path reads whole (a
    Parquet or TSV file...), refuses (a bad row without ``skip_invalid``, two rows of one id
    that do not join) or finds no prompt to rank in: it then reads the input, or names the
    fault. An output that is one of the inputs is refused before anything is read.
    O(bytes + comparisons x longest chain), in two processes for a big input (module docs).
    """
    import numpy as np

    from cheems.graph import conflict_report
    from cheems.io import atomic_open, check_outputs, gc_paused, outputs_together, write_json

    check_outputs([output, report], annotations)
    with gc_paused():  # hundreds of thousands of small long-lived objects, no cycles
        try:
            sources = row_sources(annotations, default_subsets=True)
            columns, kept, objects, errors = _ranked(sources, keep_comparisons, skip_invalid)
        except (NotPlain, CheemsInputError):
            return None
        n_prompts = int(kept.sum()) + len(objects.written)
        if not n_prompts:  # nothing to write: the general path says what it skipped
            return None
        subsets = list(compress(columns.subsets, kept.tolist())) + objects.subsets
        stats = conflict_report(subsets, *(np.concatenate([columns.count(k)[kept], objects.count(k)]) for k in _COUNTS))
        with outputs_together(output, report) as (ranked_tmp, report_tmp):  # both files or neither
            with atomic_open(ranked_tmp) as f:
                f.writelines(_in_order(columns, kept, objects))
            if report_tmp is not None:
                write_json(report_tmp, stats)
    return RankedColumns(n_prompts, stats, errors, objects.reworded)


def _ranked(sources: Sequence[RowSource], keep_comparisons: bool,
            skip_invalid: bool) -> tuple[_Ranked, np.ndarray, _Ranked, list[CheemsInputError]]:
    """Every prompt ranked: the columnar rows (those to write marked in ``kept``), the prompts of
    the rows read by the general readers, and the errors of the rows skipped (those the general
    readers refuse, then those without comparisons, each in input order). NotPlain, or the
    object path's error, for input the object path refuses."""
    import numpy as np

    columns = _joined(batch_parts(sources, _rank_batches, keep_comparisons=keep_comparisons))
    res, where = read_positions(sources, sorted(columns.refused))
    if res.errors and not skip_invalid:
        raise NotPlain("a bad row: the object path names it")
    moved = _repeated(columns.ids, [p.id for p in res.prompts])
    if len(moved):
        more, more_where = read_positions(sources, np.asarray(columns.positions)[moved].tolist())
        res, where = _merged(res, where, more, more_where)
    kept = np.ones(len(columns.ids), bool)
    kept[moved] = False
    empty = kept & (columns.count("n_comparisons") == 0)
    if empty.any() and not skip_invalid:
        raise NotPlain("a prompt without comparisons: the object path names it")
    skipped = [(p, _no_comparisons(*_line_of(sources, p))) for p in np.asarray(columns.positions)[empty].tolist()]
    objects, more_skipped = _object_ranked(res, where, keep_comparisons, skip_invalid)
    errors = res.errors + [e for _, e in sorted(skipped + more_skipped, key=lambda item: item[0])]
    return columns, kept & ~empty, objects, errors


def _rank_batches(batches: Iterator[ColumnarBatch]) -> _Ranked:
    """The batches' rows ranked, with the positions of the rows they refused."""
    from cheems.graph import resolve_comparisons

    part = _Ranked()
    for batch in batches:
        part.refused.extend(batch.refused)
        if len(batch):
            res = resolve_comparisons(*batch.arrays(), batch.response_ids)
            part.add(list(map(dump_row, batch.ranked_rows(res.ranks))), batch.ids, batch.subsets, batch.positions, res,
                     joined=True)
    return part


def _joined(parts: list[_Ranked]) -> _Ranked:
    """The parts as one, in order."""
    out = _Ranked()
    for part in parts:
        out.written += part.written
        out.lengths.extend(part.lengths)
        out.ids += part.ids
        out.subsets += part.subsets
        out.positions.extend(part.positions)
        out.refused.extend(part.refused)
        for k in _COUNTS:
            out.counts[k] += part.counts[k]
    return out


def _repeated(ids: list[str], other_ids: list[str]) -> np.ndarray:
    """The indices of the ``ids`` that occur twice or more in ``ids + other_ids``."""
    import numpy as np

    if len(set(ids).union(other_ids)) == len(ids) + len(other_ids):
        return np.zeros(0, np.int64)
    seen: set[str] = set()
    twice = {i for i in ids + other_ids if i in seen or seen.add(i)}
    return np.array([k for k, i in enumerate(ids) if i in twice], np.int64)


def _line_of(sources: Sequence[RowSource], position: int) -> tuple[str, int]:
    src, i = locate(sources, position)
    return src.name, src.numbers[i]


def _merged(res: ReadResult, where: list[int], more: ReadResult, more_where: list[int]) -> tuple[ReadResult, list[int]]:
    """The prompts read of two reads of rows (no errors in ``more``), in the order of their positions."""
    order = sorted(range(len(where) + len(more_where)), key=(where + more_where).__getitem__)
    out = ReadResult([], res.errors)
    for name in ("prompts", "lines", "files", "formats"):
        values = getattr(res, name) + getattr(more, name)
        setattr(out, name, [values[k] for k in order])
    return out, sorted(where + more_where)


def _object_ranked(res: ReadResult, where: list[int], keep_comparisons: bool,
                   skip_invalid: bool) -> tuple[_Ranked, list[tuple[int, CheemsInputError]]]:
    """The rows read by the general readers ranked as the object path ranks them: scored rows
    joined, rows of one id joined, prompts without comparisons skipped (their errors returned
    with the position of the first row of each), each prompt in the place of its first row."""
    from cheems.graph import resolve_conflicts

    position_of = dict(zip(res.locations(), where))
    if len(position_of) != len(where):
        raise NotPlain("one file given twice: its rows are told apart by position only")
    join_scored_rows(res)
    out = _Ranked(reworded=res.reworded)
    first: dict[str, int] = {}
    for p, loc in zip(res.prompts, res.locations()):
        first.setdefault(p.id, position_of[loc])
    prompts, errors = rankable_prompts(res, skip_invalid)
    if prompts:
        resolution = resolve_conflicts(prompts)
        for p, r in zip(prompts, resolution.ranks):
            p.rank = r
        out.add([dump_row(p.to_dict(comparisons=keep_comparisons)) for p in prompts], [p.id for p in prompts],
                 [p.subset for p in prompts], [first[p.id] for p in prompts], resolution, joined=False)
    return out, [(position_of[(e.file, e.line)], e) for e in errors]


def _in_order(columns: _Ranked, kept: np.ndarray, objects: _Ranked) -> list:
    """The lines to write, in input order: the ``kept`` columnar prompts, runs of them as slices
    of their batches' bytes, each prompt of ``objects`` in its place. O(prompts), a few slices
    per irregular row."""
    import numpy as np

    if kept.all() and not objects.written:
        return columns.written
    data = memoryview(b"".join(columns.written))
    lengths = np.frombuffer(columns.lengths, np.int64) if len(columns.lengths) else np.zeros(0, np.int64)
    ends = np.cumsum(lengths)
    starts = ends - lengths
    rows = np.flatnonzero(kept)
    at = np.searchsorted(np.asarray(columns.positions, np.int64)[rows], np.asarray(objects.positions, np.int64))
    cuts = sorted({0, len(rows), *(np.flatnonzero(np.diff(rows) != 1) + 1).tolist(), *at.tolist()})
    out, j = [], 0
    for lo, hi in zip(cuts, cuts[1:]):
        while j < len(at) and at[j] <= lo:  # an object prompt placed before the run
            out.append(objects.written[j])
            j += 1
        out.append(data[starts[rows[lo]]:ends[rows[hi - 1]]])
    return out + objects.written[j:]
