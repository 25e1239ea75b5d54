"""Scoring rows with a running ``cheems serve``: the reward model stays loaded in the server and
this client posts the rows to its ``/v1/score`` route.

:class:`RemoteScorer` takes the place of a loaded model wherever cheems scores rows
(:func:`cheems.scoring.run.score_with_model`, so ``cheems bon --server URL`` and ``cheems curate
resolve --server URL``): it sends the rows as they are (prompt text or chat messages, the
responses' ids and contents), the server applies the chat template as ``cheems score`` does, so
the scores are the ones ``--model`` gives.

Rows go in requests of at most ``batch_rows`` rows, ``max_responses`` responses and
``max_body_bytes`` bytes (a row with more responses is split across requests; the server scores
each response alone, so splitting changes no score). A request that cannot connect, times out,
or finds the server busy (502/503/504) is retried with exponential backoff; any other failure
is one :class:`~cheems.records.CheemsInputError` line naming the server and, where the server
said, its message and field. The standard library only (urllib): no extra to install.
"""

from __future__ import annotations

import http.client
import math
import socket
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from typing import Callable, Iterator, Sequence

import orjson

from cheems.common_settings import ServerToken
from cheems.records import CheemsInputError, Prompt, Setting
from cheems.scoring.scorer import ScorerDefaults
from cheems.settings import check_settings, setting

__all__ = ["RemoteScorer", "RemoteScorerSettings", "base_url", "request_chunks"]

RETRY_STATUS = (502, 503, 504)
"""Statuses that mean "not now" (a proxy in front, a full queue, a server draining): retried."""


@dataclass(frozen=True)
class RemoteScorerSettings(ServerToken):
    """How to reach a running ``cheems serve`` instead of loading the model here; its token file
    ``api_key_file`` is :class:`~cheems.common_settings.ServerToken`' (keyword-only), as the server's."""

    server: str | None = setting(None, pattern=r"https?://[^\s/]+(/\S*)?", pattern_text="http://HOST:PORT",
                                 default_text="none: load the model here",
                                 help="URL of a running `cheems serve` whose model scores the responses, "
                                      "instead of loading the model here")
    server_timeout_s: float = setting(300.0, gt=0, help="Seconds one request to the server may take before "
                                      "it is retried")
    server_batch_rows: int = setting(32, min=1, help="Prompt rows sent to the server in one request")

    def __post_init__(self) -> None:
        check_settings(self)


def base_url(url: str) -> str:
    """``url`` without a trailing slash or route: ``http://h:8000/v1/score/`` -> ``http://h:8000``."""
    text = url.strip().rstrip("/")
    for route in ("/v1/score", "/get_reward", "/classify", "/health"):
        if text.endswith(route):
            text = text[: -len(route)]
    parts = urllib.parse.urlsplit(text)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise CheemsInputError(f"not a server URL: {url!r} (give http://HOST:PORT)", field=Setting("server"))
    return text


def _row(p: Prompt, responses) -> dict:
    return {"id": p.id, "prompt": p.prompt, "responses": [{"id": r.id, "content": r.content} for r in responses]}


def request_chunks(prompts: Sequence[Prompt], *, done: set | None = None, max_rows: int = 32,
                   max_responses: int = 256, max_body_bytes: int = 8 << 20) -> Iterator[list[dict]]:
    """The ``rows`` of successive ``/v1/score`` requests for every response of ``prompts`` not in
    ``done`` (pairs ``(prompt id, response id)``): at most ``max_rows`` rows, ``max_responses``
    responses and about ``max_body_bytes`` bytes of JSON each. A row too big for one request is
    split into rows of fewer responses (its id repeated); a single response over the byte limit
    still goes, alone, for the server to refuse by name. O(total text) time."""
    done = done or set()
    chunk: list[dict] = []
    n_responses = n_bytes = 0
    for p in prompts:
        todo = [r for r in p.responses if (p.id, r.id) not in done]
        while todo:
            take, size = _fit(p, todo, max_responses, max_body_bytes)
            if chunk and (len(chunk) >= max_rows or n_responses + take > max_responses
                          or n_bytes + size > max_body_bytes):
                yield chunk
                chunk, n_responses, n_bytes = [], 0, 0
            chunk.append(_row(p, todo[:take]))
            n_responses, n_bytes, todo = n_responses + take, n_bytes + size, todo[take:]
    if chunk:
        yield chunk


