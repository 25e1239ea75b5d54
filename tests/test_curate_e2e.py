"""The curation pipeline end to end, as a user runs it: `cheems curate sample -> filter -> judge
-> resolve -> debias -> merge` through the CLI, on the bundled prompts, against a loopback
OpenAI-compatible server that plays both the response models and the judge, with a tiny reward
model trained in the test on the human subset. Every stage's counts must add up."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from tests.conftest import HANG_TIMEOUT_S, kill_when, run_cli_in
from tests.openai_server import Call, JudgeServer, Reply, held_from, quality
from tests.test_trainer import ranked, write
from tests.tiny_models import ONE_THREAD_ENV, require_models_extra

require_models_extra()
import torch  # noqa: E402

from cheems.formats import read_prompts  # noqa: E402
from cheems.graph import resolve_conflicts  # noqa: E402

JUDGE_MARK = "【回答A 开始"
POINTS = ["首先要弄清题目真正问的是什么，再决定从哪里入手。", "其次可以把大问题拆成几个小步骤，逐个解决。",
          "如果条件不够，就先列出已知信息和缺少的信息。", "举一个具体的例子，往往比抽象的说明更容易懂。",
          "最后别忘了回头检查结论是否和前提一致。", "不同的人可能有不同的做法，这里只给出一种常见思路。",
          "遇到拿不准的地方，可以查阅可靠的资料再下结论。", "时间有限时，优先处理最关键的那一部分。",
          "写成文字之前，先在纸上画个简单的草图会很有帮助。", "和别人讨论一下，常能发现自己没注意到的漏洞。",
          "需要计算的地方，建议把每一步都写清楚。", "结论部分要简洁，最好一两句话就能说明白。"]


def _h(*parts) -> int:
    return int(hashlib.md5("|".join(map(str, parts)).encode("utf-8")).hexdigest()[:8], 16)


def pipeline_server_script(call: Call) -> Reply:
    """Response models and a judge behind one endpoint, deterministic in the request.

    Models: 'good' writes a Chinese answer with a planted quality marker; 'weak' does too,
    except that every third sample is English only and every fifth repeats one line, and some
    are cut off (finish_reason length); 'down' always answers 503. The judge prefers the higher
    marker but flips one verdict in five (a noisy judge, so its labels have cycles)."""
    text = call.user_text
    if JUDGE_MARK in text:
        qa, qb = [int(x) for x in __import__("re").findall(r"〔质量(\d+)〕", text)[:2]]
        verdict = "A" if qa > qb else "B" if qb > qa else "C"
        if _h(text) % 5 == 0:
            verdict = {"A": "B", "B": "A", "C": "C"}[verdict]
        return Reply(f"比较两个回答后给出判决。\n[[{verdict}]]")
    model, seed = call.body.get("model"), call.body.get("seed", 0)
    if model == "down":
        return Reply("service unavailable", status=503)
    k = _h(text, model, seed)
    q = k % 9 + 1
    picked = [POINTS[(k // 9 + 3 * i) % len(POINTS)] for i in range(2 + k % 4)]
    body = f"关于这个问题，我的看法如下。{''.join(picked)}{quality(q)}"
    if model == "weak":
        k = _h(text, seed, "weak")
        if k % 3 == 0:
            return Reply("This answer is written entirely in English without any Chinese at all, "
                         "which the language filter should catch for a Chinese prompt. " * 2 + quality(q))
        if k % 5 == 0:
            return Reply("同一句话反复出现，没有任何新的内容。\n" * 12 + quality(q))
        if k % 7 == 0:
            return Reply(body[:40], finish_reason="length")
    return Reply(body)


def _config(tmp: Path, server: JudgeServer) -> Path:
    path = tmp / "pipeline.yaml"
    path.write_text(f"""
sample:
  concurrency: 8
  max_retries: 1
  backoff: 0.0
  models:
    - {{name: good, api_base: "{server.base_url}", n: 2}}
    - {{name: weak, api_base: "{server.base_url}", n: 2}}
    - {{name: down, api_base: "{server.base_url}", n: 1}}
filter:
  min_responses: 2
judge:
  model: noisy-judge
  api_base: "{server.base_url}"
  concurrency: 8
  max_retries: 1
  backoff: 0.0
resolve:
  scope: cycles
""", encoding="utf-8")
    return path


def _report(out: Path) -> dict:
    return json.loads(out.with_name(out.name.replace(".jsonl", ".report.json")).read_text(encoding="utf-8"))


def _lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


@pytest.fixture(scope="module")
def human_rm(tmp_path_factory, seq_cls_model, tiny_prompts) -> Path:
    """A tiny reward model trained on the human subset's rankings (a few CPU seconds)."""
    from cheems.training.config import TrainConfig
    from cheems.training.trainer import train

    folder = tmp_path_factory.mktemp("human-rm")
    human = [p for p in tiny_prompts if p.subset == "human" or p.id.startswith("human")]
    data = write(folder / "human-ranked.jsonl", ranked(human or tiny_prompts))
    torch.set_num_threads(1)
    train(TrainConfig(model=str(seq_cls_model), train=[data], output=str(folder / "rm"), epochs=1,
                      learning_rate=1e-3, micro_batch_size=8, gradient_accumulation=1))
    return folder / "rm"


