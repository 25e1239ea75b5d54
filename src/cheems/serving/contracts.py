"""The HTTP contracts of `cheems serve`: each route's JSON body checked into plain values, and its reply.

Every check is made here, once, before anything reaches the model; a body that breaks one
raises :class:`ContractError` (HTTP status, message, the field at fault), which the app answers
as ``{"error": {"message", "field"}}``: 413 for too large or too many, 422 for the wrong shape.

``POST /get_reward`` — OpenRLHF's remote reward model (``--remote_rm_url``; its reference server
is ``openrlhf/cli/serve_rm.py``, and its client reads the key ``rewards``). Request
``{"query": [text, ...], "prompts": [text, ...]?, "labels": [...]?}``: each query is the whole
conversation with the chat template already applied (EOS included), tokenized as given with no
special tokens added, the reward read at its last token. ``prompts`` and ``labels`` are checked
to be lists and otherwise unused. Reply ``{"rewards": [...], "scores": [...], "extra_logs": {}}``,
``rewards`` equal to ``scores``.

``POST /classify`` — vLLM's pooling API, as verl's reward loop calls it for a discriminative
reward model. vLLM's request (``ClassificationCompletionRequest`` in
``vllm/entrypoints/pooling/classify/protocol.py``, fields from ``pooling/base/protocol.py``):
``model`` (text, optional), ``input`` (a text or a list of texts; vLLM also takes token ids,
refused here), ``add_special_tokens`` (default **true**: "special tokens (e.g. BOS) will be
added to the prompt"), ``use_activation`` (default None: the pooler's activation), called
``activation`` before vLLM 0.11.2; ``truncate_prompt_tokens``, ``user``, ``priority`` and
``request_id`` are accepted and not used (over-long inputs follow the server's ``--truncate``).
vLLM's classification activation for a one-label model (``PoolerClassify`` in
``vllm/model_executor/layers/pooler/activations.py``) is the sigmoid, or the identity when the
model's config says ``problem_type: "regression"``; ``activation: false`` gives the raw score.
verl (``verl/experimental/reward_loop/reward_loop.py``, ``compute_score_disrm``) renders the
conversation with the reward model's chat template, strips a leading BOS text because vLLM adds
special tokens, posts ``{"model", "input": text, "activation": false}`` and reads
``data[-1].probs[-1]``. Reply ``{"id": "classify-…", "object": "list", "created", "model",
"data": [{"index", "label", "probs": [score], "num_classes": 1}], "usage": {"prompt_tokens",
"total_tokens", "completion_tokens": 0, "prompt_tokens_details": null}}``.

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
import math
import re
import time
import uuid
from dataclasses import dataclass
from typing import Any, Sequence

from cheems.records import CheemsInputError, Prompt, PromptText
from cheems.serving.settings import ServeSettings

__all__ = ["REASON_HEADER", "ClassifyRequest", "ContractError", "classify_reply", "error_body", "get_reward_reply",
           "lone_surrogate", "parse_classify", "parse_get_reward", "parse_json_body", "parse_score_rows",
           "refusal_reason", "score_reply"]

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


def parse_json_body(raw: bytes) -> dict:
    """The request body as a JSON object (422 naming ``body`` otherwise); a lone surrogate
    anywhere in it is refused (422) naming its field (:func:`lone_surrogate`)."""
    try:
        body = json.loads(raw)
    except (ValueError, RecursionError) as e:  # UnicodeDecodeError is a ValueError
        raise ContractError(422, f"not valid JSON ({str(e).splitlines()[0][:200]})", "body") from None
    if not isinstance(body, dict):
        raise ContractError(422, f"must be a JSON object, got {_json_type(body)}", "body")
    found = lone_surrogate(body)
    if found is not None:
        field, what = found
        raise ContractError(422, f"{what}, which is not a Unicode character: send UTF-8 text (a character "
                            "past U+FFFF as a pair of \\u escapes)", field)
    return body


def lone_surrogate(body: dict) -> tuple[str, str] | None:
    """Where the parsed JSON ``body`` first holds a lone UTF-16 surrogate, in document order:
    (the field, as ``query[0]`` or ``rows[1].prompt`` (``body`` for a key of the body itself);
    what is there). None when every text and key is Unicode. An explicit stack, so a deep body
    cannot overflow Python's recursion limit."""
    stack: list[tuple[str, Any]] = [("", body)]
    while stack:
        field, value = stack.pop()
        if isinstance(value, str):
            found = _SURROGATE.search(value)
            if found:
                return field, f"holds a lone surrogate ({_escaped(found.group())} at character {found.start()})"
        elif isinstance(value, list):
            stack.extend((f"{field}[{i}]", item) for i, item in reversed(list(enumerate(value))))
        elif isinstance(value, dict):
            for key in value:
                if _SURROGATE.search(key):
                    return field or "body", f"a key holds a lone surrogate ({_escaped(key)})"
            stack.extend((f"{field}.{key}" if field else key, item) for key, item in reversed(value.items()))
    return None


def _escaped(text: str) -> str:
    return text[:40].encode("ascii", "backslashreplace").decode()


# ----------------------------------------------------------------------------- /get_reward

def parse_get_reward(body: dict, limits: ServeSettings) -> list[str]:
    """The queries of a ``/get_reward`` body (see the module docs)."""
    queries = _texts(body.get("query"), "query", limits, allow_single=False)
    for name in ("prompts", "labels"):
        value = body.get(name)
        if value is not None and not isinstance(value, list):
            raise ContractError(422, f"must be a list, got {_json_type(value)}", name)
    return queries


