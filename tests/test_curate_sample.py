"""Sampling responses from several models (cheems.curation.sample) against a real
OpenAI-compatible HTTP server on loopback (tests/openai_server.py): request shape, response
ids and order, retries and failures, accounting, resuming from the SQLite cache after a
cancelled, failed or killed run, config validation and prompt files."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import orjson
import pytest

from tests.conftest import REPO_ROOT, kill_when
from cheems.curation.sample import (PromptRow, SampleConfig, SampleModel, default_sample_cache_path,
                                    read_prompt_rows, sample_responses)
from cheems.formats import read_prompts
from cheems.io import write_jsonl
from cheems.records import CheemsInputError, Prompt, Response
from cheems.llm.cache import ReplyCache, default_cache_path
from tests.openai_server import Call, JudgeServer, Reply, by_model, failing, held_from, responder, with_faults


CHAT = [{"role": "system", "content": "你是一位诗人。"},
        {"role": "user", "content": "写两句关于秋天的诗。"},
        {"role": "assistant", "content": "秋风起兮白云飞。"},
        {"role": "user", "content": "再写两句，要提到桂花。"}]
BRACES = "请解释 Python 里 str.format 的 {0} 和 {name} 占位符，以及 %s 的用法。"


def prompts() -> list[PromptRow]:
    return [PromptRow("p1", "介绍一下长城的历史。", ["知识", "历史"], "open", {"source": "人工"}),
            PromptRow("p2", CHAT, ["创作", "诗歌"], "human"),
            PromptRow("p3", BRACES, ["代码"], "open")]


def two_models(server: JudgeServer, **kw) -> list[SampleModel]:
    """qwen: 2 samples per prompt; glm: 1, with a system message."""
    return [SampleModel("qwen", api_base=server.base_url, model="qwen-fake", n=2, **kw),
            SampleModel("glm", api_base=server.base_url, model="glm-fake", system="你是一个乐于助人的助手。", **kw)]


def config(models: list[SampleModel], tmp_path: Path, name: str = "samples.sqlite", **kw) -> SampleConfig:
    kw.setdefault("timeout", 60.0)  # room for a loaded machine: a reply slower than this would be resent
    kw.setdefault("backoff", 0.01)
    kw.setdefault("max_backoff", 0.05)
    return SampleConfig(models, cache_path=tmp_path / name, **kw)


def dump(result) -> bytes:
    """The output file's bytes."""
    return b"".join(orjson.dumps(row, option=orjson.OPT_APPEND_NEWLINE) for row in result.rows())


N_REQUESTS = 3 * (2 + 1)  # 3 prompts x (qwen 2 + glm 1)


@pytest.fixture
def server():
    with JudgeServer(by_model({"qwen-fake": responder, "glm-fake": responder}), latency=0.005) as s:
        yield s


# ----------------------------------------------------------------------------- sampling

