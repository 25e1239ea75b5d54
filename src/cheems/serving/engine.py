"""The scoring engine of ``cheems serve``: a queue of requests, gathered into shared forward batches.

Requests arrive as already-encoded token sequences (:meth:`ScoringEngine.encode_texts` for
texts a client rendered, :meth:`ScoringEngine.encode_rows` for cheems rows through the chat
template, as ``cheems score`` encodes them), both ending where the model's reward is read
(``rm.position``, :mod:`cheems.models.reward_position`): a text ending at the end-of-turn token,
after it, or with its turn left open scores as the row does. :meth:`ScoringEngine.score` queues a request's
sequences and waits; one background task (asyncio) gathers the queue: once a sequence waits,
it waits up to ``max_wait_ms`` for company (less when the queue already fills a batch), then
takes sequences in arrival order up to ``max_batch`` sequences and ``token_budget`` tokens and
scores them with :func:`cheems.scoring.batching.scored_batches` (packed rows or padded
batches, as the model was loaded) in one worker thread, so the event loop keeps accepting
requests while the model runs. Requests that arrive meanwhile form the next batch.

Memory: a queued sequence is a 32-bit array of its token ids (4 bytes a token), turned into a
list only for the forward batch that takes it, so what waits is bounded by ``max_queue``
sequences of at most the model's max length, at 4 bytes a token; texts are tokenized
``ENCODE_CHUNK`` at a time, so the tokenizer's own per-token records exist for one chunk only.

Batch invariance: a sequence's score does not depend on its batch. In a packed row each
sequence attends to its own positions only; a padded batch reads each row's last real token.
A prefix is shared only between sequences of one request with the same ``prompt_of`` (the
responses of one prompt, as ``cheems score`` shares them); sequences of different requests
never share a group, and sharing is exact (the cascade of :mod:`cheems.models.packing`).

The standard library only at import: torch runs inside the model's methods.
"""

from __future__ import annotations

import asyncio
import itertools
import sys
import threading
import time
from array import array
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Sequence

from cheems.models.memory_budget import is_out_of_memory
from cheems.records import CheemsInputError, Prompt, prompt_key
from cheems.serving.naming import named
from cheems.serving.serve_metrics import ServeMetrics
from cheems.settings import check_settings, setting

__all__ = ["ENCODE_CHUNK", "TOKEN_TYPECODE", "EngineSettings", "EngineStoppedError", "EngineUnavailable",
           "QueueFullError", "ScoringEngine"]

ENCODE_CHUNK = 256
"""Texts tokenized at a time by :meth:`ScoringEngine.encode_texts`."""
TOKEN_TYPECODE = "i"
"""A queued sequence's token ids: a 32-bit :class:`array.array` (4 bytes a token, where a
list of Python ints costs about 36), turned into a list only for its forward batch."""


@dataclass(frozen=True)
class EngineSettings:
    """How the server queues and batches requests; checked when built."""

    max_wait_ms: float = setting(5.0, min=0, help="Milliseconds the first queued request waits for others to "
                                 "join its forward batch (0: run at once)")
    max_batch: int = setting(64, min=1, help="Most sequences in one forward batch (1: no dynamic batching)")
    token_budget: int | str | None = setting(None, min=1, words=("auto",), default_text="1024 on CPU, 16384 on CUDA",
                                             help="Most tokens in one forward batch (packed row, or padded); auto: "
                                             "the largest batch that fits the GPU, probed as the model loads")
    max_queue: int = setting(32768, min=1, help="Most sequences waiting to be scored (twice --max-queries: "
                             "two whole rollout batches); a request beyond it is refused (503, queue full)")
    truncate: bool = setting(False, help="Cut sequences longer than the model's --max-length (the side "
                             "--truncation names) instead of refusing the request")

    def __post_init__(self) -> None:
        check_settings(self)


class EngineUnavailable(RuntimeError):
    """The engine cannot take the request now (the HTTP layer answers 503)."""

    def __init__(self, message: str):
        self.message = message
        super().__init__(message)


class QueueFullError(EngineUnavailable):
    """More sequences wait than ``max_queue`` allows."""


class EngineStoppedError(EngineUnavailable):
    """The engine is not running, or is shutting down."""


@dataclass(eq=False)
class _Request:
    """One call of :meth:`ScoringEngine.score`: its sequences, their share groups (unique to
    the request), the future its caller awaits, and how far it got."""

    seqs: list[array]  # token ids, TOKEN_TYPECODE
    groups: list[tuple[int, int]]  # (request serial, prompt index): never equal across requests
    future: asyncio.Future
    arrived: float  # loop time
    scores: list[float] = field(default_factory=list)
    taken: int = 0  # sequences handed to a batch so far (they are taken in order)
    left: int = 0  # sequences not scored yet

    def __post_init__(self) -> None:
        self.scores = [0.0] * len(self.seqs)
        self.left = len(self.seqs)


