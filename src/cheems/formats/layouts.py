"""Layouts cheems does not read, told from a file's first bytes or its first row, in one place.

A file in such a layout gets one :class:`~cheems.records.CheemsInputError`, "this looks like
<layout>; cheems reads <closest formats> (see docs/formats.md)", in place of a missing field or an
invalid-JSON error on every line:

- :func:`check_file_layout` (from :func:`~cheems.formats.rows.iter_rows`, before any row is read): a
  CSV file, an Excel workbook, one JSON object that is not a list of rows (spread over lines, or
  one line wrapping the rows under a key), tab- or comma-separated text in a file not named ``.tsv``;
- :func:`row_layout` (from :func:`~cheems.formats.detect.parse_row`, only for a row no format
  detected, so a row valid elsewhere, a SCORES row or a prompt row for ``cheems curate sample``,
  is judged only where a benchmark row is wanted): a SCORES file, chat or instruction fine-tuning
  rows, AlignBench's questions, prompts without responses. That error keeps the field the cheems
  reader would name (``responses``) and is located at the row.
"""

from __future__ import annotations

import csv
import io
from pathlib import Path
from typing import Callable

import orjson

from cheems.records import CheemsInputError

__all__ = ["ROW_LAYOUTS", "check_file_layout", "closest_formats", "layout_error", "row_layout"]

_SEE = "(see docs/formats.md)"
_ROWS = "JSONL (one row a line), a JSON list of rows, Parquet or a TSV ranked list"


def layout_error(layout: str, closest: str, file: str | None = None) -> CheemsInputError:
    """The one error for a file in a layout cheems does not read."""
    return CheemsInputError(f"this looks like {layout}; cheems reads {closest} {_SEE}", file=file)


def closest_formats(keys: list[str] | set[str]) -> str:
    """The formats nearest to rows (or a table's columns) holding ``keys``."""
    k = {str(x).strip().lower() for x in keys}
    if k & {"chosen", "rejected"}:
        return "pairs (`pair`: prompt, chosen, rejected) as JSONL"
    if k & {"score", "rating", "helpfulness", "stars", "rank"}:
        return "scored responses (`scored`: prompt, response, score) as JSONL, or a TSV with a rank column"
    return "ranked lists (`cheems`: prompt, responses best first) as JSONL or TSV"


# --------------------------------------------------------------------------------------- file level

def check_file_layout(path: Path, data: bytes) -> None:
    """Raise the layout error for a file whose bytes are no rows cheems reads: a CSV or Excel
    file, one JSON object spread over lines, separated values in a file not named ``.tsv``.
    JSONL and JSON lists pass untouched (one look at the first line)."""
    name, suffix = str(path), path.suffix.lower()
    if suffix in (".xlsx", ".xls", ".xlsm"):
        raise layout_error("an Excel workbook", f"{_ROWS}: save the sheet as TSV", name)
    first = _first_line(data, 64)
    if suffix == ".csv":
        raise layout_error("a CSV file", _csv_closest(first, ","), name)
    if not first or first[:1] == b"[" or suffix == ".jsonl":
        return
    if first[:1] == b"{":
        row = _loads(first)
        if isinstance(row, dict):
            if _wraps_rows(row):  # one line holding {"data": [rows]}
                raise layout_error(_object_layout(row), _ROWS, name)
            return  # a JSONL row
        whole = _loads(data)
        if isinstance(whole, dict):
            raise layout_error(_object_layout(whole), _ROWS, name)
        return  # broken JSON: iter_rows names the line
    for sep, what in ((b"\t", "tab-separated text"), (b",", "comma-separated text (CSV)")):
        if sep in first:
            raise layout_error(f"{what} in a file not named .tsv",
                               f"{_csv_closest(first, sep.decode())}; a TSV file must be named .tsv", name)


def _first_line(data: bytes, within: int) -> bytes:
    """The first non-blank line among the first ``within`` lines of ``data``, stripped (empty:
    none), found without copying the rest of a big file."""
    start = 0
    for _ in range(within):
        end = data.find(b"\n", start)
        line = data[start:] if end < 0 else data[start:end]
        if line.strip():
            return line.strip()
        if end < 0:
            break
        start = end + 1
    return b""


def _csv_closest(header: bytes, sep: str) -> str:
    try:
        cells = next(csv.reader(io.StringIO(header.decode("utf-8", "replace")), delimiter=sep))
    except (StopIteration, csv.Error):
        cells = []
    return closest_formats(cells)


def _wraps_rows(obj: dict) -> bool:
    """An object that holds a list of rows and no prompt of its own."""
    return (not obj.keys() & _PROMPT_KEYS and
            any(isinstance(v, list) and v and all(isinstance(x, dict) for x in v) for v in obj.values()))


_PROMPT_KEYS = frozenset(("prompt", "input", "question", "instruction", "messages", "conversations", "dialog",
                          "conversation_input", "chosen"))


def _loads(data: bytes):
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        return None


def _object_layout(obj: dict) -> str:
    """How a JSON object holding no rows reads to a user: where its rows seem to be."""
    lists = [k for k, v in obj.items() if isinstance(v, list) and v and all(isinstance(x, dict) for x in v)]
    keys = ", ".join(map(str, list(obj)[:6]))
    if lists:
        return f"one JSON object holding its rows under {lists[0]!r} (keys: {keys}), not a list of rows"
    return f"one JSON object (keys: {keys}), not a list of rows"


# --------------------------------------------------------------------------------------- row level

ROW_LAYOUTS: tuple[tuple[str, str, Callable[[dict], bool]], ...] = (
    ("a SCORES file (prompt_id, response_id, score), read as the scores of an evaluation",
     "benchmark rows with responses (`cheems`, `pair`, ...)", lambda r: {"prompt_id", "response_id", "score"} <= r.keys()),
    ("chat fine-tuning rows (one conversation, no preference)",
     "preference rows: `trl` (chosen / rejected message lists) or `sharegpt`", lambda r: "messages" in r),
    ("AlignBench questions (a question and its reference answer, no model answer)",
     "AlignBench's judgments (`scored`: question, answer, score)", lambda r: {"question", "reference"} <= r.keys()),
    ("fine-tuning rows (one response, no score or preference)",
     "preference rows (`pair`, `alpaca`) or scored responses (`scored`: prompt, response, score)",
     lambda r: bool(r.keys() & {"output", "completion", "target"})),
    ("prompts without responses (a prompt file for `cheems curate sample`)",
     "rows with two or more responses (`cheems` ranked lists, `pair`) or scored responses (`scored`)",
     lambda r: bool(r.keys() & {"prompt", "input", "question", "instruction"})),
)
"""(what a row looks like, what cheems reads instead, the test), tried in order on a row that no format detected."""


def row_layout(row: dict) -> tuple[str, str] | None:
    """(layout, closest formats) of a row no format detected, or None when it names none of them
    (the cheems reader then names the missing field)."""
    for layout, closest, test in ROW_LAYOUTS:
        if test(row):
            return layout, closest
    return None
