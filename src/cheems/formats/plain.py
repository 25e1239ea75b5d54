"""Plain cheems rows read into flat arrays, no :class:`~cheems.records.Prompt` made.

``cheems rank`` on a file of plain rows (:data:`PLAIN_ROW_KEYS`; one row per prompt, responses
``{id, content}``, comparisons ``{a, b, label}``) reads it :func:`~cheems.formats.rows.row_chunks`
at a time into a :class:`PlainBatch`; any other input raises :class:`~cheems.formats.rows.NotPlain`
and goes to the general readers, which read it or name its fault.
"""

from __future__ import annotations

from array import array
from itertools import chain, count, islice, repeat
from operator import itemgetter
from typing import Any, Iterator

from cheems.formats.rows import NotPlain
from cheems.records import LABELS, prompt_id

__all__ = ["PLAIN_ROW_KEYS", "PlainBatch"]

PLAIN_ROW_KEYS = frozenset(("id", "prompt", "responses", "comparisons", "category", "subset"))
"""The keys a plain cheems row (:meth:`PlainBatch.add`) may hold."""

_GET_ROW = itemgetter("prompt", "responses", "comparisons")
_GET_ID, _GET_CONTENT = itemgetter("id"), itemgetter("content")
_GET_A, _GET_B, _GET_LABEL = itemgetter("a"), itemgetter("b"), itemgetter("label")
_LABEL_STRINGS = {label: label for label in LABELS}
_A_B_LABEL = ("a", "b", "label")


