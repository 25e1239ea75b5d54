"""Read and write prompt rows in every format cheems understands, detected row by row.

Accepted row shapes (JSONL, a JSON list, or Parquet with the ``parquet`` extra), by the name
``--format`` / ``fmt=`` forces (:data:`FORMATS`; ``docs/formats.md`` shows one row of each and
how it maps):

- ``cheems``: official Cheems rows and ranked lists ``{id?, prompt|input, responses:
  [{id?, content, model?}] or [best, ..., worst], rank?, comparisons?, annotations?, triples?,
  category?, subset?}``
- ``cheems-pairwise``: ``{input|prompt, answer1, answer2, preference: 1|2}``
- ``task``: an annotated task from ``cheems tasks`` (rows of one prompt are joined by
  :func:`merge_prompts`)
- ``pair`` (RewardBench style): ``{prompt, chosen, rejected, subset?}``
- ``sharegpt`` (LLaMA-Factory): ``{conversations: [{from, value}], chosen, rejected, system?}``
- ``alpaca`` / ``alpaca-ranking`` (LLaMA-Factory): ``{instruction, input?, chosen, rejected,
  system?, history?}`` / ``{instruction, input?, output: [best, ...], system?, history?}``
- ``medicalgpt``: ``{question, response_chosen, response_rejected, system?, history?}``
- ``autoj``, ``critiquellm``, ``pandalm``: labelled pairs, a tie kept as a tie
- ``rmb`` / ``rmb-bon``: RMB pairwise and best-of-N rows
- ``hh-rlhf``: ``"\\n\\nHuman: … \\n\\nAssistant: …"`` transcripts in ``chosen`` / ``rejected``
- ``trl``: TRL's conversational preference rows (message lists, prompt explicit or shared)

A row without ``id`` gets :func:`cheems.records.prompt_id` of its prompt and response contents,
so rows that repeat a prompt with other responses are separate items; :func:`group_by_prompt`
joins them back into one prompt where that is wanted (training). Every error is a
:class:`~cheems.records.CheemsInputError` naming file, line and field.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from array import array
from itertools import chain, count, islice, repeat
from operator import itemgetter, ne
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

import orjson

from cheems.io import gc_paused
from cheems.records import (LABELS, CheemsInputError, Comparison, Prompt, PromptText, Response, check_chat_message,
                            check_comparison, check_known_response, prompt_id, prompt_key, rank_comparisons,
                            response_id, triple_comparisons, validate_prompt)
from cheems.settings import is_integer

__all__ = ["ANNOTATION_LABELS", "COMPARISON_KEYS", "CONSUMED", "FORMAT_NAMES", "FORMATS", "RESPONSE_KEYS",
           "SHAREGPT_ROLES", "category_field", "check_format", "check_unique_ids", "detect_format",
           "drop_repeated_rows", "group_by_prompt", "iter_rows", "merge_prompts", "NotPlain", "parse_row",
           "PLAIN_ROW_KEYS", "PlainBatch", "prompt_field", "read_many", "read_prompts", "read_scores",
           "ReadResult", "row_chunks", "row_id", "score_rows", "subset_field"]

FORMATS = {
    "cheems": "official Cheems rows and ranked lists {id?, prompt|input, responses, rank?, comparisons?, "
              "annotations?, triples?, category?, subset?}",
    "cheems-pairwise": "official Cheems pairwise rows {input|prompt, answer1, answer2, preference: 1|2}",
    "task": "annotated triple-wise tasks from `cheems tasks` {task_id, prompt_id, prompt, responses, ids, ranking}",
    "pair": "pairs, RewardBench style {prompt|input, chosen, rejected, subset?}",
    "sharegpt": "LLaMA-Factory ShareGPT preference rows {conversations: [{from, value}], chosen, rejected, system?}",
    "alpaca": "LLaMA-Factory alpaca pairwise rows {instruction, input?, chosen, rejected, system?, history?}",
    "alpaca-ranking": "LLaMA-Factory alpaca ranking rows {instruction, input?, output: [best, ...], system?, "
                      "history?}",
    "medicalgpt": "MedicalGPT reward rows {question, response_chosen, response_rejected, system?, history?}",
    "autoj": "Auto-J pairwise rows {prompt, 'response 1', 'response 2', label: 0|1|2 (2 = tie), scenario}",
    "critiquellm": "CritiqueLLM / AlignBench pairwise rows {question, response_1, response_2, label: 0|1|2 "
                   "(2 = tie), category}",
    "pandalm": "PandaLM rows {instruction, input, response1, response2, annotator1..3: 0 (tie)|1|2}",
    "rmb": "RMB pairwise rows {conversation_input, chosen: {answer}, reject: {answer}, category_path}",
    "rmb-bon": "RMB best-of-N rows {conversation_input, bon_best: {answer}, loser_list: [{answer}], category_path}",
    "hh-rlhf": "HH-RLHF transcripts {chosen: '\\n\\nHuman: … \\n\\nAssistant: …', rejected: …}",
    "trl": "TRL conversational preference rows {prompt?, chosen: [messages], rejected: [messages]}",
}
"""Every row format cheems reads, by the name that forces it, with the shape it reads."""

FORMAT_NAMES = tuple(FORMATS)
"""The names of :data:`FORMATS`, in the order ``--format`` lists them."""

SHAREGPT_ROLES = {"system": "system", "human": "user", "user": "user", "gpt": "assistant",
                  "assistant": "assistant"}
ANNOTATION_LABELS = {"1": "g", "2": "b", "0": "s", "g": "g", "b": "b", "s": "s", "=": "s"}
CONSUMED = {"id", "prompt", "input", "responses", "rank", "comparisons", "annotations", "triples",
            "category", "subset"}
RESPONSE_KEYS = frozenset(("id", "content", "model"))
COMPARISON_KEYS = frozenset(("a", "b", "label", "annotator", "source"))


# ----------------------------------------------------------------------------- raw rows

def _json_source(path: Path, data: bytes) -> tuple[bytes, bool]:
    """A JSON file's bytes without a UTF-8 byte order mark (as some editors write), and whether
    they hold one JSON list (a file named ``.jsonl`` is rows, even if one of them is a list)."""
    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]
    return data, data.lstrip().startswith(b"[") and path.suffix != ".jsonl"


def iter_rows(path: str | os.PathLike, errors: list | None = None) -> Iterator[tuple[int, Any]]:
    """Yield ``(line, object)`` for each row of a JSONL, JSON-list or Parquet file (a file named
``.jsonl`` is always read line by line; another that starts with ``[`` is one JSON list).

    Blank lines are skipped. A line with invalid JSON or non-UTF-8 bytes raises
    CheemsInputError with its line number, or, when an ``errors`` list is given, is appended
    to it and skipped. ``NaN`` and ``Infinity``, which Python's ``json.dump`` writes (PandaLM's
    test set holds ``"input": NaN``), are read as floats. Items of a JSON list are numbered
    from 1 in place of lines.
    """
    path = Path(path)
    name = str(path)
    if not path.exists():
        raise CheemsInputError("no such file", file=name)
    if path.is_dir():
        raise CheemsInputError("is a directory, expected a file", file=name)
    if path.suffix == ".parquet":
        yield from _iter_parquet(path)
        return
    data, is_list = _json_source(path, path.read_bytes())
    if is_list:
        try:
            items = orjson.loads(data)
        except orjson.JSONDecodeError as e:
            items = _lenient_loads(data)
            if items is _INVALID:
                raise CheemsInputError(_json_message(data, e), file=name) from None
        for i, obj in enumerate(items):
            yield i + 1, obj
        return
    for lineno, line in enumerate(data.split(b"\n"), 1):
        if not line.strip():
            continue
        try:
            obj = orjson.loads(line)
        except orjson.JSONDecodeError as e:
            obj = _lenient_loads(line)
            if obj is _INVALID:
                err = CheemsInputError(_json_message(line, e), file=name, line=lineno)
                if errors is None:
                    raise err from None
                errors.append(err)
                continue
        yield lineno, obj


_INVALID = object()


def _lenient_loads(raw: bytes) -> Any:
    """``raw`` parsed by the standard library, which also reads NaN and Infinity; _INVALID
    when it is not JSON there either (the fast orjson parser has already refused it)."""
    try:
        return json.loads(raw.decode("utf-8"))
    except ValueError:  # UnicodeDecodeError and json.JSONDecodeError are ValueErrors
        return _INVALID


def _json_message(raw: bytes, err: Exception) -> str:
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError as u:
        return f"not valid UTF-8 (byte {u.start}); save the file as UTF-8"
    return f"invalid JSON: {err}"


def _iter_parquet(path: Path) -> Iterator[tuple[int, Any]]:
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise CheemsInputError("reading Parquet needs pyarrow: pip install 'cheems[parquet]'",
                               file=str(path)) from None
    for i, obj in enumerate(pq.read_table(path).to_pylist()):
        yield i + 1, obj


# ----------------------------------------------------------------------------- row parsing

def parse_row(obj: Any, fmt: str | None = None) -> Prompt:
    """Turn one raw row into a validated :class:`Prompt`.

    The row's format is detected from its keys (:func:`detect_format`) unless ``fmt`` names
    one of :data:`FORMAT_NAMES`; an unknown name is a CheemsInputError listing the known ones.
    """
    if not isinstance(obj, dict):
        raise CheemsInputError(f"row must be a JSON object, got {type(obj).__name__}")
    p = _PARSERS[detect_format(obj) if fmt is None else check_format(fmt)](obj)
    validate_prompt(p, comparisons=False)  # each reader has checked its comparisons, naming their field
    return p


def check_format(fmt: str) -> str:
    """``fmt`` when it names a format of :data:`FORMATS`; else CheemsInputError (field
    ``format``) listing the known names."""
    if not isinstance(fmt, str) or fmt not in FORMATS:
        raise CheemsInputError(f"unknown format {fmt!r}; known formats: {', '.join(FORMAT_NAMES)}",
                               field="format")
    return fmt


def detect_format(obj: dict) -> str:
    """The name (one of :data:`FORMAT_NAMES`) of the format of a raw row, from its keys.

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
        if keys[0] in obj or keys[1] in obj:
            return name
    if "instruction" in obj and "output" in obj:
        return "alpaca-ranking"
    return "cheems"