class ScoringEngine:
    """A loaded reward model behind a request queue with dynamic batching (see the module docs).

    ``rm`` is what :func:`cheems.scoring.run.load_scorer` returns (transformers or vLLM), a
    :class:`~cheems.scoring.scorer.SequenceScorer` with ``tokenizer``, ``truncation`` and
    ``position``. A batch takes at most ``settings.token_budget`` tokens when that is a number,
    else the budget ``rm`` resolved as it loaded (``auto`` is probed then: load the model with
    it, as :func:`cheems.serving.server.build_reward_app` does). Use it inside a running event
    loop: ``await start()`` (or ``async with engine``), ``await score(...)``, ``await stop()``.
    """

    def __init__(self, rm, settings: EngineSettings | None = None, metrics: ServeMetrics | None = None):
        self.rm = rm
        self.settings = settings or EngineSettings()
        self.metrics = metrics or ServeMetrics()
        asked = self.settings.token_budget
        self.token_budget = asked if isinstance(asked, int) else rm.token_budget
        if self.token_budget is None:
            raise CheemsInputError("this model has no default token budget; give one", field="token_budget")
        self._queue: deque[_Request] = deque()
        self._waiting = 0  # sequences queued, not yet taken
        self._waiting_tokens = 0
        self._serial = itertools.count()
        self._arrived: asyncio.Event | None = None
        self._task: asyncio.Task | None = None
        self._executor: ThreadPoolExecutor | None = None
        self._closing = False
        self._tokenizer_lock = threading.Lock()  # encoding may run on several threads at once

    # ------------------------------------------------------------------ encoding
    def encode_texts(self, texts: Sequence[str], *, field: str, add_special_tokens: bool = False,
                     max_tokens: int | None = None) -> list[array]:
        """Token ids of ``texts`` (a chat template already applied by the client), no special
        tokens added unless ``add_special_tokens``, then placed by the model's reward position
        (``rm.position.sequence``: the start's BOS once, the end at the token the reward is read
        at, whatever the client left after it or left out). A text of no tokens (or of nothing
        but padding, BOS, EOS and an end-of-turn token), or
        over the model's ``max_length`` (unless the ``truncate`` setting cuts it on the
        ``truncation`` side), is refused with a :class:`CheemsInputError` naming ``field[i]``;
        ``max_tokens`` (the client's own limit) cuts a longer text to that many tokens on the
        ``truncation`` side whatever the setting. The texts are tokenized ``ENCODE_CHUNK`` at a
        time (the tokenizer's per-token records live for one chunk) and kept as 32-bit arrays.
        Both encoders may be called from any thread (the tokenizer is used by one at a time)."""
        encoded: list[array] = []
        place = self.rm.position.sequence
        for start in range(0, len(texts), ENCODE_CHUNK):
            with self._tokenizer_lock:
                ids = self.rm.tokenizer(list(texts[start:start + ENCODE_CHUNK]),
                                        add_special_tokens=add_special_tokens)["input_ids"]
            encoded.extend(self._within_length(place(s), f"{field}[{start + i}]", max_tokens)
                           for i, s in enumerate(ids))
        return encoded

    def encode_rows(self, prompts: Sequence[Prompt], *, field: str = "rows"
                    ) -> tuple[list[list[int]], list[int], list[tuple[str, str]]]:
        """Every response of ``prompts`` as a conversation through the chat template, encoded
        exactly as ``cheems score`` encodes it (:func:`cheems.models.sequences.encode_conversations`,
        what ``rm.encode_many`` runs). Returns (sequences, the prompt index of each: equal for
        equal prompts, so their responses share a prefix, the (prompt id, response id) of each).
        A conversation over ``max_length`` is refused naming ``field[i].responses[j]``, or cut
        with the ``truncate`` setting (as ``cheems score`` cuts it)."""
        from cheems.models.sequences import EncodeStats, encode_conversations

        items, where, prompt_of, keys = [], [], [], []
        index: dict = {}
        for r, p in enumerate(prompts):
            for j, response in enumerate(p.responses):
                items.append((p.prompt, response.content))
                where.append(f"{field}[{r}].responses[{j}]")
                prompt_of.append(index.setdefault(prompt_key(p.prompt), len(index)))
                keys.append((p.id, response.id))
        # uncut here, so an over-long conversation is seen; cut below as encode_many cuts it
        with self._tokenizer_lock:
            encoded = encode_conversations(self.rm.tokenizer, items, max_length=sys.maxsize,
                                           truncation=self.rm.truncation, stats=EncodeStats(),
                                           reward_position=self.rm.position)
        return [self._within_length(s, w) for s, w in zip(encoded, where)], prompt_of, keys

    def _within_length(self, ids: Sequence[int], where: str, max_tokens: int | None = None) -> array:
        """``ids`` as a 32-bit array, refused when empty or too long, or cut when the settings (or
        the client's ``max_tokens``) say so."""
        limit = self.rm.max_length
        if not ids:
            raise CheemsInputError("no tokens: nothing to read a reward at (an empty text, or one of padding, BOS, "
                                   "EOS and end-of-turn tokens only)", field=where)
        if max_tokens is not None and len(ids) > min(max_tokens, limit):
            limit = min(max_tokens, limit)
        elif len(ids) <= limit:
            return array(TOKEN_TYPECODE, ids)
        elif not self.settings.truncate:
            raise CheemsInputError(f"{len(ids)} tokens, more than the model's max length {limit}; shorten it, "
                                   f"or start the server with {named('truncate')}", field=where)
        self.metrics.count_truncated(1)
        return array(TOKEN_TYPECODE, ids[-limit:] if self.rm.truncation == "left" else ids[:limit])

    # ------------------------------------------------------------------ lifecycle
    async def start(self) -> None:
        """Start the batching task (in the running event loop) and the model's worker thread."""
        if self._task is not None:
            return
        self._closing = False
        self._arrived = asyncio.Event()
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="cheems-score")
        self._task = asyncio.get_running_loop().create_task(self._gather_loop(), name="cheems-score-batches")

    async def stop(self, drain: bool = True) -> None:
        """Refuse new requests; with ``drain`` score everything queued first, else fail what
        waits with :class:`EngineStoppedError` (the batch already running finishes either way)."""
        if self._task is None:
            return
        self._closing = True
        if not drain:
            self._fail_waiting(EngineStoppedError("the server is shutting down"))
        self._arrived.set()
        try:
            await self._task
        finally:
            self._task = None
            executor, self._executor = self._executor, None
            executor.shutdown(wait=False)

    async def __aenter__(self) -> "ScoringEngine":
        await self.start()
        return self

    async def __aexit__(self, *exc) -> None:
        await self.stop(drain=True)

    @property
    def running(self) -> bool:
        """Whether requests are accepted."""
        return self._task is not None and not self._closing

    @property
    def queue_depth(self) -> int:
        """Sequences waiting for a batch."""
        return self._waiting

    # ------------------------------------------------------------------ requests
    async def score(self, seqs: Sequence[Sequence[int]], prompt_of: Sequence[int] | None = None) -> list[float]:
        """The scores of ``seqs`` (token ids), in order, scored in batches with whatever else is
        queued. Sequences with equal ``prompt_of`` may share their common prefix (None: each
        alone). Raises :class:`QueueFullError` or :class:`EngineStoppedError` when the request
        cannot be queued, :class:`CheemsInputError` for sequences the model cannot take. A
        caller that is cancelled leaves the batch intact; its scores are dropped."""
        seqs = [s if isinstance(s, array) else array(TOKEN_TYPECODE, s) for s in seqs]
        self._check_request(seqs, prompt_of)
        if not seqs:
            return []
        serial = next(self._serial)
        groups = [(serial, p) for p in (prompt_of if prompt_of is not None else range(len(seqs)))]
        loop = asyncio.get_running_loop()
        request = _Request(seqs, groups, loop.create_future(), loop.time())
        self._queue.append(request)
        self._count_waiting(len(seqs), sum(map(len, seqs)))
        self._arrived.set()
        try:
            return await request.future
        except asyncio.CancelledError:
            self._drop(request)
            raise

    def _check_request(self, seqs: list[array], prompt_of: Sequence[int] | None) -> None:
        if not self.running:
            raise EngineStoppedError("the server is shutting down" if self._closing else "the engine is not running")
        if prompt_of is not None and len(prompt_of) != len(seqs):
            raise CheemsInputError(f"{len(prompt_of)} prompt indices for {len(seqs)} sequences", field="prompt_of")
        for i, s in enumerate(seqs):
            if not s or len(s) > self.rm.max_length:
                raise CheemsInputError(f"{len(s)} tokens; a sequence has 1 to {self.rm.max_length}",
                                       field=f"seqs[{i}]")
        limit = self.settings.max_queue
        if len(seqs) > limit:
            raise CheemsInputError(f"{len(seqs)} sequences in one request; the queue holds at most {limit} "
                                   f"({named('max_queue')})")
        if self._waiting + len(seqs) > limit:
            raise QueueFullError(f"queue full: {self._waiting} sequences waiting, at most {limit}")

    def _count_waiting(self, sequences: int, tokens: int) -> None:
        self._waiting += sequences
        self._waiting_tokens += tokens
        self.metrics.set_queue_depth(self._waiting)

    def _drop(self, request: _Request) -> None:
        """Forget what a cancelled request still has queued (sequences already in a batch run on)."""
        if request.taken < len(request.seqs) and request in self._queue:
            self._queue.remove(request)
            rest = request.seqs[request.taken:]
            request.taken = len(request.seqs)
            self._count_waiting(-len(rest), -sum(map(len, rest)))

    def _fail_waiting(self, error: Exception) -> None:
        while self._queue:
            request = self._queue.popleft()
            rest = request.seqs[request.taken:]
            request.taken = len(request.seqs)
            self._count_waiting(-len(rest), -sum(map(len, rest)))
            if not request.future.done():
                request.future.set_exception(error)

    # ------------------------------------------------------------------ batching
    async def _gather_loop(self) -> None:
        """Wait for sequences, give them ``max_wait_ms`` for company, score a batch, repeat;
        ends once closing with nothing queued."""
        loop = asyncio.get_running_loop()
        wait = self.settings.max_wait_ms / 1000
        try:
            while True:
                if not self._queue:
                    if self._closing:
                        return
                    self._arrived.clear()
                    await self._arrived.wait()
                    continue
                oldest = self._queue[0].arrived
                while not self._closing and not self._batch_full():
                    left = oldest + wait - loop.time()
                    if left <= 0:
                        break
                    self._arrived.clear()
                    try:
                        await asyncio.wait_for(self._arrived.wait(), left)
                    except asyncio.TimeoutError:
                        break
                taken = self._take()
                if taken:
                    await self._run_batch(taken)
        finally:  # a bug must not leave callers waiting forever
            self._fail_waiting(EngineStoppedError("the scoring engine stopped"))

    def _batch_full(self) -> bool:
        return self._waiting >= self.settings.max_batch or self._waiting_tokens >= self.token_budget

    def _take(self) -> list[tuple[_Request, int]]:
        """Queued sequences in arrival order, up to ``max_batch`` of them and ``token_budget``
        tokens (at least one, however long)."""
        taken: list[tuple[_Request, int]] = []
        tokens = 0
        while self._queue and len(taken) < self.settings.max_batch:
            request = self._queue[0]
            n = len(request.seqs[request.taken])
            if taken and tokens + n > self.token_budget:
                break
            taken.append((request, request.taken))
            tokens += n
            request.taken += 1
            if request.taken == len(request.seqs):
                self._queue.popleft()
        self._count_waiting(-len(taken), -tokens)
        return taken

    async def _run_batch(self, taken: list[tuple[_Request, int]]) -> None:
        """Score ``taken`` in the worker thread and hand each request its scores."""
        seqs = [r.seqs[i].tolist() for r, i in taken]  # lists for the model: one batch's worth at a time
        ids: dict[tuple[int, int], int] = {}
        prompt_of = [ids.setdefault(r.groups[i], len(ids)) for r, i in taken]
        loop = asyncio.get_running_loop()
        try:
            scores, batches = await loop.run_in_executor(self._executor, self._forward, seqs, prompt_of)
        except Exception as error:  # the model failed: these requests fail, the engine goes on
            if is_out_of_memory(error) or (isinstance(error, CheemsInputError) and error.field == "token_budget"):
                # out of GPU memory is the server's trouble, not the request's: 503, its one line kept
                error = EngineUnavailable(getattr(error, "message", None) or f"out of GPU memory: {error}")
            for request, _ in taken:
                self._drop(request)
                if not request.future.done():
                    request.future.set_exception(error)
            return
        for sequences, tokens, seconds in batches:
            self.metrics.observe_batch(sequences, tokens, seconds)
        for (request, i), value in zip(taken, scores):
            request.scores[i] = value
            request.left -= 1
            if request.left == 0 and not request.future.done():
                request.future.set_result(request.scores)

    def _forward(self, seqs: list[list[int]], prompt_of: list[int]):
        """(scores in order, [(sequences, tokens, seconds)] per forward batch); in the worker thread."""
        from cheems.scoring.batching import scored_batches

        scores = [0.0] * len(seqs)
        batches = []
        start = time.perf_counter()
        for batch, values in scored_batches(self.rm, seqs, prompt_of, token_budget=self.token_budget,
                                            batch_size=self.settings.max_batch):
            for i, v in zip(batch, values):
                scores[i] = float(v)
            now = time.perf_counter()
            batches.append((len(batch), sum(len(seqs[i]) for i in batch), now - start))
            start = now
        return scores, batches
