"""Official Cheems rows: the data model itself, ranked lists, pairwise rows and annotated tasks.

- ``cheems``: ``{id?, prompt|input, responses: [{id?, content, model?}] or [best, ..., worst], rank?,
  comparisons?, annotations?, triples?, category?, subset?}``, what every stage writes;
- ``cheems-pairwise``: ``{input|prompt, answer1, answer2, preference: 1|2}``;
- ``task``: a triple-wise task written by ``cheems tasks`` with its ``ranking`` filled in (the rows
  of one prompt are joined by :func:`~cheems.formats.join.merge_prompts`).

Plain lists of ``{id, content}`` responses and ``{a, b, label}`` comparisons, the common case, are
read without a Python loop (:func:`_plain_responses`, :func:`_plain_comparisons`); anything else
goes through the careful loop, which names the fault.
"""

from __future__ import annotations

from operator import itemgetter, ne
from typing import Any

from cheems.formats.fields import (CONSUMED, category_field, labelled_pair, number_twins, prompt_field, row_id,
                                   subset_field, text_responses)
from cheems.formats.spec import RowFormat
from cheems.records import (LABELS, CheemsInputError, Comparison, Prompt, Response, check_comparison,
                            check_known_response, response_id, triple_comparisons)
from cheems.settings import is_integer

__all__ = ["ANNOTATION_LABELS", "CHEEMS", "CHEEMS_PAIRWISE", "COMPARISON_KEYS", "RESPONSE_KEYS", "TASK",
           "parse_cheems", "parse_cheems_pairwise", "parse_task"]

ANNOTATION_LABELS = {"1": "g", "2": "b", "0": "s", "g": "g", "b": "b", "s": "s", "=": "s"}
RESPONSE_KEYS = frozenset(("id", "content", "model"))
COMPARISON_KEYS = frozenset(("a", "b", "label", "annotator", "source"))

_GET_ID, _GET_CONTENT = itemgetter("id"), itemgetter("content")
_GET_A, _GET_B, _GET_LABEL = itemgetter("a"), itemgetter("b"), itemgetter("label")
_LABEL_STRINGS = {label: label for label in LABELS}
_LABELS = frozenset(LABELS)


def parse_cheems(obj: dict) -> Prompt:
    """An official Cheems row, or a ranked list (responses as plain strings, best first, no judgements)."""
    prompt = prompt_field(obj, "prompt", "input")
    raw = obj.get("responses")
    if raw is None:
        raise CheemsInputError("missing response list", field="responses")
    if not isinstance(raw, list):
        raise CheemsInputError("responses must be a list", field="responses")
    if not raw:
        raise CheemsInputError("response list is empty", field="responses")
    fast = _plain_responses(raw)
    responses = fast or []
    plain = fast is None
    derived = fast is None  # every response id made from its content (then the row id reuses them)
    made: list[Response] = []  # the responses whose id was made from their content
    for i, r in enumerate(raw if fast is None else ()):
        if type(r) is dict:
            plain = False
            content, rid, model = r.get("content"), r.get("id"), r.get("model")
            if type(content) is str and type(rid) is str and (model is None or type(model) is str):
                # the common, well-formed case
                derived = False
                responses.append(Response(rid, content, model,
                                          _extra(r, RESPONSE_KEYS) if len(r) > 2 + ("model" in r) else {}))
                continue
            if not isinstance(content, str):
                raise CheemsInputError("missing or non-string content", field=f"responses[{i}].content")
            if rid is None:
                rid = response_id(content)
                made.append(Response(rid, content, model if isinstance(model, str) else None,
                                     _extra(r, RESPONSE_KEYS)))
                responses.append(made[-1])
                continue
            elif not (isinstance(rid, str) or is_integer(rid)):
                raise CheemsInputError("id must be a string or an integer", field=f"responses[{i}].id")
            else:
                derived = False
            responses.append(Response(str(rid), content, model if isinstance(model, str) else None,
                                      _extra(r, RESPONSE_KEYS)))
        elif isinstance(r, str):
            made.append(Response(response_id(r), r))
            responses.append(made[-1])
        else:
            raise CheemsInputError("a response must be a string or an object {id, content}",
                                   field=f"responses[{i}]")
    if made:  # identical texts: distinct ids, so the row is read (and its ties counted downstream)
        number_twins(made, {r.id for r in responses})
    rank = _rank(obj.get("rank"), responses)
    if rank is None and plain and "comparisons" not in obj and "triples" not in obj \
            and "annotations" not in obj:
        rank = {r.id: i for i, r in enumerate(responses)}  # ranked list, best first
    comparisons = _comparisons(obj, {r.id: r.id for r in responses})
    extra = {k: v for k, v in obj.items() if k not in CONSUMED}
    return Prompt(row_id(obj, prompt, responses, derived=derived), prompt, responses, rank, comparisons,
                  category_field(obj), subset_field(obj), extra)


