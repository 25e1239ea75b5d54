"""The HTTP contracts of `cheems serve`: each route's JSON body checked into plain values, and its reply.

Every check is made here, once, before anything reaches the model; a body that breaks one
raises :class:`ContractError` (HTTP status, message, the field at fault), which the app answers
as ``{"error": {"message", "field"}}``: 413 for too large or too many, 422 for the wrong shape.
This module holds what every route shares (the body, the refusal, the checks of texts and
flags) and cheems' own routes; the routes of other inference servers (vLLM, SGLang,
LLaMA-Factory) are :mod:`cheems.serving.inference_servers`.

``POST /get_reward`` — OpenRLHF's remote reward model (``--remote_rm_url``, ``--reward.remote_url``
since 0.10.2; its reference server is ``openrlhf/cli/serve_rm.py``). Request ``{"query": [text,
...], "prompts": [text, ...]?, "labels": [...]?}``: each query is the whole conversation with the
chat template already applied (EOS included), tokenized as given with no special tokens added,
the reward read where the model's training read it (:mod:`cheems.models.reward_position`: the
token that closes the reply's turn, whatever follows it in the text). ``prompts`` and
``labels`` are checked to be lists and otherwise unused. Reply ``{"rewards": [...], "scores":
[...], "extra_logs": {}}``, ``rewards`` equal to ``scores``: v0.8.0 to v0.8.4 read ``rewards``
(``request_api_wrapper(..., score_key="rewards")``), v0.8.5 to v0.9.0 ``rewards``, ``scores``
when present and every key of ``extra_logs``, v0.9.1 on ``scores`` (else ``rewards``) and
``extra_logs``. v0.8 to v0.9.0 post the whole rollout batch in one request
(``requests.post(json=...)``); v0.9.1 on post one sample per request (aiohttp), and with several
URLs the servers past the first get empty lists, which are answered with empty lists.

``POST /v1/score`` — cheems' own: ``{"rows": [row, ...]}``, each row one prompt with its
responses in any format :func:`cheems.formats.parse_row` reads (a cheems row: ``id``?,
``prompt`` as text or chat messages, ``responses: [{id, content}]``); the server applies the
chat template as ``cheems score`` does. Reply ``{"scores": [{"prompt_id", "response_id",
"score"}, ...]}`` in row and response order.

Every text of a body must be Unicode: JSON lets a string hold a lone UTF-16 surrogate
(``"\\ud800"`` with no partner), which no tokenizer can encode; :func:`parse_json_body` refuses
it (422) naming where it is (``query[0]``, ``rows[1].responses[0].content``, ...), whatever the
route. A refusal's reason, ``field: message`` as one line of printable ASCII
(:func:`refusal_reason`), is also sent in the ``X-Cheems-Error`` header, and the server's HTTP
layer puts it after the status line's standard phrase (:mod:`cheems.serving.connections`).
"""

from __future__ import annotations

import json
import re
from typing import Any, Sequence

from cheems.records import CheemsInputError, Prompt, PromptText
from cheems.serving.naming import named
from cheems.serving.settings import ServeSettings

__all__ = ["REASON_HEADER", "ContractError", "checked_texts", "decode_json_bytes", "error_body", "get_reward_reply",
           "json_type", "lone_surrogate", "optional_bool", "optional_text", "parse_get_reward", "parse_json_body",
           "parse_score_rows", "refusal_reason", "score_reply"]

REASON_HEADER = "x-cheems-error"
"""The response header holding a refusal's reason (:func:`refusal_reason`)."""
REASON_CHARS = 200  # a reason longer than this is cut (a header value and a status line stay short)
_SURROGATE = re.compile(r"[\ud800-\udfff]")  # left in a str by json.loads only when unpaired
_UNPRINTABLE = re.compile(r"[\x00-\x1f\x7f]")


class ContractError(Exception):
    """A request the contract refuses: the HTTP ``status``, a ``message`` and the ``field`` at fault."""

    def __init__(self, status: int, message: str, field: str | None = None):
        self.status = status
        self.message = message
        self.field = field
        super().__init__(f"{field}: {message}" if field else message)


def error_body(message: str, field: str | None = None) -> dict:
    """The one shape of every error reply."""
    return {"error": {"message": message, "field": field}}


