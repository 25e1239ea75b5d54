"""Which format a raw row is: detected from its keys, row by row, or forced by ``--format``.

:func:`detect_format` holds the rules, in the order they are tried: rows with ``responses``
first (what every stage writes, two key lookups), then the formats that share keys (``chosen`` /
``rejected``, ``conversation_input``) decided between, then the formats with keys of their own.
:func:`parse_row` hands the row to its format's reader (:data:`~cheems.formats.registry.READERS`);
a row no format detected that looks like a layout cheems does not read
(:func:`~cheems.formats.layouts.row_layout`) is refused with one line naming it.
"""

from __future__ import annotations

from functools import lru_cache, partial
from typing import Any, Callable

from cheems.formats.layouts import row_layout
from cheems.formats.registry import FORMAT_NAMES, FORMATS, READERS, ROW_FORMATS
from cheems.formats.transcripts import is_transcript
from cheems.records import CheemsInputError, Prompt, validate_prompt

__all__ = ["check_format", "detect_format", "parse_row", "parse_row_as"]

_DISTINCT_KEYS = tuple((f.keys, f.name) for f in ROW_FORMATS if f.keys)
"""Formats whose rows hold keys no other format uses (``RowFormat.keys``), in the registry's order."""


def parse_row(obj: Any, fmt: str | None = None) -> Prompt:
    """Turn one raw row into a validated :class:`Prompt`.

    The row's format is detected from its keys (:func:`detect_format`) unless ``fmt`` names
    one of :data:`~cheems.formats.registry.FORMAT_NAMES`; an unknown name is a CheemsInputError
    listing the known ones.
    """
    return parse_row_as(obj, fmt)[0]


def parse_row_as(obj: Any, fmt: str | None = None) -> tuple[Prompt, str]:
    """:func:`parse_row`, and the format the row was read as: ``fmt``, or the one detected (once)."""
    if not isinstance(obj, dict):
        raise CheemsInputError(f"row must be a JSON object, got {type(obj).__name__}")
    if fmt is not None:
        name = check_format(fmt)
        p = _reader(name)(obj)
    else:
        name = detect_format(obj)
        if name == "cheems" and "responses" not in obj:
            _refuse_layout(obj)
        p = READERS[name](obj)
    validate_prompt(p, comparisons=False)  # each reader has checked its comparisons, naming their field
    return p, name


def _refuse_layout(obj: dict) -> None:
    """A row no format detected that looks like a layout cheems does not read: one line naming it."""
    found = row_layout(obj)
    if found is not None:
        raise CheemsInputError(f"missing response list; this row looks like {found[0]}; cheems reads {found[1]} "
                               "(see docs/formats.md)", field="responses")


def check_format(fmt: str) -> str:
    """``fmt`` when it names a format of :data:`~cheems.formats.registry.FORMATS`, or ``NAME:OPTION``
    for a format that takes an option (``scored:correctness``); else CheemsInputError (field
    ``format``) listing the known names."""
    name, colon, option = fmt.partition(":") if isinstance(fmt, str) else ("", "", "")
    if name not in FORMATS:
        raise CheemsInputError(f"unknown format {fmt!r}; known formats: {', '.join(FORMAT_NAMES)}",
                               field="format")
    if colon:
        f = next(f for f in ROW_FORMATS if f.name == name)
        if f.option is None:
            raise CheemsInputError(f"format {name!r} takes no option (NAME:OPTION), got {fmt!r}", field="format")
        if not option.strip():
            raise CheemsInputError(f"{name}: needs an option after the colon: {f.option}", field="format")
    return fmt


def _reader(fmt: str) -> Callable[[dict], Prompt]:
    """The reader ``--format`` names: the registered one, or, for ``NAME:OPTION``, it given the option."""
    name, _, option = fmt.partition(":")
    return _with_option(READERS[name], option) if option else READERS[name]


@lru_cache(maxsize=16)
def _with_option(read: Callable[..., Prompt], option: str) -> Callable[[dict], Prompt]:
    return partial(read, attribute=option)


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