def test_pipeline_end_to_end_counts_add_up(tmp_path, sample_annotations, human_rm):
    env_cache = tmp_path / "cache"
    with JudgeServer(pipeline_server_script) as server:
        config = _config(tmp_path, server)

        def cli(*args):
            done = run_cli_in(tmp_path, *args, env={"CHEEMS_CACHE_DIR": str(env_cache)})
            assert done.returncode == 0, (args, done.stdout, done.stderr[-3000:])
            return done

        prompts_file = sample_annotations / "open.jsonl"
        n_prompts = len(read_prompts(prompts_file).prompts)

        # sample: every prompt accounted for, per model requested = succeeded + failed
        cli("curate", "sample", prompts_file, "--config", config, "-o", tmp_path / "sampled.jsonl")
        sampled = _lines(tmp_path / "sampled.jsonl")
        rep = _report(tmp_path / "sampled.jsonl")
        failed_rows = _lines(tmp_path / "sampled.failed.jsonl")
        assert len(sampled) + len(failed_rows) == n_prompts == rep["input_rows"] and rep["balanced"]
        assert all(len(r["responses"]) == 4 for r in sampled)  # good x2 + weak x2; down failed
        assert all({x["model"] for x in r["failed_samples"]} == {"down"} for r in sampled)

        # filter: responses in = kept + removed; the weak model's broken answers go
        cli("curate", "filter", tmp_path / "sampled.jsonl", "--config", config, "-o", tmp_path / "filtered.jsonl")
        rep = _report(tmp_path / "filtered.jsonl")
        removed = _lines(tmp_path / "filtered.removed.jsonl")
        assert rep["input_responses"] == sum(len(r["responses"]) for r in sampled)
        assert rep["input_responses"] == rep["kept_responses"] + rep["removed_responses"] and rep["balanced"]
        assert rep["removed_by_rule"]["non_chinese"] > 0 and rep["removed_by_rule"]["repetition"] > 0
        assert {r["model"] for r in removed if r["response_id"]} <= {"weak"}
        filtered = _lines(tmp_path / "filtered.jsonl")
        assert len(filtered) + rep["prompts_removed"] == len(sampled)

        # judge: all C(N,2) pairs, one order each; judgements = comparisons + unparseable + failed
        requests_before = server.requests
        cli("curate", "judge", tmp_path / "filtered.jsonl", "--config", config, "-o", tmp_path / "judged.jsonl")
        rep = _report(tmp_path / "judged.jsonl")
        pairs = sum(len(r["responses"]) * (len(r["responses"]) - 1) // 2 for r in filtered)
        assert rep["pairs"] == pairs == rep["judgements"]
        assert rep["judgements"] == rep["comparisons"] + rep["unparseable"] + rep["failed"] and rep["balanced"]
        assert server.requests - requests_before == rep["requests"] == pairs
        judged = _lines(tmp_path / "judged.jsonl")
        comparison = judged[0]["comparisons"][0]
        assert comparison["source"] == "judge" and comparison["annotator"] == "noisy-judge"
        assert comparison["order"] in ("ab", "ba") and "[[" in comparison["reply"]
        before = resolve_conflicts(read_prompts(tmp_path / "judged.jsonl").prompts)
        assert before.n_conflicts.sum() > 0  # the noisy judge made cycles

        # a rerun is answered from the cache alone and writes the same file
        first = (tmp_path / "judged.jsonl").read_bytes()
        requests_before = server.requests
        cli("curate", "judge", tmp_path / "filtered.jsonl", "--config", config, "-o", tmp_path / "judged.jsonl")
        assert server.requests == requests_before and (tmp_path / "judged.jsonl").read_bytes() == first

    # resolve with the RM trained on human data: acyclic, kept + dropped = in
    cli("curate", "resolve", tmp_path / "judged.jsonl", "--rm", human_rm, "--config", config,
        "-o", tmp_path / "resolved.jsonl")
    rep = _report(tmp_path / "resolved.jsonl")
    total = rep["total"]
    assert total["comparisons"] == rep_judged_comparisons(tmp_path) == total["kept"] + total["dropped"]
    assert total["prompts_with_conflicts_before"] > 0 and total["prompts_with_conflicts_after"] == 0
    after = resolve_conflicts(read_prompts(tmp_path / "resolved.jsonl").prompts)
    assert after.n_conflicts.sum() == 0
    assert (tmp_path / "resolved.scores.jsonl").exists()

    # debias: balanced, before = after + dropped
    cli("curate", "debias", tmp_path / "resolved.jsonl", "--seed", 0, "-o", tmp_path / "debiased.jsonl")
    rep = _report(tmp_path / "debiased.jsonl")
    assert rep["balanced"] and rep["after"]["chosen_longer"] == rep["after"]["chosen_shorter"]
    assert rep["before"]["chosen_longer"] + rep["before"]["chosen_shorter"] == total["kept"] - rep["before"]["similar"] \
        - rep["before"]["ties"]

    # merge with the human subset, then Table-1 statistics
    human = sample_annotations / "human.jsonl"
    cli("curate", "merge", "--human", human, "--judge", tmp_path / "debiased.jsonl", "-o", tmp_path / "final.jsonl")
    final = _lines(tmp_path / "final.jsonl")
    n_human = len(read_prompts(human).prompts)
    assert len(final) == n_human + len(filtered)
    assert [r["source"] for r in final] == ["human"] * n_human + ["judge"] * len(filtered)
    assert all(r.get("rank") is not None for r in final[:n_human])  # annotations ranked first
    stats = cli("stats", tmp_path / "final.jsonl")
    assert "final" in stats.stdout or "prompts" in stats.stdout.lower()

    # annotator bias of human vs judge comparisons, with plots
    plots = tmp_path / "bias"
    done = cli("analyze", "bias", human, tmp_path / "judged.jsonl", "--plots", plots)
    assert "human" in done.stdout and "judged" in done.stdout
    assert sorted(p.suffix for p in plots.iterdir()) == [".png", ".png"]


def rep_judged_comparisons(tmp_path: Path) -> int:
    return sum(len(r.get("comparisons", [])) for r in _lines(tmp_path / "judged.jsonl"))


def test_judge_stage_killed_midway_resumes_without_repeating_requests(tmp_path):
    """kill -9 while judging, rerun: the output equals an uninterrupted run's, and the two
    runs together send exactly the requests one run needs."""
    rows = []
    for i in range(6):
        rows.append({"id": f"p{i}", "prompt": f"第{i}题：请比较几种做法。", "category": ["推理"],
                     "responses": [{"id": f"r{k}", "content": f"第{k}种回答{quality((i * 7 + k * 3) % 9)}"}
                                   for k in range(5)]})
    data = write(tmp_path / "in.jsonl", rows)
    needed = 6 * 10  # pairs of 5 responses, in both orders
    # the killed run (concurrency 2) gets no reply from its half on: it asks needed // 2 + 2 times, then waits
    killed = threading.Event()
    with JudgeServer(held_from(needed + needed // 2, pipeline_server_script, released=killed)) as server:
        def judge(out: Path, cache: Path) -> subprocess.Popen:
            return subprocess.Popen([sys.executable, "-m", "cheems.cli", "curate", "judge", data, "--judge", "j",
                                     "--api-base", server.base_url, "--concurrency", "2", "--cache", str(cache),
                                     "-o", str(out)], cwd=tmp_path, stdout=subprocess.DEVNULL,
                                    stderr=subprocess.PIPE, env={**os.environ, **ONE_THREAD_ENV})

        whole = judge(tmp_path / "whole.jsonl", tmp_path / "a.sqlite")
        assert whole.wait(timeout=HANG_TIMEOUT_S) == 0
        assert server.requests == needed

        start = server.requests
        victim = judge(tmp_path / "cut.jsonl", tmp_path / "b.sqlite")
        kill_when(victim, lambda: server.requests - start >= needed // 2 + 2)
        killed.set()
        assert not (tmp_path / "cut.jsonl").exists()  # nothing half-written
        resumed = judge(tmp_path / "cut.jsonl", tmp_path / "b.sqlite")
        assert resumed.wait(timeout=HANG_TIMEOUT_S) == 0
        sent = server.requests - start
    # the requests in flight at the kill are asked again: their replies never reached the cache
    assert needed <= sent <= needed + 2
    assert (tmp_path / "cut.jsonl").read_bytes() == (tmp_path / "whole.jsonl").read_bytes()


def test_stage_errors_are_one_line(tmp_path, write_rows):
    bad = write_rows([{"id": "x", "prompt": "问题", "responses": [{"id": "a", "content": "回答"}],
                       "comparisons": [{"a": "a", "b": "zz", "label": "g"}]}], "bad.jsonl")
    done = run_cli_in(tmp_path, "curate", "debias", bad, "--seed", "0", "-o", tmp_path / "o.jsonl")
    assert done.returncode == 2 and "bad.jsonl:1: comparisons[0].b" in done.stderr and "Traceback" not in done.stderr
    assert not (tmp_path / "o.jsonl").exists()
    done = run_cli_in(tmp_path, "curate", "resolve", bad, "-o", tmp_path / "o.jsonl")
    assert done.returncode == 2 and "--scores" in done.stderr
    cfg = tmp_path / "c.yaml"
    cfg.write_text("filter:\n  max_chars: 10\n  no_such_rule: 1\n", encoding="utf-8")
    done = run_cli_in(tmp_path, "curate", "filter", bad, "--config", cfg, "-o", tmp_path / "o.jsonl")
    assert done.returncode == 2 and "filter.no_such_rule" in done.stderr
