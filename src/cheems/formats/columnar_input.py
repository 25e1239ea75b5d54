"""Input files as numbered rows, for the columnar commands (``cheems rank``, ``stats``, ``curate
resolve`` and ``debias``): every row read into a :class:`~cheems.formats.columnar.ColumnarBatch`
or, where no batch takes it, by the general readers, one row at a time.

A :class:`RowSource` holds the rows of one JSONL file (its lines, unparsed) or JSON-list file
(its items) with each row's line (item) number and a position: the row's index among the rows
of all the files, in order. :func:`source_chunks` parses them a chunk at a time (a line the fast
parser refuses is set aside, :func:`~cheems.formats.rows.parse_some`); :func:`batches_of` adds
the chunks to batches, which take every row they can
(:meth:`~cheems.formats.columnar.ColumnarBatch.take`), a row of another format in the cheems
form the general readers give it (:func:`columnar_form`). The rows no batch takes, known by
their positions, are read by :func:`read_positions` as :func:`~cheems.formats.read.read_many`
reads them (a prompt, or the error naming file, line and field), so a caller treats them as the
object path does: a file with a few irregular rows takes the columnar path for all the others.
"""

from __future__ import annotations

import os
from bisect import bisect_right
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, Iterable, Iterator, NamedTuple, Sequence

from cheems.formats.columnar import BATCH_ROWS, CHUNK_ROWS, NOT_COLUMNAR_SUFFIXES, ColumnarBatch, dump_row
from cheems.formats.detect import parse_row_as
from cheems.formats.result import ReadResult
from cheems.formats.rows import NotPlain, numbered_rows, parse_some, read_row
from cheems.records import CheemsInputError

__all__ = ["Chunk", "RowSource", "batches_of", "columnar_form", "locate", "read_positions", "row_sources",
           "source_chunks"]


@dataclass
class RowSource:
    """Some consecutive rows of one file: ``rows`` (JSONL lines as bytes, or the items of a JSON
    list), the line (item) number of each, the position of the first among the rows of all the
    inputs, the rows' default subset (the file's stem, or None) and the indices of the items
    nested too deep to be taken (:func:`~cheems.formats.rows.numbered_rows`)."""

    path: Path
    stem: str | None
    rows: list
    numbers: list[int]
    first: int = 0
    deep: set[int] = field(default_factory=set)

    @property
    def name(self) -> str:
        """The file as errors name it."""
        return str(self.path)

    def part(self, lo: int, hi: int) -> "RowSource":
        """Rows ``lo:hi`` of these rows, as a source of their own."""
        deep = {i - lo for i in self.deep if lo <= i < hi}
        return RowSource(self.path, self.stem, self.rows[lo:hi], self.numbers[lo:hi], self.first + lo, deep)


def row_sources(paths: Sequence[str | os.PathLike], *, default_subsets: bool) -> list[RowSource]:
    """The rows of the files, one source per file (each file's stem the default subset of its rows
    with ``default_subsets``), positions counted across them in order. NotPlain for a file the
    general readers read whole (Parquet, TSV, CSV, a missing file, a broken JSON list...).
    O(bytes)."""
    sources, first = [], 0
    for path in map(Path, paths):
        if path.suffix.lower() in NOT_COLUMNAR_SUFFIXES:
            raise NotPlain(str(path))
        rows, numbers, deep = numbered_rows(path)
        sources.append(RowSource(path, path.stem if default_subsets else None, rows, numbers, first, deep))
        first += len(rows)
    return sources


def locate(sources: Sequence[RowSource], position: int) -> tuple[RowSource, int]:
    """The source holding the row at ``position`` and the row's index in it."""
    src = sources[bisect_right([s.first for s in sources], position) - 1]
    return src, position - src.first


class Chunk(NamedTuple):
    """Some rows of one source, parsed: the rows, their default subset, their positions, and the
    positions of the rows among them left to the general readers."""

    rows: list
    stem: str | None
    positions: Sequence[int]
    refused: list[int]


