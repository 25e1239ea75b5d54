"""Generative models as pairwise judges on a CheemsBench-style benchmark (paper §6.1, Table 2).

Every pair of responses with different ranks is shown to the judge through any
OpenAI-compatible chat endpoint. The official evaluator shows each pair once, in one random
order; judges often change their mind when the order is swapped, so by default each pair is
judged in both orders ("ab": response-list order, "ba": swapped) and the headline numbers
are the mean of the two, with the per-order reports and the position consistency beside
them. A verdict is right when it names the better response; a tie (C), an unparseable
reply and a failed request all count as wrong, and are counted separately in the report.

Replies are cached in SQLite (:mod:`cheems.llm.cache`) as they arrive, keyed by model,
template version, exact messages and sampling parameters: a rerun after a crash asks only
for what is missing, and a request that failed is not cached, so the rerun retries it. The
cache is read at the start and again right before each request, so runs sharing a cache
file ask for each reply once between them. Requests run concurrently (``concurrency`` at a
time) and are retried with capped exponential backoff with jitter on 429, 408, 5xx, timeouts
and connection errors; other 4xx fail at once. A reply that is no chat completion with text
(see :func:`cheems.llm.client.read_chat_reply`) is a failed request of that judgement, with
the raw reply in its error; the run goes on.
"""

from __future__ import annotations

import asyncio
import os
import random
import time
from dataclasses import dataclass
from typing import Callable

import numpy as np

from cheems.llm.cache import ReplyCache, default_cache_path
from cheems.llm.client import (ChatReply, RequestFailed, RequestSettings, ask, cached_reply, open_client, run_all,
                               shorten)
from cheems.metrics import Outcomes, evaluate_outcomes
from cheems.records import CheemsInputError, Prompt, ranked_pairs
from cheems.scoring.judge_prompt import TEMPLATE_VERSION, build_messages, parse_verdict
from cheems.settings import check_settings, setting

__all__ = ["ORDERS", "Generate", "JudgeConfig", "Judgement", "first_position_rate", "judge_bench", "judge_items",
           "judge_bench_async", "judge_report", "judgement_report", "order_plan", "plan_judgements",
           "run_judgements"]

ORDERS = ("ab", "ba")


@dataclass
class JudgeConfig(RequestSettings):
    """How to reach and drive the judge; the fields are the CLI flags (``concurrency``, the reply
    cache ``cache_path`` and the retry settings are :class:`~cheems.llm.client.RequestSettings`')."""

    model: str = setting(nonempty=True, help="Judge with this chat model (name at the endpoint)")
    api_base: str = setting(nonempty=True, help="OpenAI-compatible base URL, e.g. http://localhost:8000/v1")
    api_key: str | None = setting(None, repr=False, help="API key (default $OPENAI_API_KEY, else EMPTY)")
    temperature: float = setting(0.0, min=0, help="Sampling temperature of the judge")
    max_tokens: int = setting(1024, min=1, help="Longest reply in tokens")
    both_orders: bool = setting(True, help="Judge each pair in both orders (False: one random order per pair, "
                                "as the official evaluator)")
    seed: int = setting(0, min=0, help="Seed of the random orders and of the bootstrap")

    def __post_init__(self) -> None:
        check_settings(self)

    def sampling(self) -> dict:
        """The sampling parameters sent with every request (and part of the cache key)."""
        return {"temperature": self.temperature, "max_tokens": self.max_tokens}


@dataclass
class Judgement:
    """One pair shown in one order, and what came of it.

    ``first``/``second`` are the pair's responses in response-list order; ``order`` "ab"
    shows ``first`` as 回答A, "ba" shows ``second`` as 回答A.
    """

    prompt_index: int
    first: str
    second: str
    better: str | None  # the benchmark's better response; None when there is no answer key
    order: str
    key: str = ""
    verdict: str | None = None  # "A", "B", "C" or None (unparseable or failed)
    text: str | None = None  # the raw reply
    error: str | None = None  # why the request failed after its retries
    cached: bool = False
    finish_reason: str | None = None  # "length": cut off by max_tokens

    @property
    def pair(self) -> tuple[int, str, str]:
        return (self.prompt_index, self.first, self.second)

    @property
    def shown(self) -> tuple[str, str]:
        """(回答A, 回答B) response ids."""
        return (self.first, self.second) if self.order == "ab" else (self.second, self.first)

    @property
    def choice(self) -> str | None:
        """The id of the response the judge preferred, "tie", or None without a verdict."""
        if self.verdict == "A":
            return self.shown[0]
        if self.verdict == "B":
            return self.shown[1]
        return "tie" if self.verdict == "C" else None

    @property
    def correct(self) -> bool:
        return self.choice == self.better


