"""Sample k responses per prompt from several models (paper §4.1).

Each prompt is sent to every configured model ``n`` times; the answers become the prompt's
responses, in config order of the models and then sample order, whatever order they arrive
in. A model is an OpenAI-compatible endpoint (``api_base``) or a local model run through
vLLM (``vllm``, GPU only, the ``[vllm]`` extra).

Requests. One request per (prompt, model, sample index k): messages are the model's
``system`` message (if any) and the prompt as one user message; a prompt given as chat
messages is sent as those messages, with the model's ``system`` message put first only when
the prompt has no system message of its own. Sampling parameters are the model's
``temperature``, ``top_p`` and ``max_tokens`` and ``seed = config.seed + k``, sent with the
request (OpenAI-compatible servers such as vLLM honour it), so sample k of a prompt is
reproducible where the server is.

Response ids. ``f"{name}-{k}"``: the model's config name and the sample index, e.g.
``qwen-7b-0``, ``qwen-7b-1``. Model names are unique within a config and k has no ``-``, so
the ids of one prompt are unique. Each response records ``model = name`` and
``extra = {"finish_reason": ..., "sample": k}``; ``finish_reason == "length"`` (cut off by
``max_tokens``) is what the ``truncated`` filter rule reads.

Cache and resume. Every answer is stored in a SQLite :class:`~cheems.llm.cache.ReplyCache`
(default ``samples.sqlite`` beside the judge cache) the moment it arrives, under the sha256
of: ``kind="sample"``, the endpoint (``api_base`` without a trailing ``/``, or ``"vllm"``),
the model at the endpoint (``model``, or the vLLM model path), the exact messages,
``temperature``, ``top_p``, ``max_tokens``, the sample index ``k`` and ``config.seed``. A
rerun (after a crash, Ctrl-C or ``kill -9``) looks every key up first and asks only for what
is missing, so no finished request is ever repeated and the output is byte-identical to an
uninterrupted run's. The model's config ``name`` is not part of the key: two config entries
that make the very same request share its answer. Identical requests (the same key, e.g. two
prompt rows with the same text) are sent once. Each key is looked up again right before its
request (:func:`cheems.llm.client.ask`), so runs sharing a cache file ask for each answer
once between them; such hits count as cached.

Failures. Requests go through :func:`cheems.llm.client.ask`: 429, 408, 5xx, timeouts and
connection errors are retried with capped exponential backoff, other 4xx fail at once. A
reply that is no chat completion with a string ``content`` (``content`` null, a list or a
number, no ``choices``, not JSON...; see :func:`cheems.llm.client.read_chat_reply`) is a
failed request too, with the raw reply (shortened) in its error: it fails at once, or is
retried where ``retry_malformed`` says so; it never becomes a response, and neither does a
local model's answer that is not a string. An answer of no text at all (``""``) is kept in
the cache (the same request gives it again) but never becomes a response either: it is a
failed sample, :data:`EMPTY_REPLY`. A request that failed for good is not fatal and
is not cached (a rerun asks again); it is listed in its row's ``extra["failed_samples"]`` as
``{"model", "sample", "error"}``. A prompt whose every request failed gets no output row (a
row without responses is not a valid prompt row) and goes to ``SampleResult.failed`` as
``{"id", "reason", "failed_samples"}``. Always ``len(prompts) + len(failed) == prompts in``,
and for each model ``requested == succeeded + failed`` (:meth:`SampleResult.report`).

Local models. The missing requests of a vLLM model are generated in chunks of
:data:`LOCAL_CHUNK` conversations, one vLLM ``SamplingParams`` per conversation (its own
``seed = config.seed + k``, the model's temperature, top_p and max_tokens), so sample k is
the same request as through an endpoint; each chunk is cached before the next starts. Local
models run first, one after another, before any endpoint request; when one is configured
and vllm is not installed, the run stops before sending anything. vLLM may keep some GPU
memory of a model after it is done: give a run one local model where memory is tight.

Prompt text is data only: it goes into the JSON body of a request and into the cache key,
never into a template or a command line.
"""

