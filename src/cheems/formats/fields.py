"""The fields every format reads alike, and the prompt a reader assembles from what it found.

Field readers (:func:`prompt_field`, :func:`row_id`, :func:`category_field`, :func:`subset_field`)
take a raw row and return one checked value; the pieces below them (:func:`text_responses`,
:func:`question_text`, :func:`chat_prompt`, :func:`chat_messages`, :func:`conversation_prompt`)
are what several formats share; :func:`assemble_prompt` and :func:`labelled_pair` build the
:class:`~cheems.records.Prompt`. Every fault is a CheemsInputError naming the field.
"""

from __future__ import annotations

from typing import Any

from cheems.records import (CheemsInputError, Comparison, Prompt, PromptText, Response, check_chat_message,
                            prompt_id, response_id)
from cheems.settings import is_integer

__all__ = ["CONSUMED", "assemble_prompt", "category_field", "chat_messages", "chat_prompt", "number_twins",
           "conversation_prompt", "labelled_pair", "preferred_rank", "prompt_field", "question_text", "row_id",
           "subset_field", "text_responses"]

CONSUMED = {"id", "prompt", "input", "responses", "rank", "comparisons", "annotations", "triples",
            "category", "subset"}
"""The keys of an official Cheems row; every reader consumes those it reads, the rest stay on the row."""


# ----------------------------------------------------------------------------- fields

def prompt_field(obj: dict, *keys: str) -> Any:
    """The prompt of a raw row: the first of ``keys`` present, text or chat messages."""
    for k in keys:
        if k in obj and obj[k] is not None:
            v = obj[k]
            if isinstance(v, str) or (isinstance(v, list) and all(isinstance(m, dict) for m in v)):
                return v
            raise CheemsInputError("must be a string or a list of chat messages", field=k)
    raise CheemsInputError("missing prompt (expected a 'prompt' or 'input' field)", field=keys[0])


def row_id(obj: dict, prompt: Any, responses: list[Response] | None = None, *, derived: bool = False) -> str:
    """The row's ``id`` as a string; when it has none, :func:`~cheems.records.prompt_id` of its
    prompt and its ``responses``' contents (of the prompt alone when ``responses`` is None, as
    for the rows of a prompt file).

    ``derived``: every response id is :func:`~cheems.records.response_id` of its content, so
    those ids stand for the contents in the hash (the same id, computed faster)."""
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


# ----------------------------------------------------------------------------- pieces several formats share

def _is_blank(v: Any) -> bool:
    """None or NaN: an empty optional field (pandas and Python's json write NaN for one)."""
    return v is None or (isinstance(v, float) and v != v)


def text_responses(obj: dict, keys: tuple[str, ...], *, objects: bool = False) -> list[Response]:
    """One response per key, each a string (or, with ``objects``, ``{value|content}`` as
    ShareGPT writes it); two identical ones get distinct ids (:func:`number_twins`)."""
    out = []
    for k in keys:
        v = obj.get(k)
        if objects and isinstance(v, dict):
            v = v.get("value", v.get("content"))
        if not isinstance(v, str):
            raise CheemsInputError("missing or not a string", field=k)
        out.append(Response(response_id(v), v))
    number_twins(out)
    return out


def number_twins(responses: list[Response], taken: set[str] | None = None) -> int:
    """Give each response whose id repeats an earlier one's (the same text, where ids are made
    from the content) the id ``ID#n``, n its occurrence (the next free number when that is
    taken), in place; returns how many were renamed. Two identical responses in one row are
    read, not refused: they carry no preference, which ``eval``, ``train`` and ``validate``
    count and say (:func:`cheems.records.identical_responses`). ``taken``: ids of the row's other
    responses, which a new id must avoid."""
    taken = set(taken or ()) | {r.id for r in responses}
    seen: dict[str, int] = {}
    renamed = 0
    for r in responses:
        n = seen.get(r.id, 0) + 1
        seen[r.id] = n
        if n == 1:
            continue
        new = f"{r.id}#{n}"
        while new in taken:
            n += 1
            new = f"{r.id}#{n}"
        taken.add(new)
        r.id = new
        renamed += 1
    return renamed


def question_text(obj: dict, key: str, more: str | None = None) -> str:
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


def chat_prompt(obj: dict, question: str) -> PromptText:
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


def chat_messages(raw: Any, field: str) -> list[dict]:
    """Chat messages reduced to ``{role, content}`` (other keys, such as RMB's ``language``, dropped)."""
    if not isinstance(raw, list) or not raw:
        raise CheemsInputError("must be a non-empty list of chat messages {role, content}", field=field)
    out = []
    for i, m in enumerate(raw):
        check_chat_message(m, field=f"{field}[{i}]")
        out.append({"role": m["role"], "content": m["content"]})
    return out


def conversation_prompt(messages: list[dict], field: str) -> PromptText:
    """A prompt from messages that must end with the user's turn; one user message alone is
    plain text, as a ShareGPT row with one human turn has always been read."""
    if messages[-1]["role"] != "user":
        raise CheemsInputError("the last message of a prompt must be from 'user'",
                               field=f"{field}[{len(messages) - 1}].role")
    return messages[0]["content"] if len(messages) == 1 else messages


# ----------------------------------------------------------------------------- the prompt a reader assembles

def preferred_rank(responses: list[Response]) -> dict[str, int]:
    """The rank of responses listed best first, each better than the next."""
    return {r.id: i for i, r in enumerate(responses)}


def assemble_prompt(obj: dict, prompt: PromptText, responses: list[Response], rank: dict[str, int] | None,
                    comparisons: list[Comparison] | None = None, *, consumed: set[str] | frozenset[str],
                    category: list[str] | None = None) -> Prompt:
    """A prompt from the parts a reader found; the row's other keys (not ``consumed``) are kept."""
    return Prompt(row_id(obj, prompt, responses, derived=True), prompt, responses, rank, comparisons or [],
                  category_field(obj) if category is None else category, subset_field(obj),
                  {k: v for k, v in obj.items() if k not in consumed})


def labelled_pair(obj: dict, prompt: PromptText, responses: list[Response], label: str, *, source: str,
                  consumed: set[str] | frozenset[str], category: list[str] | None = None,
                  comparisons: list[Comparison] | None = None) -> Prompt:
    """Two responses judged ``label`` (g: the first is better, b: the second, s: a tie): the
    rank says the same (a tie ranks both 0, so it is never read as a preference) and one
    comparison (``source``) records the label, unless ``comparisons`` are given."""
    a, b = responses[0].id, responses[1].id
    rank = {a: 0, b: 1} if label == "g" else {a: 1, b: 0} if label == "b" else {a: 0, b: 0}
    if comparisons is None:
        comparisons = [Comparison(a, b, label, source=source)]
    return assemble_prompt(obj, prompt, responses, rank, comparisons, consumed=consumed, category=category)