def plan_judgements(prompts: list[Prompt], config: JudgeConfig) -> list[Judgement]:
    """Every (pair, order) to judge as ``config`` says: :func:`order_plan`."""
    return order_plan(prompts, both_orders=config.both_orders, seed=config.seed)


def order_plan(prompts: list[Prompt], *, both_orders: bool, seed: int) -> list[Judgement]:
    """Every (pair, order) to judge, in prompt order then :func:`ranked_pairs` order.

    With ``both_orders`` each pair is judged as "ab" and "ba"; otherwise one order per pair
    is drawn by ``random.Random(seed).choice(("ab", "ba"))``, one draw per pair in that
    sequence, so the same seed reproduces the same orders. O(total pairs).
    """
    rng = random.Random(seed)
    plan = []
    for i, p in enumerate(prompts):
        if p.rank is None:
            raise CheemsInputError(f"prompt {p.id!r} has no rank (run `cheems rank` first)", field="rank")
        position = {r.id: k for k, r in enumerate(p.responses)}
        for better, worse in ranked_pairs(p.rank):
            first, second = sorted((better, worse), key=position.__getitem__)
            orders = ORDERS if both_orders else (rng.choice(ORDERS),)
            plan.extend(Judgement(i, first, second, better, order) for order in orders)
    return plan


Generate = Callable[[list[list[dict]]], list[str]]


def judge_bench(prompts: list[Prompt], config: JudgeConfig,
                progress: Callable[[int, int], None] | None = None, *, n_bootstrap: int = 1000,
                generate: Generate | None = None) -> dict:
    """Judge every ranked pair of a benchmark and report CheemsBench metrics of the judge.

    Blocking wrapper of :func:`judge_bench_async` (which to use inside a running event loop).
    """
    return asyncio.run(judge_bench_async(prompts, config, progress, n_bootstrap=n_bootstrap, generate=generate))


async def judge_bench_async(prompts: list[Prompt], config: JudgeConfig,
                            progress: Callable[[int, int], None] | None = None, *,
                            n_bootstrap: int = 1000, generate: Generate | None = None) -> dict:
    """Judge every ranked pair (cache first, then the endpoint) and build the report.

    ``progress(done, total)`` is called with counts of pairs as they finish. Identical
    requests (same cache key) are sent once. See :func:`judge_report` for the result.
    ``generate``, when given, answers all uncached conversations in one call instead of the
    endpoint (a local model, e.g. :class:`cheems.scoring.vllm_backend.VllmChat`.generate).
    """
    plan = plan_judgements(prompts, config)
    stats = await run_judgements(prompts, plan, config, progress, generate=generate)
    return judge_report(prompts, plan, config, stats, n_bootstrap=n_bootstrap)


async def run_judgements(prompts: list[Prompt], plan: list[Judgement], config: JudgeConfig,
                         progress: Callable[[int, int], None] | None = None, *,
                         generate: Generate | None = None) -> dict:
    """Fill in every judgement of ``plan``: from the reply cache, else from the endpoint (or
    ``generate``). Sets each one's ``verdict``, ``text``, ``finish_reason``, ``cached`` and
    ``error``; returns ``{"requests", "cached"}`` counts.

    The judge sees the prompt, the two responses in the judgement's order and the criteria of
    the prompt's category. ``progress(done, total)`` counts pairs: a pair is done when all its
    orders are. Identical requests (same cache key) are sent once.
    """
    sampling = config.sampling()

    def messages_for(j: Judgement) -> list[dict]:
        p = prompts[j.prompt_index]
        content = {r.id: r.content for r in p.responses}
        a, b = j.shown
        return build_messages(p.prompt, content[a], content[b], p.category)

    by_key: dict[str, list[Judgement]] = {}
    for j in plan:
        j.key = ReplyCache.key(model=config.model, template=TEMPLATE_VERSION, messages=messages_for(j),
                               **sampling)
        by_key.setdefault(j.key, []).append(j)

    left: dict[tuple, int] = {}
    for j in plan:
        left[j.pair] = left.get(j.pair, 0) + 1
    total = len(left)
    done = 0

    def finish(js: list[Judgement]) -> None:
        nonlocal done
        for j in js:
            left[j.pair] -= 1
            if left[j.pair] == 0:
                done += 1
                if progress is not None:
                    progress(done, total)

    stats = {"requests": 0, "cached": 0}
    cache = ReplyCache(config.cache_path if config.cache_path is not None else default_cache_path())
    try:
        missing = []
        for key, js in by_key.items():
            reply = cached_reply(cache.get(key))
            if reply is None:
                missing.append(key)
                continue
            _give(js, reply)
            stats["cached"] += len(js)
            finish(js)
        if missing and generate is not None:
            _generate_all(missing, by_key, messages_for, generate, config, cache, stats, finish)
        elif missing:
            await _request_all(missing, by_key, messages_for, config, cache, stats, finish)
    finally:
        cache.close()
    return stats


