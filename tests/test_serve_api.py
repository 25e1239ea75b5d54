"""`cheems serve` as a client meets it: the real server in its own process on a loopback port,
real HTTP with httpx, tiny real reward models (tests/tiny_models.py).

The numbers: /v1/score on cheems rows, /get_reward on the same conversations rendered with the
model's chat template (tokenized as given), as OpenRLHF (ending at EOS) and TRL (prompt +
completion, no end-of-turn token) send them, and /classify as verl sends them (the template's BOS
text stripped, vLLM adding special tokens) all equal what `cheems score` writes for those rows,
for a sequence-classification model, the v-head layout and a tokenizer that adds BOS itself.
32 concurrent clients each get their own scores, equal to one at a time. The boundary: sizes
and counts (413), shapes (422), the bearer token (401), each naming its field; a client killed
mid-request; SIGTERM with requests in flight (answered, then exit 0); the metrics and the access
log.
"""

from __future__ import annotations

import json
import math
import re
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import HANG_TIMEOUT_S, run_cli_in
from tests.serve_process import launch_serve
from tests.tiny_models import require_models_extra

require_models_extra()
httpx = pytest.importorskip("httpx")
pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")

pytestmark = pytest.mark.usefixtures("single_torch_thread")

TOKEN = "tok-3f9a1c"
AUTH = {"authorization": f"Bearer {TOKEN}"}
ACCESS = re.compile(r"^\S+ \S+ (GET|POST) (\S+) (\d{3}) (\d+\.\d{3})s$")
ATOL_CHEEMS_SCORE = 1e-5  # the server vs `cheems score`, fp32 CPU
ATOL_BATCHING = 1e-6  # one request among concurrent others vs alone
MAX_BODY_BYTES = 65536  # small, so an oversized body fits the socket buffers and the 413 is read
MAX_QUERIES = 40
MAX_QUERY_CHARS = 20000


@dataclass
class Server:
    """A `cheems serve` process and where it listens."""

    proc: subprocess.Popen
    log: Path
    url: str
    name: str

    def post(self, path: str, body, headers: dict | None = None, **kwargs) -> httpx.Response:
        data = body if isinstance(body, (bytes, str)) else json.dumps(body)
        return httpx.post(self.url + path, content=data, headers={**AUTH, **(headers or {})},
                          timeout=HANG_TIMEOUT_S, **kwargs)

    def get(self, path: str, headers: dict | None = None) -> httpx.Response:
        return httpx.get(self.url + path, headers={**AUTH, **(headers or {})}, timeout=HANG_TIMEOUT_S)

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout=HANG_TIMEOUT_S)


def start_server(model: Path, folder: Path, *flags: str) -> Server:
    """`cheems serve MODEL --port 0` with a bearer token, once its ready line is printed."""
    folder.mkdir(parents=True, exist_ok=True)
    key = folder / "api-key"
    key.write_text(TOKEN + "\n")
    key.chmod(0o600)
    log = folder / "serve.log"
    proc, url, name = launch_serve(model, log, "--api-key-file", str(key), "--max-body-bytes", str(MAX_BODY_BYTES),
                                   "--max-queries", str(MAX_QUERIES), "--max-query-chars", str(MAX_QUERY_CHARS),
                                   *flags)
    server = Server(proc, log, url, name)
    assert httpx.get(server.url + "/health", timeout=HANG_TIMEOUT_S).json() == {"status": "ok", "model": server.name}
    return server


# ----------------------------------------------------------------------------- rows and reference scores

@pytest.fixture(scope="module")
def rows(tiny_prompts) -> list[dict]:
    """Six prompts of the bundled sample with two to four responses each (some with chat messages)."""
    chosen = [p for p in tiny_prompts if len(p.responses) >= 2][:6]
    return [{"id": p.id, "prompt": p.prompt, "responses": [{"id": r.id, "content": r.content}
                                                           for r in p.responses[: 2 + k % 3]]}
            for k, p in enumerate(chosen)]