from __future__ import annotations

import asyncio
import importlib.util
import os
import random
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

from cheems.formats import category_field, iter_rows, prompt_field, row_id, subset_field
from cheems.io import read_yaml_mapping
from cheems.llm.cache import ReplyCache, default_cache_path
from cheems.llm.client import (ChatReply, RequestFailed, RequestSettings, ask, cached_reply, open_client,
                               require_openai, run_all, shorten)
from cheems.records import CheemsInputError, Prompt, PromptText, Response, check_prompt_text
from cheems.settings import check_settings, setting, settings_from_mapping

__all__ = ["DROPPED_KEYS", "EMPTY_REPLY", "LOCAL_CHUNK", "LocalGenerate", "PromptRow", "SampleConfig", "SampleModel",
           "SampleResult", "check_sample_prompt", "default_sample_cache_path", "parse_prompt_row",
           "read_prompt_rows", "sample_responses", "sample_responses_async", "vllm_generate"]

SAMPLE_CACHE_NAME = "samples.sqlite"
LOCAL_CHUNK = 2048
"""Conversations handed to a local model at once; each chunk is cached before the next."""

DROPPED_KEYS = frozenset({"id", "prompt", "input", "responses", "rank", "comparisons", "annotations",
                          "triples", "category", "subset", "chosen", "rejected", "answer1", "answer2",
                          "preference", "failed_samples"})
"""Keys of a prompt file row that are not carried to the output: the prompt's own fields and
everything about responses it may already have."""

LocalGenerate = Callable[[list[list[dict]], list[dict]], list[tuple[str, str | None]]]
"""``generate(conversations, sampling) -> [(text, finish_reason)]``: a local model answering
each conversation once with its own sampling parameters (temperature, top_p, max_tokens, seed)."""


def default_sample_cache_path() -> Path:
    """``samples.sqlite`` in the folder of :func:`cheems.llm.cache.default_cache_path`."""
    return default_cache_path().with_name(SAMPLE_CACHE_NAME)


# ----------------------------------------------------------------------------- prompts

@dataclass(slots=True)
class PromptRow:
    """A prompt to sample for: a prompt row without responses (``Prompt`` needs some)."""

    id: str
    prompt: PromptText
    category: list[str] = field(default_factory=list)
    subset: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)  # other keys of the row, kept as they are


def check_sample_prompt(prompt: Any) -> None:
    """Raise CheemsInputError unless ``prompt`` is non-empty text or a chat ending in a user turn."""
    check_prompt_text(prompt)
    if isinstance(prompt, list) and prompt[-1]["role"] != "user":
        raise CheemsInputError("the last message must be from 'user': it is what the models answer",
                               field=f"prompt[{len(prompt) - 1}].role")


def parse_prompt_row(obj: Any) -> PromptRow:
    """One row of a prompt file: ``prompt`` (or ``input``), optional ``id``, ``category``,
    ``subset``; responses and judgements about them are ignored, other keys kept."""
    if not isinstance(obj, dict):
        raise CheemsInputError(f"row must be a JSON object, got {type(obj).__name__}")
    prompt = prompt_field(obj, "prompt", "input")
    check_sample_prompt(prompt)
    extra = {k: v for k, v in obj.items() if k not in DROPPED_KEYS}
    return PromptRow(row_id(obj, prompt), prompt, category_field(obj), subset_field(obj), extra)