def _fit(p: Prompt, todo: list, max_responses: int, max_body_bytes: int) -> tuple[int, int]:
    """(how many of ``todo`` fit in one request as one row, that row's JSON size): halves until
    the row is under the byte limit, one response at least."""
    take = min(len(todo), max_responses)
    size = len(orjson.dumps(_row(p, todo[:take])))
    while take > 1 and size > max_body_bytes:
        take = (take + 1) // 2
        size = len(orjson.dumps(_row(p, todo[:take])))
    return take, size


class RemoteScorer(ScorerDefaults):
    """A reward model served by ``cheems serve`` at ``url``, scoring rows as a loaded model does
    (a :class:`~cheems.scoring.scorer.RewardScorer`: what the server loaded, its layout, limits,
    token budget and counts, are its own business, so those attributes say "not known here").

    ``api_key``: the server's bearer token; ``timeout``: seconds per request; ``batch_rows``:
    rows per request; ``retries``: tries after the first one for a request that cannot connect,
    times out or finds the server busy, waiting ``backoff`` seconds, then twice that, ...
    """

    def __init__(self, url: str, *, api_key: str | None = None, timeout: float = 300.0, batch_rows: int = 32,
                 retries: int = 3, backoff: float = 0.5, max_responses: int = 256,
                 max_body_bytes: int = 8 << 20):
        self.url = base_url(url)
        self.api_key = api_key
        self.timeout, self.batch_rows, self.retries, self.backoff = timeout, batch_rows, retries, backoff
        self.max_responses, self.max_body_bytes = max_responses, max_body_bytes
        self._health: dict | None = None

    def __repr__(self) -> str:
        return f"RemoteScorer({self.url!r})"

    # ------------------------------------------------------------------ HTTP

    def request(self, method: str, route: str, body: dict | None = None) -> dict:
        """The JSON object the server answers to ``method route`` (with ``body`` as JSON),
        retrying what :data:`RETRY_STATUS` and broken connections ask to retry."""
        data = None if body is None else orjson.dumps(body)
        headers = {"accept": "application/json"}
        if data is not None:
            headers["content-type"] = "application/json"
        if self.api_key:
            headers["authorization"] = f"Bearer {self.api_key}"
        attempt = 0
        while True:
            req = urllib.request.Request(self.url + route, data=data, method=method, headers=headers)
            try:
                with urllib.request.urlopen(req, timeout=self.timeout) as reply:
                    return self._json(route, reply.read())
            except urllib.error.HTTPError as e:
                if e.code not in RETRY_STATUS or attempt >= self.retries:
                    raise self._refused(route, e.code, e.read()) from None
                why = f"HTTP {e.code}"
            except (urllib.error.URLError, http.client.HTTPException, ConnectionError, socket.timeout,
                    TimeoutError) as e:
                why = _reason(e)
                if attempt >= self.retries:
                    tries = f"{attempt + 1} time{'s' if attempt else ''}"
                    raise CheemsInputError(f"cannot reach the reward server at {self.url}: {why} (tried {tries})",
                                           field=Setting("server")) from None
            time.sleep(min(self.backoff * 2 ** attempt, 30.0))
            attempt += 1

    def _json(self, route: str, raw: bytes) -> dict:
        try:
            value = orjson.loads(raw)
        except orjson.JSONDecodeError:
            value = None
        if not isinstance(value, dict):
            raise CheemsInputError(f"the server at {self.url} answered {route} with no JSON object: "
                                   f"{raw[:80]!r}; is it `cheems serve`?", field=Setting("server"))
        return value

    def _refused(self, route: str, status: int, raw: bytes) -> CheemsInputError:
        """One line for an error reply: the server's own message and field where it gave them."""
        try:
            error = orjson.loads(raw).get("error")
        except (orjson.JSONDecodeError, AttributeError):
            error = None
        said = raw[:200].decode("utf-8", "replace").strip() or "no message"
        if isinstance(error, dict) and isinstance(error.get("message"), str):
            said = error["message"] + (f" (field {error['field']})" if error.get("field") else "")
        hint, remedy = "", None
        if status == 401 and not self.api_key:
            remedy = ("api_key_file", "give its token with {}")
        elif status == 401:
            hint = "; is the token right?"
        elif status == 404:
            hint = "; is it `cheems serve`?"
        return CheemsInputError(f"the reward server at {self.url} refused {route} with HTTP {status}: "
                                f"{' '.join(said.split())}{hint}", field=Setting("server"), remedy=remedy)

    # ------------------------------------------------------------------ scoring

    def health(self) -> dict:
        """The server's ``/health`` reply (asked once, then kept)."""
        if self._health is None:
            self._health = self.request("GET", "/health")
        return self._health

    @property
    def name(self) -> str:
        """The served model's name as the server gives it, else the server's host and port."""
        model = self.health().get("model")
        return model if isinstance(model, str) and model else urllib.parse.urlsplit(self.url).netloc

    def meta(self) -> dict:
        """What a scores file of this server depends on: its URL, its model's name and any
        fingerprint ``/health`` gives (so a rerun against other weights is refused)."""
        h = self.health()
        return {"server": self.url, "model": self.name,
                **{k: v for k, v in sorted(h.items()) if k.endswith("fingerprint") and isinstance(v, str)}}

    def score_prompts(self, prompts: Sequence[Prompt], *, batch_size: int | None = None, done: set | None = None,
                      progress: Callable[[int, int], None] | None = None) -> Iterator[list[tuple[str, str, float]]]:
        """Score every response of ``prompts`` not in ``done``, yielding (prompt id, response id,
        score) per request as :func:`cheems.scoring.batching.score_prompts` yields them per
        batch; ``progress(done_responses, total)`` after each request. ``batch_size`` does not
        apply: the server forms its own forward batches (``batch_rows`` rows go in a request)."""
        done = done or set()
        total = sum((p.id, r.id) not in done for p in prompts for r in p.responses)
        finished = 0
        if progress:
            progress(0, total)
        for rows in request_chunks(prompts, done=done, max_rows=self.batch_rows, max_responses=self.max_responses,
                                   max_body_bytes=self.max_body_bytes):
            scored = self._read_scores(rows, self.request("POST", "/v1/score", {"rows": rows}))
            yield scored
            finished += len(scored)
            if progress:
                progress(finished, total)

    def scores(self, prompts: Sequence[Prompt], *, progress: Callable[[int, int], None] | None = None) -> dict:
        """Every response's score, keyed ``(prompt id, response id)``."""
        return {(p, r): s for batch in self.score_prompts(prompts, progress=progress) for p, r, s in batch}

    def _read_scores(self, rows: list[dict], reply: dict) -> list[tuple[str, str, float]]:
        """The reply's scores for exactly the responses asked, in the order asked."""
        got = {}
        items = reply.get("scores")
        for item in items if isinstance(items, list) else ():
            if isinstance(item, dict):
                got[(item.get("prompt_id"), item.get("response_id"))] = item.get("score")
        out = []
        for row in rows:
            for r in row["responses"]:
                score = got.get((row["id"], r["id"]))
                if isinstance(score, bool) or not isinstance(score, (int, float)) or not math.isfinite(score):
                    raise CheemsInputError(f"the reward server at {self.url} gave no score for response {r['id']!r} "
                                           f"of prompt {row['id']!r} (got {score!r})", field=Setting("server"))
                out.append((row["id"], r["id"], float(score)))
        return out


def _reason(e: BaseException) -> str:
    """A short reason for a failed connection: "connection refused", "timed out", ..."""
    inner = getattr(e, "reason", e)
    if isinstance(inner, ConnectionRefusedError):
        return "connection refused"
    if isinstance(inner, (socket.timeout, TimeoutError)):
        return "timed out"
    if isinstance(inner, socket.gaierror):
        return "unknown host"
    text = str(inner) or type(inner).__name__
    return " ".join(text.split())[:200]
