"""Raw rows from a file: JSONL, a JSON list, Parquet or TSV (:mod:`~cheems.formats.tsv`), one object per row.

A file in a layout cheems does not read (CSV, Excel, one JSON object) is refused before its rows
are read, with one line naming the layout (:func:`~cheems.formats.layouts.check_file_layout`).

:func:`iter_rows` numbers every row for error messages and reads what the fast parser refuses
(NaN, Infinity) with the standard library; :func:`row_chunks` is its fast twin for plain input,
which hands anything unusual back to it by raising :class:`NotPlain`. :func:`numbered_rows`,
:func:`parse_some` and :func:`read_row` read a file's rows as :func:`iter_rows` does, the fast
parser first, one row at a time where it must (:mod:`cheems.formats.columnar_input`).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Iterator

import orjson

from cheems.formats.layouts import check_file_layout
from cheems.formats.tsv import iter_tsv
from cheems.io import MAX_JSON_DEPTH, check_input_file, json_value_problem
from cheems.records import CheemsInputError

__all__ = ["NotPlain", "iter_rows", "numbered_rows", "parse_some", "read_row", "row_chunks"]


class NotPlain(Exception):
    """Input that :func:`row_chunks` and :class:`~cheems.formats.columnar.ColumnarBatch` leave to the
    general readers (:func:`~cheems.formats.read.read_many`, :func:`~cheems.formats.detect.parse_row`),
    which read it or name its fault."""


def _json_source(path: Path, data: bytes) -> tuple[bytes, bool]:
    """A JSON file's bytes without a UTF-8 byte order mark (as some editors write), and whether
    they hold one JSON list (a file named ``.jsonl`` is rows, even if one of them is a list)."""
    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]
    return data, data.lstrip().startswith(b"[") and path.suffix != ".jsonl"


def iter_rows(path: str | os.PathLike, errors: list | None = None) -> Iterator[tuple[int, Any]]:
    """Yield ``(line, object)`` for each row of a JSONL, JSON-list, Parquet or TSV file (a file named
``.jsonl`` is always read line by line, ``.tsv`` by :func:`~cheems.formats.tsv.iter_tsv`; another
that starts with ``[`` is one JSON list).

    Blank lines are skipped. A line with invalid JSON or non-UTF-8 bytes raises
    CheemsInputError with its line number, or, when an ``errors`` list is given, is appended
    to it and skipped. ``NaN`` and ``Infinity``, which Python's ``json.dump`` writes (PandaLM's
    test set holds ``"input": NaN``), are read as floats. Items of a JSON list are numbered
    from 1 in place of lines.
    """
    path = Path(path)
    name = str(path)
    check_input_file(path)
    if path.suffix == ".parquet":
        yield from _iter_parquet(path)
        return
    data, is_list = _json_source(path, _read_input(path))
    if path.suffix.lower() == ".tsv":
        yield from iter_tsv(path, data)
        return
    if not is_list:
        check_file_layout(path, data)  # CSV, Excel, one JSON object: one line naming the layout
    if is_list:
        lenient = False
        try:
            items = orjson.loads(data)
        except orjson.JSONDecodeError as e:
            items, lenient = _lenient_loads(data), True
            if items is _INVALID:
                raise CheemsInputError(_json_message(data, e), file=name) from None
        deep = lenient or _may_nest_deep(data)
        for i, obj in enumerate(items):
            err = _value_error(obj, name, i + 1, strings=lenient) if deep else None
            if err is not None and errors is None:
                raise err
            if err is not None:
                errors.append(err)
                continue
            yield i + 1, obj
        return
    for lineno, line in enumerate(data.split(b"\n"), 1):
        if not line.strip():
            continue
        obj, err = _parse_line(line, name, lineno)
        if err is not None:
            if errors is None:
                raise err
            errors.append(err)
            continue
        yield lineno, obj


def _read_input(path: Path) -> bytes:
    """The bytes of an input file; a file that cannot be read is one error naming it."""
    try:
        return path.read_bytes()
    except OSError as e:
        raise CheemsInputError(f"cannot read: {e.strerror or e}", file=str(path)) from None


def _parse_line(line: bytes, name: str, lineno: int) -> tuple[Any, CheemsInputError | None]:
    """``(object, None)`` for one JSONL line (the fast parser, else the lenient one), or
    ``(None, error)`` naming the line: broken JSON, bytes that are not UTF-8, nesting past
    MAX_JSON_DEPTH, a lone surrogate (which only the lenient parser lets through)."""
    try:
        obj, lenient = orjson.loads(line), False
    except orjson.JSONDecodeError as e:
        obj, lenient = _lenient_loads(line), True
        if obj is _INVALID:
            return None, CheemsInputError(_json_message(line, e), file=name, line=lineno)
    if lenient or _may_nest_deep(line):
        return obj, _value_error(obj, name, lineno, strings=lenient)
    return obj, None


_SHALLOW_BYTES = 2 * MAX_JSON_DEPTH + 1
"""A JSON text this short cannot nest past MAX_JSON_DEPTH: that takes MAX_JSON_DEPTH + 1 opening
brackets and as many closing ones."""


def _may_nest_deep(raw: bytes) -> bool:
    """Whether ``raw`` holds enough brackets to nest past MAX_JSON_DEPTH (counted in C, and
    only in a line long enough to; only then is the parsed value walked)."""
    return len(raw) > _SHALLOW_BYTES and raw.count(b"[") + raw.count(b"{") > MAX_JSON_DEPTH


def _value_error(obj: Any, name: str, lineno: int, *, strings: bool) -> CheemsInputError | None:
    """The error of a parsed row nested past MAX_JSON_DEPTH or (``strings``) holding a lone
    surrogate, naming file, line and field; None for a sound row."""
    problem = json_value_problem(obj, strings=strings)
    if problem is None:
        return None
    return CheemsInputError(problem[1], file=name, line=lineno, field=problem[0] or None)


_INVALID = object()


def _lenient_loads(raw: bytes) -> Any:
    """``raw`` parsed by the standard library, which also reads NaN and Infinity; _INVALID
    when it is not JSON there either (the fast orjson parser has already refused it)."""
    try:
        return json.loads(raw.decode("utf-8"))
    except (ValueError, RecursionError):  # UnicodeDecodeError and json.JSONDecodeError are ValueErrors
        return _INVALID


def _json_message(raw: bytes, err: Exception) -> str:
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError as u:
        return f"not valid UTF-8 (byte {u.start}); save the file as UTF-8"
    if "depth limit" in str(err):  # orjson stops past 1024 levels; the standard parser runs out of stack
        return f"nests deeper than {MAX_JSON_DEPTH} levels of lists and objects"
    return f"invalid JSON: {err}"


def _iter_parquet(path: Path) -> Iterator[tuple[int, Any]]:
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        raise CheemsInputError("reading Parquet needs pyarrow: pip install 'cheems[parquet]'",
                               file=str(path)) from None
    _check_parquet_signature(path)
    try:
        rows = pq.read_table(path).to_pylist()
    except (pa.ArrowException, OSError, ValueError) as e:  # ValueError: a string that is not UTF-8
        message = " ".join(str(e).split())
        raise CheemsInputError(f"cannot read as Parquet: {message[:200]}", file=str(path)) from None
    for i, obj in enumerate(rows):
        yield i + 1, obj


PARQUET_MAGIC = b"PAR1"


def _check_parquet_signature(path: Path) -> None:
    """Refuse a ``.parquet`` file that is not Parquet (empty, JSON text under that name, other
    bytes) before pyarrow reads it: Parquet starts and ends with ``PAR1``."""
    try:
        with open(path, "rb") as f:
            head = f.read(64)
            size = f.seek(0, os.SEEK_END)
            f.seek(max(size - 4, 0))
            tail = f.read(4)
    except OSError as e:
        raise CheemsInputError(f"cannot read: {e.strerror or e}", file=str(path)) from None
    if head.startswith(PARQUET_MAGIC) and tail == PARQUET_MAGIC and size >= 12:
        return
    if size == 0:
        raise CheemsInputError("is empty (0 bytes), not a Parquet file", file=str(path))
    if head.lstrip(b"\xef\xbb\xbf \t\r\n")[:1] in (b"{", b"["):
        raise CheemsInputError("holds JSON text, not Parquet: name it .jsonl (rows) or .json (one list)",
                               file=str(path))
    raise CheemsInputError("is not a Parquet file (no PAR1 signature at its start and end): a damaged or "
                           "cut-off file, or another format under a .parquet name", file=str(path))


def row_chunks(path: str | os.PathLike, size: int) -> Iterator[list]:
    """The rows of a JSONL or JSON-list file, as :func:`iter_rows` reads them, ``size`` rows
    at a time (no line numbers). Raises NotPlain for every file or line that
    :func:`iter_rows` reports or reads with its lenient parser: a missing file, a folder,
    Parquet, a line orjson cannot read (broken JSON, NaN, not UTF-8), a row nested past
    MAX_JSON_DEPTH. O(bytes).
    """
    path = Path(path)
    data, is_list = _plain_source(path)
    if is_list:
        try:
            items = orjson.loads(data)
        except orjson.JSONDecodeError:
            raise NotPlain(str(path)) from None
        if _may_nest_deep(data):
            _refuse_deep(path, items)
        for lo in range(0, len(items), size):
            yield items[lo:lo + size]
        return
    lines = _lines(data)
    del data
    for lo in range(0, len(lines), size):
        rows, others = parse_some(lines[lo:lo + size])
        if others:
            raise NotPlain(str(path))
        yield rows


def numbered_rows(path: str | os.PathLike) -> tuple[list, list[int], set[int]]:
    """The rows of a JSONL or JSON-list file as :func:`iter_rows` numbers them, not yet read:
    ``(rows, numbers, deep)``: each non-blank line's bytes and its line number, or each item of a
    JSON list (parsed) and its number from 1, and the indices of the items nested past
    MAX_JSON_DEPTH (:func:`parse_some` finds such lines). NotPlain where :func:`iter_rows`
    refuses the whole file (a missing file, a folder, another layout) or reads it whole with
    the lenient parser, and for Parquet and TSV; the rows are then left to it. O(bytes)."""
    path = Path(path)
    data, is_list = _plain_source(path)
    try:
        check_input_file(path)
        if not is_list:
            check_file_layout(path, data)
    except CheemsInputError:
        raise NotPlain(str(path)) from None
    if is_list:
        try:
            items = orjson.loads(data)
        except orjson.JSONDecodeError:
            raise NotPlain(str(path)) from None
        deep = {i for i, item in enumerate(items) if json_value_problem(item, strings=False)} \
            if _may_nest_deep(data) else set()
        return items, list(range(1, len(items) + 1)), deep
    lines, numbers = [], []
    for lineno, line in enumerate(data.split(b"\n"), 1):
        if line.strip():
            lines.append(line)
            numbers.append(lineno)
    return lines, numbers, set()


def parse_some(lines: list[bytes]) -> tuple[list, list[int]]:
    """The rows of some of :func:`numbered_rows`' lines that the fast parser reads as
    :func:`iter_rows` reads them, and the indices of the other lines (broken JSON, NaN, bytes
    that are not UTF-8, a row nested past MAX_JSON_DEPTH): ``(rows, others)``. One C-level
    ``map`` unless a line is refused."""
    try:
        rows = list(map(orjson.loads, lines))
        others = set()
    except orjson.JSONDecodeError:
        rows, others = [], set()
        for i, line in enumerate(lines):
            try:
                rows.append(orjson.loads(line))
            except orjson.JSONDecodeError:
                rows.append(None)
                others.add(i)
    others.update(i for i, raw in enumerate(lines) if i not in others and _may_nest_deep(raw)
                  and json_value_problem(rows[i], strings=False))
    if not others:
        return rows, []
    return [r for i, r in enumerate(rows) if i not in others], sorted(others)


def read_row(path: str | os.PathLike, raw: Any, number: int) -> tuple[Any, CheemsInputError | None]:
    """One row of :func:`numbered_rows` as :func:`iter_rows` reads it: ``(object, None)``, or
    ``(None, error)`` naming the file and line (item) ``number``."""
    name = str(path)
    if type(raw) is bytes:
        return _parse_line(raw, name, number)
    err = _value_error(raw, name, number, strings=False)
    return (None, err) if err is not None else (raw, None)


def _plain_source(path: Path) -> tuple[bytes, bool]:
    """The bytes of a file :func:`row_chunks` may read (:func:`_json_source`), NotPlain for
    Parquet, TSV, a missing file or a folder."""
    if path.suffix in (".parquet", ".tsv") or not path.is_file():
        raise NotPlain(str(path))
    try:
        data = path.read_bytes()
    except OSError:
        raise NotPlain(str(path)) from None
    return _json_source(path, data)


def _lines(data: bytes) -> list[bytes]:
    return list(filter(bytes.strip, data.split(b"\n")))  # blank lines skipped, as iter_rows does


def _refuse_deep(path: Path, rows: list) -> None:
    """NotPlain when one of ``rows`` nests past MAX_JSON_DEPTH (:func:`iter_rows` names it)."""
    if any(json_value_problem(r, strings=False) for r in rows):
        raise NotPlain(str(path))
