"""`cheems serve --replicas N`: several replicas of the model behind one address, in real processes.

- Two replicas give the scores `cheems score` gives for the same rows (within the 1e-6 float32
  promise of docs/serving.md), and both answer: fresh connections meet both pids (/health,
  /metrics), each replica scoring correctly.
- A replica killed with SIGKILL while four clients post /v1/score and /get_reward: every request
  gets a 200 with the right scores or an error its client sees (an exception, a 5xx), never a 200
  with a wrong or missing score; the supervisor logs the death, and a new replica serves.
- SIGTERM: every replica drains (a request held in flight is answered, /health says 503
  ``stopping`` meanwhile), each logs its stop, the supervisor logs the end and exits 0.
- --replicas 0 and a port already taken are one line each, exit 2; the device rule.

No clock decides what the server sees: a request is held in flight by its client, and every wait
is a poll bounded by the hang timeout.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
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

from cheems.serving.replicas import replica_device  # noqa: E402

pytestmark = pytest.mark.usefixtures("single_torch_thread")

ATOL = 1e-6  # float32: a text scores the same in any batch and any process to within 1e-6 (docs/serving.md)
CLIENTS = 4
PID_IN_METRICS = re.compile(r'^cheems_serve_replica\{index="(\d+)",pid="(\d+)"\} 1$', re.M)


@dataclass
class Server:
    """A `cheems serve --replicas 2` process, where it listens and its log."""

    proc: object
    url: str
    log: Path

    def lines(self) -> list[str]:
        return self.log.read_text(encoding="utf-8", errors="replace").splitlines()

    def wait_for_line(self, pattern: str) -> re.Match:
        deadline = time.monotonic() + HANG_TIMEOUT_S
        while time.monotonic() < deadline:
            for line in self.lines():
                if found := re.search(pattern, line):
                    return found
            time.sleep(0.02)
        raise AssertionError(f"no log line matching {pattern!r}:\n" + "\n".join(self.lines()))

    def health(self) -> dict:
        """/health on a fresh connection (the kernel hands it to either replica)."""
        return httpx.get(self.url + "/health", timeout=HANG_TIMEOUT_S).json()

    def pids(self, n: int = 2, tries: int = 200) -> set[int]:
        """The replicas' pids, from /health over fresh connections, once ``n`` were seen."""
        seen = set()
        for _ in range(tries):
            seen.add(self.health()["replica"]["pid"])
            if len(seen) == n:
                break
        return seen


def start(model: Path, folder: Path, *flags: str) -> Server:
    folder.mkdir(parents=True, exist_ok=True)
    proc, url, _ = launch_serve(model, folder / "serve.log", "--replicas", "2", *flags)
    return Server(proc, url, folder / "serve.log")


# ----------------------------------------------------------------------------- rows and reference scores

@pytest.fixture(scope="module")
def rows(tiny_prompts) -> list[dict]:
    """Four prompts of the bundled sample with two or three responses each."""
    chosen = [p for p in tiny_prompts if len(p.responses) >= 3][:4]
    return [{"id": p.id, "prompt": p.prompt, "responses": [{"id": r.id, "content": r.content}
                                                           for r in p.responses[: 2 + k % 2]]}
            for k, p in enumerate(chosen)]


@pytest.fixture(scope="module")
def expected(tmp_path_factory, seq_cls_model, rows) -> list[float]:
    """What `cheems score --model` writes for ``rows``, in row order."""
    folder = tmp_path_factory.mktemp("reference")
    (folder / "rows.jsonl").write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
    r = run_cli_in(folder, "score", "rows.jsonl", "-o", "scores.jsonl", "--model", seq_cls_model)
    assert r.returncode == 0, r.stderr
    scored = {(s["prompt_id"], s["response_id"]): s["score"]
              for s in map(json.loads, (folder / "scores.jsonl").read_text().splitlines())}
    return [scored[(row["id"], x["id"])] for row in rows for x in row["responses"]]


