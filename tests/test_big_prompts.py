"""Prompts with many responses stay fast, and the fast code gives exactly what the plain one gave.

The references below are the filter's and the debias's code as they were before the near-linear
versions replaced them, copied here as plain functions: the near-duplicate rule compares each
response with every earlier kept one (O(k^2) pairs for k responses), the length-outlier rule
takes the median of a fresh list of the other lengths for every response (O(k^2)), and the debias
classifies, draws and drops comparison by comparison. The old near-duplicate loop screened each
pair on 64-bit hashed shingle counts before the exact Jaccard; the reference computes the exact
Jaccard for every pair, which gives the same answer unless two shingles share a hash.
"""

from __future__ import annotations

import random
import statistics
import time
from collections import Counter
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cheems.curation import near_duplicates
from cheems.curation.debias import DROPPED_KEY, KINDS, SET_ASIDE_KEY, length_debias
from cheems.curation.filters import (PROMPT_RULE, RULES, FilterConfig, filter_prompt, filter_prompts, jaccard,
                                     shingles, text_length, without_whitespace)
from cheems.records import Comparison, Prompt, Response, check_comparisons, rank_comparisons

FAST = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# ----------------------------------------------------------------------------- filter reference

SINGLE_RULES = ("empty", "garbled", "repetition", "non_chinese", "truncated", "too_long")


def reference_length_outlier(i: int, lengths: list[int], nonblank: list[bool],
                             config: FilterConfig) -> tuple[str, str] | None:
    """Rule 7 as it was: the median of a new list of the other non-blank lengths, per response."""
    length = lengths[i]
    if length >= config.outlier_min_chars:
        others = [n for j, n in enumerate(lengths) if j != i and nonblank[j]]
        if len(others) >= 2:
            median = statistics.median(others)
            if length > config.length_outlier_ratio * median:
                return "length_outlier", (f"{length} characters > {config.length_outlier_ratio:g} "
                                          f"x median {median:g} of the other responses")
    return None


def reference_duplicates(ids: list[str], flats: list[str], config: FilterConfig,
                         enabled: frozenset) -> dict[int, tuple[str, str]]:
    """Rules 8-9 as they were: each response against every earlier kept one, in order."""
    exact, near = "duplicate" in enabled, "near_duplicate" in enabled
    out: dict[int, tuple[str, str]] = {}
    if not (exact or near) or len(flats) < 2:
        return out
    k, t = config.shingle_size, config.near_duplicate_threshold
    sets = [shingles(f, k) for f in flats]  # the old code built them on first use: the same sets
    seen: dict[str, int] = {}
    kept: list[int] = []
    for i, flat in enumerate(flats):
        if exact and flat in seen:
            out[i] = ("duplicate", f"same text as response {ids[seen[flat]]!r}")
            continue
        if near:
            hit = None
            for j in kept:
                if len(flats[i]) < k or len(flats[j]) < k:
                    sim = 1.0 if flats[i] == flats[j] else 0.0
                else:
                    sim = jaccard(sets[i], sets[j])
                if sim >= t:
                    hit = (j, sim)
                    break
            if hit:
                out[i] = ("near_duplicate", f"near duplicate of response {ids[hit[0]]!r} "
                                            f"(Jaccard {hit[1]:.2f} of {k}-character shingles)")
                continue
        kept.append(i)
        seen.setdefault(flat, i)
    return out


