"""A warm ``cheems`` for tests that start many command processes (the example scripts, the servers).

Every ``cheems`` command that touches a model starts with several seconds of ``import torch`` and
``import transformers``, most of a tiny model's run. Here one parent process imports the command
line and those libraries once and then forks a child per command: the child is a process of its
own, with the caller's argv, working directory, environment, stdin, stdout and stderr (passed as
file descriptors over a Unix socket), running ``cheems.cli.main`` as the entry point does. The
parent reaps it and sends its exit status, as ``subprocess.Popen.returncode`` gives it (minus the
signal that ended it), to the caller.

- ``WarmParent.start(folder, env)`` starts the parent; ``parent.process(args, cwd=, env=,
  stdout=, stderr=)`` starts a command and returns a :class:`WarmProcess`, which has the Popen
  calls the tests use (pid, poll, wait, send_signal, terminate, kill, returncode) and signals the
  child itself, ``kill()`` included.
- ``parent.client_script()`` writes ``folder/cheems``, a script to put first on PATH for shell
  scripts: it runs its command in a child and exits as the child did, passing SIGINT and SIGTERM on.

The entry point itself (``python -m cheems`` and the console script, in a fresh interpreter) is
tested by tests/test_cli_runner.py and tests/test_cli.py; tests of start-up, imports or ``kill -9``
of a fresh process start real ones."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Mapping, Sequence

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
status = int(reply.readline() or 1)
if status < 0:
    signal.signal(-status, signal.SIG_DFL)
    os.kill(os.getpid(), -status)
sys.exit(status)
'''

SERVER = r'''
import io, json, locale, os, select, signal, socket, sys, traceback
import cheems.cli
import accelerate, torch, transformers  # the slow imports, done once
from transformers import AutoModelForSequenceClassification, AutoTokenizer, Qwen2ForSequenceClassification
import cheems.scoring.transformers_rm, cheems.serving.server

listener = socket.socket(socket.AF_UNIX)
listener.bind(sys.argv[1])
listener.listen(64)
waiting = {}  # child pid -> the connection its status goes to
print("ready", flush=True)


def run(request, fds):
    listener.close()
    for conn in waiting.values():
        conn.close()
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
        os.close(fd)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
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
        if e.code is not None and not isinstance(e.code, int):
            print(e.code, file=sys.stderr)
        status = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    except BaseException:
        traceback.print_exc()
        status = 1
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:
            pass
    os._exit(status)


def reap():
    while waiting:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        conn = waiting.pop(pid, None)
        if conn is not None:
            try:
                conn.sendall(b"%d\n" % os.waitstatus_to_exitcode(status))
            except OSError:
                pass
            conn.close()


while True:
    reap()
    if not select.select([listener], [], [], 0.05)[0]:
        continue
    conn, _ = listener.accept()
    message, fds, _flags, _address = socket.recv_fds(conn, 1 << 20, 3)
    while message and not message.endswith(b"\n"):
        message += conn.recv(1 << 20)
    pid = os.fork()
    if pid == 0:
        run(json.loads(message), fds)
    for fd in fds:
        os.close(fd)
    waiting[pid] = conn
    conn.sendall(b"%d\n" % pid)
'''


class WarmProcess:
    """A command forked by the warm parent, with the ``subprocess.Popen`` calls the tests use."""

    def __init__(self, conn: socket.socket, args: Sequence[str]):
        self.args = list(args)
        self._conn, self._buffer = conn, b""
        self.pid = int(self._line(None))
        self.returncode: int | None = None

    def _line(self, timeout: float | None) -> str | None:
        """The parent's next line (its pid, then the exit status); None when none came in
        ``timeout`` seconds; "" when the parent closed the connection without one."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while b"\n" not in self._buffer:
            # a socket timeout rather than select(), which refuses descriptors over 1023
            self._conn.settimeout(None if deadline is None else max(0.0, deadline - time.monotonic()))
            try:
                chunk = self._conn.recv(64)
            except (BlockingIOError, TimeoutError):
                return None
            if not chunk:
                return ""
            self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        return line.decode("ascii")

    def poll(self) -> int | None:
        return self.returncode if self.returncode is not None else self._finish(self._line(0))

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None and self._finish(self._line(timeout)) is None:
            raise subprocess.TimeoutExpired(self.args, timeout)
        return self.returncode

    def _finish(self, line: str | None) -> int | None:
        if line is not None:
            self.returncode = int(line) if line.strip() else -signal.SIGKILL  # the parent itself was killed
            self._conn.close()
        return self.returncode

    def send_signal(self, number: int) -> None:
        if self.returncode is None:
            try:
                os.kill(self.pid, number)
            except ProcessLookupError:
                pass

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


class WarmParent:
    """The forking parent (see the module's docstring). ``start`` it once; ``stop`` it at the end."""

    def __init__(self, folder: Path, proc: subprocess.Popen):
        self.folder, self.proc, self.address = folder, proc, str(folder / "warm.sock")

    @classmethod
    def start(cls, folder: Path, env: Mapping[str, str]) -> "WarmParent":
        """With ``env`` as the environment of the imports (OMP_NUM_THREADS, say)."""
        folder.mkdir(parents=True, exist_ok=True)
        log = folder / "warm.log"
        with open(log, "w", encoding="utf-8") as errors:
            proc = subprocess.Popen([sys.executable, "-c", SERVER, str(folder / "warm.sock")], env=dict(env),
                                    text=True, stdout=subprocess.PIPE, stderr=errors)
        if proc.stdout.readline().strip() != "ready":
            proc.kill()
            raise RuntimeError(f"the warm cheems did not start: {log.read_text(encoding='utf-8')[-2000:]}")
        return cls(folder, proc)

    def process(self, args: Sequence[str], *, cwd: str | os.PathLike, env: Mapping[str, str], stdout,
                stderr=None) -> WarmProcess:
        """``cheems ARGS`` in a child; stdout and stderr are open files (stderr None: stdout's)."""
        conn = socket.socket(socket.AF_UNIX)
        conn.connect(self.address)
        request = json.dumps({"argv": list(args), "cwd": str(cwd), "env": dict(env)}).encode() + b"\n"
        with open(os.devnull, "rb") as stdin:
            socket.send_fds(conn, [request], [stdin.fileno(), stdout.fileno(), (stderr or stdout).fileno()])
        return WarmProcess(conn, ["cheems", *args])

    def client_script(self) -> Path:
        """``folder/cheems``: runs its command in a child of this parent."""
        client = self.folder / "cheems"
        client.write_text(CLIENT.format(python=sys.executable, address=self.address), encoding="utf-8")
        client.chmod(0o755)
        return client

    def stop(self) -> None:
        self.proc.kill()
        self.proc.wait()
        Path(self.address).unlink(missing_ok=True)