def test_each_model_gives_its_samples_in_config_order(server, tmp_path):
    def slow_first(call: Call) -> Reply:  # sample 0 of qwen arrives last
        reply = responder(call)
        if call.body["model"] == "qwen-fake" and call.body["seed"] == 0:
            reply.delay = 0.1
        return reply

    server.script = by_model({"qwen-fake": slow_first, "glm-fake": responder})
    result = sample_responses(prompts(), config(two_models(server), tmp_path))
    assert server.requests == N_REQUESTS
    assert [p.id for p in result.prompts] == ["p1", "p2", "p3"] and result.failed == []
    for p, given in zip(result.prompts, prompts()):
        assert p.prompt == given.prompt and p.category == given.category and p.subset == given.subset
        assert [r.id for r in p.responses] == ["qwen-0", "qwen-1", "glm-0"]
        assert [r.model for r in p.responses] == ["qwen", "qwen", "glm"]
        assert [r.extra for r in p.responses] == [{"finish_reason": "stop", "sample": k} for k in (0, 1, 0)]
        seeds = ["第0号", "第1号", "第0号"]
        assert all(s in r.content and r.model + "-fake" in r.content for s, r in zip(seeds, p.responses))
    assert result.prompts[0].extra == {"source": "人工"}
    row = next(result.rows())
    assert row["responses"][0] == {"id": "qwen-0", "content": result.prompts[0].responses[0].content,
                                   "model": "qwen", "finish_reason": "stop", "sample": 0}

    # what the server was asked: sampling parameters, per-sample seeds, messages
    bodies = [c.body for c in server.calls]
    assert all(b["temperature"] == 0.8 and b["top_p"] == 0.95 and b["max_tokens"] == 2048 for b in bodies)
    assert sorted((b["model"], b["seed"]) for b in bodies) == sorted(
        [("qwen-fake", 0), ("qwen-fake", 1), ("glm-fake", 0)] * 3)
    asked = {(b["model"], b["messages"][-1]["content"]): b["messages"] for b in bodies}
    assert asked[("qwen-fake", "介绍一下长城的历史。")] == [{"role": "user", "content": "介绍一下长城的历史。"}]
    assert asked[("glm-fake", "介绍一下长城的历史。")] == [{"role": "system", "content": "你是一个乐于助人的助手。"},
                                                    {"role": "user", "content": "介绍一下长城的历史。"}]
    assert asked[("glm-fake", CHAT[-1]["content"])] == CHAT  # its own system message is kept
    assert asked[("qwen-fake", BRACES)][-1]["content"] == BRACES  # prompt text is data, sent verbatim

    report = result.report()
    assert report["prompts"] == {"in": 3, "out": 3, "failed": 0}
    assert report["requests"] == {"total": 9, "unique": 9, "succeeded": 9, "failed": 0, "cached": 0,
                                  "sent": 9, "generated": 0, "truncated": 0}
    assert report["models"]["qwen"] == {"requested": 6, "succeeded": 6, "failed": 0, "cached": 0, "sent": 6,
                                        "generated": 0, "truncated": 0}
    assert report["models"]["glm"]["requested"] == 3 and report["responses_per_prompt"] == 3.0

    # the order does not depend on completion order: one request at a time gives the same bytes
    server.script = by_model({"qwen-fake": responder, "glm-fake": responder})
    serial = sample_responses(prompts(), config(two_models(server), tmp_path, "serial.sqlite", concurrency=1))
    assert dump(serial) == dump(result)


def test_seed_and_sampling_parameters_are_sent(server, tmp_path):
    models = [SampleModel("qwen", api_base=server.base_url + "/", model="qwen-fake", n=3, temperature=0.3,
                          top_p=0.5, max_tokens=512)]
    result = sample_responses(prompts()[:1], config(models, tmp_path, seed=10))
    assert sorted(c.body["seed"] for c in server.calls) == [10, 11, 12]
    assert {(c.body["temperature"], c.body["top_p"], c.body["max_tokens"]) for c in server.calls} == {(0.3, 0.5, 512)}
    assert ["第10号" in r.content for r in result.prompts[0].responses] == [True, False, False]


def test_identical_requests_are_sent_once(server, tmp_path):
    rows = [PromptRow("a", "你好"), PromptRow("b", "你好"), PromptRow("c", "再见")]
    result = sample_responses(rows, config(two_models(server), tmp_path))
    assert server.requests == 2 * 3
    a, b, _ = result.prompts
    assert [r.content for r in a.responses] == [r.content for r in b.responses]
    report = result.report()
    assert report["requests"]["total"] == 9 and report["requests"]["unique"] == 6
    assert report["requests"]["succeeded"] == 9 and report["requests"]["sent"] == 6


def test_cut_off_answers_record_finish_reason_length(server, tmp_path):
    models = [SampleModel("qwen", api_base=server.base_url, model="qwen-fake", max_tokens=12),
              SampleModel("glm", api_base=server.base_url, model="glm-fake")]
    result = sample_responses(prompts(), config(models, tmp_path))
    for p in result.prompts:
        cut, whole = p.responses
        assert cut.extra["finish_reason"] == "length" and len(cut.content) == 12
        assert whole.extra["finish_reason"] == "stop" and len(whole.content) > 12
    assert result.report()["models"]["qwen"]["truncated"] == 3
    assert result.report()["requests"]["truncated"] == 3