def reference_filter(prompt: Prompt, config: FilterConfig) -> tuple[list[str] | None, list[dict]]:
    """(kept response ids or None, records) of :func:`filter_prompt`: rules 1-6 by the library
    (unchanged code), rules 7-9 and the prompt's fate by the plain references above."""
    enabled = frozenset(config.rules)
    single = replace(config, rules=tuple(r for r in config.rules if r in SINGLE_RULES) or ("empty",),
                     min_responses=1)
    _, records = filter_prompt(prompt, single)
    by_id = {r["response_id"]: (r["rule"], r["detail"]) for r in records if r["response_id"] is not None}
    if "empty" not in config.rules:  # the stand-in rule of an otherwise empty rule list
        by_id = {rid: hit for rid, hit in by_id.items() if hit[0] != "empty"}
    contents = [r.content for r in prompt.responses]
    lengths = [len(c) for c in contents]
    nonblank = [c != "" and not c.isspace() for c in contents]
    hits: dict[int, tuple[str, str]] = {}
    for i, r in enumerate(prompt.responses):
        hit = by_id.get(r.id)
        if hit is None and "length_outlier" in enabled:
            hit = reference_length_outlier(i, lengths, nonblank, config)
        if hit is not None:
            hits[i] = hit
    passed = [i for i in range(len(contents)) if i not in hits]
    dups = reference_duplicates([prompt.responses[i].id for i in passed],
                                [without_whitespace(contents[i]) for i in passed], config, enabled)
    for j, hit in dups.items():
        hits[passed[j]] = hit
    return reference_assemble(prompt, hits, config)


def reference_assemble(prompt: Prompt, hits: dict[int, tuple[str, str]],
                       config: FilterConfig) -> tuple[list[str] | None, list[dict]]:
    def record(r: Response | None, rule: str, detail: str) -> dict:
        return {"prompt_id": prompt.id, "response_id": None if r is None else r.id,
                "model": None if r is None else r.model, "rule": rule, "detail": detail}

    kept = [r for i, r in enumerate(prompt.responses) if i not in hits]
    if len(kept) < config.min_responses:
        detail = f"{len(kept)} response(s) left, min_responses is {config.min_responses}"
        records = [record(r, *hits[i]) if i in hits else record(r, PROMPT_RULE, "prompt removed: " + detail)
                   for i, r in enumerate(prompt.responses)]
        return None, records + [record(None, PROMPT_RULE, detail)]
    return [r.id for r in kept], [record(prompt.responses[i], *hits[i]) for i in sorted(hits)]


# ----------------------------------------------------------------------------- filter strategies

# few distinct characters, so that shingles collide often and near duplicates are common
BASES = ["长城是中国古代的军事防御工程修筑历史可以追溯到西周时期", "秦始皇统一六国以后把原来各国的城墙连接起来",
         "首先我们需要考虑这个问题的关键在于理解基本概念", "好的好的，没问题。", "答案是 42。", "abc abc"]


@st.composite
def response_text(draw, earlier: list[str]) -> str:
    kind = draw(st.integers(0, 5))
    if kind == 0 and earlier:  # an exact copy, its whitespace changed
        text = draw(st.sampled_from(earlier))
        return text.replace("。", "。\n ") if draw(st.booleans()) else " " + text + "\n"
    if kind == 1 and earlier:  # a near copy: a few characters changed, added or removed
        chars = list(draw(st.sampled_from(earlier)))
        for _ in range(draw(st.integers(0, 3))):
            at = draw(st.integers(0, len(chars)))
            op = draw(st.integers(0, 2))
            if op == 0:
                chars.insert(at, draw(st.sampled_from("的了是在有")))
            elif chars and at < len(chars):
                if op == 1:
                    chars[at] = draw(st.sampled_from("的了是在有"))
                else:
                    del chars[at]
        return "".join(chars)
    if kind == 2:  # short ones, blanks included
        return draw(st.sampled_from(["", "  ", "好", "好的", "42", "是的。", "嗯"]))
    if kind == 3:  # long ones, for the length outlier
        return draw(st.sampled_from(BASES)) * draw(st.integers(3, 12))
    pieces = draw(st.lists(st.sampled_from(BASES + ["的", "了", "，", "\n"]), min_size=1, max_size=6))
    return "".join(pieces)


@st.composite
def big_prompt(draw) -> Prompt:
    texts: list[str] = []
    for _ in range(draw(st.integers(0, 14))):
        texts.append(draw(response_text(texts)))
    responses = [Response(f"r{i}", t, model=draw(st.sampled_from(["qwen", None]))) for i, t in enumerate(texts)]
    rank = {r.id: i % 3 for i, r in enumerate(responses)} if draw(st.booleans()) else None
    comparisons = [Comparison(responses[i].id, responses[i + 1].id, "g") for i in range(len(responses) - 1)]
    return Prompt("p", "请介绍一下长城。", responses, rank=rank, comparisons=comparisons)


