"""Raw rows from a file: JSONL, a JSON list or Parquet, one object per row.

:func:`iter_rows` numbers every row for error messages and reads what the fast parser refuses
(NaN, Infinity) with the standard library; :func:`row_chunks` is its fast twin for plain input,
which hands anything unusual back to it by raising :class:`NotPlain`.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Iterator

import orjson

from cheems.records import CheemsInputError

__all__ = ["NotPlain", "iter_rows", "row_chunks"]


class NotPlain(Exception):
    """Input that :func:`row_chunks` and :class:`~cheems.formats.plain.PlainBatch` leave to the
    general readers (:func:`~cheems.formats.read.read_many`, :func:`~cheems.formats.detect.parse_row`),
    which read it or name its fault."""


def _json_source(path: Path, data: bytes) -> tuple[bytes, bool]:
    """A JSON file's bytes without a UTF-8 byte order mark (as some editors write), and whether
    they hold one JSON list (a file named ``.jsonl`` is rows, even if one of them is a list)."""
    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]
    return data, data.lstrip().startswith(b"[") and path.suffix != ".jsonl"


def iter_rows(path: str | os.PathLike, errors: list | None = None) -> Iterator[tuple[int, Any]]:
    """Yield ``(line, object)`` for each row of a JSONL, JSON-list or Parquet file (a file named
``.jsonl`` is always read line by line; another that starts with ``[`` is one JSON list).

    Blank lines are skipped. A line with invalid JSON or non-UTF-8 bytes raises
    CheemsInputError with its line number, or, when an ``errors`` list is given, is appended
    to it and skipped. ``NaN`` and ``Infinity``, which Python's ``json.dump`` writes (PandaLM's
    test set holds ``"input": NaN``), are read as floats. Items of a JSON list are numbered
    from 1 in place of lines.
    """
    path = Path(path)
    name = str(path)
    if not path.exists():
        raise CheemsInputError("no such file", file=name)
    if path.is_dir():
        raise CheemsInputError("is a directory, expected a file", file=name)
    if path.suffix == ".parquet":
        yield from _iter_parquet(path)
        return
    data, is_list = _json_source(path, path.read_bytes())
    if is_list:
        try:
            items = orjson.loads(data)
        except orjson.JSONDecodeError as e:
            items = _lenient_loads(data)
            if items is _INVALID:
                raise CheemsInputError(_json_message(data, e), file=name) from None
        for i, obj in enumerate(items):
            yield i + 1, obj
        return
    for lineno, line in enumerate(data.split(b"\n"), 1):
        if not line.strip():
            continue
        try:
            obj = orjson.loads(line)
        except orjson.JSONDecodeError as e:
            obj = _lenient_loads(line)
            if obj is _INVALID:
                err = CheemsInputError(_json_message(line, e), file=name, line=lineno)
                if errors is None:
                    raise err from None
                errors.append(err)
                continue
        yield lineno, obj


_INVALID = object()


def _lenient_loads(raw: bytes) -> Any:
    """``raw`` parsed by the standard library, which also reads NaN and Infinity; _INVALID
    when it is not JSON there either (the fast orjson parser has already refused it)."""
    try:
        return json.loads(raw.decode("utf-8"))
    except ValueError:  # UnicodeDecodeError and json.JSONDecodeError are ValueErrors
        return _INVALID


def _json_message(raw: bytes, err: Exception) -> str:
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError as u:
        return f"not valid UTF-8 (byte {u.start}); save the file as UTF-8"
    return f"invalid JSON: {err}"


def _iter_parquet(path: Path) -> Iterator[tuple[int, Any]]:
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise CheemsInputError("reading Parquet needs pyarrow: pip install 'cheems[parquet]'",
                               file=str(path)) from None
    for i, obj in enumerate(pq.read_table(path).to_pylist()):
        yield i + 1, obj


def row_chunks(path: str | os.PathLike, size: int) -> Iterator[list]:
    """The rows of a JSONL or JSON-list file, as :func:`iter_rows` reads them, ``size`` rows
    at a time (no line numbers). Raises NotPlain for every file or line that
    :func:`iter_rows` reports or reads with its lenient parser: a missing file, a folder,
    Parquet, a line orjson cannot read (broken JSON, NaN, not UTF-8). O(bytes).
    """
    path = Path(path)
    if path.suffix == ".parquet" or not path.is_file():
        raise NotPlain(str(path))
    try:
        data = path.read_bytes()
    except OSError:
        raise NotPlain(str(path)) from None
    data, is_list = _json_source(path, data)
    try:
        if is_list:
            items = orjson.loads(data)
            for lo in range(0, len(items), size):
                yield items[lo:lo + size]
            return
        lines = list(filter(bytes.strip, data.split(b"\n")))  # blank lines skipped, as iter_rows does
        del data
        for lo in range(0, len(lines), size):
            yield list(map(orjson.loads, lines[lo:lo + size]))
    except orjson.JSONDecodeError:
        raise NotPlain(str(path)) from None