def read_prompt_rows(path: str | os.PathLike) -> list[PromptRow]:
    """Read the prompts of a JSONL / JSON-list / Parquet file to sample responses for.

    Any file of prompt rows works, including benchmark and annotation files (their responses
    are ignored). A bad row raises CheemsInputError naming file, line and field; a prompt id
    used twice is an error naming both lines. A row without ``id`` gets
    :func:`cheems.records.prompt_id` of its prompt.
    """
    name = str(path)
    rows: list[PromptRow] = []
    first: dict[str, int] = {}
    for lineno, obj in iter_rows(path):
        try:
            row = parse_prompt_row(obj)
        except CheemsInputError as e:
            raise e.located(file=name, line=lineno) from None
        seen = first.setdefault(row.id, lineno)
        if seen != lineno:
            raise CheemsInputError(f"prompt id {row.id!r} is used twice (lines {seen} and {lineno})",
                                   file=name, line=lineno, field="id")
        rows.append(row)
    return rows


# ----------------------------------------------------------------------------- config

@dataclass
class SampleModel:
    """One model to sample from; the fields are the keys of a ``models:`` entry."""

    name: str = setting(nonempty=True, help="Recorded as each response's model; part of its id")
    api_base: str | None = setting(None, help="OpenAI-compatible endpoint, e.g. http://localhost:8000/v1")
    vllm: str | None = setting(None, help="Or: a local model path run through vLLM (GPU, the [vllm] extra)")
    model: str | None = setting(None, help="The model name at the endpoint (default: name)")
    api_key_env: str | None = setting(None, help="Environment variable holding the key (default $OPENAI_API_KEY, "
                                      "else EMPTY)")
    n: int = setting(1, min=1, max=256, help="Responses per prompt from this model")
    temperature: float = setting(0.8, min=0, help="Sampling temperature")
    top_p: float = setting(0.95, gt=0, max=1, help="Nucleus sampling share")
    max_tokens: int = setting(2048, min=1, max=131072, help="Longest response in tokens")
    system: str | None = setting(None, help="A system message put before each prompt")

    def __post_init__(self) -> None:
        check_settings(self)
        if not self.api_base and not self.vllm:
            raise CheemsInputError("give api_base (an OpenAI-compatible endpoint) or vllm (a local model path)",
                                   field="api_base")
        if self.api_base and self.vllm:
            raise CheemsInputError("give api_base or vllm, not both", field="vllm")
        if self.model is None:
            self.model = self.name

    @property
    def endpoint(self) -> str:
        """Where requests go, as the cache key names it: the api_base, or ``"vllm"``."""
        return self.api_base.rstrip("/") if self.api_base else "vllm"

    @property
    def served_model(self) -> str:
        """The model as the cache key names it: ``model`` at the endpoint, or the vLLM path."""
        return self.model if self.api_base else self.vllm

    def sampling(self, k: int, seed: int) -> dict:
        """Sampling parameters of sample ``k`` (sent with the request)."""
        return {"temperature": self.temperature, "top_p": self.top_p, "max_tokens": self.max_tokens,
                "seed": seed + k}

    def messages(self, prompt: PromptText) -> list[dict]:
        """The chat messages of one request for ``prompt`` (a fresh list)."""
        if isinstance(prompt, str):
            turns = [{"role": "user", "content": prompt}]
        else:
            turns = [{"role": m["role"], "content": m["content"]} for m in prompt]
        if self.system is not None and turns[0]["role"] != "system":
            turns.insert(0, {"role": "system", "content": self.system})
        return turns


