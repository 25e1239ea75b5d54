"""The scoring engine of ``cheems serve`` (cheems.serving.engine) and its metrics text.

A tiny real reward model (tests/tiny_models.py) scores the bundled sample's conversations
through the engine: alone, one request at a time, and among 31 other concurrent requests; the
scores must agree with each other and with ``cheems score``'s own path (``score_prompts``), in
fp32 on CPU. Timing-dependent cases (a request cancelled while its batch runs, a drain while a
batch runs, a full queue) hold the model's forward pass at a gate (`GatedModel`: the real model
behind a threading.Event), so they are deterministic without sleeping.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import math
import re
import threading

import pytest

from tests.tiny_models import require_models_extra

require_models_extra()

from cheems.records import CheemsInputError, Prompt  # noqa: E402
from cheems.scoring.transformers_rm import load_reward_model, score_prompts  # noqa: E402
from cheems.serving.engine import (EngineSettings, EngineStoppedError, EngineUnavailable,  # noqa: E402
                                   QueueFullError, ScoringEngine, TOKEN_TYPECODE)
from cheems.serving.serve_metrics import ServeMetrics  # noqa: E402

pytestmark = pytest.mark.usefixtures("single_torch_thread")

ATOL_BATCHING = 1e-6  # one request alone vs among others, fp32 CPU
ATOL_CHEEMS_SCORE = 1e-6  # the engine vs cheems score's own batching, fp32 CPU
GATE_TIMEOUT_S = 60  # a safety net against a hang, never a measure of speed


@pytest.fixture(scope="module", params=["packed", "padded"])
def rm(request, seq_cls_model):
    import torch

    model = load_reward_model(seq_cls_model, packing=request.param == "packed")
    torch.set_num_threads(1)  # loading sets the machine's cores; the tiny model runs best on one
    assert model.packing == (request.param == "packed")
    return model


@pytest.fixture(scope="module")
def requests(tiny_prompts) -> list[Prompt]:
    """32 requests of 1 to 5 responses of one prompt each (different lengths and sizes)."""
    return [dataclasses.replace(p, responses=p.responses[: 1 + k % 5]) for k, p in enumerate(tiny_prompts[:32])]


def run(coro, gated: "GatedModel | None" = None):
    """``asyncio.run(coro)``; a gate left closed by a failing test is opened, so its thread ends."""
    try:
        return asyncio.run(coro)
    finally:
        if gated is not None:
            gated.gate.set()


class GatedModel:
    """The real reward model, its forward pass held until ``gate`` opens; ``entered`` is set when
    a forward pass reaches the gate; ``fail_next`` makes the next forward raise."""

    def __init__(self, rm):
        self.rm = rm
        self.gate = threading.Event()
        self.entered = threading.Event()
        self.fail_next = False
        self.failure: Exception = RuntimeError("the model broke")

    def __getattr__(self, name):
        return getattr(self.rm, name)

    def _hold(self):
        self.entered.set()
        assert self.gate.wait(GATE_TIMEOUT_S), "the gate was never opened"
        if self.fail_next:
            self.fail_next = False
            raise self.failure

    def score_ids(self, batch):
        self._hold()
        return self.rm.score_ids(batch)

    def score_packed(self, seqs, groups=None):
        self._hold()
        return self.rm.score_packed(seqs, groups)


@contextlib.asynccontextmanager
async def gated_engine(model: GatedModel, settings: EngineSettings):
    """A running engine on ``model`` whose gate opens on the way out, also when the test fails,
    so the engine can stop."""
    async with ScoringEngine(model, settings) as engine:
        try:
            yield engine
        finally:
            model.gate.set()


async def entered(model: GatedModel) -> None:
    assert await asyncio.to_thread(model.entered.wait, GATE_TIMEOUT_S), "no forward pass started"


async def queued(engine: ScoringEngine, sequences: int) -> None:
    """Let the event loop run until ``sequences`` sequences wait in the queue."""
    for _ in range(1000):
        if engine.queue_depth == sequences:
            return
        await asyncio.sleep(0)
    raise AssertionError(f"queue depth {engine.queue_depth}, expected {sequences}")


def close(a, b, atol):
    assert len(a) == len(b)
    return max((abs(x - y) for x, y in zip(a, b)), default=0.0) <= atol


# ----------------------------------------------------------------------------- batch invariance

def test_concurrent_requests_score_as_alone_and_as_cheems_score(rm, requests):
    """32 concurrent requests (shared forward batches) == each alone == cheems score's path."""
    encoded = None

    async def main():
        nonlocal encoded
        engine = ScoringEngine(rm, EngineSettings(max_wait_ms=50, token_budget=4096))
        async with engine:
            encoded = [engine.encode_rows([p]) for p in requests]
            alone = [await engine.score(seqs, prompt_of) for seqs, prompt_of, _ in encoded]
            batches_alone = engine.metrics.batches
            together = await asyncio.gather(*(engine.score(seqs, prompt_of) for seqs, prompt_of, _ in encoded))
            batches_together = engine.metrics.batches - batches_alone
        return alone, together, batches_alone, batches_together, engine.metrics

    alone, together, batches_alone, batches_together, metrics = run(main())
    assert batches_alone >= len(requests)
    assert batches_together < len(requests)  # requests did share forward batches
    for k, (a, t) in enumerate(zip(alone, together)):
        assert len(t) == len(requests[k].responses)
        assert close(a, t, ATOL_BATCHING), k
    # what cheems score writes for the same rows
    reference = {(pid, rid): s for batch in score_prompts(rm, requests, batch_size=64) for pid, rid, s in batch}
    for (seqs, _, keys), scores in zip(encoded, together):
        assert close(scores, [reference[key] for key in keys], ATOL_CHEEMS_SCORE)
    n = sum(len(p.responses) for p in requests)
    assert metrics.sequences == 2 * n
    assert metrics.tokens == 2 * sum(len(s) for seqs, _, _ in encoded for s in seqs)
    assert metrics.queue_depth == 0