def refusal_reason(message: str, field: str | None = None) -> str:
    """``field: message`` as one line of printable ASCII, other characters escaped (``\\u4f60``,
    ``\\x0a``), cut to ``REASON_CHARS`` characters: what a header value, a status line and a log
    line can all hold."""
    text = f"{field}: {message}" if field else message
    text = _UNPRINTABLE.sub(lambda m: f"\\x{ord(m.group()):02x}", text.encode("ascii", "backslashreplace").decode())
    return text if len(text) <= REASON_CHARS else text[: REASON_CHARS - 3] + "..."


def parse_json_body(raw: bytes | bytearray | str) -> dict:
    """The request body as a JSON object (422 naming ``body`` otherwise); a lone surrogate
    anywhere in it is refused (422) naming its field (:func:`lone_surrogate`). Bytes are
    decoded first (:func:`decode_json_bytes`); a caller holding a large body decodes it itself
    and lets go of the bytes before parsing, so that the body is held twice at most."""
    text = decode_json_bytes(raw) if isinstance(raw, (bytes, bytearray)) else raw
    try:
        body = json.loads(text)
    except (ValueError, RecursionError) as e:
        raise ContractError(422, f"not valid JSON ({str(e).splitlines()[0][:200]})", "body") from None
    if not isinstance(body, dict):
        raise ContractError(422, f"must be a JSON object, got {json_type(body)}", "body")
    found = lone_surrogate(body)
    if found is not None:
        field, what = found
        raise ContractError(422, f"{what}, which is not a Unicode character: send UTF-8 text (a character "
                            "past U+FFFF as a pair of \\u escapes)", field)
    return body


def decode_json_bytes(raw: bytes | bytearray) -> str:
    """A body's bytes as text, the way :func:`json.loads` decodes bytes (UTF-8, or the UTF-16 or
    UTF-32 its first bytes show); bytes that are not that encoding: 422 naming ``body``."""
    try:
        return raw.decode(json.detect_encoding(raw), "surrogatepass")
    except UnicodeDecodeError as e:
        raise ContractError(422, f"not valid JSON ({str(e)[:200]})", "body") from None


def lone_surrogate(body: dict) -> tuple[str, str] | None:
    """Where the parsed JSON ``body`` first holds a lone UTF-16 surrogate, in document order:
    (the field, as ``query[0]`` or ``rows[1].prompt`` (``body`` for a key of the body itself);
    what is there). None when every text and key is Unicode. An explicit stack of iterators,
    so a deep body cannot overflow Python's recursion limit, and a field's name is written only
    for the containers descended into and the text found: a list of millions of numbers or
    texts costs no memory of its own."""
    bad_key = next((k for k in body if _SURROGATE.search(k)), None)
    if bad_key is not None:
        return "body", f"a key holds a lone surrogate ({_escaped(bad_key)})"
    stack: list[tuple[str, Any]] = [("", iter(body.items()))]
    while stack:
        field, items = stack[-1]
        step = next(items, None)
        if step is None:
            stack.pop()
            continue
        key, value = step
        if isinstance(value, str):
            found = _SURROGATE.search(value)
            if found:
                return _child(field, key), (f"holds a lone surrogate ({_escaped(found.group())} at character "
                                            f"{found.start()})")
        elif isinstance(value, list):
            stack.append((_child(field, key), enumerate(value)))
        elif isinstance(value, dict):
            child = _child(field, key)
            bad_key = next((k for k in value if _SURROGATE.search(k)), None)
            if bad_key is not None:
                return child, f"a key holds a lone surrogate ({_escaped(bad_key)})"
            stack.append((child, iter(value.items())))
    return None


def _child(field: str, key: str | int) -> str:
    if isinstance(key, int):
        return f"{field}[{key}]"
    return f"{field}.{key}" if field else key


def _escaped(text: str) -> str:
    return text[:40].encode("ascii", "backslashreplace").decode()


# ----------------------------------------------------------------------------- /get_reward

def parse_get_reward(body: dict, limits: ServeSettings) -> list[str]:
    """The queries of a ``/get_reward`` body (see the module docs); an empty list is answered
    with empty lists (OpenRLHF sends one to each server past the first it has queries for)."""
    queries = checked_texts(body.get("query"), "query", limits, allow_single=False, allow_empty=True)
    for name in ("prompts", "labels"):
        value = body.get(name)
        if value is not None and not isinstance(value, list):
            raise ContractError(422, f"must be a list, got {json_type(value)}", name)
    return queries


def get_reward_reply(scores: Sequence[float]) -> dict:
    scores = list(scores)
    return {"rewards": scores, "scores": scores, "extra_logs": {}}


