"""A scriptable OpenAI-compatible chat server on loopback, for testing API judges for real.

``JudgeServer`` answers ``POST /v1/chat/completions`` over real HTTP (stdlib
``ThreadingHTTPServer`` on 127.0.0.1, a free port, a background thread) with the JSON shape
the ``openai`` package parses. What it answers is a ``script``: a function of the request
(``Call``) returning a ``Reply`` (status, text, delay). Canned scripts:

- ``smart_judge``: the perceived quality of each response is a planted marker ``〔质量N〕``
  in its text; the first marker in the request belongs to 回答A, the second to 回答B; it
  prefers the higher one and says C on equal ones. It knows nothing of the prompt format.
- ``first_judge``: always ``[[A]]`` (a judge with pure position bias).
- ``with_faults``: wraps a script so the first calls get given statuses (429, 500, 400...),
  or no answer at all (held until the server stops: only the client's timeout ends them).
- ``held_from``: wraps a script so that calls from the n-th on get no answer (until released),
  so a run cannot finish before a test kills it.
- ``responder``: a chat model for sampling tests; its Chinese answer is made from the request
  (model, seed, temperature, last user message), so equal requests get equal answers.
- ``by_model``: one script per ``body["model"]``, so one server plays several models.
- ``failing``: always answers with one error status.
- ``huge_when``: wraps a script so requests whose user text holds a marker get a chat
  completion of ``size`` bytes (50 MB by default), written piece by piece with or without a
  Content-Length; ``bytes_sent`` counts what the server got onto the socket of those.

``latency`` delays every reply (simulated model time). ``requests`` counts the requests
received, ``calls`` keeps them. Use it as a context manager or call ``stop()``.
"""

from __future__ import annotations

import json
import re
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Callable

QUALITY = re.compile(r"〔质量(\d+)〕")


def quality(n: int) -> str:
    """The planted marker of perceived quality ``n`` that ``smart_judge`` reads."""
    return f"〔质量{n}〕"


@dataclass
class Call:
    """One request as the server saw it: its 0-based index, JSON body and HTTP headers."""

    index: int
    body: dict
    headers: dict = field(default_factory=dict)

    @property
    def messages(self) -> list[dict]:
        return self.body.get("messages", [])

    @property
    def user_text(self) -> str:
        return "\n".join(m.get("content", "") for m in self.messages if m.get("role") == "user")


@dataclass
class Reply:
    """What to answer: ``status`` 200 with ``text`` as the assistant message, or an error
    status with ``text`` as its message; ``raw`` sends those bytes as the body instead."""

    text: str = ""
    status: int = 200
    delay: float = 0.0  # extra seconds before answering (on top of the server's latency)
    held: bool = False  # never answered (held until the server stops): only the client's timeout ends it
    headers: dict = field(default_factory=dict)
    finish_reason: str = "stop"
    raw: bytes | None = None
    size: int | None = None  # a chat completion padded to this many bytes, sent piece by piece
    declare_length: bool = True  # with size: send Content-Length (else chunked transfer encoding)


Script = Callable[[Call], Reply]


def smart_judge(call: Call) -> Reply:
    """Prefer the response with the higher planted 〔质量N〕 marker; reason briefly first."""
    found = [int(q) for q in QUALITY.findall(call.user_text)]
    if len(found) < 2:
        return Reply("材料里没有可比较的内容。")
    qa, qb = found[0], found[1]
    verdict = "A" if qa > qb else "B" if qb > qa else "C"
    return Reply(f"回答A的质量约为{qa}，回答B的质量约为{qb}。综合比较后给出判决。\n[[{verdict}]]")


def first_judge(call: Call) -> Reply:
    """A judge that always prefers whatever is shown first."""
    return Reply("两个回答都不错，第一个读起来更顺。\n[[A]]")


def garbled_judge(call: Call) -> Reply:
    """A judge that never ends with a verdict marker."""
    return Reply("两个回答各有长处，我很难说哪个更好，需要更多信息才能判断。")


def with_faults(script: Script, *, statuses: list[int] = (), held_calls: int = 0) -> Script:
    """``script`` after the first calls fail: call i < len(statuses) gets ``statuses[i]``,
    then the next ``held_calls`` calls get no answer (``Reply.held``)."""
    statuses = list(statuses)

    def faulty(call: Call) -> Reply:
        if call.index < len(statuses):
            status = statuses[call.index]
            headers = {"retry-after": "0"} if status == 429 else {}
            return Reply(f"injected {status}", status=status, headers=headers)
        if call.index < len(statuses) + held_calls:
            reply = script(call)
            reply.held = True
            return reply
        return script(call)

    return faulty


def held_from(first: int, script: Script, *, released: threading.Event | None = None) -> Script:
    """``script``, except that calls from the ``first``-th on (0-based ``index >= first``) get no
    answer (``Reply.held``) until ``released`` is set (for good when None). A run that needs
    them cannot finish, and with concurrency ``c`` it sends exactly ``first + c`` requests and
    then waits: a test kills it there, without racing it."""

    def holding(call: Call) -> Reply:
        reply = script(call)
        reply.held = call.index >= first and not (released is not None and released.is_set())
        return reply

    return holding


def responder(call: Call) -> Reply:
    """A sampled chat model: a Chinese answer naming the model, the seed and the temperature
    of the request and quoting the start of its last user message. Deterministic in the
    request. An answer longer than ``max_tokens`` characters is cut there and ends with
    finish reason ``length``, as a real model's would."""
    body = call.body
    users = [m.get("content", "") for m in call.messages if m.get("role") == "user"]
    question = users[-1] if users else ""
    text = (f"这是{body.get('model')}的第{body.get('seed')}号回答（温度{body.get('temperature')}）。"
            f"关于“{question[:40]}”：先理清题意，再分步作答，最后给出结论。")
    limit = body.get("max_tokens")
    if isinstance(limit, int) and len(text) > limit:
        return Reply(text[:limit], finish_reason="length")
    return Reply(text)