class RecordingModel:
    """The real reward model, recording the share groups of every packed forward pass."""

    def __init__(self, rm):
        self.rm = rm
        self.groups: list[list[int]] = []

    def __getattr__(self, name):
        return getattr(self.rm, name)

    def score_packed(self, seqs, groups=None):
        self.groups.extend(groups or [[i] for i in range(len(seqs))])
        return self.rm.score_packed(seqs, groups)


def test_scores_are_the_requests_own_even_for_equal_and_reordered_sequences(rm, requests):
    """Requests holding the same sequences in other orders each get their own order back, and a
    prefix is shared within a request's prompt only, never across requests."""
    recording = RecordingModel(rm)

    async def main():
        async with ScoringEngine(recording, EngineSettings(max_wait_ms=20, token_budget=1 << 16)) as engine:
            seqs, prompt_of, _ = engine.encode_rows(requests[:4])
            alone = await engine.score(seqs, prompt_of)
            orders = [list(range(len(seqs)))[k:] + list(range(len(seqs)))[:k] for k in range(6)]
            results = await asyncio.gather(*(engine.score([seqs[i] for i in o], [prompt_of[i] for i in o])
                                             for o in orders))
        return alone, orders, results, engine.metrics

    alone, orders, results, metrics = run(main())
    for order, scores in zip(orders, results):
        assert close(scores, [alone[i] for i in order], ATOL_BATCHING)
    assert len(set(round(s, 4) for s in alone)) > 1  # the model tells these sequences apart
    assert metrics.batches == 2  # the six requests ran as one forward batch
    if rm.packing:
        most = max(len(p.responses) for p in requests[:4])
        assert max(map(len, recording.groups)) == most  # a prompt's responses shared, within one request


