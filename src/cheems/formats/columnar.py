"""Cheems rows read straight into columns, no :class:`~cheems.records.Prompt` made: what
``cheems rank`` (:mod:`cheems.formats.columnar_rank`), ``cheems stats``
(:mod:`cheems.formats.columnar_sums`) and ``cheems curate resolve`` and ``debias`` need from
JSONL files of cheems rows.

A :class:`ColumnarBatch` holds a few hundred parsed rows (orjson, :mod:`cheems.formats.columnar_input`)
as columns: response ids coded as integers (the index of the first response of the batch holding
each id), comparisons as integer codes and one label letter each, response and prompt lengths
as integer arrays. Texts are never copied: the values the parser made are kept as they are, and
a ranked row is written by placing ``rank`` among the parsed row's own values, in the key order
:meth:`~cheems.records.Prompt.to_dict` writes, so the bytes are those of the object path.

Columnar rows are the cheems rows :func:`~cheems.formats.official.parse_cheems` reads
without joining or converting anything: a ``prompt`` (text or chat messages), ``responses`` of
``{id, content, model?, ...}`` with string ids, ``comparisons`` of ``{a, b, label, annotator?,
source?, ...}`` naming response ids, ``triples`` (``{ids, ranking, annotator?}``, read into their
three comparisons each), an optional ``rank`` object, ``id``, ``category``, ``subset`` and any
other keys (kept); :func:`columnar_scores` reads SCORES files so. :meth:`ColumnarBatch.take`
adds the rows it is given a few at a time and refuses, one by one, every other row (another
format, ``annotations``, an id to convert, a row that is wrong in any way): it is added in the
form the general readers give it when that is a columnar row (``convert``), or left, by its
position, to the general readers, which read it or name its fault (file, line, field) as always.
"""

from __future__ import annotations

import os
from array import array
from bisect import bisect_right
from functools import partial
from itertools import accumulate, chain, count, islice, repeat
from operator import itemgetter
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator, Sequence

import orjson

from cheems.formats.official import COMPARISON_KEYS, RESPONSE_KEYS
from cheems.formats.rows import NotPlain, row_chunks
from cheems.formats.scored import RANKED_BY
from cheems.records import LABELS, ROLES, CheemsInputError, prompt_id, triple_comparisons

if TYPE_CHECKING:
    import numpy as np

    from cheems.formats.read import Scores

__all__ = ["BATCH_ROWS", "CHUNK_ROWS", "NOT_COLUMNAR_SUFFIXES", "ColumnarBatch", "columnar_scores", "dump_row"]

ROW_KEYS = frozenset(("id", "prompt", "responses", "rank", "comparisons", "triples", "category", "subset"))
"""The keys of a columnar row that :meth:`~cheems.records.Prompt.to_dict` writes in its own
order; the row's other keys are written after them, in the row's order."""

_OTHER_READERS = frozenset(("input", "annotations", "task_id", RANKED_BY))
"""Keys whose rows the general readers read (converted, joined or of another format)."""

NOT_COLUMNAR_SUFFIXES = frozenset((".csv", ".xlsx", ".xls", ".xlsm", ".tsv", ".parquet"))

_GET_PROMPT, _GET_RESPONSES = itemgetter("prompt"), itemgetter("responses")
_GET_A, _GET_B, _GET_LABEL = itemgetter("a"), itemgetter("b"), itemgetter("label")
_LABEL_STRINGS = {label: label for label in LABELS}
_GROWING = ("ids", "subsets", "has_rank", "prompts", "ranks", "responses", "comparisons", "categories", "extras",
            "response_ids", "content_chars", "prompt_chars", "rank_values", "sizes", "counts", "node_first", "a_first",
            "b_first", "labels")
"""The columns :meth:`ColumnarBatch.add` lengthens."""
CHUNK_ROWS = 64  # rows parsed per round: their comparison objects are freed while still in the CPU cache
BATCH_ROWS = 256  # rows coded, resolved and written together (numpy calls per batch, not per row)


