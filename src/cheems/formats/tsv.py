"""Ranked lists and scored responses in a TSV file (``.tsv``): a header row, then one row a line.

Two layouts, told apart by the header (cells may be quoted as spreadsheets and pandas write them,
so a response can hold tabs and newlines):

- ``prompt`` (or ``question``), then one column per response, best first: each line becomes a
  ranked list ``{prompt, responses: [best, ..., worst]}`` (a ``cheems`` row; empty cells are
  dropped, so prompts may have different numbers of responses);
- ``prompt``, ``response`` (or ``answer``) and a ``rank`` column (or ``score``, ``rating``,
  ``helpfulness``): each line is one response, ``{prompt, response, rank}``, a ``scored`` row; the
  lines of one prompt are joined as scored rows are (lower rank better; higher score better). Cells
  of the other columns that hold numbers are read as numbers, so any of them can be ranked by.

Columns named ``id``, ``category`` or ``subset`` fill those fields of a ranked list.
"""

from __future__ import annotations

import csv
import io
import re
from pathlib import Path
from typing import Any, Iterator

from cheems.formats.scored import DEFAULT_ATTRIBUTES
from cheems.records import CheemsInputError

__all__ = ["ROW_FIELDS", "iter_tsv"]

ROW_FIELDS = frozenset(("id", "category", "subset"))
"""Columns of a ranked-list TSV that are fields of the row, not responses."""
_PROMPT_COLUMNS = ("prompt", "question")
_RESPONSE_COLUMNS = ("response", "answer")
_NUMBER = re.compile(r"^[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?$")


def iter_tsv(path: Path, data: bytes) -> Iterator[tuple[int, dict]]:
    """``(line, row)`` for each line of a TSV file after its header (``data``: its bytes, without
    a byte order mark). The line is where the row starts. A header cheems cannot use, or a line
    with another number of cells than the header, raises CheemsInputError naming file and line."""
    name = str(path)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise CheemsInputError(f"not valid UTF-8 (byte {e.start}); save the file as UTF-8", file=name) from None
    reader = csv.reader(io.StringIO(text, newline=""), delimiter="\t")
    header, start = None, 1
    try:
        for cells in reader:
            line, start = start, reader.line_num + 1
            if not any(c.strip() for c in cells):
                continue
            if header is None:
                header = _header(cells, name, line)
                make = _scored_row if _score_column(header) else _ranked_row
                continue
            if len(cells) != len(header):
                raise CheemsInputError(f"has {len(cells)} cells, the header has {len(header)}", file=name, line=line)
            yield line, make(header, cells)
    except csv.Error as e:
        raise CheemsInputError(f"not a TSV file cheems can read: {e}", file=name, line=start) from None


def _header(cells: list[str], name: str, line: int) -> list[str]:
    header = [c.strip().lower() for c in cells]
    if header[0] not in _PROMPT_COLUMNS:
        raise CheemsInputError(f"the first column must be 'prompt', got {cells[0]!r}: a header row names the "
                               "columns (prompt, then the responses best first; or prompt, response, rank)",
                               file=name, line=line)
    if len(set(header)) != len(header):
        raise CheemsInputError("the header names a column twice", file=name, line=line)
    score = _score_column(header)
    if score and not set(header) & set(_RESPONSE_COLUMNS):
        raise CheemsInputError(f"a {score!r} column needs a 'response' column (one response a line)",
                               file=name, line=line)
    if not score and len([h for h in header[1:] if h not in ROW_FIELDS]) < 2:
        raise CheemsInputError("a ranked list needs two or more response columns after 'prompt' "
                               "(or a 'response' and a 'rank' column)", file=name, line=line)
    return header


def _score_column(header: list[str]) -> str | None:
    return next((h for h in header if h in DEFAULT_ATTRIBUTES), None)


def _ranked_row(header: list[str], cells: list[str]) -> dict:
    row: dict[str, Any] = {"prompt": cells[0],
                           "responses": [c for h, c in zip(header[1:], cells[1:]) if h not in ROW_FIELDS and c]}
    row.update({h: c for h, c in zip(header, cells) if h in ROW_FIELDS and c})
    return row


def _scored_row(header: list[str], cells: list[str]) -> dict:
    row: dict[str, Any] = {}
    for h, c in zip(header, cells):
        if h in _PROMPT_COLUMNS or h in _RESPONSE_COLUMNS:
            row[h] = c
        elif c or h in DEFAULT_ATTRIBUTES:
            row[h] = _number(c)  # any attribute may be the one ranked by (--format scored:NAME)
    return row


def _number(cell: str) -> Any:
    """An integer or float cell as a number; anything else as it is (the reader names it)."""
    s = cell.strip()
    if not _NUMBER.match(s):
        return cell
    return int(s) if re.fullmatch(r"[+-]?\d+", s) else float(s)
