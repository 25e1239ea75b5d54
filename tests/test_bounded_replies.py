"""Every endpoint reply is bounded by ``RetryPolicy.max_reply_bytes`` (512 KiB by default).

A real loopback server (tests/openai_server.py) answers some requests with 50 MB bodies, with
a Content-Length, chunked, or as an error status. Each such request fails its item at once
("reply over 524288 bytes"), is never retried, cached nor written; the client stops reading
at the cap, so the server never gets a whole 50 MB reply out. Checked for ``eval --judge``,
``curate judge``, ``curate sample`` and ``bon --judge``, whose output and caches stay small.
"""

from __future__ import annotations

import asyncio
import gzip
import json
import random
from pathlib import Path

import pytest

from tests.conftest import run_cli_in, write_jsonl_rows
from tests.openai_server import HUGE, JudgeServer, Reply, completion, huge_when, quality, responder, smart_judge
from cheems.llm.cache import ReplyCache
from cheems.llm.client import ReplyTooLarge, RequestFailed, RetryPolicy, ask, open_client, read_capped
from cheems.records import CheemsInputError
from cheems.settings import check_settings

pytest.importorskip("openai")

MARK = "〔巨〕"  # a prompt holding it is answered with a 50 MB reply
CAP = 512 * 1024
SMALL = 4 * 1024 * 1024  # what a run with a few small replies may leave on disk, at most


def folder_bytes(folder: Path) -> int:
    return sum(f.stat().st_size for f in folder.rglob("*") if f.is_file())


def assert_stopped_reading(server: JudgeServer, huge: int) -> None:
    """The client read no 50 MB reply whole: the server got far less onto the sockets (the
    rest of what it wrote sat in kernel buffers when the client hung up)."""
    assert server.bytes_sent < huge * HUGE * 3 // 4, (server.bytes_sent, huge)


# ----------------------------------------------------------------------------- one request

async def ask_once(base_url: str, text: str, policy: RetryPolicy, cache: ReplyCache | None = None):
    client = open_client(base_url, "EMPTY", policy)
    stats = {"requests": 0}
    try:
        return await ask(client, lambda: [{"role": "user", "content": text}], model="m", sampling={},
                         policy=policy, gate=asyncio.Semaphore(1), stats=stats, jitter=random.Random(0),
                         cache=cache, key=text), stats
    finally:
        await client.close()


@pytest.mark.parametrize("declare_length", [True, False], ids=["content-length", "chunked"])
@pytest.mark.parametrize("status", [200, 500])
def test_a_huge_reply_fails_at_once_read_no_further_than_the_cap(tmp_path, declare_length, status):
    policy = RetryPolicy(max_retries=3, backoff=0.0)
    with JudgeServer(huge_when(MARK, smart_judge, declare_length=declare_length, status=status)) as server, \
            ReplyCache(tmp_path / "c.sqlite") as cache:
        with pytest.raises(RequestFailed) as e:
            asyncio.run(ask_once(server.base_url, f"题目{MARK}", policy, cache))
        assert str(e.value).startswith(f"reply over {CAP} bytes"), e.value
        if declare_length:
            assert f"({HUGE} declared)" in str(e.value)
        assert server.requests == 1  # not retried: the same endpoint would send it again
        assert_stopped_reading(server, 1)
        assert len(cache) == 0
        reply, _ = asyncio.run(ask_once(server.base_url, "题目", policy, cache))  # the client still works
        assert reply.text and len(cache) == 1
    assert (tmp_path / "c.sqlite").stat().st_size < SMALL


def test_the_cap_is_a_setting():
    text = "好" * 600  # about 1.8 KB of UTF-8 inside JSON
    with JudgeServer(lambda call: Reply(text)) as server:
        reply, _ = asyncio.run(ask_once(server.base_url, "x", RetryPolicy(max_reply_bytes=4096)))
        assert reply.text == text
        with pytest.raises(RequestFailed, match="reply over 1024 bytes"):
            asyncio.run(ask_once(server.base_url, "x", RetryPolicy(max_reply_bytes=1024, max_retries=2)))
        assert server.requests == 2
    with pytest.raises(CheemsInputError, match="max_reply_bytes"):
        check_settings(RetryPolicy(max_reply_bytes=100))
    assert RetryPolicy().max_reply_bytes == CAP


def test_a_compressed_reply_is_capped_as_it_is_decoded():
    body = json.dumps(completion("m", "好" * 200_000), ensure_ascii=False).encode()  # 600 KB, a few KB gzipped
    packed = gzip.compress(body)
    assert len(packed) < 16_384 < len(body)
    with JudgeServer(lambda call: Reply(raw=packed, headers={"Content-Encoding": "gzip"})) as server:
        reply, _ = asyncio.run(ask_once(server.base_url, "x", RetryPolicy(max_reply_bytes=1 << 20)))
        assert reply.text == "好" * 200_000
        with pytest.raises(RequestFailed, match="reply over 16384 bytes$"):
            asyncio.run(ask_once(server.base_url, "x", RetryPolicy(max_reply_bytes=16_384)))


def test_read_capped_stops_at_the_chunk_that_passes_the_cap():
    pulled = []

    async def chunks():
        for i in range(100):
            pulled.append(i)
            yield b"x" * 100

    assert asyncio.run(read_capped(chunks(), 10_000)) == b"x" * 10_000
    pulled.clear()
    with pytest.raises(ReplyTooLarge, match="reply over 250 bytes"):
        asyncio.run(read_capped(chunks(), 250))
    assert pulled == [0, 1, 2]