def test_max_batch_one_scores_every_sequence_alone(rm, requests):
    async def main():
        async with ScoringEngine(rm, EngineSettings(max_batch=1, max_wait_ms=1)) as engine:
            encoded = [engine.encode_rows([p])[:2] for p in requests[:6]]
            together = await asyncio.gather(*(engine.score(*e) for e in encoded))
        async with ScoringEngine(rm) as reference:
            alone = [await reference.score(*e) for e in encoded]
        return together, alone, engine.metrics

    together, alone, metrics = run(main())
    for a, t in zip(alone, together):
        assert close(a, t, ATOL_BATCHING)
    assert metrics.batches == metrics.sequences == sum(len(t) for t in together)  # one sequence each


def test_a_request_larger_than_a_batch_is_split_and_put_back_together(rm, requests):
    async def main():
        async with ScoringEngine(rm, EngineSettings(max_batch=3, max_wait_ms=0)) as engine:
            seqs, prompt_of, _ = engine.encode_rows(requests[:5])
            whole = await engine.score(seqs, prompt_of)
        async with ScoringEngine(rm) as reference:
            alone = [await reference.score([s]) for s in seqs]
        return whole, [a[0] for a in alone], engine.metrics

    whole, alone, metrics = run(main())
    assert close(whole, alone, ATOL_BATCHING)
    assert metrics.batches >= math.ceil(len(whole) / 3)


# ----------------------------------------------------------------------------- cancellation, failure, shutdown

def test_a_cancelled_request_leaves_the_others_and_the_engine_whole(rm, requests):
    gated = GatedModel(rm)

    async def main():
        async with gated_engine(gated, EngineSettings(max_batch=4, max_wait_ms=0)) as engine:
            encoded = [engine.encode_rows([p])[:2] for p in requests[:4]]
            running = asyncio.create_task(engine.score(*encoded[0]))  # its batch reaches the gate
            await entered(gated)
            waiting = [asyncio.create_task(engine.score(*e)) for e in encoded[1:]]
            await queued(engine, sum(len(e[0]) for e in encoded[1:]))
            running.cancel()  # cancelled while its batch runs
            waiting[0].cancel()  # cancelled while queued
            await asyncio.sleep(0)
            assert engine.queue_depth == sum(len(e[0]) for e in encoded[2:])
            gated.gate.set()
            results = await asyncio.gather(running, *waiting, return_exceptions=True)
            after = await engine.score(*encoded[0])
        async with ScoringEngine(rm) as reference:
            alone = [await reference.score(*e) for e in encoded]
        return results, after, alone, engine.queue_depth

    results, after, alone, depth = run(main(), gated)
    assert isinstance(results[0], asyncio.CancelledError) and isinstance(results[1], asyncio.CancelledError)
    assert close(results[2], alone[2], ATOL_BATCHING) and close(results[3], alone[3], ATOL_BATCHING)
    assert close(after, alone[0], ATOL_BATCHING)
    assert depth == 0


def test_a_failing_forward_fails_its_requests_only(rm, requests):
    gated = GatedModel(rm)

    async def main():
        async with gated_engine(gated, EngineSettings(max_batch=64, max_wait_ms=0)) as engine:
            seqs, prompt_of, _ = engine.encode_rows(requests[:1])
            gated.fail_next = True
            gated.gate.set()
            with pytest.raises(RuntimeError, match="the model broke"):
                await engine.score(seqs, prompt_of)
            return await engine.score(seqs, prompt_of), engine.queue_depth

    scores, depth = run(main(), gated)
    assert len(scores) == len(requests[0].responses) and depth == 0


def test_out_of_gpu_memory_is_unavailable_with_its_one_line_and_the_engine_goes_on(rm, requests):
    import torch

    gated = GatedModel(rm)
    gated.failure = torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")

    async def main():
        async with gated_engine(gated, EngineSettings(max_batch=64, max_wait_ms=0, token_budget=4096)) as engine:
            seqs, prompt_of, _ = engine.encode_rows(requests[:1])
            gated.fail_next = True
            gated.gate.set()
            with pytest.raises(EngineUnavailable) as failed:
                await engine.score(seqs, prompt_of)
            return failed.value.message, await engine.score(seqs, prompt_of)

    message, scores = run(main(), gated)
    assert "out of GPU memory on a forward batch" in message and "token budget 4096" in message
    assert "\n" not in message
    assert len(scores) == len(requests[0].responses)