def _generate_all(keys: list[str], by_key: dict[str, list[Judgement]],
                  messages_for: Callable[[Judgement], list[dict]], generate: Generate, config: JudgeConfig,
                  cache: ReplyCache, stats: dict, finish: Callable[[list[Judgement]], None]) -> None:
    """Answer every key with a local model at once, caching each text it returns (anything
    else is a failed judgement, not cached)."""
    texts = generate([messages_for(by_key[key][0]) for key in keys])
    if len(texts) != len(keys):
        raise RuntimeError(f"the local model answered {len(texts)} of {len(keys)} conversations")
    stats["requests"] += len(keys)
    for key, text in zip(keys, texts):
        js = by_key[key]
        if isinstance(text, str):
            reply = ChatReply(text)
            cache.put(key, _record(reply, config))
            _give(js, reply)
        else:
            for j in js:
                j.error = f"the local model returned no text: {shorten(repr(text))}"
        finish(js)


async def _request_all(keys: list[str], by_key: dict[str, list[Judgement]],
                       messages_for: Callable[[Judgement], list[dict]], config: JudgeConfig, cache: ReplyCache,
                       stats: dict, finish: Callable[[list[Judgement]], None]) -> None:
    """Ask the endpoint for every key (at most ``concurrency`` at once), caching each reply;
    each key is looked up in the cache again right before its request (another run sharing
    the file may have answered it), and such hits count as cached."""
    api_key = config.api_key or os.environ.get("OPENAI_API_KEY") or "EMPTY"
    client = open_client(config.api_base, api_key, config, what="the LLM judge")
    gate = asyncio.Semaphore(config.concurrency)
    jitter = random.Random()  # delays only; results do not depend on it

    async def one(key: str) -> None:
        js = by_key[key]
        try:
            reply = await ask(client, lambda: messages_for(js[0]), model=config.model, sampling=config.sampling(),
                              policy=config, gate=gate, stats=stats, jitter=jitter, cache=cache, key=key,
                              record=lambda r: _record(r, config))
        except RequestFailed as e:
            for j in js:
                j.error = str(e)
        else:
            _give(js, reply)
            stats["cached"] += len(js) if reply.cached else 0
        finish(js)

    try:
        await run_all(one(k) for k in keys)
    finally:
        await client.close()


def _record(reply: ChatReply, config: JudgeConfig) -> dict:
    """What the cache keeps of one reply."""
    return {"text": reply.text, "verdict": parse_verdict(reply.text), "finish_reason": reply.finish_reason,
            "model": config.model, "template": TEMPLATE_VERSION, "time": time.time()}


def _give(js: list[Judgement], reply: ChatReply) -> None:
    """Give one reply to every judgement that asked for it; the verdict is parsed again, so
    parser fixes reach cached replies."""
    verdict = parse_verdict(reply.text)
    for j in js:
        j.text, j.verdict, j.finish_reason, j.cached = reply.text, verdict, reply.finish_reason, reply.cached


# ----------------------------------------------------------------------------- report

def judge_items(prompts: list[Prompt], report: dict) -> list[dict]:
    """Per prompt, its judged pairs as [better, worse, "right"|"wrong"] for pairing two reports
    (the shape of :func:`cheems.metrics.prompt_items`): a pair is right when every judged order
    picked the better response."""
    rows = {p.id: {"prompt_id": p.id, "subset": p.subset or "default", "category": p.main_category, "pairs": [],
                   "right": 0, "wrong": 0} for p in prompts}
    for rec in report["pairs"]:
        worse = rec["second"] if rec["better"] == rec["first"] else rec["first"]
        outcome = "right" if all(j["correct"] for j in rec["judgements"].values()) else "wrong"
        row = rows[rec["prompt_id"]]
        row["pairs"].append([rec["better"], worse, outcome])
        row[outcome] += 1
    return list(rows.values())



def judge_report(prompts: list[Prompt], plan: list[Judgement], config: JudgeConfig, stats: dict, *,
                 n_bootstrap: int = 1000) -> dict:
    """The CheemsBench report of judged pairs, shaped like :func:`cheems.metrics.evaluate`.

    Per order ("ab" and "ba", or "random" for one random order per pair) the report of
    :func:`cheems.metrics.evaluate_outcomes` (with bootstrap CIs). The headline
    ``overall``/``subsets`` numbers (accuracy, exact match, score, and per category) are the
    mean over the judged orders; with two orders their CIs are None (see each order's).
    Besides: ``position_consistency`` (share of pairs with a verdict in both orders whose
    verdicts pick the same response, or both C; None without such pairs),
    ``consistency_pairs`` (how many pairs that is), ``first_position_rate`` (share of A/B
    verdicts that chose 回答A; 0.5 is unbiased), ``judgements`` ((pair, order) count),
    ``tie_verdicts`` (C verdicts, wrong on a ranked pair),
    ``unparseable`` (replies without a verdict), ``truncated`` (replies cut off by
    ``max_tokens``), ``errors`` (requests failed for good),
    ``requests`` (HTTP requests sent this run, retries included), ``cached`` (judgements
    answered from the cache), and ``pairs``: per pair, each order's verdict, chosen response
    id ("tie", or None), correctness, cache hit and error, plus the raw reply of unparseable ones.
    """
    return judgement_report(prompts, plan, model=config.model, template=TEMPLATE_VERSION,
                            both_orders=config.both_orders, seed=config.seed, stats=stats, n_bootstrap=n_bootstrap)


