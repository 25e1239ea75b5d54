"""Every client of `cheems serve` as it really calls: each written from its framework's own code or
documentation (the facts and their sources are in docs/serving.md), against one real server on
the loopback, on the default limits.

- SGLang's native ``/classify`` (``{"model", "text": [...]}``, as the Skywork-Reward-V2 README's
  client posts it) and its OpenAI ``/v1/embeddings`` (as verl's reward loop calls it on SGLang);
- vLLM's ``/classify`` (``input``; ``use_activation`` and the older ``activation``, as verl
  sends them) and ``/pooling``;
- LLaMA-Factory's ``/v1/score/evaluation`` (``{"model", "messages"}``, its PPO trainer's
  ``reward_model_type: api``), ``max_length`` included;
- OpenRLHF v0.9.1 on (one sample per request, aiohttp's ``json=``, concurrent; the empty lists a
  second server gets) and v0.8 to v0.9.0 (the whole batch in one ``requests.post(json=...)``).

Each gives the scores ``/v1/score`` gives for the same conversations (which tests/test_serve_api.py
checks against `cheems score`). The whole-batch size: a body of 8,192 Chinese queries of 2,000
characters, JSON-escaped as ``json.dumps`` writes them (about 100 MB), is read and parsed in
full on the defaults (its last query, a number, is refused naming ``query[8191]``, so that the
test does not wait for the tokenizer), and 512 such queries are scored in one request.

The server runs with ``--max-length 64 --truncate``: a long query costs the tiny model 64 tokens.
"""

from __future__ import annotations

import json
import math
import random
import threading
from pathlib import Path

import pytest

from tests.conftest import HANG_TIMEOUT_S
from tests.serve_process import launch_serve
from tests.tiny_models import require_models_extra

require_models_extra()
httpx = pytest.importorskip("httpx")
requests = pytest.importorskip("requests")  # OpenRLHF v0.8 and LLaMA-Factory post with it
pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")

from cheems.serving.engine import EngineSettings  # noqa: E402
from cheems.serving.settings import ServeSettings  # noqa: E402

pytestmark = pytest.mark.usefixtures("single_torch_thread")

ATOL = 1e-5  # one route vs another on one server, fp32 CPU (documented: within 1e-5 of `cheems score`)
ATOL_BATCHING = 1e-6  # a text in a batch vs alone
CONVERSATIONS = [("你好", "你好！有什么可以帮你的吗？"), ("北京是哪个国家的首都？", "北京是中国的首都。"),
                 ("一加一等于几？", "等于二。"), ("推荐一本书。", "可以读《红楼梦》。")]
BATCH_QUERIES, QUERY_CHARS = 8192, 2000  # an OpenRLHF v0.8 rollout batch of long Chinese answers


@pytest.fixture(scope="module")
def server(seq_cls_model, tmp_path_factory):
    proc, url, name = launch_serve(seq_cls_model, tmp_path_factory.mktemp("serve-contracts") / "serve.log",
                                   "--max-length", "64", "--truncate")
    yield url, name
    proc.terminate()
    proc.wait(timeout=HANG_TIMEOUT_S)


