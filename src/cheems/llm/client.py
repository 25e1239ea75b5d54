"""OpenAI-compatible chat requests with retries: what judges and response sampling send.

:func:`ask` sends one chat completion through an ``openai.AsyncOpenAI`` client and retries
with capped exponential backoff with jitter on 429, 408, 5xx, timeouts and connection errors
(as a :class:`RetryPolicy` says); other 4xx fail at once with :class:`RequestFailed`. A 200
whose body is not a chat completion with a string ``content`` (not JSON, no ``choices``, a
``message`` that is no object, ``content`` null, a list or a number) is a
:class:`MalformedReply`: it fails at once too, or is retried like a 5xx where
``RetryPolicy.retry_malformed`` says so; its error quotes the raw body (shortened). Only a
good reply is returned, so nothing else is ever cached or used as an answer.

Replies are bounded: a body longer than ``RetryPolicy.max_reply_bytes`` (declared in a
``Content-Length`` header or counted as it arrives) fails that request at once with "reply over
N bytes", and no more than that is read from the socket. The cap sits on the HTTP client
(:func:`open_client` wraps each response's byte stream before its body is read), so it holds
for error bodies too; the decoded body is counted again as it is read, so a compressed reply
cannot grow past the cap either.

Given a :class:`~cheems.llm.cache.ReplyCache`, :func:`ask` looks the key up right before each
request, inside the concurrency gate (another run sharing the file may have answered it
meanwhile), claims it while asking, and stores the reply before giving the claim back.
:func:`run_all` runs many requests concurrently and cancels the rest when one raises. The
``openai`` package is the ``[judge]`` extra.
"""

from __future__ import annotations

import asyncio
import functools
import os
import random
import sys
from dataclasses import dataclass
from typing import Any, Callable

import orjson

from cheems.llm.cache import ReplyCache
from cheems.records import CheemsInputError
from cheems.settings import setting

__all__ = ["RETRY_STATUSES", "ChatReply", "MalformedReply", "ReplyTooLarge", "RequestFailed", "RequestSettings",
           "RetryPolicy", "ask", "cap_reply", "cached_reply", "open_client", "read_capped", "read_chat_reply",
           "require_openai", "run_all", "short_error", "shorten"]

RETRY_STATUSES = frozenset({408, 429})  # and every 5xx
CLAIM_POLL_S = (0.02, 1.0)  # first and longest wait for a key another run is asking for


@dataclass(kw_only=True)
class RetryPolicy:
    """How long to wait for a request and how to retry it; configs that send requests extend it
    (through :class:`RequestSettings`), so these settings are declared once."""

    timeout: float = setting(60.0, gt=0, help="Seconds per request before retrying")
    max_retries: int = setting(5, min=0, help="Retries on 429, 5xx and timeouts")
    backoff: float = setting(1.0, min=0, help="First retry delay in seconds; doubles each retry, with jitter")
    max_backoff: float = setting(30.0, min=0, help="Cap of one retry delay (also of a server's Retry-After)")
    retry_malformed: bool = setting(True, help="Retry a reply that is no chat completion with text content, "
                                    "as a 5xx is retried (False: it fails at once)")
    max_reply_bytes: int = setting(512 * 1024, min=1024, help="Longest reply body in bytes; a longer reply fails "
                                   "its item at once, read no further and never cached")

    def delay(self, attempt: int, jitter: random.Random, retry_after: float | None = None) -> float:
        """Seconds to wait before retry ``attempt + 1``."""
        delay = min(self.max_backoff, self.backoff * 2 ** attempt) * (0.5 + 0.5 * jitter.random())
        if retry_after is not None:
            delay = max(delay, min(retry_after, self.max_backoff))
        return delay

    def claim_ttl(self) -> float:
        """Seconds a claim on a key lasts: one attempt and the wait before the next (renewed
        by each attempt), so a claim left by a run on another host that died ends."""
        return self.timeout + self.max_backoff + 5.0


