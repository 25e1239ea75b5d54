"""`cheems serve` against misbehaving clients and when it stops: the real server in its own process.

- A lone UTF-16 surrogate anywhere in a body (valid JSON, not Unicode) is refused 422 naming its
  field, on every route, where it used to be a 500 with a traceback.
- Every refusal says why in three places: the body, the ``X-Cheems-Error`` header and the status
  line's reason phrase (what OpenRLHF's clients log), and one server log line, even with the
  access lines turned off.
- Request heads are bounded in time (a client sending a byte at a time, or nothing, gets 408)
  and in size (a 50 MB header gets 431 after the first 64 KiB or so, not after 50 MB).
- SIGTERM: /health answers 503 while the request in flight is answered, then exit 0, the stop
  logged; a second Ctrl+C with a stuck client stops at once, without a traceback.

A request is held in flight by its client (its body sent half, the rest on cue): no clock
decides what the server sees. The only waits are the server's own head timeout (1 s here) and
polls with the hang timeout as their bound.
"""

from __future__ import annotations

import http.client
import json
import re
import select
import signal
import socket
import subprocess
import time
from dataclasses import dataclass
from http import HTTPStatus
from pathlib import Path

import pytest

from tests.conftest import HANG_TIMEOUT_S
from tests.serve_process import launch_serve
from tests.tiny_models import require_models_extra

require_models_extra()
httpx = pytest.importorskip("httpx")
pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")
pytest.importorskip("httptools")

from cheems.serving.contracts import refusal_reason  # noqa: E402

pytestmark = pytest.mark.usefixtures("single_torch_thread")

TOKEN = "robust-7c1e"
AUTH = {"authorization": f"Bearer {TOKEN}"}
LOG_LINE = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} (\S+) (\S+) (\d{3}) \d+\.\d{3}s(?: (.*))?$")
HEAD_TIMEOUT_S = 1  # --header-timeout-s of the shared server: what a slow head waits for
MAX_QUERIES = 4
MAX_LENGTH = 64  # tokens: a long text is refused by the engine, not the contract


@dataclass
class Server:
    """A `cheems serve` process, where it listens and its log."""

    proc: subprocess.Popen
    url: str
    log: Path

    @property
    def address(self) -> tuple[str, int]:
        host, port = self.url.removeprefix("http://").split(":")
        return host, int(port)

    def send(self, method: str, path: str, body=None, headers: dict | None = None) -> httpx.Response:
        data = body if isinstance(body, bytes) or body is None else json.dumps(body).encode()
        return httpx.request(method, self.url + path, content=data, timeout=HANG_TIMEOUT_S,
                             headers={**AUTH, "content-type": "application/json", **(headers or {})})

    def lines(self) -> list[str]:
        return self.log.read_text(encoding="utf-8", errors="replace").splitlines()

    def wait_for_line(self, pattern: str, after: int = 0) -> str:
        """The first log line past the first ``after`` ones that ``pattern`` matches, once written."""
        deadline = time.monotonic() + HANG_TIMEOUT_S
        while time.monotonic() < deadline:
            found = [x for x in self.lines()[after:] if re.search(pattern, x)]
            if found:
                return found[0]
            time.sleep(0.01)
        raise AssertionError(f"no log line matching {pattern!r}:\n" + "\n".join(self.lines()))

    def wait_in_flight(self, n: int) -> None:
        """Until /metrics counts ``n`` requests in flight besides its own scrape."""
        deadline = time.monotonic() + HANG_TIMEOUT_S
        while f"cheems_serve_requests_in_flight {n + 1}\n" not in self.send("GET", "/metrics").text:
            assert time.monotonic() < deadline, "the held request never reached the app"
            time.sleep(0.01)


def start(model: Path, folder: Path, *flags: str) -> Server:
    folder.mkdir(parents=True, exist_ok=True)
    key = folder / "key"
    key.write_text(TOKEN)
    key.chmod(0o600)
    proc, url, _ = launch_serve(model, folder / "serve.log", "--api-key-file", str(key), *flags)
    return Server(proc, url, folder / "serve.log")