def _plain_responses(raw: list) -> list[Response] | None:
    """The responses of a list of plain ``{id, content}`` objects (both strings, no other key),
    read without a Python loop; None for any other list (the careful loop then reads it and
    names a fault). O(n)."""
    if set(map(type, raw)) != {dict} or set(map(len, raw)) != {2}:
        return None
    try:
        ids, contents = list(map(_GET_ID, raw)), list(map(_GET_CONTENT, raw))
    except KeyError:
        return None
    if set(map(type, ids)) != {str} or set(map(type, contents)) != {str}:
        return None
    return list(map(Response, ids, contents))


def _plain_comparisons(raw: list, known: dict[str, str]) -> list[Comparison] | None:
    """The comparisons of a list of plain ``{a, b, label}`` objects (no other key) with a known
    label and two different ``known`` responses, read without a Python loop; None for any
    other list (the careful loop then reads it and names a fault). Ids and labels are taken
    from ``known`` (id -> the response's own id string) and :data:`~cheems.records.LABELS`, so
    a prompt holds one string per id, not one per mention. O(n)."""
    if set(map(type, raw)) != {dict} or set(map(len, raw)) != {3}:
        return None
    try:
        a, b = list(map(known.__getitem__, map(_GET_A, raw))), list(map(known.__getitem__, map(_GET_B, raw)))
        label = list(map(_LABEL_STRINGS.__getitem__, map(_GET_LABEL, raw)))
    except (KeyError, TypeError):  # a missing key, an unknown or unhashable id or label
        return None
    return list(map(Comparison, a, b, label)) if all(map(ne, a, b)) else None


def _extra(obj: dict, consumed: frozenset) -> dict:
    return {k: v for k, v in obj.items() if k not in consumed}


def _rank(raw: Any, responses: list[Response]) -> dict[str, int] | None:
    if raw is None:
        return None
    if isinstance(raw, list):  # aligned with the response list
        if len(raw) != len(responses):
            raise CheemsInputError(f"rank list has {len(raw)} entries for {len(responses)} responses",
                                   field="rank")
        return {r.id: v for r, v in zip(responses, raw)}
    if isinstance(raw, dict):
        return {str(k): v for k, v in raw.items()}
    raise CheemsInputError("rank must be an object {response_id: int}", field="rank")


def _comparison_error(i: int, c: Any, known: dict[str, str]) -> tuple[str, str, str]:
    """Check comparison ``i`` slowly: raise the precise error, or return (a, b, label) with
    ids given as integers turned into strings."""
    if not isinstance(c, dict):
        raise CheemsInputError("a comparison must be an object {a, b, label}", field=f"comparisons[{i}]")
    for k in ("a", "b", "label"):
        if k not in c:
            raise CheemsInputError(f"missing '{k}'", field=f"comparisons[{i}].{k}")
    a, b, label = str(c["a"]), str(c["b"]), c["label"]
    check_comparison(a, b, label, known, field=f"comparisons[{i}]", subject="")
    return a, b, label


def _known(rid: Any, known: dict[str, str], field: str) -> str:
    """``rid`` as a string, checked against the ``known`` response ids."""
    rid = str(rid)
    check_known_response(rid, known, field=field)
    return rid


def _comparisons(obj: dict, known: dict[str, str]) -> list[Comparison]:
    """The row's comparisons from ``comparisons``, ``annotations`` and ``triples``, each
    checked against the row's response ids (``known``: id -> itself) so an error names the
    field it came from."""
    out = _listed_comparisons(obj.get("comparisons"), known)
    raw = obj.get("annotations")
    if raw is not None:
        out += _annotation_comparisons(raw, known)
    raw = obj.get("triples")
    if raw is not None:
        out += _triple_comparisons(raw, known)
    return out


def _listed_comparisons(raw: Any, known: dict[str, str]) -> list[Comparison]:
    """The row's ``comparisons: [{a, b, label, annotator?, source?}]`` ([] when absent)."""
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise CheemsInputError("comparisons must be a list", field="comparisons")
    plain = _plain_comparisons(raw, known)
    if plain is not None:
        return plain
    out = []
    for i, c in enumerate(raw):
        try:  # fast path for well-formed rows; anything odd is explained by _comparison_error
            a, b, label = c["a"], c["b"], c["label"]
            ok = label in _LABELS and a in known and b in known and a != b
        except (TypeError, KeyError):
            ok = False
        if not ok:
            a, b, label = _comparison_error(i, c, known)
        out.append(Comparison(a, b, label, c.get("annotator"), c.get("source"),
                              _extra(c, COMPARISON_KEYS) if len(c) > 3 else {}))
    return out