_DISTINCT_KEYS = ((("response 1", "response 2"), "autoj"), (("response_1", "response_2"), "critiquellm"),
                  (("response1", "response2"), "pandalm"),
                  (("response_chosen", "response_rejected"), "medicalgpt"), (("bon_best", "loser_list"), "rmb-bon"))


def _chosen_rejected_format(obj: dict) -> str:
    """Which of the formats that hold ``chosen`` / ``rejected`` a row is."""
    if "instruction" in obj:
        return "alpaca"
    if "conversation_input" in obj:
        return "rmb"
    chosen = obj.get("chosen")
    if type(chosen) is list or type(obj.get("rejected")) is list:
        return "trl"
    if "prompt" not in obj and "input" not in obj and isinstance(chosen, str) and _is_transcript(chosen):
        return "hh-rlhf"
    return "pair"


def prompt_field(obj: dict, *keys: str) -> Any:
    """The prompt of a raw row: the first of ``keys`` present, text or chat messages."""
    for k in keys:
        if k in obj and obj[k] is not None:
            v = obj[k]
            if isinstance(v, str) or (isinstance(v, list) and all(isinstance(m, dict) for m in v)):
                return v
            raise CheemsInputError("must be a string or a list of chat messages", field=k)
    raise CheemsInputError("missing prompt (expected a 'prompt' or 'input' field)", field=keys[0])


def row_id(obj: dict, prompt: Any, responses: list[Response] | None = None) -> str:
    """The row's ``id`` as a string; when it has none, :func:`~cheems.records.prompt_id` of its
    prompt and its ``responses``' contents (of the prompt alone when ``responses`` is None, as
    for the rows of a prompt file)."""
    return _row_id(obj, prompt, responses, derived=False)


def _row_id(obj: dict, prompt: Any, responses: list[Response] | None, *, derived: bool) -> str:
    """:func:`row_id`; ``derived``: every response id is :func:`~cheems.records.response_id` of
    its content, so those ids stand for the contents in the hash (the same id, computed faster)."""
    rid = obj.get("id")
    if rid is None:
        if responses is None:
            return prompt_id(prompt)
        if derived:
            return prompt_id(prompt, content_ids=[r.id for r in responses])
        return prompt_id(prompt, [r.content for r in responses])
    if isinstance(rid, str) or is_integer(rid):
        return str(rid)
    raise CheemsInputError("id must be a string or an integer", field="id")


def category_field(obj: dict) -> list[str]:
    """The row's ``category`` tiers as a list ([] when absent)."""
    c = obj.get("category")
    if c is None:
        return []
    if isinstance(c, str):
        return [c]
    if isinstance(c, list) and all(isinstance(x, str) for x in c):
        return list(c)
    raise CheemsInputError("category must be a string or a list of strings", field="category")


def subset_field(obj: dict) -> str | None:
    """The row's ``subset`` (None when absent)."""
    s = obj.get("subset")
    if s is None or isinstance(s, str):
        return s
    raise CheemsInputError("subset must be a string", field="subset")


# ----------------------------------------------------------------------------- cheems rows