@pytest.fixture(scope="module")
def server(tmp_path_factory, seq_cls_model) -> Server:
    """One server for the refusal and head tests, its access lines off: a line in its log is a refusal."""
    s = start(seq_cls_model, tmp_path_factory.mktemp("serve-robust"), "--no-log-requests",
              "--header-timeout-s", str(HEAD_TIMEOUT_S), "--max-queries", str(MAX_QUERIES),
              "--max-length", str(MAX_LENGTH))
    yield s
    s.proc.send_signal(signal.SIGTERM)
    assert s.proc.wait(HANG_TIMEOUT_S) == 0, s.log.read_text()
    assert re.search(r"stopped \d+\.\d{3} s after SIGTERM, every request in flight answered$", s.log.read_text(),
                     re.M), s.log.read_text()


def held(server: Server, body: bytes) -> socket.socket:
    """A /get_reward request in flight: its head and half its body sent, the rest left to the caller."""
    sock = socket.create_connection(server.address)
    sock.sendall(b"POST /get_reward HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
                 b"authorization: Bearer %s\r\ncontent-length: %d\r\n\r\n" % (TOKEN.encode(), len(body)))
    sock.sendall(body[: len(body) // 2])
    return sock


def reply(sock: socket.socket) -> tuple[http.client.HTTPResponse, bytes]:
    sock.settimeout(HANG_TIMEOUT_S)
    response = http.client.HTTPResponse(sock)
    response.begin()
    return response, response.read()


# ----------------------------------------------------------------------------- refusals

SURROGATE_ROWS = [{"id": "p", "prompt": "q\ud800", "responses": [{"id": "a", "content": "x"}]}]
REFUSALS = [
    # (what, method, path, body, headers, status, field)
    ("a query", "POST", "/get_reward", {"query": ["abc\ud800"]}, None, 422, "query[0]"),
    ("a prompt", "POST", "/get_reward", {"query": ["ok"], "prompts": ["p\udc00"]}, None, 422, "prompts[0]"),
    ("a label", "POST", "/get_reward", {"query": ["ok"], "labels": [{"answer": "\ud800"}]}, None, 422,
     "labels[0].answer"),
    ("a key", "POST", "/get_reward", {"query": ["ok"], "\ud800": 1}, None, 422, "body"),
    ("raw UTF-8 bytes of a surrogate", "POST", "/get_reward", b'{"query": ["a\xed\xa0\x80"]}', None, 422,
     "query[0]"),
    ("an input text", "POST", "/classify", {"input": "abc\ud800"}, None, 422, "input"),
    ("an input in a list", "POST", "/classify", {"input": ["ok", "\udfff"]}, None, 422, "input[1]"),
    ("the model name", "POST", "/classify", {"model": "m\ud800", "input": "a"}, None, 422, "model"),
    ("a row's prompt", "POST", "/v1/score", {"rows": SURROGATE_ROWS}, None, 422, "rows[0].prompt"),
    ("a chat message", "POST", "/v1/score",
     {"rows": [{"prompt": [{"role": "user", "content": "hi\ud800"}], "responses": [{"content": "x"}]}]}, None, 422,
     "rows[0].prompt[0].content"),
    ("a messages row", "POST", "/v1/score",
     {"rows": [{"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a\ud800"}]}]},
     None, 422, "rows[0].messages[1].content"),
    ("a response", "POST", "/v1/score", {"rows": [{"prompt": "q", "responses": [{"content": "x"},
                                                                                {"content": "y\ud800"}]}]},
     None, 422, "rows[0].responses[1].content"),
    ("a text row", "POST", "/v1/score", {"rows": [{"text": "\ud800"}]}, None, 422, "rows[0].text"),
    ("too many queries", "POST", "/get_reward", {"query": ["a"] * (MAX_QUERIES + 1)}, None, 413, "query"),
    ("a wrong shape", "POST", "/get_reward", {"query": "a"}, None, 422, "query"),
    ("longer than the model", "POST", "/get_reward", {"query": ["你好，世界" * 60]}, None, 422, "query[0]"),
    ("no bearer token", "POST", "/get_reward", {"query": ["a"]}, {"authorization": ""}, 401, "authorization"),
    ("an unknown path", "POST", "/nothing", {}, None, 404, "path"),
    ("a wrong method", "GET", "/get_reward", None, None, 405, "method"),
]


