"""The reward server's web app: routes over a :class:`~cheems.serving.engine.ScoringEngine`.

Routes (their bodies and replies: :mod:`cheems.serving.contracts` and
:mod:`cheems.serving.inference_servers`): ``POST /get_reward`` (OpenRLHF), ``POST /classify``
(vLLM's with ``input``, as verl calls it; SGLang's with ``text``), ``POST /pooling`` (vLLM),
``POST /v1/embeddings`` (SGLang's OpenAI embeddings, as verl calls it), ``POST
/v1/score/evaluation`` (LLaMA-Factory), ``POST /v1/score`` (cheems rows, the chat template
applied here), ``GET /health`` and ``GET /metrics`` (Prometheus text format 0.0.4).

What every request goes through, in order: the drain (503 once the server is stopping, but for
``/health`` and ``/metrics``), the bearer token when the server has one (401 otherwise;
``/health`` is open to probes), the body's size (413 naming ``body``, from Content-Length before
a byte is read, or as the body streams in), the contract's checks (413 or 422 naming the field,
a lone surrogate anywhere in the body included), the engine (a text the model cannot take: 422 naming it; the queue full
or the server stopping: 503). Every error is ``{"error": {"message", "field"}}``; an error no
check foresaw is logged with its traceback and answered 500 in that shape. Each request is
counted in the metrics (route, status, seconds) and, unless turned off, logged as one line
(method, path as sent, status, seconds) on the logger ``cheems.serving.access``, never a body or
a header. A refusal (any status from 400 up) carries its reason, ``field: message`` in printable
ASCII, in the ``X-Cheems-Error`` header, and its line ends with that reason; refusals are logged
even when the access lines are turned off. A client that leaves before its request is read is
logged as 499.

Stopping (:class:`~cheems.serving.drain.Drain`): each request is counted while in flight; once
the drain has begun, ``/health`` answers 503 ``stopping`` and any other new request but
``/metrics`` 503 (``connection: close``), while the requests already in flight are answered.

The ``[serve]`` extra (FastAPI) is imported with this module: import it only to serve.

Texts are tokenized on one worker thread of the app's (a tokenizer is not safe to share between
threads), so the event loop keeps answering while a large request is encoded; the model runs on
the engine's own thread. A client that goes away mid-request costs nothing but its own work:
its scores are dropped when they come.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect

from cheems.records import CheemsInputError
from cheems.serving.contracts import (REASON_HEADER, ContractError, decode_json_bytes, error_body, get_reward_reply,
                                      parse_get_reward, parse_json_body, parse_score_rows, refusal_reason, score_reply)
from cheems.serving.drain import Drain
from cheems.serving.engine import EngineUnavailable, ScoringEngine
from cheems.serving.naming import named
from cheems.serving.inference_servers import (SGLANG, TextsRequest, embeddings_reply, parse_classify,
                                              parse_embeddings, parse_pooling, parse_score_evaluation, pooling_reply,
                                              score_evaluation_reply, sglang_classify_reply, vllm_classify_reply)
from cheems.serving.serve_metrics import PROMETHEUS_CONTENT_TYPE
from cheems.serving.settings import ServeSettings

__all__ = ["ACCESS_LOG", "OPEN_ROUTES", "PARSE_OFF_LOOP_BYTES", "ROUTES", "create_app", "log_request"]

ACCESS_LOG = logging.getLogger("cheems.serving.access")
_ERRORS = logging.getLogger("cheems.serving.errors")
ROUTES = ("/get_reward", "/classify", "/pooling", "/v1/embeddings", "/v1/score/evaluation", "/v1/score", "/health",
          "/metrics")
"""The paths the metrics count by name; any other path is counted as ``other``."""
OPEN_ROUTES = frozenset({"/health"})  # answered without the bearer token (probes)
WHILE_STOPPING = frozenset({"/health", "/metrics"})  # answered during the drain; any other path: 503
PARSE_OFF_LOOP_BYTES = 1 << 20  # a larger body is decoded and parsed off the event loop
STOPPING = "the server is stopping; send the request again once it is back, or to another server"


def create_app(engine: ScoringEngine, settings: ServeSettings, *, model_name: str, api_key: str | None = None,
               classify_activation: bool = True, drain: Drain | None = None,
               replica: tuple[int, int] | None = None) -> FastAPI:
    """The FastAPI app serving ``engine``: started with the app (lifespan) and stopped with it,
    the requests queued when the server stops answered first (failed, once ``drain`` is
    abandoned). ``model_name`` is the name in replies; ``api_key``, when given, the bearer token
    every request but ``/health`` must send; ``classify_activation`` whether ``/classify``
    applies the sigmoid when the request does not say (vLLM's default for the model: False for
    a ``regression`` model); ``drain`` what the server stopping it shares (``app.state.drain``;
    a new one when not given); ``replica``, for one of several replicas (:mod:`cheems.serving.replicas`),
    its index and process id, said by ``/health`` and ``/metrics``."""
    tokenizing = {}
    drain = drain if drain is not None else Drain()
    which = {} if replica is None else {"replica": {"index": replica[0], "pid": replica[1]}}
    if replica is not None:  # each replica's series apart: replica="i" on every sample
        engine.metrics.labels = (("replica", str(replica[0])),)

    @asynccontextmanager
    async def lifespan(app):
        tokenizing["pool"] = ThreadPoolExecutor(max_workers=1, thread_name_prefix="cheems-tokenize")
        await engine.start()
        try:
            yield
        finally:
            await engine.stop(drain=not drain.abandoned)
            tokenizing.pop("pool").shutdown(wait=False)

    async def off_loop(fn, *args, **kwargs):
        return await asyncio.get_running_loop().run_in_executor(tokenizing["pool"], lambda: fn(*args, **kwargs))

    app = FastAPI(title="cheems serve", lifespan=lifespan, docs_url=None, redoc_url=None, openapi_url=None)
    app.state.drain = drain

    _add_scoring_routes(app, engine, settings, off_loop, model_name=model_name,
                        classify_activation=classify_activation)

    @app.get("/health")
    async def health():
        if drain.stopping or not engine.running:
            return JSONResponse({"status": "stopping", "model": model_name, **which}, status_code=503,
                                headers={REASON_HEADER: "the server is stopping"})
        return {"status": "ok", "model": model_name, **which}

    @app.get("/metrics")
    async def metrics():
        text = engine.metrics.prometheus_text()
        if replica is not None:  # which replica answered: its counts are its own
            text += ("# HELP cheems_serve_replica The replica that answered, by index and process id\n"
                     "# TYPE cheems_serve_replica gauge\n"
                     f'cheems_serve_replica{{index="{replica[0]}",pid="{replica[1]}"}} 1\n')
        return Response(text, media_type=PROMETHEUS_CONTENT_TYPE)

    _add_error_replies(app)
    app.add_middleware(_Boundary, metrics=engine.metrics, drain=drain, api_key=api_key,
                       log_requests=settings.log_requests)
    return app


def _add_scoring_routes(app: FastAPI, engine: ScoringEngine, settings: ServeSettings, off_loop, *, model_name: str,
                        classify_activation: bool) -> None:
    """The POST routes: each reads its body, checks it with its contract, scores its texts on
    the engine (tokenized by ``off_loop``, the app's worker thread) and replies in its shape."""
    async def read(request: Request) -> dict:
        return await _json(request, settings, off_loop)

    async def scored(asked: TextsRequest) -> tuple[list[float], list[int]]:
        """The scores of a checked request's texts, and each text's token count."""
        seqs = await off_loop(engine.encode_texts, asked.texts, field=asked.field,
                              add_special_tokens=asked.add_special_tokens, max_tokens=asked.max_tokens)
        return await engine.score(seqs), [len(s) for s in seqs]

    def activated(asked: TextsRequest) -> bool:
        return classify_activation if asked.activation is None else asked.activation

    @app.post("/get_reward")
    async def get_reward(request: Request):
        queries = parse_get_reward(await read(request), settings)
        scores, _ = await scored(TextsRequest(queries, "query", add_special_tokens=False))
        return JSONResponse(get_reward_reply(scores))

    @app.post("/classify")
    async def classify(request: Request):
        server, asked = parse_classify(await read(request), settings)
        scores, lengths = await scored(asked)
        if server == SGLANG:
            return JSONResponse(sglang_classify_reply(scores, lengths, single=asked.single))
        return JSONResponse(vllm_classify_reply(scores, sum(lengths), model=model_name, activation=activated(asked)))

    @app.post("/pooling")
    async def pooling(request: Request):
        asked = parse_pooling(await read(request), settings)
        scores, lengths = await scored(asked)
        return JSONResponse(pooling_reply(scores, sum(lengths), model=model_name, activation=activated(asked)))

    @app.post("/v1/embeddings")
    async def embeddings(request: Request):
        asked = parse_embeddings(await read(request), settings)
        scores, lengths = await scored(asked)
        return JSONResponse(embeddings_reply(scores, sum(lengths), model=model_name))

    @app.post("/v1/score/evaluation")
    async def score_evaluation(request: Request):
        asked = parse_score_evaluation(await read(request), settings)
        scores, _ = await scored(asked)
        return JSONResponse(score_evaluation_reply(scores, model=asked.model or model_name))

    @app.post("/v1/score")
    async def score(request: Request):
        prompts = parse_score_rows(await read(request), settings)
        seqs, prompt_of, keys = await off_loop(engine.encode_rows, prompts, field="rows")
        return JSONResponse(score_reply(keys, await engine.score(seqs, prompt_of)))


def _add_error_replies(app: FastAPI) -> None:
    """Every refusal as ``{"error": {"message", "field"}}`` with its status and reason header."""
    @app.exception_handler(ContractError)
    async def contract(request, e: ContractError):
        return _refusal(e.status, e.message, e.field)

    @app.exception_handler(CheemsInputError)
    async def unscorable(request, e: CheemsInputError):  # the engine: empty or too long for the model
        return _refusal(422, e.message, e.field)

    @app.exception_handler(EngineUnavailable)
    async def unavailable(request, e: EngineUnavailable):
        return _refusal(503, e.message, headers={"retry-after": "1"})

    @app.exception_handler(HTTPException)
    async def http(request, e: HTTPException):  # 404 unknown path, 405 wrong method
        if e.status_code == 404:
            return _refusal(404, "no such route; the routes are POST " + ", POST ".join(ROUTES[:-2]) + ", GET "
                            + " and GET ".join(ROUTES[-2:]), "path")
        if e.status_code == 405:
            return _refusal(405, f"{request.method} is not taken here (allowed: {(e.headers or {}).get('Allow')})",
                            "method", e.headers)
        return _refusal(e.status_code, str(e.detail), headers=e.headers)


def _refusal(status: int, message: str, field: str | None = None, headers: dict | None = None) -> JSONResponse:
    return JSONResponse(error_body(message, field), status_code=status,
                        headers={**(headers or {}), REASON_HEADER: refusal_reason(message, field)})


async def _json(request, settings: ServeSettings, off_loop) -> dict:
    """The body as a JSON object, refused past ``max_body_bytes`` (the declared length first,
    then as it streams in, for a body sent without one). Memory: the chunks are copied into one
    buffer as they come, decoded to text once, the buffer let go, then parsed; a body over
    ``PARSE_OFF_LOOP_BYTES`` is decoded and parsed on the worker thread, so the event loop keeps
    answering meanwhile."""
    limit = settings.max_body_bytes
    too_large = ContractError(413, f"larger than {limit} bytes ({named('max_body_bytes')})", "body")
    declared = request.headers.get("content-length")
    if declared is not None and (not declared.isdigit() or int(declared) > limit):
        raise too_large
    body = bytearray()  # grown as the bytes come (a large block grows in place), never sized ahead of them
    async for chunk in request.stream():
        if len(body) + len(chunk) > limit:
            raise too_large
        body += chunk
    if len(body) <= PARSE_OFF_LOOP_BYTES:
        return parse_json_body(body)
    holder = [body]
    del body  # the worker thread lets go of the bytes once they are text
    return await off_loop(_parse_owned, holder)


def _parse_owned(holder: list) -> dict:
    """Parse the one body in ``holder``, letting go of its bytes once they are text."""
    text = decode_json_bytes(holder.pop())
    return parse_json_body(text)


class _Boundary:
    """ASGI middleware around the app: the drain's count and refusals, the bearer check, one
    access line and one metrics count per request, and a last-resort 500 in the error shape for
    an error nothing else caught."""

    def __init__(self, app, metrics, drain: Drain, *, api_key: str | None, log_requests: bool):
        self.app = app
        self.metrics = metrics
        self.drain = drain
        self.expected = None if api_key is None else f"Bearer {api_key}".encode()
        self.log_requests = log_requests

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        started = time.perf_counter()
        sent = {"status": None, "reason": None}

        async def watched(message):
            if message["type"] == "http.response.start":
                sent["status"] = message["status"]
                sent["reason"] = next((v.decode("latin-1") for k, v in message.get("headers", ())
                                       if k.lower() == _REASON_KEY), None)
            await send(message)

        self.metrics.set_in_flight(self.drain.enter())
        try:
            await self._answer(scope, receive, watched)
        except ClientDisconnect:  # the connection closed while the body was read: no one to answer
            sent["reason"] = _gone(self.drain)
        except asyncio.CancelledError:
            if not self.drain.abandoned:
                raise
            sent["reason"] = _gone(self.drain)  # the server stopped at once: nothing to report but the line
        except Exception:
            if sent["status"] is not None:
                raise
            _ERRORS.exception("unhandled error in %s %s", scope.get("method"), _path(scope))
            await _reply(watched, 500, "internal error (logged on the server)")
        finally:
            self.metrics.set_in_flight(self.drain.leave())
            self._record(scope, sent["status"] or 499, sent["reason"], time.perf_counter() - started)

    async def _answer(self, scope, receive, send) -> None:
        path = scope["path"]
        if self.drain.stopping and path not in WHILE_STOPPING:
            await _reply(send, 503, STOPPING, headers=[(b"retry-after", b"1"), (b"connection", b"close")])
        elif self.expected is not None and path not in OPEN_ROUTES and not self._authorized(scope):
            await _reply(send, 401, "missing or wrong bearer token: send 'Authorization: Bearer TOKEN'",
                         "authorization", [(b"www-authenticate", b"Bearer")])
        else:
            await self.app(scope, receive, send)

    def _authorized(self, scope) -> bool:
        given = next((v for k, v in scope.get("headers", ()) if k == b"authorization"), b"")
        return hmac.compare_digest(given, self.expected)

    def _record(self, scope, status: int, reason: str | None, seconds: float) -> None:
        path = scope.get("path", "")
        self.metrics.observe_request(path if path in ROUTES else "other", status, seconds)
        if self.log_requests or status >= 400:
            log_request(scope.get("method"), _path(scope), status, seconds, reason if status >= 400 else None)


_REASON_KEY = REASON_HEADER.encode()


def log_request(method: str | None, path: str, status: int, seconds: float, reason: str | None = None) -> None:
    """One line on the access log: ``POST /get_reward 422 0.003s query[0]: must be a text, ...``
    (the reason, for a refusal, as its ``X-Cheems-Error`` header says it)."""
    ACCESS_LOG.info("%s %s %s %.3fs%s", method or "-", path, status, seconds, f" {reason}" if reason else "")


def _gone(drain: Drain) -> str:
    if drain.abandoned:
        return f"the server stopped at once before answering ({named('shutdown_timeout_s')}, or Ctrl+C twice)"
    return "the client closed the connection before its request was read"


async def _reply(send, status: int, message: str, field: str | None = None, headers: list | None = None) -> None:
    data = json.dumps(error_body(message, field)).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(data)).encode()),
                            (_REASON_KEY, refusal_reason(message, field).encode()), *(headers or [])]})
    await send({"type": "http.response.body", "body": data})


def _path(scope) -> str:
    """The path as sent (still percent-encoded, so no decoded text can break a log line)."""
    raw = scope.get("raw_path") or scope.get("path", "").encode("utf-8", "backslashreplace")
    return raw.decode("ascii", "backslashreplace")
