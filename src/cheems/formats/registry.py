"""Every row format cheems reads, listed once, in the order ``--format`` lists them and detection tries
the distinct keys.

A format is one module that reads it (its ``parse_*`` function and its :class:`RowFormat`) plus
one line in :data:`ROW_FORMATS`. A format whose rows hold keys no other format uses names them in
``RowFormat.keys`` and is detected by them, in this list's order, after the rules for the formats
that share keys (:mod:`cheems.formats.detect`). ``docs/formats.md`` shows one row of each format
(``tests/test_formats_registry.py`` checks it).
"""

from __future__ import annotations

from typing import Callable

from cheems.formats import judge_pairs, llamafactory, official, pairs, rmb, scored, transcripts
from cheems.formats.spec import RowFormat
from cheems.records import Prompt

__all__ = ["FORMAT_NAMES", "FORMATS", "READERS", "ROW_FORMATS", "RowFormat"]

ROW_FORMATS: tuple[RowFormat, ...] = (
    official.CHEEMS,
    official.CHEEMS_PAIRWISE,
    official.TASK,
    pairs.PAIR,
    llamafactory.SHAREGPT,
    llamafactory.ALPACA,
    llamafactory.ALPACA_RANKING,
    judge_pairs.AUTOJ,
    judge_pairs.CRITIQUELLM,
    judge_pairs.PANDALM,
    pairs.MEDICALGPT,
    rmb.RMB,
    rmb.RMB_BON,
    transcripts.HH_RLHF,
    transcripts.TRL,
    scored.SCORED,
)

FORMATS: dict[str, str] = {f.name: f.shape for f in ROW_FORMATS}
"""Every row format cheems reads, by the name that forces it, with the shape it reads."""

FORMAT_NAMES = tuple(FORMATS)
"""The names of :data:`FORMATS`, in the order ``--format`` lists them."""

READERS: dict[str, Callable[[dict], Prompt]] = {f.name: f.read for f in ROW_FORMATS}
"""The reader of each format, by its name."""