# ----------------------------------------------------------------------------- failures

def test_rate_limits_and_server_errors_are_retried(server, tmp_path):
    faults = [429, 500, 503, 429]
    server.script = with_faults(by_model({"qwen-fake": responder, "glm-fake": responder}), statuses=faults)
    result = sample_responses(prompts(), config(two_models(server), tmp_path, concurrency=2))
    assert server.requests == N_REQUESTS + len(faults)
    assert result.report()["requests"]["sent"] == N_REQUESTS + len(faults)
    assert result.report()["requests"]["failed"] == 0
    assert all(len(p.responses) == 3 and "failed_samples" not in p.extra for p in result.prompts)


@pytest.mark.parametrize("status, attempts", [(500, 3), (400, 1)])
def test_a_failing_model_is_recorded_per_row_and_retried_next_run(server, tmp_path, status, attempts):
    server.script = by_model({"qwen-fake": responder, "glm-fake": failing(status)})
    cfg = config(two_models(server), tmp_path, max_retries=2)
    result = sample_responses(prompts(), cfg)
    assert server.requests == 3 * 2 + 3 * attempts  # a 400 is not retried
    assert [p.id for p in result.prompts] == ["p1", "p2", "p3"] and result.failed == []
    for p in result.prompts:
        assert [r.id for r in p.responses] == ["qwen-0", "qwen-1"]
        [failure] = p.extra["failed_samples"]
        assert failure["model"] == "glm" and failure["sample"] == 0 and f"HTTP {status}" in failure["error"]
        if status == 500:
            assert "3 attempts" in failure["error"]
        assert p.to_dict()["failed_samples"] == [failure]
    report = result.report()
    assert report["models"]["glm"] == {"requested": 3, "succeeded": 0, "failed": 3, "cached": 0,
                                       "sent": 3 * attempts, "generated": 0, "truncated": 0}
    assert report["requests"]["total"] == report["requests"]["succeeded"] + report["requests"]["failed"]

    # failures were not cached: the rerun asks for them only
    server.script = by_model({"qwen-fake": responder, "glm-fake": responder})
    before = server.requests
    again = sample_responses(prompts(), cfg)
    assert server.requests - before == 3
    assert all("failed_samples" not in p.extra and len(p.responses) == 3 for p in again.prompts)
    assert again.report()["requests"]["cached"] == 6


def test_a_prompt_whose_every_request_fails_has_no_row(server, tmp_path):
    def script(call: Call) -> Reply:
        if BRACES in call.user_text:
            return Reply("injected 400", status=400)
        return responder(call)

    server.script = script
    rows = prompts() + [PromptRow("p4", "讲一个关于猫的笑话。", ["创作"], "open")]
    result = sample_responses(rows, config(two_models(server), tmp_path, max_retries=1))
    assert [p.id for p in result.prompts] == ["p1", "p2", "p4"]
    [failed] = result.failed
    assert failed["id"] == "p3" and failed["reason"] == "all 3 requests failed"
    assert [(f["model"], f["sample"]) for f in failed["failed_samples"]] == [("qwen", 0), ("qwen", 1), ("glm", 0)]
    assert all("HTTP 400" in f["error"] for f in failed["failed_samples"])
    report = result.report()
    assert report["prompts"] == {"in": 4, "out": 3, "failed": 1}
    assert len(result.prompts) + len(result.failed) == len(rows)
    for name, n in (("qwen", 2), ("glm", 1)):
        m = report["models"][name]
        assert m["requested"] == 4 * n == m["succeeded"] + m["failed"] and m["failed"] == n
    assert report["requests"]["total"] == 12 == report["requests"]["succeeded"] + report["requests"]["failed"]
    assert report["responses_per_prompt"] == 3.0
    for p in result.prompts:  # every row written is a valid prompt row
        assert "failed_samples" not in p.extra and p.responses


