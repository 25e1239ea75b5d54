"""Identical responses score identically: each distinct conversation is encoded and scored
once, so the scores of repeated responses cannot drift apart with batch size (and the tie
rule is never decided by float noise)."""

from __future__ import annotations

import pytest

from tests.tiny_models import require_models_extra

require_models_extra()

from cheems.metrics import evaluate  # noqa: E402
from cheems.records import Prompt, Response  # noqa: E402
from cheems.scoring.transformers_rm import load_reward_model, score_prompts  # noqa: E402


def bench_with_twins(prompts: list[Prompt]) -> list[Prompt]:
    """Each prompt's best and worst responses made identical in content (different ids), and a
    prompt repeated under another id, so the same conversation occurs across prompts too."""
    out = []
    for p in prompts[:6]:
        rs = list(p.responses)
        twin = Response(rs[-1].id + "-twin", rs[0].content)
        out.append(Prompt(p.id, p.prompt, rs[:-1] + [twin], {r.id: k for k, r in enumerate(rs[:-1] + [twin])},
                          category=p.category, subset="twins"))
    first = out[0]
    out.append(Prompt(first.id + "-again", first.prompt, list(first.responses), dict(first.rank),
                      category=first.category, subset="twins"))
    return out


@pytest.mark.parametrize("batch_size, token_budget", [(1, None), (2, None), (3, 64), (7, None), (64, 4096)])
def test_identical_conversations_score_identically(seq_cls_model, tiny_prompts, batch_size, token_budget):
    rm = load_reward_model(seq_cls_model)
    bench = bench_with_twins(tiny_prompts)
    scores = {}
    for batch in score_prompts(rm, bench, batch_size=batch_size, token_budget=token_budget):
        scores.update(((pid, rid), s) for pid, rid, s in batch)
    assert len(scores) == sum(len(p.responses) for p in bench)
    for p in bench:
        best, worst = p.responses[0], p.responses[-1]
        assert best.content == worst.content
        assert scores[(p.id, best.id)] == scores[(p.id, worst.id)]  # exactly, not approximately
    again = bench[-1]
    assert [scores[(again.id, r.id)] for r in again.responses] == [scores[(bench[0].id, r.id)]
                                                                    for r in bench[0].responses]
    # the twins tie, so the official rule keeps Exact Match unless another pair is reversed
    report = evaluate(bench, scores, n_bootstrap=0)
    assert report["subsets"]["twins"]["n_tied"] >= len(bench)


def test_each_distinct_conversation_is_encoded_once(seq_cls_model, tiny_prompts):
    rm = load_reward_model(seq_cls_model)
    bench = bench_with_twins(tiny_prompts)
    seen = []
    for batch in score_prompts(rm, bench, progress=lambda done, total: seen.append((done, total))):
        pass
    distinct = {(p.prompt if isinstance(p.prompt, str) else str(p.prompt), r.content)
                for p in bench for r in p.responses}
    assert rm.stats.sequences == len(distinct) < sum(len(p.responses) for p in bench)
    total = sum(len(p.responses) for p in bench)
    assert seen[0] == (0, total) and seen[-1] == (total, total)
    a, b = (bench[0].prompt, bench[0].responses[0].content), (bench[0].prompt, bench[0].responses[1].content)
    got = rm.score([a, b, a, a], batch_size=2)  # the scorer interface shares one score too
    assert got[0] == got[2] == got[3] and len(set(got)) == 2
