"""The routes `cheems serve` shares with other inference servers, so that a client written for
one of them calls cheems unchanged: vLLM's ``/classify`` and ``/pooling``, SGLang's ``/classify``
and ``/v1/embeddings``, LLaMA-Factory's ``/v1/score/evaluation``. Each body is checked into a
:class:`TextsRequest` (the shared checks of :mod:`cheems.serving.contracts`: 413 for too many or
too long, 422 naming the field for the wrong shape) and each reply built in the other server's
shape. What each field means, with its source, is in docs/serving.md. Whatever the route, each
text's reward is read where the model's training read it (the engine places each sequence's end:
:mod:`cheems.models.reward_position`), so one conversation scores the same on every route.

``POST /classify`` is two contracts on one path, told apart by the body: ``input`` is vLLM's,
``text`` SGLang's native one (both at once: 422).

- vLLM (``ClassificationCompletionRequest``, ``vllm/entrypoints/pooling/classify/protocol.py``;
  its fields in ``pooling/base/protocol.py``): ``model``, ``input`` (a text or a list; token ids
  refused), ``add_special_tokens`` (default **true**), ``use_activation`` (``activation``
  before vLLM 0.11.2; default: the sigmoid for a one-label model, the identity for a
  ``regression`` one), ``truncate_prompt_tokens`` (cut each text to that many tokens, on the
  server's ``--truncation`` side; -1: the model's max length). Reply ``{"id": "classify-…",
  "object": "list", "created", "model", "data": [{"index", "label", "probs": [score],
  "num_classes": 1}], "usage": {...}}``. verl's reward loop posts ``{"model", "input": text,
  "use_activation": false}`` (``"activation": false`` up to v0.7.0) and reads
  ``data[-1].probs[-1]``.
- SGLang (``EmbeddingReqInput``, ``python/sglang/srt/managers/io_struct.py``; the route in
  ``entrypoints/http_server.py``): ``text`` (a text or a list), ``model`` accepted. Texts are
  tokenized with the special tokens added (SGLang encodes with the tokenizer's default) and the
  score is raw (SGLang's reward models pool the last token with no activation). Reply: for a
  list, ``[{"embedding": [score], "meta_info": {"id", "prompt_tokens"}}, ...]``; for one
  text, that one object. The Skywork-Reward-V2 README's client posts ``{"model", "text": [...]}``
  (the template's BOS text stripped) and reads ``embedding[0]`` of each.

``POST /pooling`` — vLLM's ``PoolingCompletionRequest`` (``pooling/pooling/protocol.py``):
``input``, ``model``, ``add_special_tokens``, ``use_activation`` / ``activation`` and
``truncate_prompt_tokens`` as for ``/classify``; ``task`` null or ``"classify"`` (the pooling task
of a sequence-classification model; others 422); ``encoding_format`` ``"float"`` (others 422);
``dimensions`` null. The chat form (``messages``) is refused: send the rendered text, or rows
to ``/v1/score``. Reply ``{"id": "pool-…", "object": "list", "created", "model", "data":
[{"index", "object": "pooling", "data": [score]}], "usage": {...}}``.

``POST /v1/embeddings`` — SGLang's OpenAI-compatible embeddings, as verl's reward loop calls it
when its reward model runs on SGLang: ``{"model", "input": text or [text, ...]}`` (special tokens
added, raw score); reply ``{"object": "list", "data": [{"object": "embedding", "embedding":
[score], "index"}], "model", "usage": {...}}``; verl reads ``data[-1].embedding[-1]``.

``POST /v1/score/evaluation`` — LLaMA-Factory's API (``ScoreEvaluationRequest`` and
``ScoreEvaluationResponse``, ``src/llamafactory/api/protocol.py``): ``{"model": text, "messages":
[text, ...], "max_length": int?}``, each text tokenized as given with no special tokens added
(``hf_engine._get_scores``) and, with ``max_length``, cut to that many tokens (on the server's
``--truncation`` side). Reply ``{"id": "scoreval-…", "object": "score.evaluation", "model",
"scores": [...]}``, raw scores. LLaMA-Factory's own PPO trainer (``reward_model_type: api``)
posts ``{"model": "model", "messages": [...]}`` with ``requests`` and reads ``scores``.
"""