@pytest.fixture(scope="module")
def rendered(seq_cls_model, rows) -> list[str]:
    """Each conversation of ``rows`` as the model's chat template writes it (what OpenRLHF sends)."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(seq_cls_model)
    return [tok.apply_chat_template([{"role": "user", "content": row["prompt"]},
                                     {"role": "assistant", "content": x["content"]}], tokenize=False)
            for row in rows for x in row["responses"]]


@pytest.fixture(scope="module")
def server(tmp_path_factory, seq_cls_model) -> Server:
    s = start(seq_cls_model, tmp_path_factory.mktemp("serve-replicas"))
    yield s
    s.proc.send_signal(signal.SIGTERM)
    assert s.proc.wait(HANG_TIMEOUT_S) == 0, s.log.read_text()


def close(got: list[float], expected: list[float]) -> bool:
    return len(got) == len(expected) and all(abs(a - b) <= ATOL for a, b in zip(got, expected))


def scores_of(reply: httpx.Response, route: str) -> list[float]:
    body = reply.json()
    return [s["score"] for s in body["scores"]] if route == "/v1/score" else body["rewards"]


# ----------------------------------------------------------------------------- tests

def test_two_replicas_score_as_cheems_score_and_both_answer(server, rows, expected, rendered):
    ready = next(x for x in server.lines() if x.startswith("cheems serve: ready at "))
    assert ", 2 replicas on cpu); Ctrl+C stops" in ready
    scored_by: dict[int, float] = {}  # pid -> its /v1/score requests answered 200, from its /metrics
    for _ in range(200):  # fresh connections until both replicas said they scored
        reply = httpx.post(server.url + "/v1/score", json={"rows": rows}, timeout=HANG_TIMEOUT_S)
        assert reply.status_code == 200 and close(scores_of(reply, "/v1/score"), expected), reply.text
        reward = httpx.post(server.url + "/get_reward", json={"query": rendered}, timeout=HANG_TIMEOUT_S)
        assert reward.status_code == 200 and close(scores_of(reward, "/get_reward"), expected), reward.text
        text = httpx.get(server.url + "/metrics", timeout=HANG_TIMEOUT_S).text
        (index, pid), = PID_IN_METRICS.findall(text)
        found = re.search(r'^cheems_serve_requests_total\{replica="(\d+)",route="/v1/score",status="200"\} (\S+)$',
                          text, re.M)
        assert found is None or found.group(1) == index  # each replica's series carry its index
        samples = [line for line in text.splitlines() if line and not line.startswith("#")
                   and not line.startswith("cheems_serve_replica{")]
        assert all(f'replica="{index}"' in line for line in samples), text
        scored_by[int(pid)] = float(found.group(2)) if found else 0.0
        if len(scored_by) == 2 and all(scored_by.values()):
            break
    assert len(scored_by) == 2 and all(scored_by.values()), scored_by
    assert server.pids() == set(scored_by)
    assert server.health()["status"] == "ok"


def test_a_killed_replica_fails_visibly_and_a_new_one_serves(server, rows, expected, rendered):
    before = server.pids()
    assert len(before) == 2
    victim = max(before)
    outcomes: list[str] = []  # "ok", "error: ...", "status N", or "WRONG ..." (the failure looked for)
    lock, stop = threading.Lock(), threading.Event()
    bodies = {"/v1/score": {"rows": rows}, "/get_reward": {"query": rendered}}

    def client(k: int) -> None:
        route = ("/v1/score", "/get_reward")[k % 2]
        with httpx.Client(timeout=HANG_TIMEOUT_S) as c:  # keep-alive: a dead replica's connection breaks
            while not stop.is_set():
                try:
                    reply = c.post(server.url + route, json=bodies[route])
                except httpx.HTTPError as e:
                    outcome = f"error: {type(e).__name__}"
                else:
                    if reply.status_code != 200:
                        outcome = f"status {reply.status_code}"
                    else:
                        try:
                            outcome = "ok" if close(scores_of(reply, route), expected) else f"WRONG {reply.text}"
                        except (ValueError, KeyError, TypeError):
                            outcome = f"WRONG {reply.text}"
                with lock:
                    outcomes.append(outcome)

    threads = [threading.Thread(target=client, args=(k,)) for k in range(CLIENTS)]
    for t in threads:
        t.start()
    try:
        wait_until(lambda: outcomes.count("ok") >= 4 * CLIENTS, "the load never got answers")
        os.kill(victim, signal.SIGKILL)
        index = int(server.wait_for_line(rf"replica (\d) \(pid {victim}\) was killed by SIGKILL while serving "
                                         r"\(its requests in flight, if any, fail at their clients\); "
                                         r"starting another$").group(1))
        new = int(server.wait_for_line(rf"replica {index} \(pid (\d+), cpu\) is ready again$").group(1))
        served = len(outcomes)
        wait_until(lambda: len(outcomes) >= served + 4 * CLIENTS, "no answers after the restart")
    finally:
        stop.set()
        for t in threads:
            t.join(HANG_TIMEOUT_S)
    wrong = [x for x in outcomes if x.startswith("WRONG")]
    assert not wrong, wrong[:3]
    assert all(x == "ok" or x.startswith(("error: ", "status 5")) for x in outcomes), set(outcomes)
    assert server.pids() == before - {victim} | {new}  # the new replica answers; the old pid is gone
    assert not any("Traceback" in x for x in server.lines())


def test_sigterm_drains_every_replica_and_exits_0(tmp_path, seq_cls_model, rendered, expected):
    s = start(seq_cls_model, tmp_path)
    host, port = s.url.removeprefix("http://").split(":")
    body = json.dumps({"query": rendered[:1]}).encode()
    held = socket.create_connection((host, int(port)))  # a request in flight: its body sent half
    held.sendall(b"POST /get_reward HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
                 b"content-length: %d\r\n\r\n" % len(body) + body[:10])
    wait_until(lambda: re.search(r'^cheems_serve_requests_in_flight\{replica="\d+"\} 2$',
                                 httpx.get(s.url + "/metrics").text, re.M) is not None,
               "the held request never reached a replica")  # the scrape and the held request
    s.proc.send_signal(signal.SIGTERM)
    index = s.wait_for_line(r"replica (\d): stopping on SIGTERM: 1 request in flight; /health answers 503").group(1)
    s.wait_for_line(rf"replica {1 - int(index)}: stopping on SIGTERM: no request in flight$")
    stopping = httpx.get(s.url + "/health", timeout=HANG_TIMEOUT_S)  # whichever replica answers, it drains
    assert stopping.status_code == 503 and stopping.json()["status"] == "stopping", stopping.text
    held.sendall(body[10:])
    reply = held.makefile("rb").read()  # the drain closes the connection after its answer
    held.close()
    head, _, payload = reply.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200 ") and close(json.loads(payload)["rewards"], expected[:1]), reply
    assert s.proc.wait(HANG_TIMEOUT_S) == 0, s.log.read_text()
    log = s.log.read_text()
    assert re.search(r"stopping on SIGTERM: 2 replicas drain their requests in flight", log), log
    assert re.search(rf"replica {index}: stopped \d+\.\d{{3}} s after SIGTERM, every request in flight answered$",
                     log, re.M), log
    assert len(re.findall(r"replica \d: stopped \d+\.\d{3} s after SIGTERM", log)) == 2, log
    assert re.search(r"stopped \d+\.\d{3} s after SIGTERM: every replica ended$", log, re.M), log
    assert "Traceback" not in log


def test_bad_values_are_one_line(tmp_path, seq_cls_model):
    none = run_cli_in(tmp_path, "serve", seq_cls_model, "--replicas", "0")
    assert none.returncode == 2 and none.stderr.strip() == "error: --replicas: must be at least 1, got 0", none.stderr
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        busy = run_cli_in(tmp_path, "serve", seq_cls_model, "--replicas", "2", "--port", str(port))
    lines = busy.stderr.strip().splitlines()
    assert busy.returncode == 2 and len(lines) == 1, busy.stderr
    assert lines[0].startswith(f"error: --port: cannot listen on 127.0.0.1:{port}: "), lines


def test_the_device_rule():
    assert [replica_device("cuda", i, lambda: 2) for i in range(3)] == ["cuda:0", "cuda:1", "cuda:0"]
    assert [replica_device("cuda:1", i, lambda: 2) for i in range(2)] == ["cuda:1", "cuda:1"]
    assert replica_device("cpu", 3, lambda: 2) == "cpu"
    assert replica_device("cuda", 1, lambda: 0) == "cuda"  # no GPU: refused as the single server refuses it


def wait_until(done, message: str) -> None:
    deadline = time.monotonic() + HANG_TIMEOUT_S
    while not done():
        assert time.monotonic() < deadline, message
        time.sleep(0.02)