def test_stop_drains_queued_requests_and_refuses_later_ones(rm, requests):
    gated = GatedModel(rm)

    async def main():
        engine = ScoringEngine(gated, EngineSettings(max_batch=4, max_wait_ms=0))
        await engine.start()
        encoded = [engine.encode_rows([p])[:2] for p in requests[:3]]
        first = asyncio.create_task(engine.score(*encoded[0]))
        await entered(gated)
        second = asyncio.create_task(engine.score(*encoded[1]))
        await queued(engine, len(encoded[1][0]))
        stopping = asyncio.create_task(engine.stop(drain=True))
        await asyncio.sleep(0)
        assert not engine.running
        with pytest.raises(EngineStoppedError, match="shutting down"):
            await engine.score(*encoded[2])
        gated.gate.set()
        await stopping
        with pytest.raises(EngineStoppedError):
            await engine.score(*encoded[2])
        async with ScoringEngine(rm) as reference:
            alone = [await reference.score(*e) for e in encoded[:2]]
        return first.result(), second.result(), alone

    first, second, alone = run(main(), gated)
    assert close(first, alone[0], ATOL_BATCHING) and close(second, alone[1], ATOL_BATCHING)


def test_stop_without_drain_fails_the_queued_requests(rm, requests):
    gated = GatedModel(rm)

    async def main():
        engine = ScoringEngine(gated, EngineSettings(max_batch=4, max_wait_ms=0))
        await engine.start()
        encoded = [engine.encode_rows([p])[:2] for p in requests[:2]]
        first = asyncio.create_task(engine.score(*encoded[0]))
        await entered(gated)
        second = asyncio.create_task(engine.score(*encoded[1]))
        await queued(engine, len(encoded[1][0]))
        stopping = asyncio.create_task(engine.stop(drain=False))
        await asyncio.sleep(0)
        gated.gate.set()
        await stopping
        return await asyncio.gather(first, second, return_exceptions=True)

    first, second = run(main(), gated)
    assert isinstance(first, list) and len(first) == len(requests[0].responses[:2])
    assert isinstance(second, EngineStoppedError)


def test_a_full_queue_refuses_the_request_as_unavailable(rm, requests):
    gated = GatedModel(rm)

    async def main():
        settings = EngineSettings(max_batch=2, max_wait_ms=0, max_queue=4, token_budget=1 << 20)
        async with gated_engine(gated, settings) as engine:
            seqs = engine.encode_rows(requests[4:5])[0]  # five responses
            first = asyncio.create_task(engine.score(seqs[:2]))
            await entered(gated)  # its two sequences left the queue
            second = asyncio.create_task(engine.score(seqs[:3]))
            await queued(engine, 3)
            with pytest.raises(QueueFullError, match="queue full") as full:
                await engine.score(seqs[:2])
            assert isinstance(full.value, EngineUnavailable)
            with pytest.raises(CheemsInputError, match="at most 4"):
                await engine.score(seqs[:1] * 5)  # never fits, however empty the queue
            third = await asyncio.gather(engine.score(seqs[:1]), asyncio.to_thread(gated.gate.set))
            return await first, await second, third[0]

    first, second, third = run(main(), gated)
    assert (len(first), len(second), len(third)) == (2, 3, 1)
    assert close(third, first[:1], ATOL_BATCHING)


def test_requests_outside_a_running_engine_or_malformed_are_refused(rm):
    async def main():
        engine = ScoringEngine(rm)
        with pytest.raises(EngineStoppedError, match="not running"):
            await engine.score([[1, 2, 3]])
        async with engine:
            assert await engine.score([]) == []
            with pytest.raises(CheemsInputError, match="seqs\\[1\\]"):
                await engine.score([[1, 2], []])
            with pytest.raises(CheemsInputError, match="seqs\\[0\\]"):
                await engine.score([[1] * (rm.max_length + 1)])
            with pytest.raises(CheemsInputError, match="prompt_of"):
                await engine.score([[1, 2]], prompt_of=[0, 0])

    run(main())


