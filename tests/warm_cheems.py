"""A warm ``cheems`` for tests that run shell scripts of many commands (the examples).

Every ``cheems`` command that touches a model starts with several seconds of ``import torch`` and
``import transformers``, most of a tiny model's run. Here one parent process imports the command
line and those libraries once and then forks a child per command: the child is a process of its
own, with the caller's argv, working directory, environment, stdin, stdout and stderr (passed as
file descriptors over a Unix socket), running ``cheems.cli.main`` as the entry point does, and the
caller exits with the child's status. SIGINT and SIGTERM sent to the caller reach the child.

``warm_cheems(folder, env)`` starts the parent and writes ``folder/cheems``, a script to put first
on PATH; the parent stops when the context ends. The entry point itself (``python -m cheems`` and
the console script) is tested by tests/test_cli_runner.py and tests/test_cli.py."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Iterator, Mapping

CLIENT = '''#!{python}
import json, os, signal, socket, sys
conn = socket.socket(socket.AF_UNIX)
conn.connect({address!r})
request = json.dumps({{"argv": sys.argv[1:], "cwd": os.getcwd(), "env": dict(os.environ)}}).encode() + b"\\n"
socket.send_fds(conn, [request], [0, 1, 2])
reply = conn.makefile("r")
pid = int(reply.readline())
for number in (signal.SIGINT, signal.SIGTERM):
    signal.signal(number, lambda n, _frame: os.kill(pid, n))
status = reply.readline().strip()
sys.exit(int(status) if status else 1)
'''

SERVER = r'''
import io, json, locale, os, signal, socket, sys, traceback
import cheems.cli
import torch, transformers, accelerate  # the slow imports, done once
from transformers import AutoModelForSequenceClassification, AutoTokenizer, Qwen2ForSequenceClassification

listener = socket.socket(socket.AF_UNIX)
listener.bind(sys.argv[1])
listener.listen(64)
listener.settimeout(0.2)
print("ready", flush=True)


def run(conn, request, fds):
    signal.signal(signal.SIGINT, signal.default_int_handler)
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
        os.close(fd)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    inherited = (sys.stdout, sys.stderr)
    for stream in inherited:
        stream.flush()
    # the standard streams a fresh interpreter would open on these descriptors
    encoding = os.environ.get("PYTHONIOENCODING") or locale.getpreferredencoding(False)
    sys.stdin = io.TextIOWrapper(io.open(0, "rb", closefd=False), encoding=encoding)
    sys.stdout = io.TextIOWrapper(io.open(1, "wb", closefd=False), encoding=encoding, line_buffering=os.isatty(1))
    sys.stderr = io.TextIOWrapper(io.open(2, "wb", closefd=False), encoding=encoding, errors="backslashreplace",
                                  line_buffering=True)
    sys.argv = ["cheems", *request["argv"]]
    status = 0
    try:
        cheems.cli.main()
    except SystemExit as e:
        status = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        if e.code is not None and not isinstance(e.code, int):
            print(e.code, file=sys.stderr)
    except BaseException:
        traceback.print_exc()
        status = 1
    finally:
        for stream in (*inherited, sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:
                pass
    conn.sendall(b"%d\n" % status)
    os._exit(status)


while True:
    with_children = True
    while with_children:
        try:
            with_children = os.waitpid(-1, os.WNOHANG)[0] != 0
        except ChildProcessError:
            with_children = False
    try:
        conn, _ = listener.accept()
    except socket.timeout:
        continue
    conn.settimeout(None)
    message, fds, _flags, _address = socket.recv_fds(conn, 1 << 20, 3)
    while not message.endswith(b"\n"):
        message += conn.recv(1 << 20)
    pid = os.fork()
    if pid == 0:
        listener.close()
        run(conn, json.loads(message), fds)
    for fd in fds:
        os.close(fd)
    conn.sendall(b"%d\n" % pid)
    conn.close()
'''


@contextlib.contextmanager
def warm_cheems(folder: Path, env: Mapping[str, str]) -> Iterator[Path]:
    """Starts the forking parent (with ``env``, as the commands' environment is at import) and
    writes ``folder/cheems``; yields the folder, to put first on PATH."""
    folder.mkdir(parents=True, exist_ok=True)
    address = str(folder / "warm.sock")
    log = folder / "warm.log"
    with open(log, "w", encoding="utf-8") as errors:
        parent = subprocess.Popen([sys.executable, "-c", SERVER, address], env=dict(env), text=True,
                                  stdout=subprocess.PIPE, stderr=errors)
    try:
        if parent.stdout.readline().strip() != "ready":
            raise RuntimeError(f"the warm cheems did not start: {log.read_text(encoding='utf-8')[-2000:]}")
        client = folder / "cheems"
        client.write_text(CLIENT.format(python=sys.executable, address=address), encoding="utf-8")
        client.chmod(0o755)
        yield folder
    finally:
        parent.kill()
        parent.wait()
        Path(address).unlink(missing_ok=True)