from __future__ import annotations

import math
import time
import uuid
from dataclasses import dataclass
from typing import Sequence

from cheems.serving.contracts import (ContractError, checked_texts, json_type, optional_bool, optional_text)
from cheems.serving.settings import ServeSettings

__all__ = ["SGLANG", "VLLM", "TextsRequest", "embeddings_reply", "parse_classify", "parse_embeddings",
           "parse_pooling", "parse_score_evaluation", "pooling_reply", "score_evaluation_reply",
           "sglang_classify_reply", "sigmoid", "vllm_classify_reply"]

VLLM, SGLANG = "vllm", "sglang"


@dataclass(frozen=True)
class TextsRequest:
    """A checked body: the texts and the field they came in (for errors), the model named (echoed
    where a reply names it), the activation asked for (None: the model's default), whether
    special tokens are added, the most tokens a text keeps (None: the server's ``--max-length``
    and ``--truncate`` decide), and whether one text came rather than a list."""

    texts: list[str]
    field: str
    model: str | None = None
    activation: bool | None = None
    add_special_tokens: bool = True
    max_tokens: int | None = None
    single: bool = False


# ----------------------------------------------------------------------------- vLLM and SGLang: /classify

def parse_classify(body: dict, limits: ServeSettings) -> tuple[str, TextsRequest]:
    """A ``/classify`` body: (:data:`VLLM` or :data:`SGLANG`, what it asks)."""
    if "text" in body and "input" in body:
        raise ContractError(422, "give one of input (vLLM's /classify) or text (SGLang's), not both", "text")
    if "text" in body:
        return SGLANG, _sglang_texts(body, "text", limits)
    if "input" not in body:
        raise ContractError(422, "missing: give a text or a list of texts as input (vLLM) or text (SGLang)",
                            "input")
    return VLLM, _vllm_texts(body, limits)


def _vllm_texts(body: dict, limits: ServeSettings) -> TextsRequest:
    """The fields vLLM's ``/classify`` and ``/pooling`` share."""
    model = optional_text(body, "model")
    value = body.get("input")
    texts = checked_texts(value, "input", limits, allow_single=True)
    activation = optional_bool(body, "use_activation")
    legacy = optional_bool(body, "activation")
    if activation is not None and legacy is not None and activation != legacy:
        raise ContractError(422, "contradicts use_activation; give one of them", "activation")
    add_special = optional_bool(body, "add_special_tokens")
    return TextsRequest(texts, "input", model, activation if activation is not None else legacy,
                        True if add_special is None else add_special, _truncate_prompt_tokens(body),
                        isinstance(value, str))


def _truncate_prompt_tokens(body: dict) -> int | None:
    """vLLM's ``truncate_prompt_tokens``: k > 0 cuts a text to k tokens, -1 to the model's max
    length (a number past any max length here: the engine cuts to the smaller), null leaves it."""
    value = body.get("truncate_prompt_tokens")
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value == 0 or value < -1:
        raise ContractError(422, f"must be a positive whole number or -1, got {json_type(value)} {value!r}"[:200],
                            "truncate_prompt_tokens")
    return 1 << 62 if value == -1 else value


def _sglang_texts(body: dict, name: str, limits: ServeSettings) -> TextsRequest:
    """SGLang's ``text`` (``/classify``) or ``input`` (``/v1/embeddings``): special tokens added."""
    if body.get("input_ids") is not None:
        raise ContractError(422, "token ids are not taken: send the text", "input_ids")
    value = body.get(name)
    texts = checked_texts(value, name, limits, allow_single=True)
    return TextsRequest(texts, name, optional_text(body, "model"), single=isinstance(value, str))


def vllm_classify_reply(scores: Sequence[float], prompt_tokens: int, *, model: str, activation: bool) -> dict:
    """vLLM's classification reply for a one-label model: ``probs`` holds the score, through the
    sigmoid when ``activation``."""
    data = [{"index": i, "label": "LABEL_0", "probs": [sigmoid(s) if activation else s], "num_classes": 1}
            for i, s in enumerate(scores)]
    return {"id": f"classify-{uuid.uuid4().hex}", "object": "list", "created": int(time.time()), "model": model,
            "data": data, "usage": _usage(prompt_tokens)}


