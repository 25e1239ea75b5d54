"""Every catalogue entry, by name: the one list ``cheems data list`` prints and every command
that takes a data file resolves names against."""

from __future__ import annotations

from cheems.catalog import cheems_release, chinese, english, rated
from cheems.catalog.entry import Entry
from cheems.records import CheemsInputError

__all__ = ["CATALOG", "entry_for_hub_id", "find_entry"]

CATALOG: dict[str, Entry] = {e.name: e for e in (*chinese.ENTRIES, *cheems_release.ENTRIES, *english.ENTRIES,
                                                 *rated.ENTRIES)}
"""The entries by name: Chinese sets, the Cheems releases, then the English sets of Table 3."""


def find_entry(name: str) -> Entry:
    """The entry called ``name`` (case-insensitive), or one error listing the names there are."""
    entry = CATALOG.get(name) or CATALOG.get(name.lower())
    if entry is None:
        raise CheemsInputError(f"no dataset {name!r} in the catalogue; `cheems data list` shows them all "
                               f"({', '.join(CATALOG)})")
    return entry


def entry_for_hub_id(hub_id: str) -> Entry | None:
    """The entry whose hub id (or one of whose alternative ids) is ``hub_id``, if any: an
    ``hf:ID`` the catalogue knows is converted by its entry."""
    for entry in CATALOG.values():
        if hub_id == entry.hub_id or hub_id in entry.alternatives:
            return entry
    return None