@pytest.mark.parametrize("bad, field", [({"max_batch": 0}, "max_batch"), ({"max_wait_ms": -1}, "max_wait_ms"),
                                        ({"token_budget": 0}, "token_budget"), ({"max_queue": 0}, "max_queue")])
def test_settings_are_checked_when_built(bad, field):
    with pytest.raises(CheemsInputError) as err:
        EngineSettings(**bad)
    assert err.value.field == field


# ----------------------------------------------------------------------------- encoding

def test_encode_texts_tokenizes_as_given_and_refuses_or_cuts_long_texts(rm, requests):
    short = dataclasses.replace(rm, max_length=16)
    text = rm.tokenizer.apply_chat_template([{"role": "user", "content": requests[0].prompt},
                                             {"role": "assistant", "content": requests[0].responses[0].content}],
                                            tokenize=False)
    full = rm.tokenizer(text, add_special_tokens=False)["input_ids"]
    assert len(full) > 16
    # a chat-formatted text is the same tokens as the row through the template
    assert ScoringEngine(rm).encode_texts([text], field="query") == [ScoringEngine(rm).encode_rows(requests[:1])[0][0]]
    assert ScoringEngine(rm).encode_texts([text], field="query")[0].typecode == TOKEN_TYPECODE  # 4 bytes a token
    with pytest.raises(CheemsInputError) as err:
        ScoringEngine(short).encode_texts(["好", text], field="query")
    assert err.value.field == "query[1]" and "max length 16" in err.value.message
    assert err.value.message.endswith("or start the server with truncate")  # EngineSettings.truncate, from Python
    with pytest.raises(CheemsInputError) as err:
        ScoringEngine(short).encode_texts(["好", ""], field="input")
    assert err.value.field == "input[1]"
    cutting = ScoringEngine(short, EngineSettings(truncate=True))
    cut = cutting.encode_texts([text], field="query")
    assert [s.tolist() for s in cut] == [full[-16:]]  # the end kept, as --truncation left
    assert cutting.metrics.truncated == 1
    right = ScoringEngine(dataclasses.replace(short, truncation="right"), EngineSettings(truncate=True))
    assert [s.tolist() for s in right.encode_texts([text], field="query")] == [full[:16]]


def test_encode_rows_matches_cheems_score_encoding_and_names_long_rows(rm, requests):
    engine = ScoringEngine(rm)
    seqs, prompt_of, keys = engine.encode_rows(requests[:3] + requests[:1])
    items = [(p.prompt, r.content) for p in requests[:3] + requests[:1] for r in p.responses]
    assert [s.tolist() for s in seqs] == rm.encode_many(items)
    assert keys == [(p.id, r.id) for p in requests[:3] + requests[:1] for r in p.responses]
    n0 = len(requests[0].responses)
    assert prompt_of[:n0] == [0] * n0 and prompt_of[-n0:] == [0] * n0  # equal prompts share a prefix
    assert len(set(prompt_of)) == 3
    short = dataclasses.replace(rm, max_length=16)
    with pytest.raises(CheemsInputError) as err:
        ScoringEngine(short).encode_rows(requests[:2])
    assert err.value.field == "rows[0].responses[0]"
    cut, _, _ = ScoringEngine(short, EngineSettings(truncate=True)).encode_rows(requests[:2])
    expected = short.encode_many([(p.prompt, r.content) for p in requests[:2] for r in p.responses])
    assert [s.tolist() for s in cut] == expected


# ----------------------------------------------------------------------------- metrics text

SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})? (\S+)$')
LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"(,|$)')