def test_unknown_model_at_the_endpoint_fails_without_retries(server, tmp_path):
    models = [SampleModel("typo", api_base=server.base_url, model="qwen-fakee")]
    result = sample_responses(prompts(), config(models, tmp_path))
    assert result.prompts == [] and len(result.failed) == 3 and server.requests == 3
    assert "HTTP 404" in result.failed[0]["failed_samples"][0]["error"]


# ----------------------------------------------------------------------------- resume

def test_rerun_sends_nothing_and_writes_the_same_bytes(server, tmp_path):
    cfg = config(two_models(server), tmp_path)
    first = sample_responses(prompts(), cfg)
    assert len(ReplyCache(cfg.cache_path)) == N_REQUESTS
    again = sample_responses(prompts(), cfg)
    assert server.requests == N_REQUESTS
    assert dump(again) == dump(first)
    assert again.report()["requests"]["cached"] == N_REQUESTS and again.report()["requests"]["sent"] == 0
    # anything that changes a request misses the cache
    cfg.models[0].temperature = 0.7
    sample_responses(prompts(), cfg)
    assert server.requests == N_REQUESTS + 3 * 2


class Stop(Exception):
    pass


def test_cancelled_run_asks_only_for_what_is_missing(server, tmp_path):
    whole = sample_responses(prompts(), config(two_models(server), tmp_path, "whole.sqlite"))
    base = server.requests
    cfg = config(two_models(server), tmp_path, "cut.sqlite", concurrency=2)

    def stop_after_four(done: int, total: int) -> None:
        assert total == N_REQUESTS
        if done >= 4:
            raise Stop

    with pytest.raises(Stop):
        sample_responses(prompts(), cfg, stop_after_four)
    cut_sent = server.requests - base
    kept = len(ReplyCache(cfg.cache_path))
    assert 4 <= kept < N_REQUESTS and kept <= cut_sent <= kept + cfg.concurrency  # at most those in flight
    resumed = sample_responses(prompts(), cfg)
    assert server.requests - base - cut_sent == N_REQUESTS - kept  # only the missing ones
    assert resumed.report()["requests"]["cached"] == kept
    assert dump(resumed) == dump(whole)


def test_run_failing_midway_then_resumed_never_repeats_an_answered_request(server, tmp_path):
    answered: list[int] = []

    def going_down(call: Call) -> Reply:  # the endpoint breaks after 4 requests
        if call.index >= 4:
            return Reply("service unavailable", status=503)
        answered.append(call.index)
        return responder(call)

    server.script = going_down
    cfg = config(two_models(server), tmp_path, max_retries=0, concurrency=1)
    broken = sample_responses(prompts(), cfg)
    assert broken.report()["requests"]["succeeded"] == 4 and broken.report()["requests"]["failed"] == 5

    def counting(call: Call) -> Reply:
        answered.append(call.index)
        return responder(call)

    server.script = counting
    before = server.requests
    resumed = sample_responses(prompts(), cfg)
    assert server.requests - before == 5
    assert len(answered) == N_REQUESTS  # every request answered exactly once over both runs
    whole = sample_responses(prompts(), config(two_models(server), tmp_path, "whole.sqlite"))
    assert dump(resumed) == dump(whole)


KILLED_RUN = """
import sys
from cheems.curation.sample import SampleConfig, read_prompt_rows, sample_responses
sample_responses(read_prompt_rows(sys.argv[1]), SampleConfig.from_yaml(sys.argv[2]))
"""