def judgement_report(prompts: list[Prompt], plan: list[Judgement], *, model: str, template: str, both_orders: bool,
                     seed: int, stats: dict, n_bootstrap: int = 1000) -> dict:
    """The report of :func:`judge_report` from judgements whose verdicts are set, whichever
    judge gave them (an endpoint, or a local model's verdict probabilities); ``tie_verdicts``
    counts the C verdicts."""
    names = list(ORDERS) if both_orders else ["random"]
    orders = {}
    for name in names:
        n_comp = np.zeros(len(prompts), np.int64)
        n_right = np.zeros(len(prompts), np.int64)
        for j in plan:
            if name == "random" or j.order == name:
                n_comp[j.prompt_index] += 1
                n_right[j.prompt_index] += j.correct
        orders[name] = evaluate_outcomes(prompts, Outcomes(n_comp, n_right), n_bootstrap=n_bootstrap, seed=seed)
    report = {"model": model, "template": template}
    report.update(_mean_reports(list(orders.values())))
    report["orders"] = orders

    pairs: dict[tuple, dict] = {}
    for j in plan:
        p = prompts[j.prompt_index]
        rec = pairs.setdefault((j.prompt_index, j.first, j.second),
                               {"prompt_id": p.id, "first": j.first, "second": j.second, "better": j.better,
                                "judgements": {}})
        entry = {"verdict": j.verdict, "choice": j.choice, "correct": j.correct, "cached": j.cached,
                 "error": j.error}
        if j.verdict is None and j.error is None:
            entry["text"] = j.text
        rec["judgements"][j.order] = entry
    both = [rec["judgements"] for rec in pairs.values()
            if all(rec["judgements"].get(o, {}).get("verdict") is not None for o in ORDERS)]
    agree = sum(js["ab"]["choice"] == js["ba"]["choice"] for js in both)
    report.update(
        position_consistency=agree / len(both) if both else None,
        consistency_pairs=len(both),
        first_position_rate=first_position_rate(plan),
        judgements=len(plan),
        tie_verdicts=sum(j.verdict == "C" for j in plan),
        unparseable=sum(j.verdict is None and j.error is None for j in plan),
        truncated=sum(j.finish_reason == "length" for j in plan),
        errors=sum(j.error is not None for j in plan),
        requests=stats["requests"],
        cached=stats["cached"],
        pairs=list(pairs.values()),
    )
    return report


def first_position_rate(plan: list[Judgement]) -> float | None:
    """Share of A/B verdicts that chose 回答A (0.5 is unbiased; None without any)."""
    sided = [j.verdict for j in plan if j.verdict in ("A", "B")]
    return sided.count("A") / len(sided) if sided else None


def _mean(values: list) -> float | None:
    return None if any(v is None for v in values) else float(np.mean(values))


def _mean_reports(reports: list[dict]) -> dict:
    """overall/overall_ci/subsets averaged over reports of the same prompts (CIs kept for one)."""
    if len(reports) == 1:
        r = reports[0]
        return {"overall": r["overall"], "overall_ci": r["overall_ci"], "subsets": r["subsets"]}
    subsets = {}
    for name, s in reports[0]["subsets"].items():
        entry = {k: s[k] for k in ("n_prompts", "n_skipped", "n_comparisons", "n_tied")}
        for k in ("accuracy", "exact_match", "score"):
            entry[k] = _mean([r["subsets"][name][k] for r in reports])
        entry["ci"] = None
        entry["categories"] = {
            c: {"accuracy": _mean([r["subsets"][name]["categories"][c]["accuracy"] for r in reports]),
                "exact_match": _mean([r["subsets"][name]["categories"][c]["exact_match"] for r in reports]),
                "n_prompts": cat["n_prompts"], "n_comparisons": cat["n_comparisons"], "n_tied": cat["n_tied"]}
            for c, cat in s["categories"].items()}
        subsets[name] = entry
    return {"overall": _mean([r["overall"] for r in reports]), "overall_ci": None, "subsets": subsets}