def _annotation_comparisons(raw: Any, known: dict[str, str]) -> list[Comparison]:
    """The official release's ``annotations: [[id1, id2, "1"|"2"|"0"]]``, one comparison each."""
    if not isinstance(raw, list):
        raise CheemsInputError("annotations must be a list of [id1, id2, label]", field="annotations")
    out = []
    for i, a in enumerate(raw):
        if not isinstance(a, list) or len(a) != 3:
            raise CheemsInputError("an annotation must be [id1, id2, label]", field=f"annotations[{i}]")
        label = ANNOTATION_LABELS.get(str(a[2]))
        if label is None:
            raise CheemsInputError(f"label must be 1, 2 or 0 (or g, b, s), got {a[2]!r}",
                                   field=f"annotations[{i}][2]")
        x, y = _known(a[0], known, f"annotations[{i}][0]"), _known(a[1], known, f"annotations[{i}][1]")
        if x == y:
            raise CheemsInputError(f"comparison of response {x!r} with itself", field=f"annotations[{i}]")
        out.append(Comparison(x, y, label, source="annotation"))
    return out


def _triple_comparisons(raw: Any, known: dict[str, str]) -> list[Comparison]:
    """The official release's ``triples: [{ids: [x, y, z], ranking: 'x>z=y'}]``, three comparisons each."""
    if not isinstance(raw, list):
        raise CheemsInputError("triples must be a list", field="triples")
    out: list[Comparison] = []
    for i, t in enumerate(raw):
        if not isinstance(t, dict) or not isinstance(t.get("ids"), list) or len(t["ids"]) != 3:
            raise CheemsInputError("a triple must be {ids: [x, y, z], ranking: 'x>z=y'}",
                                   field=f"triples[{i}]")
        ids = [_known(x, known, f"triples[{i}].ids") for x in t["ids"]]
        out.extend(triple_comparisons(ids, t.get("ranking"), annotator=t.get("annotator"),
                                      field_name=f"triples[{i}].ranking"))
    return out


def parse_cheems_pairwise(obj: dict) -> Prompt:
    """An official pairwise row: ``preference`` 1 = answer1 is better, 2 = answer2."""
    prompt = prompt_field(obj, "input", "prompt", "question")
    responses = text_responses(obj, ("answer1", "answer2"))
    pref = str(obj.get("preference"))
    if pref not in ("1", "2"):
        raise CheemsInputError(f"preference must be 1 or 2, got {obj.get('preference')!r}",
                               field="preference")
    return labelled_pair(obj, prompt, responses, "g" if pref == "1" else "b", source="preference",
                         consumed=CONSUMED | {"answer1", "answer2", "preference", "question"})


def parse_task(obj: dict) -> Prompt:
    """A triple-wise task written by `cheems tasks` with its ``ranking`` filled in."""
    if "prompt_id" not in obj:
        raise CheemsInputError("missing prompt_id", field="prompt_id")
    if obj.get("ranking") is None:
        raise CheemsInputError("task has no 'ranking' yet (expected e.g. 'r2>r1=r3')", field="ranking")
    ids = obj.get("ids")
    if not isinstance(ids, list) or len(ids) not in (2, 3):
        raise CheemsInputError("ids must list the task's 2 or 3 response ids", field="ids")
    p = parse_cheems({k: v for k, v in obj.items() if k not in ("ranking", "ids", "id", "task_id", "round")}
                     | {"id": obj["prompt_id"]})
    p.extra = {}
    known = set(p.response_ids())
    for k, x in enumerate(ids):
        check_known_response(str(x), known, field=f"ids[{k}]")
    p.comparisons = triple_comparisons([str(x) for x in ids], obj["ranking"],
                                       annotator=obj.get("annotator"), field_name="ranking")
    p.rank = None
    return p


CHEEMS = RowFormat("cheems", parse_cheems, "official Cheems rows and ranked lists {id?, prompt|input, responses, "
                   "rank?, comparisons?, annotations?, triples?, category?, subset?}")
CHEEMS_PAIRWISE = RowFormat("cheems-pairwise", parse_cheems_pairwise,
                            "official Cheems pairwise rows {input|prompt, answer1, answer2, preference: 1|2}")
TASK = RowFormat("task", parse_task,
                 "annotated triple-wise tasks from `cheems tasks` {task_id, prompt_id, prompt, responses, ids, "
                 "ranking}")
