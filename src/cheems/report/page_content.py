"""What the report page is made of: numbers that carry their source (`Num`, written by `format_number`), table
cells, tables, figures and sections, the input files they come from (`Source`) and the whole `Report`.

Every number shown carries its source: the input it comes from (``src``: its index among the inputs), its place
in that file (``path``: JSON-pointer segments, a list position as its index) and how it is written (``fmt``, one
of `FORMATS`). The renderers (`cheems.report.render`) turn these into HTML attributes and Markdown text.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from decimal import ROUND_HALF_UP, Decimal, localcontext
from pathlib import Path
from typing import Any, Callable, Union

from cheems.records import is_integer, is_number

__all__ = ["DASH", "FORMATS", "Block", "Cell", "Figure", "Num", "Report", "Section", "Source", "Table", "auto_format",
           "bootstrap_p_format", "format_number", "p_value_text"]

FORMATS = {"f2": "fixed, 2 decimals", "f3": "fixed, 3 decimals", "f4": "fixed, 4 decimals",
           "e3": "scientific, 3 decimals, exponent unpadded (1.000e-5)", "d": "integer",
           "p": "p-value: fixed, 3 decimals; below 0.001 written <0.001",
           "pbN": "p-value of a bootstrap of N resamples: fixed, 4 decimals; below its resolution 1/(N+1) written "
                  "< 1/(N+1) (fixed, 4 decimals; scientific, 3 decimals, below 0.0001)"}
"""How a number is written (``data-fmt``). Decimals round half away from zero on the exact binary value, as
JavaScript's ``toFixed`` / ``toExponential`` do, so a browser can check every number."""

DASH = "–"
"""Shown for a value that is missing (null, absent, not finite)."""


def format_number(value: int | float, fmt: str) -> str:
    """``value`` written as `FORMATS` ``fmt`` says (``format_number(0.72967, "f3") == "0.730"``)."""
    if fmt == "d":
        return str(int(value))
    if fmt.startswith("pb"):
        return p_value_text(value, int(fmt[2:]))
    if fmt == "p" and value < 0.001:
        return "<0.001"
    with localcontext() as context:
        context.rounding = ROUND_HALF_UP
        if fmt == "e3":
            return "0.000e+0" if value == 0 else format(Decimal(value), ".3e")
        digits = 3 if fmt == "p" else int(fmt[1:])
        exact = Decimal(abs(value)).quantize(Decimal(1).scaleb(-digits))
    return ("-" if value < 0 else "") + f"{exact:f}"


def p_value_text(p: float, n_bootstrap: int) -> str:
    """A bootstrap p-value as readers quote it: 4 decimals, or ``< 1/(n+1)`` below the resolution of
    ``n_bootstrap`` resamples (``p_value_text(0.0, 999) == "< 0.0010"``), never ``0.0000``."""
    floor = 1 / (n_bootstrap + 1)
    if p < floor:
        return "< " + format_number(floor, "f4" if floor >= 1e-4 else "e3")
    return format_number(p, "f4")


def bootstrap_p_format(n_bootstrap: Any) -> str:
    """The format of the p-values of a bootstrap of ``n_bootstrap`` resamples: ``pbN``, or ``p`` when the
    number of resamples is not known."""
    return f"pb{n_bootstrap}" if is_integer(n_bootstrap) and n_bootstrap >= 1 else "p"


def auto_format(value: int | float) -> str:
    """The format of a value whose size is not known in advance (a training log's): ``d`` for an integer,
    ``f4`` from 0.001 to 10,000, else ``e3``."""
    if is_integer(value):
        return "d"
    return "f4" if value == 0 or 1e-3 <= abs(value) < 1e4 else "e3"


def _escape_segment(key: Any) -> str:
    return str(key).replace("~", "~0").replace("/", "~1")