def by_model(scripts: dict[str, Script]) -> Script:
    """Answer each request with the script of its ``body["model"]``; an unknown model gets
    a 404, as real endpoints answer."""

    def dispatch(call: Call) -> Reply:
        script = scripts.get(call.body.get("model"))
        if script is None:
            return Reply(f"The model `{call.body.get('model')}` does not exist.", status=404)
        return script(call)

    return dispatch


HUGE = 50 * 1024 * 1024


def huge_when(marker: str, script: Script, *, size: int = HUGE, declare_length: bool = True,
              status: int = 200) -> Script:
    """``script``, except that a request whose user text holds ``marker`` is answered with a
    body of ``size`` bytes: a chat completion (or, with another ``status``, an error) whose
    text is padding."""

    def maybe_huge(call: Call) -> Reply:
        if marker in call.user_text:
            return Reply(status=status, size=size, declare_length=declare_length)
        return script(call)

    return maybe_huge


def failing(status: int) -> Script:
    """A script that answers every request with ``status``."""

    def fail(call: Call) -> Reply:
        headers = {"retry-after": "0"} if status == 429 else {}
        return Reply(f"injected {status}", status=status, headers=headers)

    return fail


class JudgeServer:
    """The fake endpoint; ``base_url`` is what a client passes as ``api_base``."""

    def __init__(self, script: Script = smart_judge, *, latency: float = 0.0):
        self.script = script
        self.latency = latency
        self.calls: list[Call] = []
        self.bytes_sent = 0  # of the sized (huge) replies, what went onto the socket
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        owner = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive, as real endpoints do
            disable_nagle_algorithm = True  # headers and body go out at once

            def log_message(self, *args) -> None:  # quiet
                pass

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length)
                if self.path.rstrip("/") != "/v1/chat/completions":
                    self._send(404, {"error": {"message": "not found", "type": "invalid_request_error"}})
                    return
                body = json.loads(raw)
                with owner._lock:
                    call = Call(len(owner.calls), body, dict(self.headers))
                    owner.calls.append(call)
                reply = owner.script(call)
                if owner._stopping.wait(None if reply.held else owner.latency + reply.delay):
                    return  # shutting down (or held until then): answer nothing
                if reply.raw is not None:
                    self._send(reply.status, reply.raw, reply.headers)
                    return
                if reply.size is not None:
                    self._send_sized(reply, body.get("model", "fake"), call.index)
                    return
                if reply.status != 200:
                    kind = "rate_limit_error" if reply.status == 429 else "server_error"
                    self._send(reply.status, {"error": {"message": reply.text, "type": kind, "code": None}},
                               reply.headers)
                    return
                self._send(200, completion(body.get("model", "fake"), reply.text, call.index, reply.finish_reason),
                           reply.headers)

            def _send(self, status: int, payload: dict | bytes, headers: dict | None = None) -> None:
                data = payload if isinstance(payload, bytes) else json.dumps(payload, ensure_ascii=False).encode()
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    for k, v in (headers or {}).items():
                        self.send_header(k, v)
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (timeout): nothing to do

            def _send_sized(self, reply: Reply, model: str, index: int) -> None:
                """A body of exactly ``reply.size`` bytes, 64 KiB at a time, until the client hangs up."""
                if reply.status == 200:
                    head, tail = json.dumps(completion(model, "\0", index)).encode().split(b"\\u0000")
                else:
                    head, tail = b'{"error": {"type": "server_error", "message": "', b'"}}'
                pad = reply.size - len(head) - len(tail)
                self.close_connection = True
                try:
                    self.send_response(reply.status)
                    self.send_header("Content-Type", "application/json")
                    if reply.declare_length:
                        self.send_header("Content-Length", str(reply.size))
                    else:
                        self.send_header("Transfer-Encoding", "chunked")
                    self.end_headers()
                    piece = b"x" * 65536
                    parts = [head] + [piece] * (pad // len(piece)) + [piece[:pad % len(piece)], tail]
                    for part in parts:
                        if owner._stopping.is_set():
                            return
                        self.wfile.write(part if reply.declare_length else
                                         b"%x\r\n%s\r\n" % (len(part), part) if part else b"")
                        with owner._lock:
                            owner.bytes_sent += len(part)
                    if not reply.declare_length:
                        self.wfile.write(b"0\r\n\r\n")
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client stopped reading: what it was meant to do

        class Server(ThreadingHTTPServer):
            daemon_threads = True
            request_queue_size = 256  # many concurrent connects without SYN retries

            def handle_error(self, request, client_address) -> None:
                pass  # clients that hang up are expected in fault tests

        self._httpd = Server(("127.0.0.1", 0), Handler)
        self.port = self._httpd.server_address[1]
        self.base_url = f"http://127.0.0.1:{self.port}/v1"
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05},
                                        daemon=True)
        self._thread.start()

    @property
    def requests(self) -> int:
        with self._lock:
            return len(self.calls)

    def stop(self) -> None:
        self._stopping.set()
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)

    def __enter__(self) -> "JudgeServer":
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def completion(model: str, text: str, index: int = 0, finish_reason: str = "stop") -> dict:
    """An OpenAI ``chat.completion`` object with one choice."""
    return {
        "id": f"chatcmpl-fake-{index}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                     "logprobs": None, "finish_reason": finish_reason}],
        "usage": {"prompt_tokens": 10, "completion_tokens": max(1, len(text)),
                  "total_tokens": 10 + max(1, len(text))},
    }