@dataclass(kw_only=True)
class RequestSettings(RetryPolicy):
    """How a config that sends requests drives them: how many at once, the reply cache, and the
    retry policy. :class:`~cheems.scoring.bench_judge.JudgeConfig` and
    :class:`~cheems.curation.sample.SampleConfig` extend it, so these settings are declared once;
    a command words the help for its own case (sampling counts requests over all its models and
    caches in ``samples.sqlite`` by default)."""

    concurrency: int = setting(16, min=1, help="Requests in flight at once")
    cache_path: str | os.PathLike | None = setting(None, help="SQLite reply cache (default under the user cache "
                                                   "folder)")


class RequestFailed(Exception):
    """A request that failed for good (after its retries, or at once for a 4xx)."""


class ReplyTooLarge(Exception):
    """A reply body longer than ``limit`` bytes (``declared``: its Content-Length, when it said)."""

    def __init__(self, limit: int, declared: int | None = None):
        self.limit, self.declared = limit, declared
        said = f" ({declared} declared)" if declared is not None else ""
        super().__init__(f"reply over {limit} bytes{said}")


class MalformedReply(Exception):
    """A 200 reply that is not a chat completion with a string ``content``; its message says
    what is wrong and quotes the raw body (shortened)."""


@dataclass
class ChatReply:
    """The text of a chat completion, its finish reason, and whether it came from the cache."""

    text: str
    finish_reason: str | None = None
    cached: bool = False


def require_openai(what: str):
    """The openai module, or one clear CheemsInputError saying ``what`` needs it."""
    try:
        import openai
    except ImportError:
        raise CheemsInputError(f"{what} needs the openai package: "
                               "pip install 'cheems[judge]' (or pip install openai)") from None
    return openai


def open_client(api_base: str, api_key: str, policy: RetryPolicy, *, what: str = "the LLM judge"):
    """An ``openai.AsyncOpenAI`` client for ``api_base`` that leaves retrying to :func:`ask` and
    reads no reply body past ``policy.max_reply_bytes`` (:func:`cap_reply` on every response)."""
    openai = require_openai(what)
    limit = policy.max_reply_bytes

    async def capped(response) -> None:
        cap_reply(response, limit)

    http = openai.DefaultAsyncHttpxClient(event_hooks={"response": [capped]})
    return openai.AsyncOpenAI(base_url=api_base, api_key=api_key, timeout=policy.timeout, max_retries=0,
                              http_client=http)


def cap_reply(response, limit: int) -> None:
    """Bound an HTTP response whose body is not read yet (an httpx ``response`` event hook):
    raise :class:`ReplyTooLarge` now when its Content-Length is over ``limit``, else wrap its
    byte stream so that reading raises it as soon as more than ``limit`` bytes arrived."""
    declared = response.headers.get("content-length", "")
    if declared.strip().isdigit() and int(declared) > limit:
        raise ReplyTooLarge(limit, int(declared))
    response.stream = _capped_stream_class(_http_package(response).AsyncByteStream)(response.stream, limit)


@functools.cache
def _capped_stream_class(base: type) -> type:
    """A byte stream (subclass of the HTTP package's ``AsyncByteStream``, which responses
    require) that passes chunks on until more than ``limit`` bytes came, then raises."""

    class CappedStream(base):
        def __init__(self, inner, limit: int):
            self.inner, self.limit = inner, limit

        async def __aiter__(self):
            seen = 0
            async for chunk in self.inner:
                seen += len(chunk)
                if seen > self.limit:
                    raise ReplyTooLarge(self.limit)
                yield chunk

        async def aclose(self) -> None:
            await self.inner.aclose()

    return CappedStream


async def read_capped(chunks, limit: int) -> bytes:
    """The bytes of an async iterator of chunks, or :class:`ReplyTooLarge` once more than
    ``limit`` came (what is left is not read)."""
    parts, seen = [], 0
    async for chunk in chunks:
        seen += len(chunk)
        if seen > limit:
            raise ReplyTooLarge(limit)
        parts.append(chunk)
    return b"".join(parts)