@dataclass(frozen=True)
class Num:
    """A number shown on the page, with its source: input ``src``, place ``path`` in it, format ``fmt``.
    ``negated``: the number shown is minus the one in the file (a difference read the other way round)."""

    src: int
    path: tuple
    value: int | float
    fmt: str
    negated: bool = False

    @property
    def text(self) -> str:
        return format_number(self.value, self.fmt)

    @property
    def data_path(self) -> str:
        return "/".join(_escape_segment(k) for k in self.path)

    @property
    def data_value(self) -> str:
        return json.dumps(self.value)


Cell = Union[str, Num, tuple]
"""A table cell: text, a number, or a tuple of texts and numbers shown one after another."""


@dataclass
class Table:
    """A table; ``sortable`` ones re-sort by a column when its header is clicked."""

    header: list[str]
    rows: list[list[Cell]]
    caption: str = ""
    sortable: bool = False


@dataclass
class Figure:
    """A plot: ``draw`` fills a matplotlib Figure (see `cheems.report.plots`); ``name`` is its PNG's stem and
    ``texts`` the labels it shows (a CJK font is picked when one is Chinese)."""

    name: str
    title: str
    draw: Callable
    texts: list[str] = field(default_factory=list)
    size: tuple[float, float] = (8.0, 4.4)


Block = Union[str, Table, Figure]
"""A part of a section: a paragraph (str), a table or a figure."""


@dataclass
class Section:
    """A part of the page: a title and its paragraphs (str), tables and figures, in order."""

    anchor: str
    title: str
    blocks: list[Block]


@dataclass
class Source:
    """One input file: its position on the page (``index``, the ``data-src`` of its numbers), its kind, its
    parsed content and the label it goes by (a model name, a stage, a file name)."""

    index: int
    path: Path
    kind: str
    data: Any
    label: str = ""

    def value(self, *path) -> Any:
        """The value at ``path`` in the file, or None where the path leads nowhere."""
        node = self.data
        for key in path:
            if isinstance(node, dict) and key in node:
                node = node[key]
            elif isinstance(node, list) and isinstance(key, int) and 0 <= key < len(node):
                node = node[key]
            else:
                return None
        return node

    def num(self, *path, fmt: str = "f3", negate: bool = False) -> Num | str:
        """The number at ``path`` as a `Num` (with its source), or `DASH` where there is none; ``fmt``: one of
        `FORMATS`, or ``auto`` for `auto_format`; ``negate``: show minus the number."""
        v = self.value(*path)
        if not is_number(v) or not math.isfinite(v):
            return DASH
        if fmt == "auto":
            fmt = auto_format(v)
        if fmt == "d" and not float(v).is_integer():
            fmt = "f3"
        return Num(self.index, tuple(path), 0 - v if negate else v, fmt, negate)

    def interval(self, *path, fmt: str = "f3") -> Cell:
        """``[lo, hi]`` of the two-number list at ``path``, each number with its source; `DASH` without one."""
        ci = self.value(*path)
        if not isinstance(ci, list) or len(ci) != 2 or not all(is_number(x) for x in ci):
            return DASH
        return ("[", self.num(*path, 0, fmt=fmt), ", ", self.num(*path, 1, fmt=fmt), "]")


@dataclass
class Report:
    """What `cheems.report.page.build_report` read (``sources``, in the order given), the page's ``sections``,
    its title, its language (``lang``, one of `cheems.report.wording.LANGUAGES`) and the line under the title that
    says why and how to switch (``lang_note``; `code` in backquotes)."""

    sources: list[Source]
    sections: list[Section]
    title: str = "cheems report"
    lang: str = "en"
    lang_note: str = ""

    def of_kind(self, kind: str) -> list[Source]:
        return [s for s in self.sources if s.kind == kind]

    def say(self, key: str, **fields: Any) -> str:
        """The page's text ``key`` in its language (`cheems.report.wording`)."""
        from cheems.report.wording import say

        return say(self.lang, key, **fields)
