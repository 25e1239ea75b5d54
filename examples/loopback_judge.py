"""A small OpenAI-compatible chat server on 127.0.0.1 for running the examples without any real model.

It answers ``POST /v1/chat/completions`` (and lists its models at ``GET /v1/models``) with deterministic
replies, so every run of an example gives the same files:

- a request for the model ``judge`` is answered as an LLM judge: it compares 回答A and 回答B of the judge prompt
  and prefers the one with more distinct characters (a judge that likes detailed answers), ``[[C]]`` on a tie;
- a request for any other model is answered as a chat model: a Chinese answer put together from the question,
  the model's name and the request's seed, a different length for each.

Usage: ``python examples/loopback_judge.py --port-file PORT_FILE`` picks a free port, writes it to PORT_FILE
once it listens, and serves until it is stopped (SIGTERM or Ctrl-C). Standard library only.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import signal
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

__all__ = ["answer", "chat_answer", "judge_answer", "main"]

JUDGE_MODEL = "judge"

SENTENCES = [
    "先把问题拆成几个小问题，逐个说清楚。",
    "关键在于弄清题目真正要求的是什么。",
    "可以举一个具体的例子来说明这一点。",
    "需要注意边界情况，不能只看常见的情形。",
    "如果条件不同，结论也会随之变化。",
    "最后把前面的要点归纳成一句简明的结论。",
    "这样回答既完整又便于读者核对。",
    "另外要提醒读者留意容易出错的细节。",
]


def _digest(*parts: object) -> int:
    return int(hashlib.sha256(json.dumps(parts, ensure_ascii=False).encode("utf-8")).hexdigest(), 16)


def chat_answer(model: str, seed: object, question: str) -> str:
    """A chat model's answer: two to six sentences chosen by (model, seed, question)."""
    h = _digest(model, seed, question)
    count = 2 + h % 5
    order = sorted(range(len(SENTENCES)), key=lambda i: _digest(h, i))
    topic = question.strip().splitlines()[0][:24] if question.strip() else "这个问题"
    return f"关于“{topic}”，{model}的看法如下：" + "".join(SENTENCES[i] for i in order[:count])


_BLOCK = r"【回答{0} 开始·(\w+)】\n(.*?)\n【回答{0} 结束·\1】"


def judge_answer(user_text: str) -> str:
    """The judge's reply: a short reason, then ``[[A]]``, ``[[B]]`` or ``[[C]]`` on the last line."""
    found = [re.search(_BLOCK.format(side), user_text, re.S) for side in "AB"]
    if not all(found):
        return "材料不完整，无法比较。\n[[C]]"
    a, b = (len(set(m.group(2))) for m in found)
    verdict = "A" if a > b else "B" if b > a else "C"
    return f"回答A用了{a}个不同的字，回答B用了{b}个，内容更丰富的一方更好。\n[[{verdict}]]"


def answer(body: dict) -> str:
    """The reply to one chat completion request."""
    messages = body.get("messages") or []
    users = [m.get("content") or "" for m in messages if m.get("role") == "user"]
    users = [u if isinstance(u, str) else json.dumps(u, ensure_ascii=False) for u in users]
    if body.get("model") == JUDGE_MODEL:
        return judge_answer("\n".join(users))
    return chat_answer(str(body.get("model")), body.get("seed"), users[-1] if users else "")


class Handler(BaseHTTPRequestHandler):
    """Serves the two routes; anything else is a 404."""

    def _send(self, status: int, payload: dict) -> None:
        data = json.dumps(payload, ensure_ascii=False).encode("utf-8")
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:  # noqa: N802 (the name http.server calls)
        if self.path.rstrip("/").endswith("/models"):
            self._send(200, {"object": "list", "data": [{"id": JUDGE_MODEL, "object": "model"}]})
        else:
            self._send(404, {"error": {"message": f"no route {self.path}"}})

    def do_POST(self) -> None:  # noqa: N802
        if not self.path.rstrip("/").endswith("/chat/completions"):
            self._send(404, {"error": {"message": f"no route {self.path}"}})
            return
        try:
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
        except json.JSONDecodeError as e:
            self._send(400, {"error": {"message": f"invalid JSON: {e}"}})
            return
        text = answer(body)
        self._send(200, {
            "id": f"chatcmpl-{_digest(body) % 10 ** 12}", "object": "chat.completion", "created": int(time.time()),
            "model": body.get("model"),
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 0, "completion_tokens": len(text), "total_tokens": len(text)}})

    def log_message(self, format: str, *args) -> None:  # quiet: the examples print their own progress
        pass


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, default=0, help="Port to listen on (default: a free one).")
    parser.add_argument("--port-file", type=Path, help="Write the port here once the server listens.")
    args = parser.parse_args(argv)
    server = ThreadingHTTPServer(("127.0.0.1", args.port), Handler)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    port = server.server_address[1]
    if args.port_file:
        tmp = args.port_file.with_name(args.port_file.name + ".tmp")
        tmp.write_text(str(port), encoding="utf-8")
        tmp.replace(args.port_file)
    print(f"loopback chat server on http://127.0.0.1:{port}/v1", file=sys.stderr)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()


if __name__ == "__main__":
    main()