@pytest.mark.parametrize("what,method,path,body,headers,status,field", REFUSALS, ids=[r[0] for r in REFUSALS])
def test_a_refusal_names_its_reason_in_the_body_header_status_line_and_log(server, what, method, path, body,
                                                                          headers, status, field):
    before = len(server.lines())
    r = server.send(method, path, body, headers)
    assert (r.status_code, r.json()["error"]["field"]) == (status, field), r.text
    reason = r.headers["x-cheems-error"]
    assert reason == refusal_reason(r.json()["error"]["message"], field) and reason.startswith(f"{field}: ")
    assert r.reason_phrase == f"{HTTPStatus(status).phrase} ({reason})"
    line = server.wait_for_line(rf" {status} \d", before)
    assert LOG_LINE.match(line).groups() == (method, path, str(status), reason), line
    assert len(server.lines()) == before + 1 and "Traceback" not in server.log.read_text()


def test_a_lone_surrogate_says_where_it_is_and_a_pair_is_scored(server):
    before = len(server.lines())
    r = server.send("POST", "/get_reward", b'{"query": ["ok", "abc\\ud800def"]}')
    assert r.json()["error"]["message"].startswith("holds a lone surrogate (\\ud800 at character 3)"), r.text
    pair = server.send("POST", "/get_reward", b'{"query": ["\\ud83d\\ude00 \xe4\xbd\xa0\xe5\xa5\xbd"]}')
    assert pair.status_code == 200 and len(pair.json()["rewards"]) == 1, pair.text
    assert server.send("GET", "/nothing").status_code == 404  # its line comes after any the pair would have
    server.wait_for_line(" 404 ", before)
    assert [LOG_LINE.match(x).group(3) for x in server.lines()[before:]] == ["422", "404"], \
        "an answered request is not logged with --no-log-requests"


def test_openrlhf_s_client_logs_the_reason(server):
    """OpenRLHF up to v0.9.0 posts with requests and logs the HTTPError (v0.9.1 on, aiohttp's
    ClientResponseError: ``422, message='...'``): both print the reason phrase."""
    requests = pytest.importorskip("requests")
    response = requests.post(server.url + "/get_reward", json={"query": ["abc\ud800"], "prompts": ["p"]},
                             headers={"Content-Type": "application/json", **AUTH}, timeout=180)
    with pytest.raises(requests.HTTPError) as e:
        response.raise_for_status()
    assert "422 Client Error: Unprocessable Entity (query[0]: holds a lone surrogate" in str(e.value)


# ----------------------------------------------------------------------------- request heads

@pytest.mark.parametrize("trickle", [True, False], ids=["a-byte-at-a-time", "nothing-sent"])
def test_a_slow_head_is_cut_off_with_408(server, trickle):
    before = len(server.lines())
    sock = socket.create_connection(server.address)
    head = b"POST /get_reward HTTP/1.1\r\nhost: x\r\n" + b"x-slow: " + b"a" * 10_000
    sent = 0
    while trickle and sent < len(head) and not select.select([sock], [], [], 0.05)[0]:
        sock.sendall(head[sent:sent + 1])  # one byte each 50 ms: the whole head would take 8 minutes
        sent += 1
    response, body = reply(sock)
    assert response.status == 408 and json.loads(body)["error"]["field"] == "headers"
    assert response.reason.startswith("Request Timeout (headers: the request head was not complete within 1 s")
    assert sock.recv(1) == b"", "the connection is closed"
    sock.close()
    line = server.wait_for_line(" 408 ", before)
    assert LOG_LINE.match(line).groups()[:3] == ("-", "-", "408"), line