@dataclass
class SampleConfig(RequestSettings):
    """Which models to sample from and how to drive the requests; the keys of a ``sample:``
    section of a YAML file (how requests are driven, ``concurrency`` over all models, the reply
    cache ``cache_path`` and the retries, are :class:`~cheems.llm.client.RequestSettings`'; the
    cache is ``samples.sqlite`` beside the judge cache by default)."""

    models: list[SampleModel] = setting(help="The models to sample from")
    timeout: float = setting(120.0, gt=0, kw_only=True, help="Seconds per request before retrying")
    seed: int = setting(0, min=0, help="Base sampling seed: sample k is requested with seed + k")

    def __post_init__(self) -> None:
        if not isinstance(self.models, list) or not self.models:
            raise CheemsInputError("give at least one model", field="models")
        for i, m in enumerate(self.models):
            if not isinstance(m, SampleModel):
                raise CheemsInputError(f"must be a SampleModel, got {type(m).__name__}", field=f"models[{i}]")
        check_settings(self)
        names: dict[str, int] = {}
        for i, m in enumerate(self.models):
            j = names.setdefault(m.name, i)
            if j != i:
                raise CheemsInputError(f"model name {m.name!r} is used twice (models[{j}] and models[{i}]); "
                                       "names make the response ids", field=f"models[{i}].name")

    @classmethod
    def from_mapping(cls, data: Any, *, file: str | os.PathLike | None = None) -> "SampleConfig":
        """A config from a mapping: its ``sample`` section if it has one (other sections are
        other stages'), else the mapping itself. Unknown keys and bad values raise
        CheemsInputError naming the field, e.g. ``sample.models[1].n``."""
        file = str(file) if file is not None else None
        if not isinstance(data, dict):
            raise CheemsInputError("a config is a mapping of setting: value", file=file)
        prefix = ""
        if "sample" in data:
            data, prefix = data["sample"], "sample."
            if not isinstance(data, dict):
                raise CheemsInputError("must be a mapping of setting: value", file=file, field="sample")
        raw = data.get("models")
        if not isinstance(raw, list) or not raw:
            raise CheemsInputError("give a list of models, each with a name and api_base or vllm",
                                   file=file, field=f"{prefix}models")
        return settings_from_mapping(cls, data, file=file, prefix=prefix)

    @classmethod
    def from_yaml(cls, path: str | os.PathLike) -> "SampleConfig":
        """A config from a YAML file (needs pyyaml): see :meth:`from_mapping`."""
        data = read_yaml_mapping(path, what="a sampling config")
        return cls.from_mapping(data, file=path)


# ----------------------------------------------------------------------------- result

@dataclass
class SampleResult:
    """Prompt rows with their sampled responses, the prompts that got none, and counts."""

    prompts: list[Prompt]
    failed: list[dict]  # {"id", "reason", "failed_samples"} per prompt without any response
    n_input: int
    requests: dict[str, int]  # run-wide counts, see report()
    models: dict[str, dict[str, int]]  # per model name

    def rows(self) -> Iterator[dict]:
        """The output rows (each a valid prompt row with at least one response)."""
        for p in self.prompts:
            yield p.to_dict()

    def report(self) -> dict:
        """Counts of the run.

        ``prompts``: ``in`` = ``out`` + ``failed``. ``requests`` (one per prompt, model and
        sample index): ``total`` = ``succeeded`` + ``failed``; ``cached`` answered from the
        cache; ``unique`` distinct requests (identical ones are asked once); ``sent`` HTTP
        requests this run, retries included; ``generated`` answers of local models this run;
        ``truncated`` answers cut off by max_tokens. ``models``: the same per model name,
        ``requested`` = ``succeeded`` + ``failed``. ``responses_per_prompt``: mean over
        output rows (None without any).
        """
        n_out = len(self.prompts)
        return {
            "prompts": {"in": self.n_input, "out": n_out, "failed": len(self.failed)},
            "requests": dict(self.requests),
            "models": {name: dict(counts) for name, counts in self.models.items()},
            "responses_per_prompt": (sum(len(p.responses) for p in self.prompts) / n_out) if n_out else None,
        }


# ----------------------------------------------------------------------------- sampling

Progress = Callable[[int, int], None]


@dataclass(slots=True)
class _Outcome:
    text: str | None = None
    finish_reason: str | None = None
    error: str | None = None
    cached: bool = False