def test_killed_run_resumes_without_repeating_requests(tmp_path):
    rows = [{"id": f"q{i}", "prompt": f"第{i}个问题：请简要回答。", "category": ["知识"]} for i in range(6)]
    prompt_file = tmp_path / "prompts.jsonl"
    write_jsonl(prompt_file, rows)
    cache = tmp_path / "killed.sqlite"
    needed = 6 * 3
    # no reply to the 6th request on until the run is killed: it asks 6 + 2 (its concurrency) times, then waits
    killed = threading.Event()
    with JudgeServer(held_from(6, by_model({"qwen-fake": responder, "glm-fake": responder}), released=killed)) as srv:
        (tmp_path / "sample.yaml").write_text(
            "sample:\n"
            "  concurrency: 2\n"
            f"  cache_path: {cache}\n"
            "  models:\n"
            f"    - {{name: qwen, api_base: '{srv.base_url}', model: qwen-fake, n: 2}}\n"
            f"    - {{name: glm, api_base: '{srv.base_url}', model: glm-fake}}\n", encoding="utf-8")
        env = {**os.environ, "PYTHONPATH": str(REPO_ROOT / "src")}
        proc = subprocess.Popen([sys.executable, "-c", KILLED_RUN, str(prompt_file), str(tmp_path / "sample.yaml")],
                                env=env, cwd=tmp_path)
        kill_when(proc, lambda: srv.requests >= 8)
        killed.set()
        kept = len(ReplyCache(cache))
        assert 4 <= kept < needed
        before = srv.requests
        cfg = SampleConfig.from_yaml(tmp_path / "sample.yaml")
        resumed = sample_responses(read_prompt_rows(prompt_file), cfg)
        assert srv.requests - before == resumed.report()["requests"]["sent"] == needed - kept
        assert resumed.report()["requests"]["cached"] == kept
        cfg.cache_path = tmp_path / "whole.sqlite"
        whole = sample_responses(read_prompt_rows(prompt_file), cfg)
    assert dump(resumed) == dump(whole)


# ----------------------------------------------------------------------------- local models

def test_local_model_answers_missing_requests_and_is_cached(server, tmp_path):
    asked: list[tuple[list, list]] = []

    def local(conversations: list[list[dict]], sampling: list[dict]) -> list[tuple[str, str]]:
        asked.append((conversations, sampling))
        return [(f"本地模型第{s['seed']}号回答：{c[-1]['content'][:10]}", "stop") for c, s in zip(conversations, sampling)]

    models = [SampleModel("local", vllm="/models/本地模型", n=2, top_p=0.9),
              SampleModel("glm", api_base=server.base_url, model="glm-fake")]
    cfg = config(models, tmp_path)
    result = sample_responses(prompts(), cfg, generators={"local": local})
    [(conversations, sampling)] = asked
    assert len(conversations) == 6 and conversations[0] == [{"role": "user", "content": "介绍一下长城的历史。"}]
    assert [s["seed"] for s in sampling] == [0, 1] * 3
    assert all(s["top_p"] == 0.9 and s["temperature"] == 0.8 and s["max_tokens"] == 2048 for s in sampling)
    assert server.requests == 3
    assert [r.id for r in result.prompts[0].responses] == ["local-0", "local-1", "glm-0"]
    assert result.prompts[0].responses[1].content.startswith("本地模型第1号回答")
    assert result.report()["models"]["local"]["generated"] == 6
    again = sample_responses(prompts(), cfg, generators={"local": local})
    assert len(asked) == 1 and server.requests == 3 and dump(again) == dump(result)


def test_missing_vllm_stops_before_any_request(server, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "vllm", None)  # as on a machine without the extra
    models = [SampleModel("glm", api_base=server.base_url, model="glm-fake"),
              SampleModel("local", vllm="/models/qwen2.5-7b-instruct")]
    with pytest.raises(CheemsInputError, match=r"install cheems\[vllm\] on a GPU machine") as err:
        sample_responses(prompts(), config(models, tmp_path))
    assert err.value.field == "models[1].vllm" and "'local'" in str(err.value)
    assert server.requests == 0