@st.composite
def filter_configs(draw) -> FilterConfig:
    rules = tuple(r for r in RULES if r in ("duplicate", "near_duplicate", "length_outlier") or draw(st.booleans()))
    if draw(st.booleans()):
        rules = tuple(r for r in rules if draw(st.integers(0, 3)))  # sometimes drop 7-9 too
    return FilterConfig(
        rules=rules or ("near_duplicate",),
        near_duplicate_threshold=draw(st.one_of(st.sampled_from([0.3, 0.5, 0.8, 0.9, 1.0]),
                                                st.floats(0.05, 1.0))),
        shingle_size=draw(st.integers(1, 6)),
        length_outlier_ratio=draw(st.sampled_from([1.2, 2.0, 4.0])),
        outlier_min_chars=draw(st.sampled_from([0, 20, 60])),
        min_responses=draw(st.integers(1, 3)))


# ----------------------------------------------------------------------------- filter properties

@FAST
@given(big_prompt(), filter_configs())
def test_filter_matches_the_plain_reference(prompt, config):
    kept, records = filter_prompt(prompt, config)
    ids, ref_records = reference_filter(prompt, config)
    assert records == ref_records
    assert (None if kept is None else kept.response_ids()) == ids


@FAST
@given(st.lists(big_prompt(), max_size=4), filter_configs())
def test_batched_filter_matches_the_plain_reference(prompts, config):
    prompts = [replace(p, id=f"p{i}") for i, p in enumerate(prompts)]
    result = filter_prompts(prompts, config)
    expected_kept, expected_records = [], []
    for p in prompts:
        ids, records = reference_filter(p, config)
        expected_records.extend(records)
        if ids is not None:
            expected_kept.append((p.id, ids))
    assert result.removed == expected_records
    assert [(p.id, p.response_ids()) for p in result.kept] == expected_kept


def test_near_duplicate_chains_keep_the_first_match():
    # r1 is like r0, r2 like r1 but not like r0: r1 goes, so r2 is compared with r0 only
    a = "甲乙丙丁戊己庚辛壬癸子丑寅卯辰巳午未申酉"
    b = a[:-2] + "戌亥"
    c = b[:-4] + "天地玄黄"
    cfg = FilterConfig(rules=("near_duplicate",), near_duplicate_threshold=0.7, shingle_size=2, min_responses=1)
    p = Prompt("p", "问", [Response("r0", a), Response("r1", b), Response("r2", c)])
    assert filter_prompt(p, cfg)[1] == reference_filter(p, cfg)[1]
    assert [r["response_id"] for r in filter_prompt(p, cfg)[1]] == ["r1"]


@pytest.mark.parametrize("k, threshold", [(5, 0.9), (3, 0.5), (6, 0.8), (5, 0.3)])
def test_wide_alphabets_match_the_plain_reference(k, threshold):
    """Thousands of distinct characters: a 5-character shingle no longer fits one 64-bit word,
    so shingles are told apart on a hash and checked column by column."""
    p = big_row(300, seed=k)
    assert len(set("".join(r.content for r in p.responses))) > 4096
    config = FilterConfig(shingle_size=k, near_duplicate_threshold=threshold, min_responses=1)
    records = filter_prompt(p, config)[1]
    assert records == reference_filter(p, config)[1]
    assert {r["rule"] for r in records} >= {"duplicate", "near_duplicate"}


def test_hash_collisions_fall_back_to_sorting_the_columns(monkeypatch):
    """Every shingle hashed alike: the runs of equal hashes hold different shingles, which
    is seen, and the exact lexsort decides."""
    monkeypatch.setattr(near_duplicates, "mix_columns", lambda columns: np.zeros(len(columns[0]), np.uint64))
    p = big_row(120, seed=3)
    assert len(set("".join(r.content for r in p.responses))) > 4096  # more than one column
    config = FilterConfig(near_duplicate_threshold=0.5, min_responses=1)
    assert filter_prompt(p, config)[1] == reference_filter(p, config)[1]