def sample_responses(prompts: Sequence[PromptRow | Prompt], config: SampleConfig,
                     progress: Progress | None = None, *,
                     generators: dict[str, LocalGenerate] | None = None) -> SampleResult:
    """Sample every model's ``n`` responses to every prompt; see the module docstring.

    Blocking wrapper of :func:`sample_responses_async` (which to use inside a running event loop).
    """
    return asyncio.run(sample_responses_async(prompts, config, progress, generators=generators))


async def sample_responses_async(prompts: Sequence[PromptRow | Prompt], config: SampleConfig,
                                 progress: Progress | None = None, *,
                                 generators: dict[str, LocalGenerate] | None = None) -> SampleResult:
    """Sample (cache first, then local models, then endpoints) and assemble the rows.

    ``prompts`` are :class:`PromptRow` (or :class:`~cheems.records.Prompt`, whose responses
    are ignored), with unique ids. ``progress(done, total)`` counts requests (prompt x model x
    sample) as they finish, cached ones first. ``generators`` maps the name of a ``vllm``
    model to a :data:`LocalGenerate` used instead of loading the model (any local model).
    O(requests) besides the model time; one task per missing request, ``concurrency`` in
    flight.
    """
    prompts, generators, models = list(prompts), dict(generators or {}), config.models
    _check_prompts(prompts)
    _check_local_models(models, generators)
    api_keys = {mi: _api_key(m, mi) for mi, m in enumerate(models) if m.api_base}
    if api_keys:
        require_openai("sampling from an endpoint")
    settings = [[m.sampling(k, config.seed) for k in range(m.n)] for m in models]
    plan, by_key = _plan_requests(prompts, models, config.seed)
    total = sum(len(row) for row in plan)
    done = 0
    outcomes: dict[str, _Outcome] = {}
    sent = [{"requests": 0} for _ in models]  # HTTP requests per model, counted by ask
    generated = [0 for _ in models]

    def finish(key: str) -> None:
        nonlocal done
        done += len(by_key[key])
        if progress is not None:
            progress(done, total)

    def messages_for(key: str) -> list[dict]:
        i, mi, _ = by_key[key][0]
        return models[mi].messages(prompts[i].prompt)

    cache = ReplyCache(config.cache_path if config.cache_path is not None else default_sample_cache_path())
    try:
        missing: list[list[str]] = [[] for _ in models]  # per model, in plan order
        for key, users in by_key.items():
            reply = cached_reply(cache.get(key))
            if reply is None:
                missing[users[0][1]].append(key)
                continue
            outcomes[key] = _Outcome(reply.text, reply.finish_reason, cached=True)
            finish(key)
        for mi, m in enumerate(models):
            if m.vllm is not None and missing[mi]:
                generate = generators.get(m.name) or vllm_generate(m.vllm)
                generated[mi] = _generate_local(missing[mi], generate, messages_for, by_key, models, settings,
                                                cache, outcomes, finish)
                del generate
        keys = [key for mi, m in enumerate(models) if m.api_base for key in missing[mi]]
        if keys:
            await _request_all(sorted(keys, key=lambda key: by_key[key][0]), by_key, models, api_keys,
                               settings, messages_for, config, cache, outcomes, sent, finish)
    finally:
        cache.close()
    return _assemble(prompts, plan, models, outcomes, by_key, sent, generated)


def _plan_requests(prompts: list, models: list[SampleModel],
                   seed: int) -> tuple[list[list[tuple[int, int, str]]], dict[str, list[tuple[int, int, int]]]]:
    """The plan: per prompt, per model (config order), per k, ``(model index, k, cache key)``;
    and per key, every ``(prompt index, model index, k)`` making that very request."""
    plan: list[list[tuple[int, int, str]]] = []
    by_key: dict[str, list[tuple[int, int, int]]] = {}
    for i, p in enumerate(prompts):
        row = []
        for mi, m in enumerate(models):
            messages = m.messages(p.prompt)
            for k in range(m.n):
                key = ReplyCache.key(kind="sample", endpoint=m.endpoint, model=m.served_model, messages=messages,
                                     temperature=m.temperature, top_p=m.top_p, max_tokens=m.max_tokens,
                                     sample=k, seed=seed)
                row.append((mi, k, key))
                by_key.setdefault(key, []).append((i, mi, k))
        plan.append(row)
    return plan, by_key