# ----------------------------------------------------------------------------- /v1/score

def parse_score_rows(body: dict, limits: ServeSettings) -> list[Prompt]:
    """The rows of a ``/v1/score`` body as validated prompts (a bad row: 422 naming
    ``rows[i].field``; too many responses in all, or a text too long: 413)."""
    from cheems.formats import parse_row

    rows = body.get("rows")
    if rows is None:
        raise ContractError(422, "missing: give a list of rows, each a prompt with its responses", "rows")
    if not isinstance(rows, list):
        raise ContractError(422, f"must be a list of rows, got {json_type(rows)}", "rows")
    if not rows:
        raise ContractError(422, "empty: give at least one row", "rows")
    prompts, responses = [], 0
    for i, row in enumerate(rows):
        try:
            p = parse_row(row)
        except CheemsInputError as e:
            raise ContractError(422, e.message, f"rows[{i}]" + (f".{e.field}" if e.field else "")) from None
        responses += len(p.responses)
        if responses > limits.max_queries:
            raise ContractError(413, f"more than {limits.max_queries} responses in one request "
                                f"({named('max_queries')}); split the rows over several requests", "rows")
        _check_row_lengths(p, i, limits.max_query_chars)
        prompts.append(p)
    return prompts


def _check_row_lengths(p: Prompt, i: int, limit: int) -> None:
    if _chars(p.prompt) > limit:
        raise ContractError(413, f"longer than {limit} characters ({named('max_query_chars')})", f"rows[{i}].prompt")
    for j, r in enumerate(p.responses):
        if len(r.content) > limit:
            raise ContractError(413, f"longer than {limit} characters ({named('max_query_chars')})",
                                f"rows[{i}].responses[{j}].content")


def _chars(prompt: PromptText) -> int:
    return len(prompt) if isinstance(prompt, str) else sum(len(m.get("content") or "") for m in prompt)


def score_reply(keys: Sequence[tuple[str, str]], scores: Sequence[float]) -> dict:
    return {"scores": [{"prompt_id": p, "response_id": r, "score": s} for (p, r), s in zip(keys, scores)]}


# ----------------------------------------------------------------------------- shared checks

def checked_texts(value: Any, name: str, limits: ServeSettings, *, allow_single: bool,
                  allow_empty: bool = False) -> list[str]:
    """A list of texts (or one text, where ``allow_single``; empty only where ``allow_empty``),
    within the limits: too many or too long is 413, anything else not a text 422, naming
    ``name`` or ``name[i]``."""
    shape = "a text or a list of texts" if allow_single else "a list of texts"
    if value is None:
        raise ContractError(422, f"missing: give {shape}", name)
    if allow_single and isinstance(value, str):
        value = [value]
    if not isinstance(value, list):
        raise ContractError(422, f"must be {shape}, got {json_type(value)}", name)
    if not value and not allow_empty:
        raise ContractError(422, "empty: give at least one text", name)
    if len(value) > limits.max_queries:
        raise ContractError(413, f"{len(value)} texts, more than {limits.max_queries} in one request "
                            f"({named('max_queries')}); split them over several requests", name)
    for i, text in enumerate(value):
        if not isinstance(text, str):
            hint = " (token ids are not taken: send the text)" if isinstance(text, int) else ""
            raise ContractError(422, f"must be a text, got {json_type(text)}{hint}", f"{name}[{i}]")
        if len(text) > limits.max_query_chars:
            raise ContractError(413, f"{len(text)} characters, more than {limits.max_query_chars} "
                                f"({named('max_query_chars')})", f"{name}[{i}]")
    return value


def optional_text(body: dict, name: str) -> str | None:
    """``body[name]``: a text, or None when absent (422 naming it otherwise)."""
    value = body.get(name)
    if value is not None and not isinstance(value, str):
        raise ContractError(422, f"must be a text, got {json_type(value)}", name)
    return value


def optional_bool(body: dict, name: str) -> bool | None:
    """``body[name]``: true or false, or None when absent (422 naming it otherwise)."""
    value = body.get(name)
    if value is not None and not isinstance(value, bool):
        raise ContractError(422, f"must be true or false, got {json_type(value)}", name)
    return value


def json_type(value: Any) -> str:
    """The JSON name of a parsed value's type, for messages."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a text"
    if isinstance(value, list):
        return "a list"
    return "an object"