def parse_prometheus(text: str) -> dict:
    """{family: {"type", "help", "samples": [(name, {label: value}, float)]}}; asserts the format."""
    assert text.endswith("\n")
    families: dict = {}
    current = None
    for line in text.splitlines():
        if not line:
            continue
        if line.startswith("# HELP ") or line.startswith("# TYPE "):
            _, kind, name, rest = line.split(" ", 3)
            family = families.setdefault(name, {"samples": []})
            family["help" if kind == "HELP" else "type"] = rest
            current = name
            continue
        match = SAMPLE.match(line)
        assert match, f"not a sample line: {line!r}"
        name, _, inner, value = match.groups()
        labels = {}
        if inner:
            spans = list(LABEL.finditer(inner))
            assert "".join(m.group(0) for m in spans) == inner, f"bad labels: {inner!r}"
            labels = {m.group(1): m.group(2) for m in spans}
        assert current and name.startswith(current), f"{name} outside its family {current}"
        families[current]["samples"].append((name, labels, float(value)))
    return families


def test_metrics_text_parses_and_histograms_are_cumulative(rm, requests):
    async def main():
        async with ScoringEngine(rm, EngineSettings(max_wait_ms=5)) as engine:
            encoded = [engine.encode_rows([p])[:2] for p in requests[:8]]
            await asyncio.gather(*(engine.score(*e) for e in encoded))
        engine.metrics.observe_request("/get_reward", 200, 0.003)
        engine.metrics.observe_request("/get_reward", 200, 0.3)
        engine.metrics.observe_request("/classify", 503, 100.0)
        engine.metrics.observe_request('/odd "route"\\\n', 422, 0.01)
        return engine.metrics

    metrics = run(main())
    families = parse_prometheus(metrics.prometheus_text())
    for name, family in families.items():
        assert family["type"] in ("counter", "gauge", "histogram") and family["help"], name
        if family["type"] == "counter":
            assert name.endswith("_total")
    requests_total = {(s[1]["route"], s[1]["status"]): s[2] for s in families["cheems_serve_requests_total"]["samples"]}
    assert requests_total[("/get_reward", "200")] == 2 and requests_total[("/classify", "503")] == 1
    assert requests_total[('/odd \\"route\\"\\\\\\n', "422")] == 1  # escaped as the format says
    n = sum(len(p.responses) for p in requests[:8])
    assert families["cheems_serve_sequences_total"]["samples"][0][2] == metrics.sequences == n
    assert families["cheems_serve_queue_depth"]["samples"][0][2] == 0
    for name, family in families.items():
        if family["type"] != "histogram":
            continue
        series: dict = {}
        for sample, labels, value in family["samples"]:
            key = tuple(sorted((k, v) for k, v in labels.items() if k != "le"))
            series.setdefault(key, {"buckets": [], "sum": None, "count": None})
            if sample == name + "_bucket":
                series[key]["buckets"].append((float(labels["le"]), value))
            else:
                series[key][sample[len(name) + 1:]] = value
        assert series, name
        for key, s in series.items():
            bounds = [b for b, _ in s["buckets"]]
            counts = [c for _, c in s["buckets"]]
            assert bounds == sorted(bounds) and bounds[-1] == math.inf, (name, key)
            assert counts == sorted(counts), (name, key)  # cumulative
            assert counts[-1] == s["count"] and s["sum"] is not None, (name, key)
    latency = families["cheems_serve_request_duration_seconds"]["samples"]
    inf = [v for n, lab, v in latency if lab.get("route") == "/classify" and lab.get("le") == "+Inf"]
    below = [v for n, lab, v in latency if lab.get("route") == "/classify" and lab.get("le") == "60.0"]
    assert inf == [1] and below == [0]  # 100 s lies only in +Inf


def test_tokens_per_second_counts_the_last_minute():
    now = [1000.0]
    metrics = ServeMetrics(clock=lambda: now[0])
    metrics.observe_batch(4, 600, 0.1)
    now[0] += 30
    metrics.observe_batch(2, 1200, 0.1)
    assert metrics.tokens_per_second() == pytest.approx(1800 / 60)
    now[0] += 45  # the first batch is over a minute old
    assert metrics.tokens_per_second() == pytest.approx(1200 / 60)
    assert metrics.tokens == 1800 and metrics.sequences == 6