def get_reward_reply(scores: Sequence[float]) -> dict:
    scores = list(scores)
    return {"rewards": scores, "scores": scores, "extra_logs": {}}


# ----------------------------------------------------------------------------- /classify

@dataclass(frozen=True)
class ClassifyRequest:
    """A checked ``/classify`` body: the texts, the model named (unused: one model is served),
    the activation asked for (None: the model's default) and whether to add special tokens."""

    texts: list[str]
    model: str | None
    activation: bool | None
    add_special_tokens: bool


def parse_classify(body: dict, limits: ServeSettings) -> ClassifyRequest:
    """A ``/classify`` body (see the module docs)."""
    model = body.get("model")
    if model is not None and not isinstance(model, str):
        raise ContractError(422, f"must be a text, got {_json_type(model)}", "model")
    texts = _texts(body.get("input"), "input", limits, allow_single=True)
    activation = _optional_bool(body, "use_activation")
    legacy = _optional_bool(body, "activation")
    if activation is not None and legacy is not None and activation != legacy:
        raise ContractError(422, "contradicts use_activation; give one of them", "activation")
    add_special = _optional_bool(body, "add_special_tokens")
    return ClassifyRequest(texts, model, activation if activation is not None else legacy,
                           True if add_special is None else add_special)


def classify_reply(scores: Sequence[float], prompt_tokens: int, *, model: str, activation: bool) -> dict:
    """vLLM's classification reply for a one-label model: ``probs`` holds the score, through the
    sigmoid when ``activation``."""
    data = [{"index": i, "label": "LABEL_0", "probs": [_sigmoid(s) if activation else s], "num_classes": 1}
            for i, s in enumerate(scores)]
    return {"id": f"classify-{uuid.uuid4().hex}", "object": "list", "created": int(time.time()), "model": model,
            "data": data, "usage": {"prompt_tokens": prompt_tokens, "total_tokens": prompt_tokens,
                                    "completion_tokens": 0, "prompt_tokens_details": None}}


def _sigmoid(x: float) -> float:
    if x >= 0:
        return 1.0 / (1.0 + math.exp(-x))
    e = math.exp(x)  # no overflow for very negative x
    return e / (1.0 + e)


# ----------------------------------------------------------------------------- /v1/score

def parse_score_rows(body: dict, limits: ServeSettings) -> list[Prompt]:
    """The rows of a ``/v1/score`` body as validated prompts (a bad row: 422 naming
    ``rows[i].field``; too many responses in all, or a text too long: 413)."""
    from cheems.formats import parse_row

    rows = body.get("rows")
    if rows is None:
        raise ContractError(422, "missing: give a list of rows, each a prompt with its responses", "rows")
    if not isinstance(rows, list):
        raise ContractError(422, f"must be a list of rows, got {_json_type(rows)}", "rows")
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
                                "(--max-queries); split the rows over several requests", "rows")
        _check_row_lengths(p, i, limits.max_query_chars)
        prompts.append(p)
    return prompts


def _check_row_lengths(p: Prompt, i: int, limit: int) -> None:
    if _chars(p.prompt) > limit:
        raise ContractError(413, f"longer than {limit} characters (--max-query-chars)", f"rows[{i}].prompt")
    for j, r in enumerate(p.responses):
        if len(r.content) > limit:
            raise ContractError(413, f"longer than {limit} characters (--max-query-chars)",
                                f"rows[{i}].responses[{j}].content")


def _chars(prompt: PromptText) -> int:
    return len(prompt) if isinstance(prompt, str) else sum(len(m.get("content") or "") for m in prompt)


def score_reply(keys: Sequence[tuple[str, str]], scores: Sequence[float]) -> dict:
    return {"scores": [{"prompt_id": p, "response_id": r, "score": s} for (p, r), s in zip(keys, scores)]}


# ----------------------------------------------------------------------------- shared checks

def _texts(value: Any, name: str, limits: ServeSettings, *, allow_single: bool) -> list[str]:
    """A non-empty list of texts (or one text, where ``allow_single``), within the limits."""
    shape = "a text or a list of texts" if allow_single else "a list of texts"
    if value is None:
        raise ContractError(422, f"missing: give {shape}", name)
    if allow_single and isinstance(value, str):
        value = [value]
    if not isinstance(value, list):
        raise ContractError(422, f"must be {shape}, got {_json_type(value)}", name)
    if not value:
        raise ContractError(422, "empty: give at least one text", name)
    if len(value) > limits.max_queries:
        raise ContractError(413, f"{len(value)} texts, more than {limits.max_queries} in one request "
                            "(--max-queries); split them over several requests", name)
    for i, text in enumerate(value):
        if not isinstance(text, str):
            hint = " (token ids are not taken: send the text)" if isinstance(text, int) else ""
            raise ContractError(422, f"must be a text, got {_json_type(text)}{hint}", f"{name}[{i}]")
        if len(text) > limits.max_query_chars:
            raise ContractError(413, f"{len(text)} characters, more than {limits.max_query_chars} "
                                "(--max-query-chars)", f"{name}[{i}]")
    return value


def _optional_bool(body: dict, name: str) -> bool | None:
    value = body.get(name)
    if value is not None and not isinstance(value, bool):
        raise ContractError(422, f"must be true or false, got {_json_type(value)}", name)
    return value


def _json_type(value: Any) -> str:
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