# ----------------------------------------------------------------------------- the commands

def bench_rows(n: int = 6) -> list[dict]:
    """Ranked prompts with the quality marker the fake judge reads; every odd prompt holds MARK."""
    rows = []
    for k in range(n):
        texts = ["答案是12，因为3乘4。", "答案是十二。", "不知道"]
        rows.append({"id": f"p{k}", "prompt": f"第{k}题：3乘4等于几？" + (MARK if k % 2 else ""),
                     "category": ["数学"], "subset": "open",
                     "responses": [{"id": f"r{i}", "content": quality(3 - i) + t} for i, t in enumerate(texts)],
                     "rank": {f"r{i}": i for i in range(3)}})
    return rows


def cli(tmp_path: Path, *args):
    done = run_cli_in(tmp_path, *args, env={"CHEEMS_CACHE_DIR": str(tmp_path / "cache")})
    assert done.returncode == 0, (args, done.stdout, done.stderr[-3000:])
    assert "Traceback" not in done.stderr
    return done


def test_eval_judge_counts_huge_replies_as_failed(tmp_path):
    bench = write_jsonl_rows(tmp_path / "bench.jsonl", bench_rows())
    with JudgeServer(huge_when(MARK, smart_judge, declare_length=False)) as server:
        cli(tmp_path, "eval", bench, "--judge", "j", "--api-base", server.base_url, "--cache",
            tmp_path / "judge.sqlite", "--json", "report.json", "--bootstrap", "0")
        huge = 3 * 3 * 2  # three marked prompts, three pairs each, both orders
        assert server.requests == 2 * huge
        assert_stopped_reading(server, huge)
    report = json.loads((tmp_path / "report.json").read_text(encoding="utf-8"))
    assert report["errors"] == huge and report["requests"] == 2 * huge
    errors = [j["error"] for p in report["pairs"] for j in p["judgements"].values() if j["error"]]
    assert errors == [f"reply over {CAP} bytes"] * huge
    with ReplyCache(tmp_path / "judge.sqlite") as cache:
        assert len(cache) == huge
    assert folder_bytes(tmp_path) < SMALL


def test_curate_judge_counts_huge_replies_as_failed(tmp_path):
    rows = [{k: v for k, v in r.items() if k != "rank"} for r in bench_rows()]
    data = write_jsonl_rows(tmp_path / "filtered.jsonl", rows)
    with JudgeServer(huge_when(MARK, smart_judge)) as server:
        cli(tmp_path, "curate", "judge", data, "--judge", "j", "--api-base", server.base_url, "-o",
            tmp_path / "judged.jsonl")
        huge = 3 * 3  # three marked prompts, three pairs each, one order
        assert server.requests == 2 * huge
        assert_stopped_reading(server, huge)
    report = json.loads((tmp_path / "judged.report.json").read_text(encoding="utf-8"))
    assert report["failed"] == huge and report["pairs"] == 2 * huge
    assert folder_bytes(tmp_path) < SMALL


def test_curate_sample_counts_huge_replies_as_failed(tmp_path):
    prompts = write_jsonl_rows(tmp_path / "prompts.jsonl", [{"id": r["id"], "prompt": r["prompt"]}
                                                             for r in bench_rows()])
    with JudgeServer(huge_when(MARK, responder)) as server:
        config = tmp_path / "sample.yaml"
        config.write_text(f"sample:\n  max_retries: 2\n  backoff: 0.0\n  models:\n"
                          f"    - {{name: chat, api_base: \"{server.base_url}\", n: 2}}\n", encoding="utf-8")
        done = cli(tmp_path, "curate", "sample", prompts, "--config", config, "-o", tmp_path / "sampled.jsonl")
        huge = 3 * 2  # three marked prompts, two samples each
        assert server.requests == 2 * huge
        assert_stopped_reading(server, huge)
    assert f"({huge} failed)" in done.stdout
    sampled = [json.loads(line) for line in (tmp_path / "sampled.jsonl").read_text(encoding="utf-8").splitlines()]
    assert [r["id"] for r in sampled] == ["p0", "p2", "p4"]
    failed = [json.loads(line) for line in (tmp_path / "sampled.failed.jsonl").read_text(encoding="utf-8").splitlines()]
    assert [r["id"] for r in failed] == ["p1", "p3", "p5"]
    assert {s["error"] for r in failed for s in r["failed_samples"]} == {f"reply over {CAP} bytes ({HUGE} declared)"}
    assert folder_bytes(tmp_path) < SMALL


def test_bon_judge_counts_huge_replies_as_failed(tmp_path):
    bench = write_jsonl_rows(tmp_path / "bench.jsonl", bench_rows())
    write_jsonl_rows(tmp_path / "scores.jsonl", [{"prompt_id": r["id"], "response_id": f"r{i}", "score": -i}
                                                 for r in bench_rows() for i in range(3)])
    with JudgeServer(huge_when(MARK, smart_judge)) as server:
        done = cli(tmp_path, "bon", bench, "--scores", "scores.jsonl", "--judge", "j", "--api-base",
                   server.base_url, "--cache", tmp_path / "judge.sqlite", "--baseline", "r2", "--json", "bon.json")
        huge = 3 * 2  # three marked prompts, both orders
        assert server.requests == 2 * huge
        assert_stopped_reading(server, huge)
    judged = json.loads((tmp_path / "bon.json").read_text(encoding="utf-8"))["judged"]
    assert judged["errors"] == huge and judged["scored_prompts"] == 3, (judged, done.stdout)
    assert folder_bytes(tmp_path) < SMALL