def _parse_general(obj: dict) -> Prompt:
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
            elif not (isinstance(rid, str) or is_integer(rid)):
                raise CheemsInputError("id must be a string or an integer", field=f"responses[{i}].id")
            else:
                derived = False
            responses.append(Response(str(rid), content, model if isinstance(model, str) else None,
                                      _extra(r, RESPONSE_KEYS)))
        elif isinstance(r, str):
            responses.append(Response(response_id(r), r))
        else:
            raise CheemsInputError("a response must be a string or an object {id, content}",
                                   field=f"responses[{i}]")
    rank = _rank(obj.get("rank"), responses)
    if rank is None and plain and "comparisons" not in obj and "triples" not in obj \
            and "annotations" not in obj:
        rank = {r.id: i for i, r in enumerate(responses)}  # ranked list, best first
    comparisons = _comparisons(obj, {r.id: r.id for r in responses})
    extra = {k: v for k, v in obj.items() if k not in CONSUMED}
    return Prompt(_row_id(obj, prompt, responses, derived=derived), prompt, responses, rank, comparisons,
                  category_field(obj), subset_field(obj), extra)


_GET_ID, _GET_CONTENT = itemgetter("id"), itemgetter("content")
_GET_A, _GET_B, _GET_LABEL = itemgetter("a"), itemgetter("b"), itemgetter("label")


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
    from ``known`` (id -> the response's own id string) and :data:`LABELS`, so a prompt holds
    one string per id, not one per mention. O(n)."""
    if set(map(type, raw)) != {dict} or set(map(len, raw)) != {3}:
        return None
    try:
        a, b = list(map(known.__getitem__, map(_GET_A, raw))), list(map(known.__getitem__, map(_GET_B, raw)))
        label = list(map(_LABEL_STRINGS.__getitem__, map(_GET_LABEL, raw)))
    except (KeyError, TypeError):  # a missing key, an unknown or unhashable id or label
        return None
    return list(map(Comparison, a, b, label)) if all(map(ne, a, b)) else None


_LABEL_STRINGS = {label: label for label in LABELS}


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


_LABELS = frozenset(LABELS)


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
    out: list[Comparison] = []
    raw = obj.get("comparisons")
    if raw is not None:
        if not isinstance(raw, list):
            raise CheemsInputError("comparisons must be a list", field="comparisons")
        plain = _plain_comparisons(raw, known)
        if plain is not None:
            out = plain
            raw = ()
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
    raw = obj.get("annotations")
    if raw is not None:
        if not isinstance(raw, list):
            raise CheemsInputError("annotations must be a list of [id1, id2, label]", field="annotations")
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
    raw = obj.get("triples")
    if raw is not None:
        if not isinstance(raw, list):
            raise CheemsInputError("triples must be a list", field="triples")
        for i, t in enumerate(raw):
            if not isinstance(t, dict) or not isinstance(t.get("ids"), list) or len(t["ids"]) != 3:
                raise CheemsInputError("a triple must be {ids: [x, y, z], ranking: 'x>z=y'}",
                                       field=f"triples[{i}]")
            ids = [_known(x, known, f"triples[{i}].ids") for x in t["ids"]]
            out.extend(triple_comparisons(ids, t.get("ranking"), annotator=t.get("annotator"),
                                          field_name=f"triples[{i}].ranking"))
    return out


def _parse_official_pair(obj: dict) -> Prompt:
    """An official pairwise row: ``preference`` 1 = answer1 is better, 2 = answer2."""
    prompt = prompt_field(obj, "input", "prompt", "question")
    responses = _text_responses(obj, ("answer1", "answer2"))
    pref = str(obj.get("preference"))
    if pref not in ("1", "2"):
        raise CheemsInputError(f"preference must be 1 or 2, got {obj.get('preference')!r}",
                               field="preference")
    return _labelled_pair(obj, prompt, responses, "g" if pref == "1" else "b", source="preference",
                          consumed=CONSUMED | {"answer1", "answer2", "preference", "question"})


def _parse_task_result(obj: dict) -> Prompt:
    """A triple-wise task written by `cheems tasks` with its ``ranking`` filled in."""
    if "prompt_id" not in obj:
        raise CheemsInputError("missing prompt_id", field="prompt_id")
    if obj.get("ranking") is None:
        raise CheemsInputError("task has no 'ranking' yet (expected e.g. 'r2>r1=r3')", field="ranking")
    ids = obj.get("ids")
    if not isinstance(ids, list) or len(ids) not in (2, 3):
        raise CheemsInputError("ids must list the task's 2 or 3 response ids", field="ids")
    p = _parse_general({k: v for k, v in obj.items() if k not in ("ranking", "ids", "id", "task_id", "round")}
                       | {"id": obj["prompt_id"]})
    p.extra = {}
    known = set(p.response_ids())
    for k, x in enumerate(ids):
        check_known_response(str(x), known, field=f"ids[{k}]")
    p.comparisons = triple_comparisons([str(x) for x in ids], obj["ranking"],
                                       annotator=obj.get("annotator"), field_name="ranking")
    p.rank = None
    return p


# ----------------------------------------------------------------------------- pieces of other formats

def _row(obj: dict, prompt: PromptText, responses: list[Response], rank: dict[str, int] | None,
         comparisons: list[Comparison] | None = None, *, consumed: set[str] | frozenset[str],
         category: list[str] | None = None) -> Prompt:
    """A prompt from the parts a reader found; the row's other keys (not ``consumed``) are kept."""
    return Prompt(_row_id(obj, prompt, responses, derived=True), prompt, responses, rank, comparisons or [],
                  category_field(obj) if category is None else category, subset_field(obj),
                  {k: v for k, v in obj.items() if k not in consumed})


def _is_blank(v: Any) -> bool:
    """None or NaN: an empty optional field (pandas and Python's json write NaN for one)."""
    return v is None or (isinstance(v, float) and v != v)


def _text_responses(obj: dict, keys: tuple[str, ...], *, objects: bool = False) -> list[Response]:
    """One response per key, each a string (or, with ``objects``, ``{value|content}`` as
    ShareGPT writes it); two identical ones are an error at the later key."""
    out = []
    for k in keys:
        v = obj.get(k)
        if objects and isinstance(v, dict):
            v = v.get("value", v.get("content"))
        if not isinstance(v, str):
            raise CheemsInputError("missing or not a string", field=k)
        out.append(Response(response_id(v), v))
    _check_distinct(out, keys)
    return out


def _check_distinct(responses: list[Response], fields: tuple[str, ...] | list[str]) -> None:
    first: dict[str, str] = {}
    for r, f in zip(responses, fields):
        earlier = first.setdefault(r.id, f)
        if earlier != f:
            raise CheemsInputError(f"duplicate response id: {earlier} and {f} are identical", field=f)


def _question(obj: dict, key: str, more: str | None = None) -> str:
    """The text of ``obj[key]``, then ``obj[more]`` on a new line when that is non-empty
    (LLaMA-Factory joins ``instruction`` and ``input`` this way)."""
    text = obj.get(key)
    if not isinstance(text, str):
        raise CheemsInputError("missing or not a string", field=key)
    if more is not None and not _is_blank(obj.get(more)):
        extra = obj[more]
        if not isinstance(extra, str):
            raise CheemsInputError("must be a string", field=more)
        if extra.strip():
            text = f"{text}\n{extra}" if text.strip() else extra
    if not text.strip():
        raise CheemsInputError(f"{key} is empty", field=key)
    return text


def _chat(obj: dict, question: str) -> PromptText:
    """The prompt of a row with an optional ``system`` text and a ``history`` of earlier
    ``[user, assistant]`` turns (LLaMA-Factory alpaca, MedicalGPT): the question as plain text
    when there are neither, else chat messages ending with it."""
    messages = []
    system = obj.get("system")
    if not _is_blank(system):
        if not isinstance(system, str):
            raise CheemsInputError("system must be a string", field="system")
        if system.strip():
            messages.append({"role": "system", "content": system})
    history = obj.get("history")
    if not _is_blank(history):
        if not isinstance(history, list):
            raise CheemsInputError("history must be a list of [user, assistant] turns", field="history")
        for i, turn in enumerate(history):
            if not (isinstance(turn, (list, tuple)) and len(turn) == 2 and all(isinstance(t, str) for t in turn)):
                raise CheemsInputError("a turn must be [user, assistant], two strings", field=f"history[{i}]")
            messages += [{"role": "user", "content": turn[0]}, {"role": "assistant", "content": turn[1]}]
    if not messages:
        return question
    messages.append({"role": "user", "content": question})
    return messages


def _messages(raw: Any, field: str) -> list[dict]:
    """Chat messages reduced to ``{role, content}`` (other keys, such as RMB's ``language``, dropped)."""
    if not isinstance(raw, list) or not raw:
        raise CheemsInputError("must be a non-empty list of chat messages {role, content}", field=field)
    out = []
    for i, m in enumerate(raw):
        check_chat_message(m, field=f"{field}[{i}]")
        out.append({"role": m["role"], "content": m["content"]})
    return out


def _conversation(messages: list[dict], field: str) -> PromptText:
    """A prompt from messages that must end with the user's turn; one user message alone is
    plain text, as a ShareGPT row with one human turn has always been read."""
    if messages[-1]["role"] != "user":
        raise CheemsInputError("the last message of a prompt must be from 'user'",
                               field=f"{field}[{len(messages) - 1}].role")
    return messages[0]["content"] if len(messages) == 1 else messages


def _preferred(responses: list[Response]) -> dict[str, int]:
    """The rank of responses listed best first, each better than the next."""
    return {r.id: i for i, r in enumerate(responses)}


def _labelled_pair(obj: dict, prompt: PromptText, responses: list[Response], label: str, *, source: str,
                   consumed: set[str] | frozenset[str], category: list[str] | None = None,
                   comparisons: list[Comparison] | None = None) -> Prompt:
    """Two responses judged ``label`` (g: the first is better, b: the second, s: a tie): the
    rank says the same (a tie ranks both 0, so it is never read as a preference) and one
    comparison (``source``) records the label, unless ``comparisons`` are given."""
    a, b = responses[0].id, responses[1].id
    rank = {a: 0, b: 1} if label == "g" else {a: 1, b: 0} if label == "b" else {a: 0, b: 0}
    if comparisons is None:
        comparisons = [Comparison(a, b, label, source=source)]
    return _row(obj, prompt, responses, rank, comparisons, consumed=consumed, category=category)


def _label_number(v: Any, field: str, meaning: str) -> int:
    """A label 0, 1 or 2, given as an integer, an integral float or its text."""
    n = v
    if isinstance(v, float) and v.is_integer():
        n = int(v)
    elif isinstance(v, str) and v.strip() in ("0", "1", "2"):
        n = int(v)
    if not is_integer(n) or n not in (0, 1, 2):
        raise CheemsInputError(f"must be {meaning}, got {v!r}", field=field)
    return n


# ----------------------------------------------------------------------------- chosen / rejected pairs

_PAIR_CONSUMED = CONSUMED | {"chosen", "rejected"}


def _parse_pair(obj: dict, prompt: Any = None, consumed: set[str] | frozenset[str] = _PAIR_CONSUMED) -> Prompt:
    """A pair: ``chosen`` ranks above ``rejected``; the prompt is ``prompt`` (or ``input``) unless
    the caller has read it from the row's own fields."""
    if prompt is None:
        prompt = prompt_field(obj, "prompt", "input")
    responses = _text_responses(obj, ("chosen", "rejected"), objects=True)
    return _row(obj, prompt, responses, _preferred(responses), consumed=consumed)


def _parse_sharegpt(obj: dict) -> Prompt:
    """A ShareGPT preference row: the conversation, ending with a human turn, is the prompt."""
    conv = obj.get("conversations")
    if not isinstance(conv, list) or not conv:
        raise CheemsInputError("missing prompt: conversations must be a non-empty list",
                               field="conversations")
    messages = []
    system = obj.get("system")  # LLaMA-Factory's optional system column, unless a turn is the system's
    has_system_turn = isinstance(conv[0], dict) and conv[0].get("from") == "system"
    if isinstance(system, str) and system.strip() and not has_system_turn:
        messages.append({"role": "system", "content": system})
    for i, m in enumerate(conv):
        if not isinstance(m, dict) or not isinstance(m.get("value"), str):
            raise CheemsInputError("a turn must be {from, value} with a string value",
                                   field=f"conversations[{i}]")
        role = SHAREGPT_ROLES.get(m.get("from"))
        if role is None:
            raise CheemsInputError(f"'from' must be system, human or gpt, got {m.get('from')!r}",
                                   field=f"conversations[{i}].from")
        messages.append({"role": role, "content": m["value"]})
    if messages[-1]["role"] != "user":
        raise CheemsInputError("the last turn must be from 'human'", field="conversations")
    prompt: Any = messages[0]["content"] if len(messages) == 1 else messages
    return _parse_pair(obj, prompt, _PAIR_CONSUMED | {"conversations", "system"})


_ALPACA_CONSUMED = _PAIR_CONSUMED | {"instruction", "system", "history"}


def _parse_alpaca(obj: dict) -> Prompt:
    """LLaMA-Factory's alpaca pairwise row: the prompt is ``instruction`` + newline + ``input``
    (when non-empty), after the ``system`` text and ``history`` turns when given."""
    return _parse_pair(obj, _chat(obj, _question(obj, "instruction", "input")), _ALPACA_CONSUMED)


def _parse_alpaca_ranking(obj: dict) -> Prompt:
    """LLaMA-Factory's alpaca ranking row: ``output`` lists the responses, best first."""
    prompt = _chat(obj, _question(obj, "instruction", "input"))
    raw = obj.get("output")
    if not isinstance(raw, list) or len(raw) < 2:
        raise CheemsInputError("output must list two or more responses, best first (a row with one "
                               "output is for fine-tuning: it compares nothing)", field="output")
    fields = [f"output[{i}]" for i in range(len(raw))]
    responses = []
    for v, f in zip(raw, fields):
        if not isinstance(v, str):
            raise CheemsInputError("missing or not a string", field=f)
        responses.append(Response(response_id(v), v))
    _check_distinct(responses, fields)
    return _row(obj, prompt, responses, _preferred(responses), consumed=_ALPACA_CONSUMED | {"output"})


def _parse_medicalgpt(obj: dict) -> Prompt:
    """MedicalGPT's reward row: ``question`` after the optional ``system`` and ``history``."""
    responses = _text_responses(obj, ("response_chosen", "response_rejected"))
    return _row(obj, _chat(obj, _question(obj, "question")), responses, _preferred(responses),
                consumed=CONSUMED | {"question", "response_chosen", "response_rejected", "system", "history"})


# ----------------------------------------------------------------------------- labelled pairs

_FIRST_SECOND_TIE = {0: "g", 1: "b", 2: "s"}  # Auto-J and CritiqueLLM: 0 = the first is better, 2 = tie
_PANDALM_VOTES = {1: "g", 2: "b", 0: "s"}  # PandaLM: 1 = response1 is better, 2 = response2, 0 = tie


def _parse_autoj(obj: dict) -> Prompt:
    """An Auto-J pairwise row: ``label`` 0 = response 1 is better, 1 = response 2, 2 = tie;
    the ``scenario`` is the category."""
    prompt = prompt_field(obj, "prompt")
    responses = _text_responses(obj, ("response 1", "response 2"))
    label = _label_number(obj.get("label"), "label", "0 (response 1 is better), 1 (response 2) or 2 (tie)")
    scenario = obj.get("scenario")
    if not (scenario is None or isinstance(scenario, str)):
        raise CheemsInputError("scenario must be a string", field="scenario")
    return _labelled_pair(obj, prompt, responses, _FIRST_SECOND_TIE[label], source="label",
                          consumed=CONSUMED | {"response 1", "response 2", "label", "scenario"},
                          category=[scenario] if scenario else None)


def _parse_critiquellm(obj: dict) -> Prompt:
    """A CritiqueLLM / AlignBench pairwise row: ``label`` 0 = response_1 is better, 1 =
    response_2, 2 = tie (CritiqueLLM's README and evaluation code); ``category`` as given."""
    prompt = prompt_field(obj, "question")
    responses = _text_responses(obj, ("response_1", "response_2"))
    label = _label_number(obj.get("label"), "label", "0 (response_1 is better), 1 (response_2) or 2 (tie)")
    return _labelled_pair(obj, prompt, responses, _FIRST_SECOND_TIE[label], source="label",
                          consumed=CONSUMED | {"question", "response_1", "response_2", "label"})


def _parse_pandalm(obj: dict) -> Prompt:
    """A PandaLM row: each ``annotatorN`` votes 1 (response1 is better), 2 (response2) or 0
    (tie). The rank follows the majority (more than half the votes), a tie without one; each
    vote is kept as a comparison by its annotator."""
    prompt = _question(obj, "instruction", "input")
    responses = _text_responses(obj, ("response1", "response2"))
    voters = sorted((k for k in obj if k.startswith("annotator") and k[9:].isdigit()), key=lambda k: int(k[9:]))
    if not voters:
        raise CheemsInputError("missing annotator votes (annotator1, annotator2, ...)", field="annotator1")
    a, b = responses[0].id, responses[1].id
    votes = [_PANDALM_VOTES[_label_number(obj[k], k, "0 (tie), 1 (response1 is better) or 2 (response2)")]
             for k in voters]
    majority = next((v for v in ("g", "b", "s") if 2 * votes.count(v) > len(votes)), "s")
    comparisons = [Comparison(a, b, v, annotator=k, source="vote") for k, v in zip(voters, votes)]
    return _labelled_pair(obj, prompt, responses, majority, source="vote", comparisons=comparisons,
                          consumed=CONSUMED | {"instruction", "response1", "response2", *voters})


# ----------------------------------------------------------------------------- conversations

def _rmb_prompt(obj: dict) -> PromptText:
    return _conversation(_messages(obj.get("conversation_input"), "conversation_input"), "conversation_input")


def _rmb_answer(v: Any, field: str) -> Response:
    """An RMB answer ``{answer, llm_name?, ...}``: llm_name is the model, other keys are kept."""
    if not isinstance(v, dict) or not isinstance(v.get("answer"), str):
        raise CheemsInputError("must be an object {answer, llm_name?} with a string answer", field=field)
    model = v.get("llm_name")
    return Response(response_id(v["answer"]), v["answer"], model if isinstance(model, str) else None,
                    {k: x for k, x in v.items() if k not in ("answer", "llm_name")})


def _category_path(obj: dict) -> list[str]:
    """RMB's ``category_path`` ("Pairwise_set/Helpfulness/Code/…") as category tiers; the leading
    "…_set" names RMB's test set, not a category, and is left out."""
    path = obj.get("category_path")
    if path is None:
        return category_field(obj)
    if not isinstance(path, str):
        raise CheemsInputError("category_path must be a '/'-separated string", field="category_path")
    tiers = [t for t in path.split("/") if t]
    return tiers[1:] if tiers and tiers[0].endswith("_set") else tiers


_RMB_CONSUMED = CONSUMED | {"conversation_input", "category_path"}


def _parse_rmb(obj: dict) -> Prompt:
    """An RMB pairwise row: ``chosen`` is better than ``reject``."""
    prompt = _rmb_prompt(obj)
    responses = [_rmb_answer(obj.get("chosen"), "chosen"), _rmb_answer(obj.get("reject"), "reject")]
    _check_distinct(responses, ("chosen", "reject"))
    return _row(obj, prompt, responses, _preferred(responses), consumed=_RMB_CONSUMED | {"chosen", "reject"},
                category=_category_path(obj))


def _parse_rmb_bon(obj: dict) -> Prompt:
    """An RMB best-of-N row: ``bon_best`` ranks above every loser and the losers tie, so the
    prompt's Exact Match (official tie rule) is RMB's best-of-N accuracy. An answer repeated
    among the losers is kept once (it ties with itself anyway)."""
    prompt = _rmb_prompt(obj)
    best = _rmb_answer(obj.get("bon_best"), "bon_best")
    losers = obj.get("loser_list")
    if not isinstance(losers, list) or not losers:
        raise CheemsInputError("loser_list must be a non-empty list of {answer}", field="loser_list")
    responses, seen = [best], {best.id}
    for i, v in enumerate(losers):
        r = _rmb_answer(v, f"loser_list[{i}]")
        if r.id == best.id:
            raise CheemsInputError("repeats bon_best: the best answer cannot also lose", field=f"loser_list[{i}]")
        if r.id not in seen:
            seen.add(r.id)
            responses.append(r)
    rank = {r.id: 0 if r is best else 1 for r in responses}
    return _row(obj, prompt, responses, rank, consumed=_RMB_CONSUMED | {"bon_best", "loser_list"},
                category=_category_path(obj))


_HH_TURN = re.compile(r"\n\n(Human|Assistant):")
_HH_ROLES = {"Human": "user", "Assistant": "assistant"}


def _is_transcript(text: str) -> bool:
    """Whether ``text`` is an HH-RLHF transcript: "Human:" first, an Assistant turn after."""
    return text.lstrip().startswith("Human:") and "\n\nAssistant:" in text


def _hh_turns(text: Any, field: str) -> list[dict]:
    """The turns of an HH-RLHF transcript as messages; it must end with an Assistant turn."""
    if not isinstance(text, str):
        raise CheemsInputError("missing or not a string", field=field)
    parts = _HH_TURN.split("\n\n" + text.lstrip())  # ["", "Human", " …", "Assistant", " …", ...]
    if parts[0].strip() or len(parts) < 5:
        raise CheemsInputError("not an HH-RLHF transcript '\\n\\nHuman: … \\n\\nAssistant: …'", field=field)
    turns = [{"role": _HH_ROLES[parts[i]], "content": parts[i + 1].strip()} for i in range(1, len(parts), 2)]
    if turns[-1]["role"] != "assistant":
        raise CheemsInputError("the transcript must end with an '\\n\\nAssistant:' turn", field=field)
    return turns


def _parse_hh(obj: dict) -> Prompt:
    """An HH-RLHF pair: the prompt is the conversation the two transcripts share before their
    last Assistant turn (messages; one Human turn is plain text), the responses those turns."""
    chosen, rejected = _hh_turns(obj.get("chosen"), "chosen"), _hh_turns(obj.get("rejected"), "rejected")
    if chosen[:-1] != rejected[:-1]:
        raise CheemsInputError("the conversation before the last Assistant turn differs from chosen's: "
                               "a pair needs one shared prompt", field="rejected")
    if chosen[-2]["role"] != "user":
        raise CheemsInputError("the last Assistant turn must follow a Human turn", field="chosen")
    prompt = chosen[0]["content"] if len(chosen) == 2 else chosen[:-1]
    responses = [Response(response_id(t[-1]["content"]), t[-1]["content"]) for t in (chosen, rejected)]
    _check_distinct(responses, ("chosen", "rejected"))
    return _row(obj, prompt, responses, _preferred(responses), consumed=_PAIR_CONSUMED)


def _parse_trl(obj: dict) -> Prompt:
    """TRL's conversational preference row: ``chosen`` and ``rejected`` are message lists that
    end with one assistant message each; the prompt is ``prompt`` (text or messages) or, when
    absent, the messages the two share up to the last user turn (TRL's implicit prompt). A row
    of plain strings is TRL's standard format, read as a pair."""
    if isinstance(obj.get("chosen"), str) and isinstance(obj.get("rejected"), str):
        return _parse_pair(obj)
    chosen, rejected = _messages(obj.get("chosen"), "chosen"), _messages(obj.get("rejected"), "rejected")
    raw = obj.get("prompt")
    if raw is None:
        n = 0
        while n < min(len(chosen), len(rejected)) and chosen[n] == rejected[n]:
            n += 1
        while n and chosen[n - 1]["role"] != "user":  # the prompt ends with the user's turn
            n -= 1
        if n == 0:
            raise CheemsInputError("missing prompt: no 'prompt' field, and chosen and rejected share no "
                                   "conversation up to a user turn", field="prompt")
        prompt, tails = _conversation(chosen[:n], "chosen"), (chosen[n:], rejected[n:])
    else:
        prompt = raw if isinstance(raw, str) else _conversation(_messages(raw, "prompt"), "prompt")
        tails = (chosen, rejected)
    responses = []
    for name, tail in zip(("chosen", "rejected"), tails):
        if len(tail) != 1 or tail[0]["role"] != "assistant":
            raise CheemsInputError("must hold one assistant message after the prompt", field=name)
        responses.append(Response(response_id(tail[0]["content"]), tail[0]["content"]))
    _check_distinct(responses, ("chosen", "rejected"))
    return _row(obj, prompt, responses, _preferred(responses), consumed=_PAIR_CONSUMED)


_PARSERS: dict[str, Callable[[dict], Prompt]] = {
    "cheems": _parse_general, "cheems-pairwise": _parse_official_pair, "task": _parse_task_result,
    "pair": _parse_pair, "sharegpt": _parse_sharegpt, "alpaca": _parse_alpaca,
    "alpaca-ranking": _parse_alpaca_ranking, "medicalgpt": _parse_medicalgpt, "autoj": _parse_autoj,
    "critiquellm": _parse_critiquellm, "pandalm": _parse_pandalm, "rmb": _parse_rmb, "rmb-bon": _parse_rmb_bon,
    "hh-rlhf": _parse_hh, "trl": _parse_trl,
}


# ----------------------------------------------------------------------------- joining rows

def merge_prompts(prompts: list[Prompt],
                  locations: list[tuple[str, int]] | None = None) -> list[Prompt]:
    """Join rows of the same prompt id (e.g. one row per annotated task) into one prompt.

    Rows with the same id must hold the same prompt (the first row's category and subset
    are kept); one id naming two different prompts is an error, since scores files address
    responses by (prompt id, response id). Responses are united by id (first-seen order) and comparisons
    concatenated; a response id given two different contents is an error located by
    ``locations[i]`` = (file, line) of row i when given. Rows without an ``id`` share one only
    when they hold the same prompt and responses (:func:`row_id`); to join the rows that
    repeat a prompt with other responses, use :func:`group_by_prompt`.
    """
    seen: set[str] = set()
    repeated = {p.id for p in prompts if p.id in seen or seen.add(p.id)}
    if not repeated:
        return list(prompts)
    merged: dict[str, Prompt] = {}
    for i, p in enumerate(prompts):
        if p.id not in repeated:
            merged[p.id] = p
            continue
        q = merged.get(p.id)
        if q is not None and q.prompt != p.prompt:
            raise CheemsInputError(f"prompt id {p.id!r} names two different prompts; give them distinct ids",
                                   field="id", **_where(locations, i))
        if q is None:
            merged[p.id] = Prompt(p.id, p.prompt, list(p.responses), p.rank, list(p.comparisons),
                                 p.category, p.subset, dict(p.extra))
            continue
        known = {r.id: r for r in q.responses}
        for r in p.responses:
            if r.id not in known:
                q.responses.append(r)
            elif known[r.id].content != r.content:
                raise CheemsInputError(f"response {r.id!r} of prompt {p.id!r} has a different content "
                                       "than in an earlier row", field="responses", **_where(locations, i))
        q.comparisons.extend(p.comparisons)
        q.rank = None
    return list(merged.values())


def group_by_prompt(prompts: list[Prompt]) -> list[Prompt]:
    """Join the rows that hold the same prompt into one prompt each, in first-seen order.

    Files such as LLaMA-Factory's DPO data, RewardBench or RMB hold one row per pair, so a
    prompt answered several times is several rows (several ids). The same prompt means the
    same text, or the same chat messages (one user message equals its text). A prompt held by
    one row is returned as it is (the same object). Rows that share a prompt become one
    :class:`Prompt` with:

    - the first row's id, prompt, category, subset and extra keys;
    - the rows' responses united by content, in first-seen order; a response keeps its id
      unless an earlier, different content holds it in the group (then it takes the md5 of
      its content, :func:`~cheems.records.response_id`);
    - no rank: a rank orders only its own row's responses. Each ranked row contributes its
      rank's comparisons (:func:`~cheems.records.rank_comparisons`: ``g`` for every ordered
      pair, ``s`` for a tie; ``source="rank"``) and each unranked row its comparisons, so
      :func:`~cheems.records.preference_pairs` of the joined prompt is the union of the rows'
      pairs (as a ranked row's own comparisons are ignored there, they are left out here too).

    Contradicting rows give contradicting pairs; :func:`cheems.graph.resolve_conflicts`
    resolves them. O(total responses + comparisons).
    """
    groups: dict[Any, list[Prompt]] = {}
    for p in prompts:
        groups.setdefault(prompt_key(p.prompt), []).append(p)
    return [rows[0] if len(rows) == 1 else _join_rows(rows) for rows in groups.values()]


def _join_rows(rows: list[Prompt]) -> Prompt:
    """The rows of one prompt as one prompt (see :func:`group_by_prompt`)."""
    by_content: dict[str, str] = {}  # content -> its id in the joined prompt
    used: set[str] = set()  # the ids of the joined prompt's responses
    responses: list[Response] = []
    comparisons: list[Comparison] = []
    for p in rows:
        ids: dict[str, str] = {}  # this row's response id -> the joined one
        for r in p.responses:
            rid = by_content.get(r.content)
            if rid is None:
                rid = r.id if r.id not in used else _free_id(r.content, used)
                by_content[r.content] = rid
                used.add(rid)
                responses.append(r if rid == r.id else Response(rid, r.content, r.model, dict(r.extra)))
            ids[r.id] = rid
        if p.rank is not None:
            comparisons += [Comparison(ids[c.a], ids[c.b], c.label, source="rank") for c in rank_comparisons(p.rank)]
            continue
        for c in p.comparisons:
            a, b = ids[c.a], ids[c.b]
            comparisons.append(c if (a, b) == (c.a, c.b) else
                               Comparison(a, b, c.label, c.annotator, c.source, dict(c.extra)))
    first = rows[0]
    return Prompt(first.id, first.prompt, responses, None, comparisons, list(first.category), first.subset,
                  dict(first.extra))


def _free_id(content: str, taken: set[str]) -> str:
    """The md5 of ``content``, suffixed until no id in ``taken`` holds it."""
    rid, n = response_id(content), 1
    while rid in taken:
        rid, n = f"{response_id(content)}-{n}", n + 1
    return rid


def _where(locations: list[tuple[str, int]] | None, i: int) -> dict:
    if not locations:
        return {}
    file, line = locations[i]
    return {"file": file, "line": line}


def drop_repeated_rows(res: "ReadResult") -> int:
    """Remove, in place, rows that repeat an earlier row exactly (same id and the same prompt,
    responses, ranking and comparisons), as LLaMA-Factory's own sample files do: one item,
    counted once. Returns how many were removed. Rows that share an id but differ stay, for
    :func:`check_unique_ids` to refuse."""
    seen: dict[str, dict] = {}
    keep = []
    for i, p in enumerate(res.prompts):
        row = p.to_dict()
        if seen.get(p.id) == row:
            continue
        seen.setdefault(p.id, row)
        keep.append(i)
    removed = len(res.prompts) - len(keep)
    if removed:
        res.prompts = [res.prompts[i] for i in keep]
        res.lines = [res.lines[i] for i in keep]
        res.files = [res.files[i] for i in keep]
    return removed


def check_unique_ids(prompts: list[Prompt], locations: list[tuple[str, int]] | None = None) -> None:
    """Raise CheemsInputError at the second row that reuses a prompt id, naming the first.

    Two rows share an id when both give it, or when neither does and they hold the same
    prompt and responses (:func:`row_id`); the message says whether their contents differ.
    """
    first: dict[str, int] = {}
    for i, p in enumerate(prompts):
        j = first.setdefault(p.id, i)
        if j != i:
            earlier = f" (first at {locations[j][0]}:{locations[j][1]})" if locations else ""
            q = prompts[j]
            same = q.prompt == p.prompt and sorted(r.content for r in q.responses) == sorted(
                r.content for r in p.responses)
            what = ("the two rows repeat one prompt and its responses: drop one" if same else
                    "by two rows of different content (prompt or responses): give them distinct ids")
            raise CheemsInputError(f"prompt id {p.id!r} is used twice{earlier}, {what}; scores could not tell "
                                   "the two apart", field="id", **_where(locations, i))


# ----------------------------------------------------------------------------- files

@dataclass
class ReadResult:
    prompts: list[Prompt]
    errors: list[CheemsInputError] = field(default_factory=list)  # rows skipped
    lines: list[int] = field(default_factory=list)  # where each prompt was read (line or item)
    files: list[str] = field(default_factory=list)  # and from which file (read_many)

    def locations(self) -> list[tuple[str, int]]:
        return list(zip(self.files, self.lines))


def read_prompts(path: str | os.PathLike, *, skip_invalid: bool = False, require_rank: bool = False,
                 default_subset: str | None = None, fmt: str | None = None) -> ReadResult:
    """Read every row of a file into prompts.

    Without ``skip_invalid`` the first bad row raises CheemsInputError (file, line, field);
    with it, bad rows are skipped and returned in ``errors``. A file-level problem (missing
    file, broken JSON list) always raises. ``default_subset`` fills rows that have no subset.
    Each row's format is detected unless ``fmt`` names one of :data:`FORMAT_NAMES` for all.
    """
    if fmt is not None:
        check_format(fmt)
    name = str(path)
    prompts: list[Prompt] = []
    errors: list[CheemsInputError] = []
    lines: list[int] = []
    with gc_paused():
        for lineno, obj in iter_rows(path, errors if skip_invalid else None):
            try:
                p = parse_row(obj, fmt)
                if require_rank and p.rank is None:
                    raise CheemsInputError("no 'rank' (run `cheems rank` on annotations first)", field="rank")
            except CheemsInputError as e:
                err = e.located(file=name, line=lineno)
                if not skip_invalid:
                    raise err from None
                errors.append(err)
                continue
            if p.subset is None:
                p.subset = default_subset
            prompts.append(p)
            lines.append(lineno)
    errors.sort(key=lambda e: e.line or 0)
    return ReadResult(prompts, errors, lines, [name] * len(prompts))


def read_many(paths: Iterable[str | os.PathLike], *, fmt: str | None = None, **kw: Any) -> ReadResult:
    """Read several files (``fmt`` and ``kw`` as for :func:`read_prompts`); each file's stem
    is the default subset of its rows."""
    out = ReadResult([], [], [])
    for p in paths:
        r = read_prompts(p, default_subset=Path(p).stem, fmt=fmt, **kw)
        out.prompts.extend(r.prompts)
        out.errors.extend(r.errors)
        out.lines.extend(r.lines)
        out.files.extend([str(p)] * len(r.prompts))
    return out


# ----------------------------------------------------------------------------- plain rows, without objects

class NotPlain(Exception):
    """Input that :func:`row_chunks` and :func:`plain_rows` leave to the general readers
    (:func:`read_many`, :func:`parse_row`), which read it or name its fault."""


PLAIN_ROW_KEYS = frozenset(("id", "prompt", "responses", "comparisons", "category", "subset"))
"""The keys a plain cheems row (:func:`plain_rows`) may hold."""


def row_chunks(path: str | os.PathLike, size: int) -> Iterator[list]:
    """The rows of a JSONL or JSON-list file, as :func:`iter_rows` reads them, ``size`` rows
    at a time (no line numbers). Raises NotPlain for every file or line that
    :func:`iter_rows` reports or reads with its lenient parser: a missing file, a folder,
    Parquet, a line orjson cannot read (broken JSON, NaN, not UTF-8). O(bytes).
    """
    path = Path(path)
    if path.suffix == ".parquet" or not path.is_file():
        raise NotPlain(str(path))
    try:
        data = path.read_bytes()
    except OSError:
        raise NotPlain(str(path)) from None
    data, is_list = _json_source(path, data)
    try:
        if is_list:
            items = orjson.loads(data)
            for lo in range(0, len(items), size):
                yield items[lo:lo + size]
            return
        lines = list(filter(bytes.strip, data.split(b"\n")))  # blank lines skipped, as iter_rows does
        del data
        for lo in range(0, len(lines), size):
            yield list(map(orjson.loads, lines[lo:lo + size]))
    except orjson.JSONDecodeError:
        raise NotPlain(str(path)) from None


class PlainBatch:
    """Plain cheems rows read chunk by chunk into one batch, no :class:`Prompt` made.

    Plain rows (:meth:`add`) read as :func:`parse_row` reads them. Per row the batch keeps what
    ``Prompt.to_dict`` writes: id (given, or derived as :func:`row_id` derives it), prompt text,
    responses and (with ``comparisons``) comparisons as the dicts it writes, category tiers
    and subset. Flat over the batch it keeps integer codes, so that a chunk's comparison
    objects can be freed while still in the CPU cache: ``sizes`` / ``counts`` (responses /
    comparisons per row); ``node_first``: for each response the batch index of the first
    response holding its id; ``a_first`` / ``b_first``: the same for the id each comparison
    names (-1 for an id no response of the batch holds so far); ``labels``: one letter per
    comparison. :func:`cheems.graph.comparison_arrays_from_codes` checks them.
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
        then unusable), which :func:`parse_row` reads or refuses, naming the fault.

        Plain: a dict with keys among :data:`PLAIN_ROW_KEYS`; ``prompt`` non-blank text; ``id`` a
        string, an integer or absent; ``responses`` a non-empty list of ``{id, content}`` (two
        strings, no other key); ``comparisons`` a non-empty list of ``{a, b, label}`` (no other
        key, a label of g, b, s; the ids are checked by
        :func:`~cheems.graph.comparison_arrays_from_codes`); ``category`` and ``subset`` as
        :func:`category_field` and :func:`subset_field` accept them. ``default_subset`` fills a
        missing subset, as :func:`read_prompts` does. C-level ``map``s only; O(rows +
        responses + comparisons).
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


_GET_ROW = itemgetter("prompt", "responses", "comparisons")
_A_B_LABEL = ("a", "b", "label")


def _plain_row_id(rid: Any, prompt: str, responses: list[dict]) -> str:
    """:func:`row_id` of a plain row."""
    if type(rid) is str:
        return rid
    if rid is None:
        return prompt_id(prompt, list(map(_GET_CONTENT, responses)))
    if type(rid) is int:
        return str(rid)
    raise NotPlain("id")


def _plain_category(row: dict) -> list[str]:
    """:func:`category_field` of a plain row; NotPlain where it would raise."""
    c = row.get("category")
    if c is None:
        return []
    if type(c) is str:
        return [c]
    if type(c) is list and set(map(type, c)) <= {str}:
        return c
    raise NotPlain("category")


# ----------------------------------------------------------------------------- scores

def read_scores(path: str | os.PathLike) -> dict[tuple[str, str], float]:
    """Read a SCORES file: rows ``{prompt_id, response_id, score}`` -> {(pid, rid): score}.

    A later row for the same pair replaces an earlier one (appended, resumed runs)."""
    name = str(path)
    scores: dict[tuple[str, str], float] = {}
    for lineno, obj in iter_rows(path):
        if not isinstance(obj, dict):
            raise CheemsInputError("row must be a JSON object", file=name, line=lineno)
        for k in ("prompt_id", "response_id", "score"):
            if k not in obj:
                raise CheemsInputError(f"missing '{k}'", file=name, line=lineno, field=k)
        s = obj["score"]
        if not (is_integer(s) or isinstance(s, float)) or s != s:  # not is_number: an infinite score passes
            raise CheemsInputError(f"score must be a number, got {s!r}", file=name, line=lineno,
                                   field="score")
        scores[(str(obj["prompt_id"]), str(obj["response_id"]))] = float(s)
    return scores


def score_rows(scores: dict[tuple[str, str], float]) -> Iterator[dict]:
    for (pid, rid), s in scores.items():
        yield {"prompt_id": pid, "response_id": rid, "score": s}