def cheems_score(model: Path, rows: list[dict], folder: Path) -> dict[tuple[str, str], float]:
    """What `cheems score --model` writes for ``rows``, keyed (prompt id, response id)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "rows.jsonl").write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
    r = run_cli_in(folder, "score", "rows.jsonl", "-o", "scores.jsonl", "--model", model)
    assert r.returncode == 0, r.stderr
    lines = (folder / "scores.jsonl").read_text().splitlines()
    return {(s["prompt_id"], s["response_id"]): s["score"] for s in map(json.loads, lines)}


def rendered(model: Path, rows: list[dict]) -> list[str]:
    """Each conversation of ``rows`` as the model's chat template writes it (what a client sends)."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model)
    texts = []
    for row in rows:
        asked = [{"role": "user", "content": row["prompt"]}] if isinstance(row["prompt"], str) else row["prompt"]
        for r in row["responses"]:
            texts.append(tok.apply_chat_template(asked + [{"role": "assistant", "content": r["content"]}],
                                                 tokenize=False))
    return texts


def as_verl_sends(model: Path, texts: list[str]) -> list[str]:
    """verl's reward loop strips the template's leading BOS text: vLLM adds special tokens."""
    from transformers import AutoTokenizer

    bos = AutoTokenizer.from_pretrained(model).bos_token
    return [t[len(bos):] if bos and t.startswith(bos) else t for t in texts]


@pytest.fixture(scope="module", params=["seq-cls", "v-head", "bos-template"])
def served(request, tmp_path_factory, rows):
    """(server, model folder, reference scores in row order) per model layout."""
    model = {"seq-cls": "seq_cls_model", "v-head": "v_head_file_model", "bos-template": "bos_template_model"}
    model = request.getfixturevalue(model[request.param])
    model = getattr(model, "dir", model)
    folder = tmp_path_factory.mktemp(f"serve-{request.param}")
    reference = cheems_score(model, rows, folder / "reference")
    expected = [reference[(row["id"], r["id"])] for row in rows for r in row["responses"]]
    server = start_server(model, folder)
    yield server, model, expected
    assert server.stop() == 0, server.log.read_text()


@pytest.fixture(scope="module")
def server(tmp_path_factory, seq_cls_model) -> Server:
    """One seq-cls server for the boundary tests; a token budget that holds several requests'
    conversations in one forward pass (CPU's default, 1024, holds about two of the sample's)."""
    s = start_server(seq_cls_model, tmp_path_factory.mktemp("serve-boundary"), "--token-budget", "16384")
    yield s
    assert s.stop() == 0, s.log.read_text()


def close(got: list[float], expected: list[float], atol: float) -> bool:
    return len(got) == len(expected) and all(abs(a - b) <= atol for a, b in zip(got, expected))


# ----------------------------------------------------------------------------- the numbers

def test_every_route_scores_as_cheems_score(served, rows):
    server, model, expected = served
    got = server.post("/v1/score", {"rows": rows})
    assert got.status_code == 200, got.text
    keys = [(row["id"], r["id"]) for row in rows for r in row["responses"]]
    assert [(s["prompt_id"], s["response_id"]) for s in got.json()["scores"]] == keys
    assert close([s["score"] for s in got.json()["scores"]], expected, ATOL_CHEEMS_SCORE)

    texts = rendered(model, rows)
    reward = server.post("/get_reward", {"query": texts, "prompts": ["p"] * len(texts), "labels": [None]})
    assert reward.status_code == 200, reward.text
    assert reward.json()["rewards"] == reward.json()["scores"]
    assert close(reward.json()["rewards"], expected, ATOL_CHEEMS_SCORE)

    # OpenRLHF's decode ending at EOS and TRL's prompt + completion: read where the rendering is read
    from transformers import AutoTokenizer

    from cheems.formats import parse_row
    from tests.client_texts import client_forms

    forms = client_forms(AutoTokenizer.from_pretrained(model), [parse_row(row) for row in rows])
    for form in ("openrlhf", "trl"):
        reward = server.post("/get_reward", {"query": forms[form]})
        assert close(reward.json()["rewards"], expected, ATOL_CHEEMS_SCORE), form

    verl = as_verl_sends(model, texts)
    raw = [server.post("/classify", {"model": server.name, "input": t, "activation": False}).json() for t in verl]
    assert [c["data"][-1]["probs"][-1] for c in raw] == pytest.approx(expected, abs=ATOL_CHEEMS_SCORE)
    as_given = server.post("/classify", {"input": texts, "add_special_tokens": False, "use_activation": False})
    assert close([d["probs"][0] for d in as_given.json()["data"]], expected, ATOL_CHEEMS_SCORE)
    listed = server.post("/classify", {"model": "any", "input": verl}).json()  # no activation asked: the sigmoid
    assert listed["object"] == "list" and listed["model"] == server.name and listed["id"].startswith("classify-")
    assert [d["index"] for d in listed["data"]] == list(range(len(verl)))
    assert {(d["label"], d["num_classes"]) for d in listed["data"]} == {("LABEL_0", 1)}
    sigmoid = [1 / (1 + math.exp(-s)) for s in expected]
    assert close([d["probs"][0] for d in listed["data"]], sigmoid, ATOL_CHEEMS_SCORE)
    assert listed["usage"]["prompt_tokens"] == listed["usage"]["total_tokens"] > len(verl)