async def run_all(coroutines) -> None:
    """Run coroutines concurrently; when one raises (or the caller is cancelled) the rest are
    cancelled and awaited, so no request outlives the run."""
    tasks = [asyncio.create_task(c) for c in coroutines]
    try:
        await asyncio.gather(*tasks)
    finally:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


# ----------------------------------------------------------------------------- replies

JSON_TYPES = {dict: "an object", list: "a list", str: "a string", int: "a number", float: "a number",
              bool: "a boolean", type(None): "null"}


def read_chat_reply(body: bytes) -> ChatReply:
    """The reply in a chat completion's raw body: ``choices[0].message.content`` (a string)
    and ``choices[0].finish_reason`` (kept when a string). Raises :class:`MalformedReply`
    for anything else; ``content`` null (a refusal, a tool call) is malformed too, not ""."""
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError:
        problem = "not JSON"
    else:
        problem = _chat_problem(data)
    if problem is not None:
        raw = body.decode("utf-8", "replace")
        raise MalformedReply(f"not a chat completion with text ({problem}): {shorten(raw) or '(empty body)'}")
    choice = data["choices"][0]
    finish = choice.get("finish_reason")
    return ChatReply(choice["message"]["content"], finish if isinstance(finish, str) else None)


def _chat_problem(data: Any) -> str | None:
    """What keeps a parsed body from being a chat completion with text; None if nothing."""
    if not isinstance(data, dict):
        return f"the body is {_json_type(data)}"
    choices = data.get("choices")
    if not isinstance(choices, list) or not choices:
        return "no choices" if not isinstance(choices, list) else "choices is empty"
    if not isinstance(choices[0], dict):
        return "choices[0] is not an object"
    message = choices[0].get("message")
    if not isinstance(message, dict):
        return f"message is {_json_type(message)}, not an object"
    content = message.get("content")
    if not isinstance(content, str):
        return f"content is {_json_type(content)}, not a string"
    return None


def _json_type(value: Any) -> str:
    """What a parsed JSON value is, in words ("a list", "null")."""
    return JSON_TYPES.get(type(value), type(value).__name__)


def cached_reply(record: Any) -> ChatReply | None:
    """A cache record (``{"text", "finish_reason", ...}``) as a cached reply; None when it holds
    no text string (a record no run should use: ask again)."""
    if not isinstance(record, dict) or not isinstance(record.get("text"), str):
        return None
    finish = record.get("finish_reason")
    return ChatReply(record["text"], finish if isinstance(finish, str) else None, cached=True)


# ----------------------------------------------------------------------------- requests

async def ask(client, make_messages: Callable[[], list[dict]], *, model: str, sampling: dict[str, Any],
              policy: RetryPolicy, gate: asyncio.Semaphore, stats: dict, jitter: random.Random,
              cache: ReplyCache | None = None, key: str = "",
              record: Callable[[ChatReply], dict] | None = None) -> ChatReply:
    """One chat completion with retries; returns the reply or raises :class:`RequestFailed`.
    ``stats["requests"]`` counts every HTTP request sent.

    The messages are built once a slot of ``gate`` is free, so waiting requests hold no
    prompt text. With ``cache``, each attempt first looks ``key`` up in it (inside the gate:
    a reply stored meanwhile by another run comes back with ``cached=True``, no request sent)
    and claims the key; a key claimed by another live run is waited for, outside the gate.
    A good reply is stored as ``record(reply)`` before the claim is given back.
    """
    messages, failure, attempt, waits = None, "", 0, 0
    try:
        while True:
            async with gate:
                found, mine = _look_up(cache, key, policy)
                if found is not None:
                    return cached_reply(found)
                if mine:
                    messages = messages or make_messages()
                    stats["requests"] += 1
                    reply, failure, retry_after = await _send(client, messages, model, sampling, policy)
                    if reply is not None:
                        if cache is not None:
                            cache.put(key, record(reply) if record is not None else {
                                "text": reply.text, "finish_reason": reply.finish_reason})
                        return reply
            if not mine:  # another run is asking for it: look again soon
                waits += 1
                await asyncio.sleep(min(CLAIM_POLL_S[1], CLAIM_POLL_S[0] * 2 ** waits))
                continue
            if attempt == policy.max_retries:
                raise RequestFailed(f"{failure} ({attempt + 1} attempts)")
            await asyncio.sleep(policy.delay(attempt, jitter, retry_after))
            attempt += 1
    finally:
        if cache is not None:
            cache.release(key)