class ColumnarBatch:
    """Columnar rows (see the module) added a chunk at a time: :meth:`add` raises NotPlain for
    any other row, leaving the batch unusable; :meth:`take` adds what it can and refuses the
    others, one by one, and :meth:`checked` makes sure :meth:`arrays` takes every row.

    Per row: ``ids`` (given, an integer id as text, or :func:`~cheems.records.prompt_id` of a row
    without one), ``subsets``, ``has_rank`` and, with ``keep_rows``, what ``Prompt.to_dict``
    writes: ``prompts``, ``ranks`` (parsed, None: none), ``responses`` (the parsed dicts, rebuilt
    only where their keys are not in the written order), ``comparisons`` (only with
    ``keep_comparisons``), ``categories``, ``extras`` (None: none). Flat over the batch:
    ``response_ids``, ``content_chars``; ``sizes`` and ``counts`` (responses and comparisons per
    row); ``node_first``, ``a_first``, ``b_first`` and ``labels`` as
    :func:`cheems.graph.comparison_arrays_from_codes` takes them; ``rank_values`` (the input rank
    of every response of a ranked row, in response order) and ``prompt_chars``. ``positions``:
    each row's position among the rows of all the inputs; ``refused``: the positions of the rows
    left to the general readers (:meth:`take`), in no particular order."""

    def __init__(self, *, keep_rows: bool = True, keep_comparisons: bool = False):
        self.keep_rows, self.keep_comparisons = keep_rows, keep_comparisons
        self.ids: list[str] = []
        self.subsets: list[str | None] = []
        self.has_rank: list[bool] = []
        self.prompts: list[Any] = []
        self.ranks: list[dict | None] = []
        self.responses: list[list[dict]] = []
        self.comparisons: list[list[dict]] = []
        self.categories: list[list[str]] = []
        self.extras: list[dict | None] = []
        self.response_ids: list[str] = []
        self.content_chars, self.prompt_chars, self.rank_values = array("q"), array("q"), array("q")
        self.sizes, self.counts = array("q"), array("q")
        self.node_first, self.a_first, self.b_first = array("q"), array("q"), array("q")
        self.labels: list[str] = []
        self.positions, self.refused = array("q"), array("q")
        self._first: dict[str, int] = {}
        self._taken: list[tuple[list, str | None]] = []  # the rows of each add and their default subset, until checked
        self._arrays: tuple | None = None

    def __len__(self) -> int:
        return len(self.ids)

    def take(self, rows: list, default_subset: str | None, positions: Sequence[int],
             convert: Callable[[Any], dict | None] | None = None) -> None:
        """Add, in order, the rows this batch takes (``positions``: theirs among all rows); a row
        it refuses is added as ``convert(row)`` where that gives a row it takes, else its
        position joins ``refused``. Rows are tried together, then in the pieces of :func:`_pieces`
        down to single rows: a few irregular rows cost a few more tries, not one per row."""
        if not rows:
            return
        mark = self._mark()
        try:
            self.add(rows, default_subset)
        except NotPlain as e:
            self._undo(mark)
            refused = getattr(e, "rows", None)
        else:
            self.positions.extend(positions)
            self._taken.append((rows, default_subset))
            return
        if len(rows) > 1:
            for lo, hi in _pieces(rows, refused):
                self.take(rows[lo:hi], default_subset, positions[lo:hi], convert)
            return
        converted = convert(rows[0]) if convert is not None else None
        if converted is None:
            self.refused.extend(positions)
        else:
            self.take([converted], default_subset, positions)

    def _mark(self) -> tuple[int, ...]:
        """How long each growing column is, for :meth:`_undo`."""
        return tuple(len(getattr(self, name)) for name in _GROWING)

    def _undo(self, mark: tuple[int, ...]) -> None:
        """Every column cut back to its length at ``mark``: the batch as it was before a refused
        :meth:`add`, response ids coded since then forgotten."""
        for name, n in zip(_GROWING, mark):
            del getattr(self, name)[n:]
        n_responses = len(self.response_ids)
        self._first = {k: v for k, v in self._first.items() if v < n_responses}

    def checked(self) -> "ColumnarBatch":
        """This batch when :meth:`arrays` takes every row of it; else a batch of its rows but
        those :func:`cheems.graph.invalid_code_prompts` finds (a row that repeats a response
        id, a comparison that names an id its row lacks or one response twice), whose
        positions join ``refused``. Called once, when no row is to be added any more."""
        from cheems.graph import comparison_arrays_from_codes, invalid_code_prompts

        taken, self._taken = self._taken, []
        if not len(self):
            return self
        codes = (self.sizes, self.counts, self.node_first, self.a_first, self.b_first, "".join(self.labels))
        self._arrays = comparison_arrays_from_codes(*codes)
        if self._arrays is not None:
            return self
        spoilt = invalid_code_prompts(*codes).tolist()
        if not any(spoilt):  # not found row by row: every row to the general readers
            spoilt = [True] * len(self)
        out = ColumnarBatch(keep_rows=self.keep_rows, keep_comparisons=self.keep_comparisons)
        out.refused = self.refused
        at = 0
        for rows, stem in taken:  # the runs of good rows added again, each as one
            positions, bad = self.positions[at:at + len(rows)], spoilt[at:at + len(rows)] + [True]
            at += len(rows)
            lo = 0
            for k in (k for k, b in enumerate(bad) if b):
                if k > lo:
                    out.take(rows[lo:k], stem, positions[lo:k])
                if k < len(rows):
                    out.refused.append(positions[k])
                lo = k + 1
        return out.checked()

    def add(self, rows: list, default_subset: str | None = None) -> None:
        """Add parsed rows that are all columnar (NotPlain otherwise); ``default_subset`` fills
        a missing subset, as :func:`~cheems.formats.read.read_many` does. C-level ``map``s over
        responses and comparisons; Python code per row only for what is unusual (a chat prompt,
        a missing id, an input rank, extra keys). O(rows + responses + comparisons)."""
        if set(map(type, rows)) != {dict} or not _OTHER_READERS.isdisjoint(chain.from_iterable(rows)):
            raise NotPlain("not a columnar row")
        try:
            prompts, responses = list(map(_GET_PROMPT, rows)), list(map(_GET_RESPONSES, rows))
        except KeyError:
            raise NotPlain("prompt or responses missing") from None
        prompt_chars = _prompt_chars(prompts)
        if set(map(type, responses)) != {list} or not all(responses):
            raise NotPlain("responses")
        sizes = list(map(len, responses))
        first_response = len(self.response_ids)
        contents = self._add_responses(responses, sizes)
        ranked = self._add_ranks(rows, sizes, first_response)
        comps = list(map(dict.get, rows, repeat("comparisons")))
        triples = list(map(dict.get, rows, repeat("triples")))
        if triples.count(None) != len(triples):
            comps = list(map(_with_triples, comps, triples))
        self._add_comparisons(comps)
        self.ids += _row_ids(rows, prompts, contents, sizes)
        subsets = list(map(dict.get, rows, repeat("subset")))
        if not {str, type(None)}.issuperset(map(type, subsets)):
            raise NotPlain("subset")
        categories = _categories(list(map(dict.get, rows, repeat("category"))))
        self.subsets += [default_subset if s is None else s for s in subsets]
        self.has_rank += ranked
        self.prompt_chars.extend(prompt_chars)
        self.sizes.extend(sizes)
        if self.keep_rows:
            self.prompts += prompts
            self.categories += categories
            self.extras += _extras(rows)

    def _add_responses(self, responses: list[list], sizes: list[int]) -> list[str]:
        """Code the responses' ids, keep their lengths (and, with ``keep_rows``, the dicts as
        ``Response.to_dict`` writes them). Returns every content. O(responses)."""
        flat = list(chain.from_iterable(responses))
        if set(map(type, flat)) != {dict}:
            raise NotPlain("responses")
        ids, contents = list(map(dict.get, flat, repeat("id"))), list(map(dict.get, flat, repeat("content")))
        if set(map(type, ids)) != {str} or set(map(type, contents)) != {str}:
            raise NotPlain("responses")  # a missing or integer id, a missing content
        self.node_first.extend(map(self._first.setdefault, ids, count(len(self.response_ids))))
        self.response_ids += ids
        self.content_chars.extend(map(len, contents))
        if self.keep_rows:
            if not _written_as_read(flat, _response_order, ("model",), _all_text):
                rebuilt = iter(list(map(_response_dict, flat)))
                responses = [list(islice(rebuilt, n)) for n in sizes]
            self.responses += responses
        return contents

    def _add_ranks(self, rows: list[dict], sizes: list[int], first_response: int) -> list[bool]:
        """Whether each row has a ``rank``; the values of those that do, in response order. A rank
        must be an object giving every response of its row (and nothing else) an integer.
        ``first_response``: the batch index of the rows' first response."""
        ranks = list(map(dict.get, rows, repeat("rank")))
        if self.keep_rows:
            self.ranks += ranks
        if ranks.count(None) == len(ranks):
            return [False] * len(rows)
        it = islice(self.response_ids, first_response, None)
        for rank, ids in zip(ranks, [list(islice(it, n)) for n in sizes]):
            if rank is None:
                continue
            if type(rank) is not dict or rank.keys() != set(ids) or set(map(type, rank.values())) != {int}:
                raise NotPlain("rank")
            try:
                self.rank_values.extend(map(rank.__getitem__, ids))
            except OverflowError:
                raise NotPlain("rank") from None
        return [r is not None for r in ranks]

    def _add_comparisons(self, comps: list) -> None:
        """Code the comparisons' ids and labels (an id no response of the batch holds is refused
        here, the others are checked by :func:`~cheems.graph.comparison_arrays_from_codes`); keep
        them, as ``Comparison.to_dict`` writes them, with ``keep_comparisons``. O(comparisons)."""
        if not {list, type(None)}.issuperset(map(type, comps)):
            raise NotPlain("comparisons")
        comps = [c or [] for c in comps]
        flat = list(chain.from_iterable(comps))
        first, start = self._first.get, len(self.a_first)
        try:  # a comparison that is not a dict, a missing key, an unhashable id or unknown label
            a, b = list(map(_GET_A, flat)), list(map(_GET_B, flat))
            self.labels.append("".join(map(_LABEL_STRINGS.__getitem__, map(_GET_LABEL, flat))))
            self.a_first.extend(map(first, a, repeat(-1)))
            self.b_first.extend(map(first, b, repeat(-1)))
        except (KeyError, TypeError):
            raise NotPlain("comparisons") from None
        if -1 in self.a_first[start:] or -1 in self.b_first[start:]:
            ends = list(accumulate(map(len, comps)))
            unknown = {bisect_right(ends, k) for side in (self.a_first, self.b_first)
                       for k, f in enumerate(side[start:]) if f == -1}
            raise RowsRefused("a comparison names a response id no row holds", sorted(unknown))
        self.counts.extend(map(len, comps))
        if self.keep_rows and self.keep_comparisons:
            if not _written_as_read(flat, _comparison_order, ("annotator", "source"), _none_null):
                rebuilt = iter(list(map(_comparison_dict, flat)))
                comps = [list(islice(rebuilt, len(c))) for c in comps]
            self.comparisons += comps

    def arrays(self) -> tuple[np.ndarray, ...]:
        """``(offsets, a, b, label_code, prompt_index)`` as :func:`cheems.graph.comparison_arrays`
        returns them; NotPlain when a row repeats a response id or a comparison names an id its
        row lacks or one response twice."""
        from cheems.graph import comparison_arrays_from_codes

        if self._arrays is None:
            self._arrays = comparison_arrays_from_codes(self.sizes, self.counts, self.node_first, self.a_first,
                                                        self.b_first, "".join(self.labels))
        if self._arrays is None:
            raise NotPlain("a comparison or response id is not valid")
        return self._arrays

    def ranked_rows(self, ranks: list[dict[str, int]]) -> Iterator[dict]:
        """Each row as ``Prompt.to_dict`` writes it ranked by ``ranks[i]`` (same keys, order and
        values): the parsed values, ``rank`` placed after ``responses``. O(rows)."""
        return self.written_rows(ranks, self.comparisons if self.keep_comparisons else repeat(None), self.extras)

    def written_rows(self, ranks: Iterable[dict | None], comparisons: Iterable[list[dict] | None],
                     extras: Iterable[dict | None]) -> Iterator[dict]:
        """Each row as ``Prompt.to_dict`` writes a prompt of the row's id, prompt, responses,
        category and subset with the given rank, comparisons (as ``Comparison.to_dict`` writes
        them) and extra keys, one of each per row (None: none). O(rows)."""
        for rid, prompt, responses, rank, comps, category, subset, extra in zip(
                self.ids, self.prompts, self.responses, ranks, comparisons, self.categories, self.subsets, extras):
            d = {"id": rid, "prompt": prompt, "responses": responses}
            if rank is not None:
                d["rank"] = rank
            if comps:
                d["comparisons"] = comps
            if category:
                d["category"] = category
            if subset is not None:
                d["subset"] = subset
            if extra:
                d.update(extra)
            yield d