# ----------------------------------------------------------------------------- debias reference

def reference_debias(prompts: list[Prompt], *, seed: int, tolerance: int = 0) -> tuple[list[Prompt], dict]:
    """:func:`length_debias` as it was: classify, draw and drop one comparison at a time."""
    staged, kinds, where, ranked = [], [], {"chosen_longer": [], "chosen_shorter": []}, 0
    for i, p in enumerate(prompts):
        if p.rank is None:
            q = replace(p, comparisons=list(p.comparisons), extra=dict(p.extra))
        else:
            ranked += 1
            extra = dict(p.extra)
            if p.comparisons:
                extra[SET_ASIDE_KEY] = list(p.extra.get(SET_ASIDE_KEY, [])) + [c.to_dict() for c in p.comparisons]
            q = replace(p, rank=None, comparisons=rank_comparisons(p.rank), extra=extra)
        check_comparisons(q)
        lengths = {r.id: text_length(r.content) for r in q.responses}
        row = []
        for j, c in enumerate(q.comparisons):
            kind = reference_kind(c, lengths, tolerance)
            row.append(kind)
            if kind in where:
                where[kind].append((i, j))
        staged.append(q)
        kinds.append(row)
    n_longer, n_shorter = len(where["chosen_longer"]), len(where["chosen_shorter"])
    cut = "chosen_longer" if n_longer > n_shorter else "chosen_shorter" if n_shorter > n_longer else None
    drop: dict[int, set[int]] = {}
    if cut is not None:
        pool = where[cut]
        rng = np.random.default_rng(seed)
        for k in rng.choice(len(pool), size=abs(n_longer - n_shorter), replace=False).tolist():
            i, j = pool[k]
            drop.setdefault(i, set()).add(j)
    return reference_drop(staged, kinds, drop, cut)


def reference_kind(c: Comparison, lengths: dict[str, int], tolerance: int) -> str:
    if c.label == "s":
        return "ties"
    d = lengths[c.a] - lengths[c.b]
    if c.label == "b":
        d = -d
    if d > tolerance:
        return "chosen_longer"
    if d < -tolerance:
        return "chosen_shorter"
    return "similar"


def reference_drop(staged: list[Prompt], kinds: list[list[str]], drop: dict[int, set[int]],
                   cut: str | None) -> tuple[list[Prompt], dict]:
    """The prompts without the drawn comparisons and the counts the report is made from."""
    out, before, dropped, without_pairs = [], {}, Counter(), 0
    for i, q in enumerate(staged):
        cat = q.main_category
        before.setdefault(cat, Counter()).update(kinds[i])
        gone = drop.get(i)
        if gone:
            dropped[cat] += len(gone)
            record = [{**q.comparisons[j].to_dict(), "dropped": "length_debias"} for j in sorted(gone)]
            extra = dict(q.extra)
            extra[DROPPED_KEY] = list(q.extra.get(DROPPED_KEY, [])) + record
            q = replace(q, comparisons=[c for j, c in enumerate(q.comparisons) if j not in gone], extra=extra)
        if not any(c.label != "s" for c in q.comparisons):
            without_pairs += 1
        out.append(q)
    total_before = sum(before.values(), Counter())
    return out, {"before": {k: total_before[k] for k in KINDS}, "dropped": sum(dropped.values()),
                 "downsampled": cut, "prompts_without_pairs": without_pairs,
                 "by_category_dropped": {cat: dropped[cat] for cat in sorted(before)}}


# ----------------------------------------------------------------------------- debias properties

TEXT = st.text(alphabet="你好世界春风明月ab \n", max_size=30)