def _check_local_models(models: list[SampleModel], generators: dict[str, LocalGenerate]) -> None:
    """Stop before sending anything when a vLLM model has no generator and vllm is missing."""
    for mi, m in enumerate(models):
        if m.vllm is not None and m.name not in generators and importlib.util.find_spec("vllm") is None:
            raise CheemsInputError(f"model {m.name!r} runs through vLLM, which is not installed: "
                                   "install cheems[vllm] on a GPU machine (pip install 'cheems[vllm]')",
                                   field=f"models[{mi}].vllm")


def _check_prompts(prompts: list) -> None:
    first: dict[str, int] = {}
    for i, p in enumerate(prompts):
        try:
            check_sample_prompt(p.prompt)
        except CheemsInputError as e:
            raise CheemsInputError(f"prompt {p.id!r}: {e.message}", field=f"prompts[{i}].{e.field}",
                                   remedy=e.remedy) from None
        j = first.setdefault(p.id, i)
        if j != i:
            raise CheemsInputError(f"prompt id {p.id!r} is used twice (prompts[{j}] and prompts[{i}])",
                                   field=f"prompts[{i}].id")


def _api_key(m: SampleModel, mi: int) -> str:
    if m.api_key_env is None:
        return os.environ.get("OPENAI_API_KEY") or "EMPTY"
    key = os.environ.get(m.api_key_env)
    if not key:
        raise CheemsInputError(f"environment variable {m.api_key_env} (the API key of model {m.name!r}) "
                               "is not set", field=f"models[{mi}].api_key_env")
    return key


def _record(reply: ChatReply, model: str, k: int) -> dict:
    """What the cache keeps of one answer."""
    return {"text": reply.text, "finish_reason": reply.finish_reason, "model": model, "sample": k,
            "time": time.time()}


def _generate_local(keys: list[str], generate: LocalGenerate, messages_for: Callable[[str], list[dict]],
                    by_key: dict, models: list[SampleModel], settings: list[list[dict]], cache: ReplyCache,
                    outcomes: dict[str, _Outcome], finish: Callable[[str], None]) -> int:
    """Answer ``keys`` with a local model, LOCAL_CHUNK at a time, caching each chunk."""
    for start in range(0, len(keys), LOCAL_CHUNK):
        chunk = keys[start:start + LOCAL_CHUNK]
        owners = [by_key[key][0] for key in chunk]  # (prompt, model, k)
        answers = generate([messages_for(key) for key in chunk],
                           [settings[mi][k] for _, mi, k in owners])
        if len(answers) != len(chunk):
            raise RuntimeError(f"the local model answered {len(answers)} of {len(chunk)} conversations")
        for key, (_, mi, k), (text, finish_reason) in zip(chunk, owners, answers):
            if isinstance(text, str):
                reply = ChatReply(text, finish_reason if isinstance(finish_reason, str) else None)
                cache.put(key, _record(reply, models[mi].model, k))  # committed at once
                outcomes[key] = _Outcome(reply.text, reply.finish_reason)
            else:
                outcomes[key] = _Outcome(error=f"the local model returned no text: {shorten(repr(text))}")
            finish(key)
    return len(keys)


def vllm_generate(path: str) -> LocalGenerate:
    """Load a local chat model with vLLM (:func:`cheems.scoring.vllm_backend.load_vllm_chat`)
    and answer conversations with one ``SamplingParams`` each (temperature, top_p,
    max_tokens, seed); GPU only."""
    from cheems.scoring.vllm_backend import load_vllm_chat

    chat = load_vllm_chat(path)
    from vllm import SamplingParams

    def generate(conversations: list[list[dict]], sampling: list[dict]) -> list[tuple[str, str | None]]:
        params = [SamplingParams(**s) for s in sampling]
        outputs = chat.llm.chat(list(conversations), params, use_tqdm=False)
        return [(o.outputs[0].text, o.outputs[0].finish_reason) for o in outputs]

    return generate


