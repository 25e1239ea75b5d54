"""What one row format is: the name ``--format`` calls it by, its reader, and the shape of its rows.

Each format module defines the :class:`RowFormat` of what it reads; :mod:`cheems.formats.registry`
lists them all, once.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from cheems.records import Prompt

__all__ = ["RowFormat"]


@dataclass(frozen=True)
class RowFormat:
    """One row format cheems reads."""

    name: str  # what --format / fmt= calls it, e.g. "autoj"
    read: Callable[[dict], Prompt]  # a raw row -> a Prompt; CheemsInputError naming the field it refuses
    shape: str  # the row's keys, as :data:`cheems.formats.FORMATS` shows them
    keys: tuple[str, ...] = ()  # keys no other format uses: a row holding one of them is this format
    option: str | None = None  # what ``--format NAME:OPTION`` passes to ``read`` as its second argument