def test_named_api_key_variable_is_used_and_must_be_set(server, tmp_path, monkeypatch):
    monkeypatch.setenv("FAKE_SAMPLE_KEY", "sk-sample")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-default")
    models = [SampleModel("qwen", api_base=server.base_url, model="qwen-fake", api_key_env="FAKE_SAMPLE_KEY"),
              SampleModel("glm", api_base=server.base_url, model="glm-fake")]
    sample_responses(prompts()[:1], config(models, tmp_path))
    keys = {c.body["model"]: {v for k, v in c.headers.items() if k.lower() == "authorization"} for c in server.calls}
    assert keys == {"qwen-fake": {"Bearer sk-sample"}, "glm-fake": {"Bearer sk-default"}}
    monkeypatch.delenv("FAKE_SAMPLE_KEY")
    with pytest.raises(CheemsInputError, match="FAKE_SAMPLE_KEY") as err:
        sample_responses(prompts(), config(models, tmp_path, "other.sqlite"))
    assert err.value.field == "models[0].api_key_env" and server.requests == 2


# ----------------------------------------------------------------------------- config

def test_config_from_yaml_with_defaults(tmp_path, monkeypatch):
    path = tmp_path / "pipeline.yaml"
    path.write_text("filter:\n  min_chars: 5\n"
                    "sample:\n  seed: 7\n  models:\n"
                    "    - name: qwen\n      api_base: http://127.0.0.1:8000/v1\n      n: 4\n"
                    "      system: 你是一个乐于助人的助手。\n"
                    "    - name: local\n      vllm: /models/glm\n      temperature: 1.0\n", encoding="utf-8")
    cfg = SampleConfig.from_yaml(path)
    qwen, local = cfg.models
    assert (qwen.name, qwen.model, qwen.n) == ("qwen", "qwen", 4)
    assert (qwen.temperature, qwen.top_p, qwen.max_tokens) == (0.8, 0.95, 2048)
    assert qwen.system == "你是一个乐于助人的助手。" and qwen.api_key_env is None
    assert local.vllm == "/models/glm" and local.temperature == 1.0 and local.api_base is None
    assert (cfg.seed, cfg.concurrency, cfg.timeout, cfg.max_retries, cfg.cache_path) == (7, 16, 120.0, 5, None)
    monkeypatch.setenv("CHEEMS_CACHE_DIR", str(tmp_path / "caches"))
    assert default_sample_cache_path() == tmp_path / "caches" / "samples.sqlite"
    assert default_sample_cache_path() != default_cache_path()


GOOD = {"name": "qwen", "api_base": "http://127.0.0.1:8000/v1"}


@pytest.mark.parametrize("data, field, message", [
    ({"models": [{**GOOD, "temprature": 0.5}]}, "models[0].temprature", "unknown setting"),
    ({"models": [GOOD], "concurency": 4}, "concurency", "unknown setting"),
    ({"sample": {"models": [GOOD], "seeds": 1}}, "sample.seeds", "unknown setting"),
    ({"models": [{**GOOD, "n": 0}]}, "models[0].n", "must be in [1, 256]"),
    ({"sample": {"models": [GOOD, {**GOOD, "name": "glm", "n": 0}]}}, "sample.models[1].n", "must be in [1, 256]"),
    ({"models": [{**GOOD, "n": True}]}, "models[0].n", "integer"),
    ({"models": [{"name": "qwen"}]}, "models[0].api_base", "give api_base"),
    ({"models": [{**GOOD, "vllm": "/models/qwen"}]}, "models[0].vllm", "not both"),
    ({"models": [{"api_base": "http://x/v1"}]}, "models[0].name", "missing"),
    ({"models": [GOOD, GOOD]}, "models[1].name", "used twice"),
    ({"models": [{**GOOD, "top_p": 0}]}, "models[0].top_p", "(0, 1]"),
    ({"models": [{**GOOD, "temperature": "hot"}]}, "models[0].temperature", ">= 0"),
    ({"models": [{**GOOD, "max_tokens": 0}]}, "models[0].max_tokens", "must be in [1, 131072]"),
    ({"models": [{**GOOD, "n": 1_000_000_000}]}, "models[0].n", "must be in [1, 256], got 1000000000"),
    ({"models": [{**GOOD, "system": ["a"]}]}, "models[0].system", "must be a string"),
    ({"models": []}, "models", "list of models"),
    ({"concurrency": 4}, "models", "list of models"),
    ({"models": ["qwen"]}, "models[0]", "mapping"),
    ({"models": [GOOD], "concurrency": 0}, "concurrency", "at least 1"),
    ({"models": [GOOD], "timeout": -1}, "timeout", "positive"),
    ({"models": [GOOD], "seed": -1}, "seed", ">= 0"),
    ({"sample": [GOOD]}, "sample", "mapping"),
])
def test_bad_config_names_the_field(data, field, message):
    with pytest.raises(CheemsInputError) as err:
        SampleConfig.from_mapping(data, file="sample.yaml")
    assert err.value.field == field and message in err.value.message
    assert str(err.value).startswith(f"sample.yaml: {field}: ")


