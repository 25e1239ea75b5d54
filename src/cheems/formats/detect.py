"""Which format a raw row is: detected from its keys, row by row, or forced by ``--format``.

:func:`detect_format` holds the rules, in the order they are tried: rows with ``responses``
first (what every stage writes, two key lookups), then the formats that share keys (``chosen`` /
``rejected``, ``conversation_input``) decided between, then the formats with keys of their own.
:func:`parse_row` hands the row to its format's reader (:data:`~cheems.formats.registry.READERS`).
"""

from __future__ import annotations

from typing import Any

from cheems.formats.registry import FORMAT_NAMES, FORMATS, READERS, ROW_FORMATS
from cheems.formats.transcripts import is_transcript
from cheems.records import CheemsInputError, Prompt, validate_prompt

__all__ = ["check_format", "detect_format", "parse_row"]

_DISTINCT_KEYS = tuple((f.keys, f.name) for f in ROW_FORMATS if f.keys)
"""Formats whose rows hold keys no other format uses (``RowFormat.keys``), in the registry's order."""


def parse_row(obj: Any, fmt: str | None = None) -> Prompt:
    """Turn one raw row into a validated :class:`Prompt`.

    The row's format is detected from its keys (:func:`detect_format`) unless ``fmt`` names
    one of :data:`~cheems.formats.registry.FORMAT_NAMES`; an unknown name is a CheemsInputError
    listing the known ones.
    """
    if not isinstance(obj, dict):
        raise CheemsInputError(f"row must be a JSON object, got {type(obj).__name__}")
    p = READERS[detect_format(obj) if fmt is None else check_format(fmt)](obj)
    validate_prompt(p, comparisons=False)  # each reader has checked its comparisons, naming their field
    return p


def check_format(fmt: str) -> str:
    """``fmt`` when it names a format of :data:`~cheems.formats.registry.FORMATS`; else
    CheemsInputError (field ``format``) listing the known names."""
    if not isinstance(fmt, str) or fmt not in FORMATS:
        raise CheemsInputError(f"unknown format {fmt!r}; known formats: {', '.join(FORMAT_NAMES)}",
                               field="format")
    return fmt


def detect_format(obj: dict) -> str:
    """The name (one of :data:`~cheems.formats.registry.FORMAT_NAMES`) of the format of a raw
    row, from its keys.

    Rows with ``responses`` (cheems rows, the common case on the read path) are recognised
    first, with two key lookups; the others by their distinctive keys. A row that matches
    none is read as a cheems row, whose reader names the missing field.
    """
    if "responses" in obj:
        return "task" if "task_id" in obj else "cheems"
    if "conversations" in obj:
        return "sharegpt"
    if "chosen" in obj or "rejected" in obj:
        return _chosen_rejected_format(obj)
    if "conversation_input" in obj:
        return "rmb-bon" if "bon_best" in obj or "loser_list" in obj else "rmb"
    if "answer1" in obj or "answer2" in obj:
        return "cheems-pairwise"
    if "task_id" in obj:
        return "task"
    for keys, name in _DISTINCT_KEYS:
        if any(k in obj for k in keys):
            return name
    if "instruction" in obj and "output" in obj:
        return "alpaca-ranking"
    return "cheems"


def _chosen_rejected_format(obj: dict) -> str:
    """Which of the formats that hold ``chosen`` / ``rejected`` a row is."""
    if "instruction" in obj:
        return "alpaca"
    if "conversation_input" in obj:
        return "rmb"
    chosen = obj.get("chosen")
    if type(chosen) is list or type(obj.get("rejected")) is list:
        return "trl"
    if "prompt" not in obj and "input" not in obj and isinstance(chosen, str) and is_transcript(chosen):
        return "hh-rlhf"
    return "pair"