def source_chunks(sources: Iterable[RowSource]) -> Iterator[Chunk]:
    """The rows of the sources parsed, :data:`~cheems.formats.columnar.CHUNK_ROWS` at a time:
    what :func:`batches_of` takes. A line the fast parser refuses (broken JSON, NaN, bytes that
    are not UTF-8) or a row nested too deep is refused. O(bytes)."""
    for src in sources:
        for lo in range(0, len(src.rows), CHUNK_ROWS):
            raw = src.rows[lo:lo + CHUNK_ROWS]
            positions = range(src.first + lo, src.first + lo + len(raw))
            if type(raw[0]) is bytes:
                rows, others = parse_some(raw)
            else:
                others = [i - lo for i in sorted(src.deep) if lo <= i < lo + len(raw)]
                rows = [r for i, r in enumerate(raw) if i not in others] if others else raw
            if not others:
                yield Chunk(rows, src.stem, positions, [])
                continue
            skip = set(others)
            yield Chunk(rows, src.stem, [p for i, p in enumerate(positions) if i not in skip],
                        [positions[i] for i in others])


def batches_of(chunks: Iterable[Chunk], *, keep_rows: bool, keep_comparisons: bool = False,
               convert: bool = True) -> Iterator[ColumnarBatch]:
    """:class:`~cheems.formats.columnar.ColumnarBatch` es of :data:`~cheems.formats.columnar.BATCH_ROWS`
    rows or so from the chunks, each :meth:`~cheems.formats.columnar.ColumnarBatch.checked`,
    with the positions of the rows they refused (one may hold only those); rows of another
    format added in their :func:`columnar_form` with ``convert``."""
    new = partial(ColumnarBatch, keep_rows=keep_rows, keep_comparisons=keep_comparisons)
    batch = new()
    for rows, stem, positions, refused in chunks:
        batch.refused.extend(refused)
        batch.take(rows, stem, positions, columnar_form if convert else None)
        if len(batch) >= BATCH_ROWS:
            yield batch.checked()
            batch = new()
    if len(batch) or len(batch.refused):
        yield batch.checked()


def columnar_form(obj: Any) -> dict | None:
    """A row as the cheems row the general readers make of it (``Prompt.to_dict`` of
    :func:`~cheems.formats.detect.parse_row_as`), when that reads back to a prompt written as the
    same bytes; None for any other row (one they refuse, a scored row to join with others, a value
    that does not read back), which the general readers then read themselves."""
    try:
        row = parse_row_as(obj)[0].to_dict()
        again, fmt = parse_row_as(row)
        same = fmt == "cheems" and dump_row(again.to_dict()) == dump_row(row)
    except (CheemsInputError, TypeError):  # TypeError: a value orjson does not write
        return None
    return row if same else None


def read_positions(sources: Sequence[RowSource], positions: Iterable[int]) -> tuple[ReadResult, list[int]]:
    """The rows at ``positions`` (ascending) as :func:`~cheems.formats.read.read_many` reads them,
    scored rows not yet joined: the prompts with the line, file and format of each (their rows
    without a subset given their file's stem, with ``default_subsets``), the errors of the
    rows they refuse; and each prompt's position."""
    res, kept = ReadResult([]), []
    for position in positions:
        src, i = locate(sources, position)
        obj, err = read_row(src.path, src.rows[i], src.numbers[i])
        if err is None:
            try:
                p, fmt = parse_row_as(obj)
            except CheemsInputError as e:
                err = e.located(file=src.name, line=src.numbers[i])
        if err is not None:
            res.errors.append(err)
            continue
        if p.subset is None:
            p.subset = src.stem
        res.prompts.append(p)
        res.lines.append(src.numbers[i])
        res.files.append(src.name)
        res.formats.append(fmt)
        kept.append(position)
    return res, kept