def test_bad_config_in_code_and_bad_yaml(tmp_path):
    with pytest.raises(CheemsInputError, match="give api_base") as err:
        SampleModel("qwen")
    assert err.value.field == "api_base"
    with pytest.raises(CheemsInputError, match="at least one model"):
        SampleConfig([])
    path = tmp_path / "bad.yaml"
    path.write_text("sample: [unclosed\n", encoding="utf-8")
    with pytest.raises(CheemsInputError, match="cannot read YAML") as err:
        SampleConfig.from_yaml(path)
    assert err.value.file == str(path)
    path.write_text("", encoding="utf-8")
    with pytest.raises(CheemsInputError, match="mapping"):
        SampleConfig.from_yaml(path)


# ----------------------------------------------------------------------------- prompt files

def test_bundled_annotations_read_as_prompts_and_sample(sample_annotations, server, tmp_path):
    rows = read_prompt_rows(sample_annotations / "open.jsonl") + read_prompt_rows(sample_annotations / "human.jsonl")
    assert len(rows) == 48 and rows[0].id == "open-01" and rows[0].subset == "open"
    assert rows[0].category == ["理解", "阅读理解"] and rows[0].extra == {}  # responses and triples dropped
    assert any(isinstance(r.prompt, list) for r in rows)
    models = [SampleModel("glm", api_base=server.base_url, model="glm-fake", max_tokens=4096)]
    result = sample_responses(rows, config(models, tmp_path, concurrency=8))
    assert server.requests == 48 and result.report()["prompts"] == {"in": 48, "out": 48, "failed": 0}
    out = tmp_path / "sampled.jsonl"
    write_jsonl(out, result.rows())
    read = read_prompts(out)  # the output is a valid prompt file for the next stage
    assert [p.id for p in read.prompts] == [r.id for r in rows]
    assert all(p.responses[0].extra == {"finish_reason": "stop", "sample": 0} for p in read.prompts)
    # and an output file is itself a prompt file: its responses and failures are ignored
    again = read_prompt_rows(out)
    assert [(r.id, r.prompt, r.category, r.subset) for r in again] == [(r.id, r.prompt, r.category, r.subset)
                                                                        for r in rows]


def test_prompt_rows_take_ids_from_prompts_and_accept_prompt_objects(server, tmp_path, write_rows):
    path = write_rows([{"prompt": "你好"}, {"input": "再见", "category": "闲聊", "id": 7}])
    first, second = read_prompt_rows(path)
    assert len(first.id) == 16 and first.category == [] and first.subset is None
    assert (second.id, second.prompt, second.category) == ("7", "再见", ["闲聊"])
    given = Prompt("x", "介绍一下长城的历史。", [Response("r1", "旧回答")], rank={"r1": 0}, category=["知识"])
    models = [SampleModel("glm", api_base=server.base_url, model="glm-fake")]
    [p] = sample_responses([given], config(models, tmp_path)).prompts
    assert [r.id for r in p.responses] == ["glm-0"] and p.rank is None and p.category == ["知识"]