class PlainBatch:
    """Plain cheems rows read chunk by chunk into one batch, no :class:`Prompt` made.

    Plain rows (:meth:`add`) read as :func:`~cheems.formats.detect.parse_row` reads them. Per row
    the batch keeps what ``Prompt.to_dict`` writes: id (given, or derived as
    :func:`~cheems.formats.fields.row_id` derives it), prompt text, responses and (with
    ``comparisons``) comparisons as the dicts it writes, category tiers and subset. Flat over the
    batch it keeps integer codes, so that a chunk's comparison objects can be freed while still in
    the CPU cache: ``sizes`` / ``counts`` (responses / comparisons per row); ``node_first``: for
    each response the batch index of the first response holding its id; ``a_first`` /
    ``b_first``: the same for the id each comparison names (-1 for an id no response of the batch
    holds so far); ``labels``: one letter per comparison.
    :func:`cheems.graph.comparison_arrays_from_codes` checks them.
    """

    def __init__(self, *, comparisons: bool = False):
        self.keep_comparisons = comparisons
        self.ids: list[str] = []
        self.prompts: list[str] = []
        self.responses: list[list[dict]] = []
        self.comparisons: list[list[dict]] = []
        self.categories: list[list[str]] = []
        self.subsets: list[str | None] = []
        self.response_ids: list[str] = []
        self.sizes, self.counts = array("q"), array("q")
        self.node_first, self.a_first, self.b_first = array("q"), array("q"), array("q")
        self.labels: list[str] = []
        self._first: dict[str, int] = {}

    def __len__(self) -> int:
        return len(self.ids)

    def add(self, rows: list, default_subset: str | None = None) -> None:
        """Add rows that are all plain cheems rows; NotPlain for any other list (the batch is
        then unusable), which :func:`~cheems.formats.detect.parse_row` reads or refuses, naming
        the fault.

        Plain: a dict with keys among :data:`PLAIN_ROW_KEYS`; ``prompt`` non-blank text; ``id`` a
        string, an integer or absent; ``responses`` a non-empty list of ``{id, content}`` (two
        strings, no other key); ``comparisons`` a non-empty list of ``{a, b, label}`` (no other
        key, a label of g, b, s; the ids are checked by
        :func:`~cheems.graph.comparison_arrays_from_codes`); ``category`` and ``subset`` as
        :func:`~cheems.formats.fields.category_field` and
        :func:`~cheems.formats.fields.subset_field` accept them. ``default_subset`` fills a
        missing subset, as :func:`~cheems.formats.read.read_prompts` does. C-level ``map``s only;
        O(rows + responses + comparisons).
        """
        if set(map(type, rows)) != {dict} or not PLAIN_ROW_KEYS.issuperset(chain.from_iterable(rows)):
            raise NotPlain("not a plain row")
        try:
            prompts, responses, comps = zip(*map(_GET_ROW, rows))
        except (KeyError, ValueError):  # a missing field, no rows
            raise NotPlain("a field is missing") from None
        if set(map(type, prompts)) != {str} or not all(map(str.strip, prompts)) \
                or set(map(type, responses)) != {list} or not all(responses) \
                or set(map(type, comps)) != {list} or not all(comps):
            raise NotPlain("prompt, responses or comparisons")
        sizes, counts = list(map(len, responses)), list(map(len, comps))
        responses = self._add_responses(responses, sizes)
        self._add_comparisons(comps, counts)
        ids = list(map(dict.get, rows, repeat("id")))
        if set(map(type, ids)) != {str}:
            ids = list(map(_plain_row_id, ids, prompts, responses))
        subsets = list(map(dict.get, rows, repeat("subset")))
        if not {str, type(None)}.issuperset(map(type, subsets)):
            raise NotPlain("subset")
        self.categories += map(_plain_category, rows)
        self.subsets += [default_subset if s is None else s for s in subsets]
        self.ids += ids
        self.prompts += prompts
        self.responses += responses
        self.sizes.extend(sizes)
        self.counts.extend(counts)

    def _add_responses(self, responses: tuple[list, ...], sizes: list[int]) -> list[list[dict]]:
        """Code the responses' ids; the responses as to_dict writes them. O(responses)."""
        flat = list(chain.from_iterable(responses))
        try:  # a response that is not a dict fails its len() or its lookup
            if set(map(len, flat)) != {2}:
                raise NotPlain("responses")
            ids = list(map(_GET_ID, flat))
            types = set(map(type, ids)) | set(map(type, map(_GET_CONTENT, flat)))
        except (KeyError, TypeError):
            raise NotPlain("responses") from None
        if types != {str}:
            raise NotPlain("responses")
        if set(map(next, map(iter, flat))) != {"id"}:  # written {content, id}: rebuilt as to_dict writes it
            it = iter([{"id": i, "content": c} for i, c in zip(ids, map(_GET_CONTENT, flat))])
            responses = tuple(list(islice(it, n)) for n in sizes)
        self.node_first.extend(map(self._first.setdefault, ids, count(len(self.response_ids))))
        self.response_ids += ids
        return list(responses)

    def _add_comparisons(self, comps: tuple[list, ...], counts: list[int]) -> None:
        """Code the comparisons' ids and labels; keep them when asked. O(comparisons)."""
        flat = list(chain.from_iterable(comps))
        first = self._first.get
        try:  # a comparison that is not a dict, a missing key, an unhashable id or unknown label
            if set(map(len, flat)) != {3}:
                raise NotPlain("comparisons")
            a, b = list(map(_GET_A, flat)), list(map(_GET_B, flat))
            self.labels.append("".join(map(_LABEL_STRINGS.__getitem__, map(_GET_LABEL, flat))))
            self.a_first.extend(map(first, a, repeat(-1)))
            self.b_first.extend(map(first, b, repeat(-1)))
        except (KeyError, TypeError):
            raise NotPlain("comparisons") from None
        if self.keep_comparisons:
            if set(map(tuple, flat)) != {_A_B_LABEL}:  # keys in another order: rebuilt as to_dict writes them
                it = iter([{"a": x, "b": y, "label": z} for x, y, z in zip(a, b, map(_GET_LABEL, flat))])
                comps = tuple(list(islice(it, n)) for n in counts)
            self.comparisons += comps

    def ranked_rows(self, ranks: list[dict[str, int]]) -> Iterator[dict]:
        """Each row as ``Prompt.to_dict`` writes its prompt ranked by ``ranks[i]`` (same keys,
        order and values), with the comparisons when they were kept. O(rows)."""
        comparisons = self.comparisons if self.keep_comparisons else repeat(None)
        for rid, prompt, responses, rank, comps, category, subset in zip(
                self.ids, self.prompts, self.responses, ranks, comparisons, self.categories, self.subsets):
            d = {"id": rid, "prompt": prompt, "responses": responses, "rank": rank}
            if comps:
                d["comparisons"] = comps
            if category:
                d["category"] = category
            if subset is not None:
                d["subset"] = subset
            yield d


def _plain_row_id(rid: Any, prompt: str, responses: list[dict]) -> str:
    """:func:`~cheems.formats.fields.row_id` of a plain row."""
    if type(rid) is str:
        return rid
    if rid is None:
        return prompt_id(prompt, list(map(_GET_CONTENT, responses)))
    if type(rid) is int:
        return str(rid)
    raise NotPlain("id")


def _plain_category(row: dict) -> list[str]:
    """:func:`~cheems.formats.fields.category_field` of a plain row; NotPlain where it would raise."""
    c = row.get("category")
    if c is None:
        return []
    if type(c) is str:
        return [c]
    if type(c) is list and set(map(type, c)) <= {str}:
        return c
    raise NotPlain("category")