@st.composite
def debias_prompts(draw) -> list[Prompt]:
    out = []
    for i in range(draw(st.integers(0, 6))):
        n = draw(st.integers(2, 7))
        responses = [Response(f"r{k}", draw(TEXT)) for k in range(n)]
        category = draw(st.sampled_from([[], ["写作"], ["代码"]]))
        extra = {DROPPED_KEY: [{"a": "r0", "b": "r1", "label": "g"}]} if draw(st.integers(0, 5)) == 0 else {}
        pairs = draw(st.lists(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1), st.sampled_from("gbs")),
                              max_size=12))
        comparisons = [Comparison(f"r{a}", f"r{b}", label, annotator="甲") for a, b, label in pairs if a != b]
        rank = None
        if draw(st.integers(0, 3)) == 0:
            rank = {r.id: draw(st.integers(0, 3)) for r in responses}
        out.append(Prompt(f"p{i}", "写一段话。", responses, rank=rank, comparisons=comparisons,
                          category=category, extra=extra))
    return out


@FAST
@given(debias_prompts(), st.integers(0, 2**32), st.integers(0, 3))
def test_debias_matches_the_plain_reference(prompts, seed, tolerance):
    out, report = length_debias(prompts, seed=seed, tolerance=tolerance)
    ref_out, ref = reference_debias(prompts, seed=seed, tolerance=tolerance)
    assert [p.to_dict() for p in out] == [p.to_dict() for p in ref_out]
    assert [p.extra for p in out] == [p.extra for p in ref_out]
    assert {k: report["before"][k] for k in KINDS} == ref["before"]
    assert (report["dropped"], report["downsampled"], report["prompts_without_pairs"]) == (
        ref["dropped"], ref["downsampled"], ref["prompts_without_pairs"])
    assert {cat: row["dropped"] for cat, row in report["by_category"].items()} == ref["by_category_dropped"]


# ----------------------------------------------------------------------------- one big prompt

PHRASES = ["首先", "我们需要", "考虑", "这个问题", "的关键在于", "理解", "基本概念", "其次", "可以通过", "分析数据",
           "得出结论", "例如", "在实际应用中", "需要注意", "性能", "安全性", "总之", "综上所述", "用户", "模型",
           "Python", "API", "，", "。", "；", "因此", "但是", "另外", "具体来说", "历史", "文化", "经济"]


def big_row(n: int, seed: int = 0) -> Prompt:
    """One prompt with ``n`` responses of 50-800 characters, 5% copies and 5% near copies, and
    three comparisons per response."""
    rng = random.Random(seed)
    responses: list[Response] = []
    for i in range(n):
        u = rng.random()
        if responses and u < 0.05:
            text = rng.choice(responses).content.replace("。", "。\n")
        elif responses and u < 0.10:
            chars = list(rng.choice(responses).content)
            for _ in range(max(1, len(chars) // 100)):
                chars[rng.randrange(len(chars))] = rng.choice("的了是在有")
            text = "".join(chars)
        else:
            size, parts = rng.randint(50, 800), []
            while sum(map(len, parts)) < size:
                parts.append(rng.choice(PHRASES) + chr(0x4E00 + rng.randrange(20000)))
            text = "".join(parts)[:size]
        responses.append(Response(f"r{i}", text))
    comparisons = [Comparison(f"r{i}", f"r{rng.randrange(n)}", rng.choice("gbs")) for i in range(n) for _ in range(3)]
    return Prompt("big", "请回答这个问题。", responses, comparisons=[c for c in comparisons if c.a != c.b])


def test_one_prompt_with_many_responses_is_filtered_and_debiased_quickly():
    """10,000 responses: the near-linear filter and debias. Times are printed, not asserted (the
    benchmark `benchmarks/bench_big_prompt.py` measures them against the plain approach); the
    result is checked against what the rules must find."""
    p = big_row(10_000)
    start = time.perf_counter()
    result = filter_prompts([p])
    filtered = time.perf_counter() - start
    report = result.report()
    assert report["balanced"] and report["input_responses"] == 10_000
    assert report["removed_by_rule"]["duplicate"] > 300 and report["removed_by_rule"]["near_duplicate"] > 300
    start = time.perf_counter()
    out, deb = length_debias([p], seed=0)
    debiased = time.perf_counter() - start
    assert deb["after"]["chosen_longer"] == deb["after"]["chosen_shorter"]
    print(f"\n10,000 responses: filter {filtered:.2f} s, debias {debiased:.2f} s")