@pytest.mark.parametrize("row, field, message", [
    ({"id": "a", "prompt": ""}, "prompt", "prompt is empty"),
    ({"id": "a", "prompt": 3}, "prompt", "string or a list"),
    ({"id": "a"}, "prompt", "missing prompt"),
    ({"id": "a", "prompt": []}, "prompt", "no messages"),
    ({"id": "a", "prompt": [{"role": "user", "content": "你好"}, {"role": "assistant", "content": "好"}]},
     "prompt[1].role", "last message must be from 'user'"),
    ({"id": "a", "prompt": [{"role": "bot", "content": "你好"}]}, "prompt[0].role", "role must be one of"),
    ({"id": "a", "prompt": [{"role": "user"}]}, "prompt[0]", "string 'content'"),
    ({"id": ["a"], "prompt": "你好"}, "id", "string or an integer"),
    ({"id": "a", "prompt": "你好", "category": 5}, "category", "list of strings"),
    ({"id": "a", "prompt": "你好", "subset": 1}, "subset", "must be a string"),
    (["a", "你好"], None, "JSON object"),
])
def test_bad_prompt_row_names_file_line_and_field(write_rows, row, field, message):
    path = write_rows([{"id": "ok", "prompt": "第一行"}, row])
    with pytest.raises(CheemsInputError) as err:
        read_prompt_rows(path)
    e = err.value
    assert (e.file, e.line, e.field) == (str(path), 2, field) and message in e.message
    assert str(e).startswith(f"{path}:2: " + (f"{field}: " if field else ""))


def test_broken_json_and_duplicate_ids_are_located(write_rows):
    path = write_rows([{"id": "a", "prompt": "一"}, '{"id": "b", "prompt": ', {"id": "c", "prompt": "三"}])
    with pytest.raises(CheemsInputError, match="invalid JSON") as err:
        read_prompt_rows(path)
    assert err.value.line == 2
    path = write_rows([{"id": "a", "prompt": "一"}, {"id": "b", "prompt": "二"}, {"id": "a", "prompt": "三"}],
                      "dup.jsonl")
    with pytest.raises(CheemsInputError, match=r"prompt id 'a' is used twice \(lines 1 and 3\)") as err:
        read_prompt_rows(path)
    assert (err.value.line, err.value.field) == (3, "id")
    with pytest.raises(CheemsInputError, match="used twice") as err:
        sample_responses([PromptRow("a", "一"), PromptRow("a", "二")],
                         SampleConfig([SampleModel("m", api_base="http://127.0.0.1:9/v1")]))
    assert err.value.field == "prompts[1].id"


def test_an_empty_reply_is_a_failed_sample_not_an_empty_response(server, tmp_path, write_rows):
    from tests.conftest import run_cli_in

    def qwen(call: Call) -> Reply:
        return Reply("") if "长城" in call.user_text else responder(call)

    server.script = by_model({"qwen-fake": qwen, "glm-fake": lambda call: Reply("")})
    write_rows([{"id": p.id, "prompt": p.prompt} for p in prompts()], name="prompts.jsonl")
    (tmp_path / "c.yaml").write_text(f"sample:\n  models:\n    - {{name: qwen, api_base: {server.base_url}, "
                                     f"model: qwen-fake, n: 2}}\n    - {{name: glm, api_base: {server.base_url}, "
                                     "model: glm-fake}\n", encoding="utf-8")
    r = run_cli_in(tmp_path, "curate", "sample", "prompts.jsonl", "--config", "c.yaml", "-o", "out.jsonl",
                   env={"CHEEMS_CACHE_DIR": str(tmp_path / "cache")})
    assert r.returncode == 0, r.stderr
    assert "2 prompts with responses (2.0 each), 1 failed; requests: 9 (5 failed)" in r.stdout, r.stdout
    rows = [orjson.loads(line) for line in (tmp_path / "out.jsonl").read_bytes().splitlines()]
    assert all(resp["content"] for row in rows for resp in row["responses"])
    assert [f["error"] for f in rows[0]["failed_samples"]] == ["the reply is empty (no text): not a response"]
    [failed] = [orjson.loads(line) for line in (tmp_path / "out.failed.jsonl").read_bytes().splitlines()]
    assert failed["id"] == "p1" and failed["reason"] == "all 3 requests failed"