def _look_up(cache: ReplyCache | None, key: str, policy: RetryPolicy) -> tuple[dict | None, bool]:
    """ReplyCache.get_or_claim with records that hold a reply; (None, True) without a cache."""
    if cache is None:
        return None, True
    return cache.get_or_claim(key, policy.claim_ttl(), usable=lambda r: cached_reply(r) is not None)


async def _send(client, messages: list[dict], model: str, sampling: dict[str, Any],
                policy: RetryPolicy) -> tuple[ChatReply | None, str, float | None]:
    """One HTTP request: (reply, "", None), or (None, why, Retry-After) when it is worth
    retrying; raises RequestFailed when it is not."""
    import openai

    try:
        async with client.chat.completions.with_streaming_response.create(model=model, messages=messages,
                                                                          **sampling) as raw:
            body = await _read_body(raw, policy.max_reply_bytes)
        return read_chat_reply(body), "", None
    except ReplyTooLarge as e:  # never retried: the same endpoint would send it again
        raise RequestFailed(str(e)) from None
    except openai.APIStatusError as e:
        failure = f"HTTP {e.status_code}: {short_error(e)}"
        if e.status_code not in RETRY_STATUSES and e.status_code < 500:
            raise RequestFailed(failure) from None
        return None, failure, _retry_after(e)
    except openai.APITimeoutError:
        return None, f"timed out after {policy.timeout:g} s", None
    except openai.APIConnectionError as e:
        if isinstance(e.__cause__, ReplyTooLarge):  # SDKs that wrap what the HTTP client raised
            raise RequestFailed(str(e.__cause__)) from None
        return None, f"connection error: {short_error(e)}", None
    except MalformedReply as e:
        if not policy.retry_malformed:
            raise RequestFailed(str(e)) from None
        return None, str(e), None
    except Exception as e:  # anything else the client could not handle: not worth retrying
        raise RequestFailed(f"{type(e).__name__}: {short_error(e)}") from None


async def _read_body(raw, limit: int) -> bytes:
    """The decoded body of a streamed SDK response, at most ``limit`` bytes; the HTTP package's
    timeouts and transport errors while it arrives become the SDK's, as when the SDK reads it."""
    import openai

    http = _http_package(raw.http_response)
    try:
        return await read_capped(raw.iter_bytes(), limit)
    except http.TimeoutException as e:
        raise openai.APITimeoutError(request=raw.http_response.request) from e
    except http.TransportError as e:
        raise openai.APIConnectionError(request=raw.http_response.request) from e


def _http_package(response):
    """The module of an HTTP response: ``httpx``, or ``httpx2`` that newer openai SDKs use."""
    return sys.modules[type(response).__module__.partition(".")[0]]


def short_error(e: Exception, limit: int = 200) -> str:
    """An exception's text on one line, cut at ``limit`` characters."""
    return shorten(str(e), limit)


def shorten(text: str, limit: int = 200) -> str:
    """``text`` on one line, cut at ``limit`` characters."""
    s = " ".join(text.split())
    return s if len(s) <= limit else s[:limit] + "..."


def _retry_after(e) -> float | None:
    try:
        value = e.response.headers.get("retry-after")
        return float(value) if value is not None else None
    except (AttributeError, TypeError, ValueError):
        return None