@pytest.fixture(scope="module")
def rendered(seq_cls_model) -> list[str]:
    """Each conversation through the reward model's chat template, as the clients render it."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(seq_cls_model)
    texts = [tok.apply_chat_template([{"role": "user", "content": p}, {"role": "assistant", "content": r}],
                                     tokenize=False) for p, r in CONVERSATIONS]
    bos = tok.bos_token  # SGLang and vLLM add special tokens: the clients strip the template's BOS text
    return [t[len(bos):] if bos and t.startswith(bos) else t for t in texts]


@pytest.fixture(scope="module")
def expected(server) -> list[float]:
    """The raw scores of the conversations through /v1/score (the server's own template)."""
    rows = [{"id": str(i), "prompt": p, "responses": [{"id": "r", "content": r}]}
            for i, (p, r) in enumerate(CONVERSATIONS)]
    reply = httpx.post(server[0] + "/v1/score", json={"rows": rows}, timeout=HANG_TIMEOUT_S)
    assert reply.status_code == 200, reply.text
    return [s["score"] for s in reply.json()["scores"]]


def sigmoid(x: float) -> float:
    return 1 / (1 + math.exp(-x))


def close(got, want, atol=ATOL) -> bool:
    return len(got) == len(want) and all(abs(a - b) <= atol for a, b in zip(got, want))


# ----------------------------------------------------------------------------- SGLang

def test_sglang_classify_as_the_skywork_readme_calls_it(server, rendered, expected):
    url, name = server
    responses = requests.post(url + "/classify", json={"model": name, "text": rendered}).json()
    assert close([r["embedding"][0] for r in responses], expected)
    assert all(set(r) == {"embedding", "meta_info"} and r["meta_info"]["prompt_tokens"] > 0 for r in responses)
    one = requests.post(url + "/classify", json={"model": name, "text": rendered[1]}).json()  # one text: one object
    assert isinstance(one, dict) and abs(one["embedding"][0] - expected[1]) <= ATOL
    both = requests.post(url + "/classify", json={"text": rendered, "input": rendered})
    assert both.status_code == 422 and both.json()["error"]["field"] == "text"


def test_sglang_embeddings_as_verl_calls_them(server, rendered, expected):
    url, name = server
    got = [requests.post(url + "/v1/embeddings", json={"model": name, "input": t}).json()["data"][-1]["embedding"][-1]
           for t in rendered]
    assert close(got, expected)
    listed = httpx.post(url + "/v1/embeddings", json={"model": name, "input": rendered}, timeout=HANG_TIMEOUT_S).json()
    assert listed["object"] == "list" and listed["model"] == name and listed["usage"]["prompt_tokens"] > 0
    assert [(d["object"], d["index"]) for d in listed["data"]] == [("embedding", i) for i in range(len(rendered))]


# ----------------------------------------------------------------------------- vLLM

@pytest.mark.parametrize("flag", ["use_activation", "activation"], ids=["verl>=0.7.1", "verl<=0.7.0"])
def test_vllm_classify_as_verl_calls_it(server, rendered, expected, flag):
    url, name = server
    got = [httpx.post(url + "/classify", json={"model": name, "input": t, flag: False},
                      timeout=HANG_TIMEOUT_S).json()["data"][-1]["probs"][-1] for t in rendered]
    assert close(got, expected)


def test_vllm_classify_and_pooling_with_their_defaults(server, rendered, expected):
    url, name = server
    classified = httpx.post(url + "/classify", json={"model": name, "input": rendered}, timeout=HANG_TIMEOUT_S).json()
    assert close([d["probs"][0] for d in classified["data"]], [sigmoid(s) for s in expected])
    pooled = httpx.post(url + "/pooling", json={"model": name, "input": rendered}, timeout=HANG_TIMEOUT_S).json()
    assert pooled["id"].startswith("pool-") and pooled["object"] == "list" and pooled["model"] == name
    assert [(d["index"], d["object"]) for d in pooled["data"]] == [(i, "pooling") for i in range(len(rendered))]
    assert close([d["data"][0] for d in pooled["data"]], [sigmoid(s) for s in expected])
    assert pooled["usage"]["prompt_tokens"] == classified["usage"]["prompt_tokens"] > len(rendered)
    raw = httpx.post(url + "/pooling", json={"input": rendered[0], "use_activation": False, "task": "classify",
                                            "encoding_format": "float"}, timeout=HANG_TIMEOUT_S).json()
    assert abs(raw["data"][0]["data"][0] - expected[0]) <= ATOL
    for body, field in [({"input": "x", "task": "token_classify"}, "task"),
                        ({"input": "x", "encoding_format": "base64"}, "encoding_format"),
                        ({"messages": [{"role": "user", "content": "x"}]}, "messages")]:
        r = httpx.post(url + "/pooling", json=body, timeout=HANG_TIMEOUT_S)
        assert (r.status_code, r.json()["error"]["field"]) == (422, field), r.text


# ----------------------------------------------------------------------------- LLaMA-Factory

def test_llamafactory_score_evaluation_as_its_ppo_trainer_calls_it(server, rendered, expected):
    url, name = server
    response = requests.post(url + "/v1/score/evaluation", json={"model": "model", "messages": rendered},
                             headers={"Content-Type": "application/json"})
    reply = json.loads(response.text)
    assert close(reply["scores"], expected)
    assert reply["id"].startswith("scoreval-") and reply["object"] == "score.evaluation" and reply["model"] == "model"
    cut = requests.post(url + "/v1/score/evaluation", json={"model": "m", "messages": rendered, "max_length": 8})
    assert cut.status_code == 200 and not close(cut.json()["scores"], expected)  # 8 tokens of each, not all
    empty = requests.post(url + "/v1/score/evaluation", json={"model": "m", "messages": []})
    assert empty.status_code == 422 and empty.json()["error"]["field"] == "messages"


# ----------------------------------------------------------------------------- OpenRLHF

def test_openrlhf_one_sample_per_request_concurrently(server, rendered, expected):
    """v0.9.1 on: aiohttp's ``session.post(url, json=data)`` (json.dumps, application/json), one
    sample each, all at once; the servers past the first get empty lists."""
    url, _ = server
    got: list = [None] * len(rendered) * 4
    start = threading.Barrier(len(got))

    def sample(k: int) -> None:
        body = json.dumps({"query": [rendered[k % len(rendered)]], "prompts": [CONVERSATIONS[0][0]],
                           "labels": [None]})
        start.wait()
        reply = httpx.post(url + "/get_reward", content=body.encode(), timeout=HANG_TIMEOUT_S,
                           headers={"Content-Type": "application/json"}).json()
        got[k] = (reply.get("scores") or reply.get("rewards"), reply["rewards"], reply.get("extra_logs") or {})

    threads = [threading.Thread(target=sample, args=(k,)) for k in range(len(got))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(HANG_TIMEOUT_S)
    for k, (scores, rewards, logs) in enumerate(got):
        assert scores == rewards and logs == {} and close(scores, [expected[k % len(rendered)]]), (k, got[k])
    second = httpx.post(url + "/get_reward", json={"query": [], "prompts": [], "labels": []}, timeout=HANG_TIMEOUT_S)
    assert second.status_code == 200 and second.json() == {"rewards": [], "scores": [], "extra_logs": {}}


def test_openrlhf_whole_batch_in_one_request(server, rendered, expected):
    """v0.8 to v0.9.0: ``requests.post(url=url, json=data, headers=..., timeout=180)``."""
    url, _ = server
    data = {"query": rendered * 3, "prompts": [p for p, _ in CONVERSATIONS] * 3, "labels": ["", "", "", ""] * 3}
    response = requests.post(url=url + "/get_reward", json=data, headers={"Content-Type": "application/json"},
                             timeout=180)
    response.raise_for_status()
    reply = response.json()
    assert reply["rewards"] == reply["scores"] and close(reply["rewards"], expected * 3) and "extra_logs" in reply


def long_queries(n: int, distinct: int = 8) -> list[str]:
    """``n`` Chinese texts of QUERY_CHARS characters, ``distinct`` different ones repeated."""
    rng = random.Random(0)
    base = "".join(chr(rng.randrange(0x4E00, 0x9FA6)) for _ in range(QUERY_CHARS + 31 * distinct))
    texts = [base[31 * k: 31 * k + QUERY_CHARS] for k in range(distinct)]
    return [texts[i % distinct] for i in range(n)]


def test_a_whole_rollout_batch_of_long_chinese_queries_fits_the_defaults(server):
    url, _ = server
    queries = long_queries(BATCH_QUERIES)
    size = len(json.dumps({"query": queries, "prompts": queries[:1], "labels": [None]}))  # as requests sends it
    assert size > 98_000_000  # \uXXXX: 6 bytes a character
    serve, engine = ServeSettings(), EngineSettings()
    assert size <= serve.max_body_bytes and BATCH_QUERIES <= serve.max_queries <= engine.max_queue
    assert QUERY_CHARS <= serve.max_query_chars
    # the body is read and parsed whole: only its last query, a number, is refused (no tokenizing)
    reply = requests.post(url + "/get_reward", json={"query": queries[:-1] + [7], "prompts": [], "labels": []},
                          timeout=180)
    assert (reply.status_code, reply.json()["error"]["field"]) == (422, f"query[{BATCH_QUERIES - 1}]"), reply.text


def test_512_long_chinese_queries_in_one_request_are_scored(server):
    url, _ = server
    queries = long_queries(512)
    reply = requests.post(url + "/get_reward", json={"query": queries, "prompts": queries, "labels": [None] * 512},
                          timeout=180)
    assert reply.status_code == 200, reply.text
    rewards = reply.json()["rewards"]
    alone = [httpx.post(url + "/get_reward", json={"query": [q]}, timeout=HANG_TIMEOUT_S).json()["rewards"][0]
             for q in queries[:8]]
    assert close(rewards, alone * 64, ATOL_BATCHING)
    assert len(set(alone)) == 8
