"""The catalogue as the markdown tables of docs/catalog.md, made from the entries themselves so
that the docs never say another thing than :data:`~cheems.catalog.registry.CATALOG`.

Each table sits between two markers in the page, ``<!-- table: NAME -->`` and
``<!-- end of table: NAME -->``; ``python -m cheems.catalog.tables docs/catalog.md`` writes them
afresh (the tests fail when the page holds other tables than these).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Callable

from cheems.catalog.entry import Entry
from cheems.catalog.registry import CATALOG

__all__ = ["TABLES", "entries_table", "files_table", "with_tables"]


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _splits(e: Entry) -> str:
    parts = [", ".join(e.files or e.splits)]
    if e.configs:
        parts.append(f"configs {', '.join(e.configs)}")
    if e.option:
        parts.append(f"option {e.option.name}: {'/'.join(e.option.choices)}")
    return "; ".join(parts)


def entries_table() -> str:
    """One row per entry: name, the paper's name, hub id, language, licence, splits and
    configs, what the conversion does."""
    rows = ["| name | paper | hub id | lang | licence | splits / configs | conversion |",
            "|---|---|---|---|---|---|---|"]
    for e in CATALOG.values():
        licence = e.licence + (" (non-commercial)" if e.non_commercial else "") + (" (gated)" if e.gated else "")
        rows.append(f"| `{e.name}` | {_cell(e.title)} | `{e.hub_id}` | {e.language} | {_cell(licence)} | "
                    f"{_cell(_splits(e))} | {_cell(e.description)} |")
    return "\n".join(rows)


def files_table() -> str:
    """One row per entry: the folder under ``$CHEEMS_HUB_MIRROR`` that holds its copy, and the
    files it reads there (or in a ``--source`` folder)."""
    rows = ["| name | folder under `$CHEEMS_HUB_MIRROR` | files read |", "|---|---|---|"]
    for e in CATALOG.values():
        rows.append(f"| `{e.name}` | `{e.mirror_folder}/` | {_cell(e.layout(quote='`'))} |")
    return "\n".join(rows)


TABLES: dict[str, Callable[[], str]] = {"entries": entries_table, "files": files_table}
"""Each generated table of docs/catalog.md by its marker name."""


def with_tables(page: str) -> str:
    """``page`` with every marked table written afresh from the catalogue."""
    for name, table in TABLES.items():
        pattern = re.compile(rf"(<!-- table: {name} -->\n).*?(<!-- end of table: {name} -->)", re.S)
        if not pattern.search(page):
            raise ValueError(f"the page has no <!-- table: {name} --> ... <!-- end of table: {name} --> markers")
        page = pattern.sub(lambda m: f"{m[1]}{table()}\n{m[2]}", page)
    return page


if __name__ == "__main__":
    for path in map(Path, sys.argv[1:]):
        path.write_text(with_tables(path.read_text(encoding="utf-8")), encoding="utf-8")