def test_concurrent_clients_each_get_their_own_scores(server, seq_cls_model, rows):
    texts = rendered(seq_cls_model, rows)
    asks = [[texts[(k + j) % len(texts)] for j in range(1 + k % 4)] for k in range(32)]
    alone = [server.post("/get_reward", {"query": q}).json()["rewards"] for q in asks]
    got: list = [None] * len(asks)
    start = threading.Barrier(len(asks))

    def client(k: int) -> None:
        with httpx.Client(headers=AUTH, timeout=HANG_TIMEOUT_S) as c:
            start.wait()
            got[k] = c.post(server.url + "/get_reward", json={"query": asks[k]}).json()["rewards"]

    threads = [threading.Thread(target=client, args=(k,)) for k in range(len(asks))]
    batches, sequences = forward_counts(server)
    for t in threads:
        t.start()
    for t in threads:
        t.join(HANG_TIMEOUT_S)
    for k in range(len(asks)):
        assert got[k] is not None and close(got[k], alone[k], ATOL_BATCHING), (k, got[k], alone[k])
    after = forward_counts(server)
    assert after[1] - sequences == sum(map(len, asks))
    assert after[0] - batches < len(asks), "no two of 32 concurrent requests shared a forward pass"


def forward_counts(server: Server) -> tuple[int, int]:
    """(forward batches run, sequences scored) so far, from /metrics."""
    text = server.get("/metrics").text
    return tuple(int(re.search(rf"^{name} (\d+)$", text, re.M).group(1))
                 for name in ("cheems_serve_batch_sequences_count", "cheems_serve_sequences_total"))


# ----------------------------------------------------------------------------- the boundary

BOUNDARY = [
    # (what, path, body, headers, status, field)
    ("body over --max-body-bytes", "/get_reward", {"query": ["x" * MAX_BODY_BYTES]}, None, 413, "body"),
    ("more queries than --max-queries", "/get_reward", {"query": ["x"] * (MAX_QUERIES + 1)}, None, 413, "query"),
    ("more responses than --max-queries", "/v1/score",
     {"rows": [{"prompt": "p", "responses": [{"content": f"r{k}"} for k in range(MAX_QUERIES + 1)]}]}, None, 413,
     "rows"),
    ("malformed JSON", "/get_reward", b'{"query": ["a"', None, 422, "body"),
    ("not UTF-8", "/get_reward", b'{"query": ["\xff"]}', None, 422, "body"),
    ("not an object", "/classify", [1, 2], None, 422, "body"),
    ("query missing", "/get_reward", {"prompts": ["a"]}, None, 422, "query"),
    ("query a text", "/get_reward", {"query": "a"}, None, 422, "query"),
    ("input empty", "/classify", {"input": []}, None, 422, "input"),
    ("a query not a text", "/get_reward", {"query": ["a", 3]}, None, 422, "query[1]"),
    ("prompts not a list", "/get_reward", {"query": ["a"], "prompts": "a"}, None, 422, "prompts"),
    ("an empty query", "/get_reward", {"query": ["a", ""]}, None, 422, "query[1]"),
    ("token ids as input", "/classify", {"input": [[1, 2, 3]]}, None, 422, "input[0]"),
    ("input an object", "/classify", {"input": {"a": 1}}, None, 422, "input"),
    ("activation not a boolean", "/classify", {"input": "a", "activation": "no"}, None, 422, "activation"),
    ("model not a text", "/classify", {"model": 1, "input": "a"}, None, 422, "model"),
    ("rows not a list", "/v1/score", {"rows": {"prompt": "p"}}, None, 422, "rows"),
    ("a response's content not a text", "/v1/score",
     {"rows": [{"prompt": "p", "responses": [{"id": "a", "content": "x"}]},
               {"prompt": "p", "responses": [{"id": "a", "content": 5}]}]}, None, 422, "rows[1].responses[0].content"),
    ("no bearer token", "/get_reward", {"query": ["a"]}, {"authorization": ""}, 401, "authorization"),
    ("a wrong bearer token", "/get_reward", {"query": ["a"]}, {"authorization": "Bearer nope"}, 401, "authorization"),
    ("metrics without the token", "/metrics", None, {"authorization": ""}, 401, "authorization"),
]