async def _request_all(keys: list[str], by_key: dict, models: list[SampleModel], api_keys: dict[int, str],
                       settings: list[list[dict]], messages_for: Callable[[str], list[dict]],
                       config: SampleConfig, cache: ReplyCache, outcomes: dict[str, _Outcome],
                       sent: list[dict], finish: Callable[[str], None]) -> None:
    """Ask the endpoints for every key (at most ``concurrency`` at once over all models),
    caching each answer as it arrives; each key is looked up in the cache again right before
    its request, and such hits count as cached."""
    clients = {mi: open_client(models[mi].api_base, key, config, what="sampling from an endpoint")
               for mi, key in api_keys.items()}
    gate = asyncio.Semaphore(config.concurrency)
    jitter = random.Random()  # delays only; results do not depend on it

    async def one(key: str) -> None:
        _, mi, k = by_key[key][0]
        try:
            reply = await ask(clients[mi], lambda: messages_for(key), model=models[mi].model,
                              sampling=settings[mi][k], policy=config, gate=gate, stats=sent[mi], jitter=jitter,
                              cache=cache, key=key, record=lambda r: _record(r, models[mi].model, k))
        except RequestFailed as e:
            outcomes[key] = _Outcome(error=str(e))
        else:
            outcomes[key] = _Outcome(reply.text, reply.finish_reason, cached=reply.cached)
        finish(key)

    try:
        await run_all(one(key) for key in keys)
    finally:
        for client in clients.values():
            await client.close()


EMPTY_REPLY = "the reply is empty (no text): not a response"
"""The failure recorded for an answer of no text at all (blank text is the ``empty`` filter rule's)."""


def _assemble(prompts: list, plan: list[list[tuple[int, int, str]]], models: list[SampleModel],
              outcomes: dict[str, _Outcome], by_key: dict, sent: list[dict], generated: list[int]) -> SampleResult:
    counts = [{"requested": 0, "succeeded": 0, "failed": 0, "cached": 0, "sent": sent[mi]["requests"],
               "generated": generated[mi], "truncated": 0} for mi in range(len(models))]
    out: list[Prompt] = []
    failed: list[dict] = []
    for p, row in zip(prompts, plan):
        responses: list[Response] = []
        failures: list[dict] = []
        for mi, k, key in row:
            m, o, c = models[mi], outcomes[key], counts[mi]
            c["requested"] += 1
            error = o.error if o.error is not None or o.text != "" else EMPTY_REPLY
            if error is not None:
                c["failed"] += 1
                failures.append({"model": m.name, "sample": k, "error": error})
                continue
            c["succeeded"] += 1
            c["cached"] += o.cached
            c["truncated"] += o.finish_reason == "length"
            responses.append(Response(f"{m.name}-{k}", o.text, m.name,
                                      {"finish_reason": o.finish_reason, "sample": k}))
        if not responses:
            failed.append({"id": p.id, "reason": f"all {len(row)} requests failed", "failed_samples": failures})
            continue
        extra = {k: v for k, v in p.extra.items() if k not in DROPPED_KEYS}
        if failures:
            extra["failed_samples"] = failures
        out.append(Prompt(p.id, p.prompt, responses, category=list(p.category), subset=p.subset, extra=extra))
    requests = {name: sum(c[name] for c in counts)
                for name in ("succeeded", "failed", "cached", "sent", "generated", "truncated")}
    requests = {"total": sum(len(row) for row in plan), "unique": len(by_key), **requests}
    return SampleResult(out, failed, len(prompts), requests,
                        {m.name: counts[mi] for mi, m in enumerate(models)})