# ----------------------------------------------------------------------------- rows refused

class RowsRefused(NotPlain):
    """NotPlain for some rows of those :meth:`ColumnarBatch.add` was given, known by their indices."""

    def __init__(self, message: str, rows: list[int]):
        super().__init__(message)
        self.rows = rows


def _pieces(rows: list, refused: list[int] | None = None) -> list[tuple[int, int]]:
    """How to try again rows a batch refused together, as ``(lo, hi)`` ranges: each row it
    named (``refused``) or of another shape (not an object, no ``responses``, a key of another
    reader) alone and the runs between them, or, when there is no such row or only such rows,
    eighths."""
    odd = refused or [k for k, r in enumerate(rows) if type(r) is not dict or "responses" not in r
                      or not _OTHER_READERS.isdisjoint(r)]
    if not odd or len(odd) == len(rows):
        step = -(-len(rows) // 8)
        return [(lo, min(lo + step, len(rows))) for lo in range(0, len(rows), step)]
    bounds = sorted({0, len(rows), *odd, *(k + 1 for k in odd)})
    return list(zip(bounds, bounds[1:]))


# ----------------------------------------------------------------------------- row fields

def _prompt_chars(prompts: list) -> list[int]:
    """The length of each prompt as text (``Prompt.prompt_text``); NotPlain for a blank text or a
    list that is not chat messages, each ``{role, content}`` with a known role."""
    if set(map(type, prompts)) == {str}:
        if not all(map(str.strip, prompts)):
            raise NotPlain("blank prompt")
        return list(map(len, prompts))
    return list(map(_one_prompt_chars, prompts))


def _one_prompt_chars(prompt: Any) -> int:
    if type(prompt) is str:
        if not prompt.strip():
            raise NotPlain("blank prompt")
        return len(prompt)
    if type(prompt) is not list or not prompt or set(map(type, prompt)) != {dict}:
        raise NotPlain("prompt")
    contents = list(map(dict.get, prompt, repeat("content")))
    if set(map(type, contents)) != {str} or not all(m.get("role") in ROLES for m in prompt):
        raise NotPlain("prompt")
    return sum(map(len, contents)) + len(contents) - 1  # joined by newlines


def _row_ids(rows: list[dict], prompts: list, contents: list[str], sizes: list[int]) -> list[str]:
    """Each row's id as :func:`~cheems.formats.fields.row_id` gives it; NotPlain for an id that
    is neither a string, an integer nor absent."""
    ids = list(map(dict.get, rows, repeat("id")))
    if set(map(type, ids)) == {str}:
        return ids
    out, it = [], iter(contents)
    for rid, prompt, n in zip(ids, prompts, sizes):
        row_contents = list(islice(it, n))
        if type(rid) is str:
            out.append(rid)
        elif type(rid) is int:
            out.append(str(rid))
        elif rid is None:
            out.append(prompt_id(prompt, row_contents))
        else:
            raise NotPlain("id")
    return out


def _with_triples(comps: Any, triples: Any) -> Any:
    """A row's ``comparisons`` followed by the three comparisons of each of its ``triples``
    (``{ids: [x, y, z], ranking: 'x>z=y', annotator?}``), as ``Comparison.to_dict`` writes them;
    NotPlain for triples the reader would refuse (it names the fault)."""
    if triples is None:
        return comps
    if type(triples) is not list or not {list, type(None)}.issuperset((type(comps),)):
        raise NotPlain("triples")
    out = list(comps or ())
    for t in triples:
        if type(t) is not dict or type(t.get("ids")) is not list or len(t["ids"]) != 3 \
                or set(map(type, t["ids"])) != {str}:
            raise NotPlain("triples")
        try:
            out += [c.to_dict() for c in triple_comparisons(t["ids"], t.get("ranking"), annotator=t.get("annotator"))]
        except CheemsInputError:
            raise NotPlain("triples") from None
    return out


def _categories(values: list) -> list[list[str]]:
    """:func:`~cheems.formats.fields.category_field` of each row's ``category`` value; NotPlain
    where it would raise. Lists of strings, the common case, are taken as they are."""
    if set(map(type, values)) == {list} and set(map(type, chain.from_iterable(values))) <= {str}:
        return values
    return list(map(_category, values))


def _category(c: Any) -> list[str]:
    if c is None:
        return []
    if type(c) is str:
        return [c]
    if type(c) is list and set(map(type, c)) <= {str}:
        return c
    raise NotPlain("category")


def _extras(rows: list[dict]) -> list[dict | None]:
    """Each row's keys other than :data:`ROW_KEYS`, in the row's order (None: none). The keys
    are sorted out once per distinct key order."""
    shapes = {shape: tuple(k for k in shape if k not in ROW_KEYS) for shape in set(map(tuple, rows))}
    if not any(shapes.values()):
        return [None] * len(rows)
    return [{k: row[k] for k in shapes[tuple(row)]} or None for row in rows]


_ABSENT = object()


def _written_as_read(items: list[dict], order, optional: tuple[str, ...], keeps) -> bool:
    """Whether ``to_dict`` writes each of ``items`` back as it was read: every distinct key
    order is one ``order`` accepts, and each ``optional`` key, where present, holds a value
    that ``keeps`` accepts, given them all (the reader drops a model that is not text, an
    annotator of null); C-level ``map``s."""
    shapes = set(map(tuple, items))
    if not all(map(order, shapes)):
        return False
    for key in optional:
        if any(key in s for s in shapes):
            if not keeps(list(map(dict.get, items, repeat(key), repeat(_ABSENT)))):
                return False
    return True


def _all_text(values: list) -> bool:
    return set(map(type, values)) <= {str, object}  # object: _ABSENT


def _none_null(values: list) -> bool:
    return None not in values


def _response_order(shape: tuple) -> bool:
    """``Response.to_dict``'s key order: id, content, model (if any), the others."""
    return shape[:2] == ("id", "content") and ("model" not in shape or shape[2] == "model")


def _response_dict(r: dict) -> dict:
    """A response as ``Response.to_dict`` writes what the reader made of it."""
    d = {"id": r["id"], "content": r["content"]}
    if type(r.get("model")) is str:
        d["model"] = r["model"]
    d.update((k, v) for k, v in r.items() if k not in RESPONSE_KEYS)
    return d


def _comparison_order(shape: tuple) -> bool:
    """``Comparison.to_dict``'s key order: a, b, label, annotator, source (if any), the others;
    an annotator or source of null is dropped, so a row holding one is rebuilt."""
    named = tuple(k for k in shape if k in ("annotator", "source"))
    return shape[:3] == ("a", "b", "label") and named in ((), ("annotator",), ("source",), ("annotator", "source")) \
        and shape[3:3 + len(named)] == named


def _comparison_dict(c: dict) -> dict:
    """A comparison as ``Comparison.to_dict`` writes what the reader made of it."""
    d = {"a": c["a"], "b": c["b"], "label": c["label"]}
    for k in ("annotator", "source"):
        if c.get(k) is not None:
            d[k] = c[k]
    d.update((k, v) for k, v in c.items() if k not in COMPARISON_KEYS)
    return d


def columnar_scores(path: str | os.PathLike) -> Scores | None:
    """The scores of a SCORES file as :func:`~cheems.formats.read.read_scores` reads them, when
    every row is ``{prompt_id, response_id, score, ...}`` with string ids, a finite number for
    a score and no pair given twice; None for any other file (``read_scores`` then reads it or
    names its fault). O(rows), C-level ``map``s."""
    from math import isfinite

    from cheems.formats.read import Scores

    pids, rids, values = [], [], []
    try:
        for rows in row_chunks(path, 4096):
            if set(map(type, rows)) != {dict}:
                return None
            pids += map(itemgetter("prompt_id"), rows)
            rids += map(itemgetter("response_id"), rows)
            values += map(itemgetter("score"), rows)
    except (NotPlain, KeyError):
        return None
    if set(map(type, chain(pids, rids))) != {str} or not {int, float}.issuperset(map(type, values)):
        return None
    try:
        floats = list(map(float, values))
    except OverflowError:  # an integer past the float range
        return None
    scores = Scores(zip(zip(pids, rids), floats))
    return scores if len(scores) == len(pids) and all(map(isfinite, floats)) else None


# ----------------------------------------------------------------------------- writing

dump_row = partial(orjson.dumps, option=orjson.OPT_APPEND_NEWLINE | orjson.OPT_SERIALIZE_NUMPY)
"""One row as a line of :func:`cheems.io.write_jsonl`: the same bytes."""