def test_a_50_mb_header_is_refused_with_431_early(server):
    before = len(server.lines())
    sock = socket.create_connection(server.address)
    sock.sendall(b"GET /health HTTP/1.1\r\nhost: x\r\nx-big: ")
    sent, chunk = 0, b"a" * 65536
    while sent < 50 << 20 and not select.select([sock], [], [], 0)[0]:
        sock.sendall(chunk)
        sent += len(chunk)
    response, body = reply(sock)
    assert response.status == 431 and json.loads(body)["error"]["field"] == "headers"
    assert response.reason == "Request Header Fields Too Large (headers: larger than 65536 bytes (--max-header-bytes))"
    assert sent < 50 << 20, "answered before the whole header was sent"
    sock.close()
    assert LOG_LINE.match(server.wait_for_line(" 431 ", before)).group(4).startswith("headers: larger than")


def test_a_large_head_within_the_bound_is_served(server):
    r = server.send("GET", "/health", headers={"x-large": "a" * 60_000})
    assert r.status_code == 200 and r.json()["status"] == "ok", r.text


def test_help_says_what_the_server_does():
    import typer

    from cheems.cli.app import app

    helps = {p.name: " ".join((p.help or "").split()) for p in typer.main.get_command(app).commands["serve"].params}
    assert "`cheems serve` refuses them (422) unless --truncation left or right" in helps["max_length"]
    assert "431" in helps["max_header_bytes"] and "408" in helps["header_timeout_s"]
    assert "/health says 503" in helps["shutdown_timeout_s"]
    assert "refused requests are logged either way" in helps["log_requests"]


# ----------------------------------------------------------------------------- stopping

def test_sigterm_drains_with_health_503_then_a_second_ctrl_c_stops_at_once(tmp_path, seq_cls_model):
    """Two requests in flight when SIGTERM comes: /health says 503 and new requests are refused
    while the first is answered; the second is stuck, and Ctrl+C stops the server at once,
    without a traceback. (The drain running to its end: the ``server`` fixture's teardown.)"""
    server = start(seq_cls_model, tmp_path)
    body = json.dumps({"query": ["你好"]}).encode()
    answered, stuck = held(server, body), held(server, body)
    try:
        server.wait_in_flight(2)
        server.proc.send_signal(signal.SIGTERM)
        server.wait_for_line("stopping on SIGTERM: 2 requests in flight")
        health = httpx.get(server.url + "/health", timeout=HANG_TIMEOUT_S)
        assert (health.status_code, health.json()["status"]) == (503, "stopping")
        assert health.reason_phrase == "Service Unavailable (the server is stopping)"
        refused = server.send("POST", "/get_reward", {"query": ["a"]})
        assert refused.status_code == 503 and refused.headers["retry-after"] == "1", refused.text
        assert server.send("GET", "/metrics").status_code == 200, "metrics are still scraped while draining"
        answered.sendall(body[len(body) // 2:])  # the first request in flight goes on, and is answered
        response, data = reply(answered)
        assert response.status == 200 and len(json.loads(data)["rewards"]) == 1, data
        server.wait_for_line("POST /get_reward 200 ")
        assert server.proc.poll() is None, "still draining: the stuck request is in flight"
        server.proc.send_signal(signal.SIGINT)
        assert server.proc.wait(HANG_TIMEOUT_S) == 0, server.log.read_text()
        stuck.settimeout(HANG_TIMEOUT_S)
        assert stuck.recv(1) == b"", "the stuck request's connection is closed, unanswered"
    finally:
        answered.close()
        stuck.close()
    log = server.log.read_text()
    assert "stopping at once (Ctrl+C again, after" in log and "1 request in flight left unanswered" in log, log
    assert re.search(r"^\S+ \S+ stopped \d+\.\d{3} s after SIGTERM$", log, re.M), log
    assert "Traceback" not in log and "CancelledError" not in log, log
    answers = [m.groups() for x in log.splitlines() if (m := LOG_LINE.match(x)) and m.group(2) != "/metrics"]
    assert [a[2] for a in answers] == ["503", "503", "200", "499"], log  # one line per request
    assert answers[-1][3] == "the server stopped at once before answering (--shutdown-timeout-s, or Ctrl+C twice)"