def sglang_classify_reply(scores: Sequence[float], lengths: Sequence[int], *, single: bool) -> list | dict:
    """SGLang's reply: one ``{"embedding": [score], "meta_info"}`` per text, a list (one object
    when one text was sent)."""
    items = [{"embedding": [s], "meta_info": {"id": uuid.uuid4().hex, "prompt_tokens": n}}
             for s, n in zip(scores, lengths)]
    return items[0] if single else items


# ----------------------------------------------------------------------------- vLLM: /pooling

def parse_pooling(body: dict, limits: ServeSettings) -> TextsRequest:
    """A vLLM ``/pooling`` body (see the module docs)."""
    if body.get("messages") is not None:
        raise ContractError(422, "the chat form is not taken: send the rendered conversation as input, or "
                            "rows to /v1/score (the server applies the chat template)", "messages")
    task = body.get("task")
    if task not in (None, "classify"):
        raise ContractError(422, f"{task!r} is not served: a sequence-classification reward model pools "
                            "with the task classify (or null)"[:200], "task")
    if body.get("encoding_format", "float") != "float":
        raise ContractError(422, "only \"float\" is served", "encoding_format")
    if body.get("dimensions") is not None:
        raise ContractError(422, "not taken by a reward model: leave it out", "dimensions")
    if "input" not in body:
        raise ContractError(422, "missing: give a text or a list of texts", "input")
    return _vllm_texts(body, limits)


def pooling_reply(scores: Sequence[float], prompt_tokens: int, *, model: str, activation: bool) -> dict:
    """vLLM's pooling reply for the classify task of a one-label model."""
    data = [{"index": i, "object": "pooling", "data": [sigmoid(s) if activation else s]}
            for i, s in enumerate(scores)]
    return {"id": f"pool-{uuid.uuid4().hex}", "object": "list", "created": int(time.time()), "model": model,
            "data": data, "usage": _usage(prompt_tokens)}


# ----------------------------------------------------------------------------- SGLang: /v1/embeddings

def parse_embeddings(body: dict, limits: ServeSettings) -> TextsRequest:
    """An OpenAI embeddings body as SGLang takes it for a reward model (see the module docs)."""
    return _sglang_texts(body, "input", limits)


def embeddings_reply(scores: Sequence[float], prompt_tokens: int, *, model: str) -> dict:
    data = [{"object": "embedding", "embedding": [s], "index": i} for i, s in enumerate(scores)]
    return {"object": "list", "data": data, "model": model, "usage": _usage(prompt_tokens)}


# ----------------------------------------------------------------------------- LLaMA-Factory: /v1/score/evaluation

def parse_score_evaluation(body: dict, limits: ServeSettings) -> TextsRequest:
    """A LLaMA-Factory ``/v1/score/evaluation`` body (see the module docs)."""
    model = optional_text(body, "model")
    texts = checked_texts(body.get("messages"), "messages", limits, allow_single=False)
    max_length = body.get("max_length")
    if max_length is not None and (isinstance(max_length, bool) or not isinstance(max_length, int)
                                   or max_length < 1):
        raise ContractError(422, f"must be a positive whole number, got {json_type(max_length)}", "max_length")
    return TextsRequest(texts, "messages", model, add_special_tokens=False, max_tokens=max_length)


def score_evaluation_reply(scores: Sequence[float], *, model: str) -> dict:
    return {"id": f"scoreval-{uuid.uuid4().hex}", "object": "score.evaluation", "model": model,
            "scores": list(scores)}


# ----------------------------------------------------------------------------- shared

def _usage(prompt_tokens: int) -> dict:
    return {"prompt_tokens": prompt_tokens, "total_tokens": prompt_tokens, "completion_tokens": 0,
            "prompt_tokens_details": None}


def sigmoid(x: float) -> float:
    """The logistic function, without overflow for large negative ``x``."""
    if x >= 0:
        return 1.0 / (1.0 + math.exp(-x))
    e = math.exp(x)
    return e / (1.0 + e)