@pytest.mark.parametrize("what,path,body,headers,status,field", BOUNDARY, ids=[b[0] for b in BOUNDARY])
def test_bad_requests_are_refused_naming_the_field(server, what, path, body, headers, status, field):
    r = server.get(path, headers) if body is None else server.post(path, body, headers)
    assert (r.status_code, r.json()["error"]["field"]) == (status, field), r.text
    assert r.json()["error"]["message"] and set(r.json()) == {"error"}
    assert server.get("/health").status_code == 200


def test_too_long_texts_are_refused_naming_them(server):
    r = server.post("/classify", {"input": ["a", "x" * (MAX_QUERY_CHARS + 1)]})
    assert r.status_code == 413 and r.json()["error"]["field"] == "input[1]", r.text
    over_model = " ".join(["hello"] * 3000)  # within --max-query-chars, over the model's 2048 tokens
    r = server.post("/get_reward", {"query": ["a", over_model]})
    assert r.status_code == 422 and r.json()["error"]["field"] == "query[1]", r.text
    assert r.json()["error"]["message"].endswith("or start the server with --truncation left")


def test_a_body_streamed_without_length_is_cut_at_the_limit(server):
    def chunks():
        yield b'{"query": ["'
        for _ in range(MAX_BODY_BYTES // 1024 + 1):
            yield b"x" * 1024
        yield b'"]}'

    r = httpx.post(server.url + "/get_reward", content=chunks(), headers=AUTH, timeout=HANG_TIMEOUT_S)
    assert r.status_code == 413 and r.json()["error"]["field"] == "body", r.text


def test_health_needs_no_token_and_unknown_paths_are_json(server):
    assert httpx.get(server.url + "/health", timeout=HANG_TIMEOUT_S).status_code == 200
    r = server.get("/nothing")
    assert r.status_code == 404 and set(r.json()) == {"error"}
    r = server.get("/get_reward")
    assert r.status_code == 405 and set(r.json()) == {"error"}


CLIENT = """
import socket, sys
host, port, body, part = sys.argv[1], int(sys.argv[2]), sys.argv[3].encode(), float(sys.argv[4])
s = socket.create_connection((host, port))
s.sendall(b"POST /get_reward HTTP/1.1\\r\\nhost: x\\r\\ncontent-type: application/json\\r\\n"
          b"authorization: Bearer %s\\r\\ncontent-length: %d\\r\\n\\r\\n" % (sys.argv[5].encode(), len(body)))
s.sendall(body[: int(len(body) * part)])
print("sent", flush=True)
sys.stdin.read()
"""


@pytest.mark.parametrize("part", [0.5, 1.0], ids=["mid-body", "awaiting-scores"])
def test_a_client_killed_mid_request_leaves_the_server_serving(server, seq_cls_model, rows, part):
    texts = rendered(seq_cls_model, rows)
    before = server.post("/get_reward", {"query": texts}).json()["rewards"]
    host, port = server.url.removeprefix("http://").split(":")
    body = json.dumps({"query": texts * 3})
    client = subprocess.Popen([sys.executable, "-c", CLIENT, host, port, body, str(part), TOKEN],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert client.stdout.readline().strip() == "sent"
    finally:
        client.send_signal(signal.SIGKILL)
        client.wait()
    assert server.proc.poll() is None
    after = server.post("/get_reward", {"query": texts})
    assert after.status_code == 200 and close(after.json()["rewards"], before, ATOL_BATCHING)


def test_metrics_count_requests_by_route_and_status(server):
    def count(route: str, status: int) -> int:
        r = server.get("/metrics")
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain; version=0.0.4")
        found = re.search(rf'^cheems_serve_requests_total{{route="{re.escape(route)}",status="{status}"}} (\d+)$',
                          r.text, re.M)
        return int(found.group(1)) if found else 0

    ok, bad = count("/get_reward", 200), count("/get_reward", 422)
    assert server.post("/get_reward", {"query": ["a", "b"]}).status_code == 200
    assert server.post("/get_reward", {"query": ["a"]}).status_code == 200
    assert server.post("/get_reward", {"query": 5}).status_code == 422
    assert (count("/get_reward", 200), count("/get_reward", 422)) == (ok + 2, bad + 1)
    text = server.get("/metrics").text
    for family in ("cheems_serve_queue_depth", "cheems_serve_batch_sequences_bucket", "cheems_serve_tokens_total",
                   'cheems_serve_request_duration_seconds_count{route="/get_reward"}'):
        assert family in text


# ----------------------------------------------------------------------------- lifecycle

def test_sigterm_answers_the_requests_in_flight_then_exits_0(tmp_path, server, seq_cls_model, rows):
    texts = rendered(seq_cls_model, rows)[:4]
    expected = server.post("/get_reward", {"query": texts}).json()["rewards"]
    # a long wait for company (and room for all in one batch) keeps the requests queued while the signal comes
    server = start_server(seq_cls_model, tmp_path, "--max-wait-ms", "3000", "--token-budget", "100000")
    answers: list = [None] * len(texts)

    def client(k: int) -> None:
        answers[k] = server.post("/get_reward", {"query": [texts[k]]})

    threads = [threading.Thread(target=client, args=(k,)) for k in range(len(texts))]
    try:
        for t in threads:
            t.start()
        deadline = time.monotonic() + HANG_TIMEOUT_S
        while "cheems_serve_queue_depth 4" not in server.get("/metrics").text:
            assert time.monotonic() < deadline and all(a is None for a in answers)
            time.sleep(0.01)
        server.proc.send_signal(signal.SIGTERM)
        for t in threads:
            t.join(HANG_TIMEOUT_S)
    finally:
        code = server.stop()
    log = server.log.read_text()
    assert code == 0, log
    assert [a.status_code for a in answers] == [200] * len(texts), log
    assert close([a.json()["rewards"][0] for a in answers], expected, ATOL_BATCHING)
    access = [m.groups()[:3] for line in log.splitlines() if (m := ACCESS.match(line))]
    assert access.count(("POST", "/get_reward", "200")) == len(texts), log
    assert TOKEN not in log and texts[0][:20] not in log


def test_a_token_file_anyone_can_read_is_refused(tmp_path, seq_cls_model):
    key = tmp_path / "key"
    key.write_text(TOKEN)
    key.chmod(0o644)
    r = run_cli_in(tmp_path, "serve", seq_cls_model, "--api-key-file", key)
    assert r.returncode == 2 and "--api-key-file" in r.stderr and "chmod 600" in r.stderr, r.stderr
    key.write_text("  \n")
    key.chmod(0o600)
    r = run_cli_in(tmp_path, "serve", seq_cls_model, "--api-key-file", key)
    assert r.returncode == 2 and "empty" in r.stderr, r.stderr
    r = run_cli_in(tmp_path, "serve", seq_cls_model, "--api-key-file", tmp_path / "missing")
    assert r.returncode == 2 and "no such file" in r.stderr, r.stderr
