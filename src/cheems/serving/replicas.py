"""Several replicas of the reward server behind one address: ``cheems serve MODEL --replicas N``.

:func:`serve_replicas` is the supervisor. It checks the model folder and the token file as the
single server does, binds the one listening socket on ``--host``:``--port`` (:func:`listen`),
then starts N replica processes. Each replica (:func:`run_replica`) loads the model on its own
device (:func:`replica_device`) and serves the single server's app under uvicorn
(:func:`~cheems.serving.server.run_server`) on that shared socket: new connections wait in its
one accept queue and whichever replica accepts first serves each, so a connection waiting there
is served by any replica alive. ``/health`` and ``/metrics`` say which replica answered (its
index and pid); each replica counts its own requests.

Processes. The supervisor never runs torch, touches no GPU and starts no thread, so the replicas
are forked from it (quick: the imports are shared); a fork is unsafe after CUDA started or while
another thread holds a lock, and the supervisor does neither. Where that cannot be promised (a
caller of :func:`serve_replicas` with threads running or CUDA started, or not Linux) the
replicas come from multiprocessing's forkserver instead (:func:`start_method`). Each replica
runs in a process group of its own, so a terminal's Ctrl+C reaches the supervisor alone, which
passes every SIGINT and SIGTERM on to each replica; a replica whose supervisor is gone (killed)
drains and stops by itself. On the CPU the replicas share the cores (``LOCAL_WORLD_SIZE``,
:mod:`cheems.models.threads`), unless ``OMP_NUM_THREADS`` says otherwise.

Ready: ``on_ready(served)`` once every replica listens (``served``: each replica's
:class:`~cheems.serving.server.ServedModel`). A replica that cannot start then stops them all:
its bad input is raised (one line) once the others ended; a crash makes the status 1.

A replica that ends while the server runs (killed, crashed) is logged in one line (index, pid,
how it ended) and started again: at once when it had been serving, after 1, 2, 4, ... up to 60 s
when it ended again before being ready. The requests it was answering fail at their clients (the
connection closes unanswered: a reset or an end of stream, never a reply); connections waiting
in the queue are served by the other replicas.

Stop: on SIGTERM or Ctrl+C every replica drains as the single server does
(:mod:`cheems.serving.drain`: /health 503 ``stopping``, the requests in flight answered, the stop
logged), and a second Ctrl+C stops them at once. The supervisor waits for them (killing one still
running ``--shutdown-timeout-s`` + 10 s later), logs the end and returns 0 (1 when a replica
ended badly meanwhile).
"""

from __future__ import annotations

import errno
import logging
import multiprocessing
import os
import signal
import socket
import sys
import threading
import time
from dataclasses import dataclass, field, replace
from multiprocessing.connection import Connection, wait
from pathlib import Path
from typing import Callable

from cheems.records import CheemsInputError, Setting
from cheems.scoring.model_settings import ModelSettings
from cheems.serving.drain import signal_name
from cheems.serving.engine import EngineSettings
from cheems.serving.naming import named, setting_names, use_setting_names
from cheems.serving.server import ServedModel, build_reward_app, check_reward_model, run_server
from cheems.serving.settings import ServeSettings

__all__ = ["ReplicaJob", "listen", "replica_device", "run_replica", "serve_replicas", "start_method"]

LOG = logging.getLogger("cheems.serving.replicas")
BACKLOG = 2048  # connections waiting in the shared accept queue (uvicorn's default)
RESTART_DELAY_MAX_S = 60.0
STOP_GRACE_S = 10.0  # past --shutdown-timeout-s, the time a replica has to end before it is killed
LOOK_S = 1.0  # the longest the supervisor waits without looking at its replicas
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


@dataclass(frozen=True)
class ReplicaJob:
    """What every replica serves (handed to each replica process)."""

    model: str
    model_settings: ModelSettings
    engine_settings: EngineSettings
    settings: ServeSettings
    setting_names: dict = field(default_factory=dict)  # how refusals and log lines name settings (naming.py)


def replica_device(device: str, index: int, gpus: Callable[[], int] | None = None) -> str:
    """The device of replica ``index`` for ``--device``: ``cuda`` without an index is GPU
    ``index`` modulo the visible GPUs (``gpus()``, torch's count by default, asked in the
    replica: the supervisor touches no GPU); ``cpu`` and ``cuda:N`` are every replica's. With no
    GPU visible ``cuda`` stays ``cuda``, refused as the single server refuses it."""
    if device != "cuda":
        return device
    if gpus is None:
        import torch

        gpus = torch.cuda.device_count
    n = gpus()
    return f"cuda:{index % n}" if n else device


def listen(host: str, port: int) -> socket.socket:
    """The listening socket the replicas share, bound as uvicorn binds its own (SO_REUSEADDR;
    IPv6 when the host has a colon); an address that cannot be had is one line."""
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as e:
        sock.close()
        where = Setting("port" if e.errno in (errno.EADDRINUSE, errno.EACCES) else "host")
        raise CheemsInputError(f"cannot listen on {host}:{port}: {e.strerror or e}", field=where) from None
    sock.listen(BACKLOG)
    sock.set_inheritable(True)
    return sock


def start_method() -> str:
    """``fork`` where forking this process is safe (Linux, this thread alone, CUDA not started
    here), else ``forkserver`` (``spawn`` where there is none)."""
    torch = sys.modules.get("torch")
    cuda_started = torch is not None and torch.cuda.is_initialized()
    if sys.platform == "linux" and threading.active_count() == 1 and not cuda_started:
        return "fork"
    return "forkserver" if "forkserver" in multiprocessing.get_all_start_methods() else "spawn"


def serve_replicas(model: str | os.PathLike, model_settings: ModelSettings, engine_settings: EngineSettings,
                   settings: ServeSettings, on_ready: Callable[[str, list[ServedModel]], None]) -> int:
    """Serve ``settings.replicas`` replicas of the model folder ``model`` on ``settings.host``:
    ``settings.port`` until SIGTERM or Ctrl+C (see the module docs); ``on_ready(url, served)``
    once every replica listens. Logs on stderr, the replicas' too. The exit status: 0 once
    stopped, 1 when a replica crashed at start or ended badly while stopping."""
    from cheems.annotate.server import listening_url, log_to

    check_reward_model(model, model_settings, settings)  # one line before any replica starts
    sock = listen(settings.host, settings.port)
    log_to(sys.stderr, "cheems.serving")
    url = listening_url(settings.host, sock.getsockname()[1])
    job = ReplicaJob(str(model), model_settings, engine_settings, settings, setting_names())
    return Supervisor(job, sock, multiprocessing.get_context(start_method())).run(lambda served: on_ready(url, served))


@dataclass
class _Replica:
    """One replica's place: the process now in it, and how it has gone."""

    index: int
    process: multiprocessing.process.BaseProcess | None = None
    conn: Connection | None = None  # the supervisor's end of the replica's pipe
    served: ServedModel | None = None  # once it listens
    failures: int = 0  # ends in a row before being ready
    restart_at: float | None = None
    refused: bool = False  # it said why it could not start (and exits with status 2)


class Supervisor:
    """The replicas' supervisor (see the module docs). One thread: the signal handlers only note
    the signal, and the loop waits on the replicas' pipes and process sentinels."""

    def __init__(self, job: ReplicaJob, sock: socket.socket, context):
        self.job, self.sock, self.context = job, sock, context
        self.replicas = [_Replica(i) for i in range(job.settings.replicas)]
        self.signals: list[int] = []
        self.stopping_since: float | None = None
        self.stopped_by: str | None = None
        self.killed_late = False
        self.announced = False
        self.failure: CheemsInputError | None = None  # a replica's bad input at start
        self.status = 0

    def run(self, on_ready: Callable[[list[ServedModel]], None]) -> int:
        wake_r, wake_w = os.pipe()
        os.set_blocking(wake_r, False)
        os.set_blocking(wake_w, False)
        previous = {sig: signal.signal(sig, lambda sig, _frame: self.signals.append(sig)) for sig in STOP_SIGNALS}
        old_wakeup = signal.set_wakeup_fd(wake_w)  # a signal wakes the wait below
        try:
            for r in self.replicas:
                self._start(r)
            while self._running():
                self._wait(wake_r)
                self._take_signals()
                for r in self.replicas:
                    self._look_at(r)
                self._on_time()
                if not self.announced and self.stopping_since is None and all(r.served for r in self.replicas):
                    self.announced = True
                    on_ready([r.served for r in self.replicas])
        finally:
            signal.set_wakeup_fd(old_wakeup)
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            os.close(wake_r)
            os.close(wake_w)
            self.sock.close()
            self._kill_all()  # only on an error of the loop itself: the replicas have ended otherwise
        return self._end()

    def _running(self) -> bool:
        if any(r.process is not None for r in self.replicas):
            return True
        return self.stopping_since is None and any(r.restart_at is not None for r in self.replicas)

    def _wait(self, wake_r: int) -> None:
        now = time.monotonic()
        due = [r.restart_at - now for r in self.replicas if r.restart_at is not None]
        waits = [r.conn for r in self.replicas if r.conn is not None]
        waits += [r.process.sentinel for r in self.replicas if r.process is not None]
        wait([wake_r, *waits], max(0.0, min([LOOK_S, *due])))
        try:
            os.read(wake_r, 512)
        except BlockingIOError:
            pass

    def _start(self, r: _Replica) -> None:
        reader, writer = self.context.Pipe(duplex=False)
        r.process = self.context.Process(target=run_replica, args=(self.job, r.index, self.sock, writer),
                                         name=f"cheems-serve-replica-{r.index}")
        r.process.start()
        writer.close()  # the replica's end is its own: its end of file tells the supervisor it is gone
        r.conn, r.restart_at = reader, None

    def _look_at(self, r: _Replica) -> None:
        self._read(r)
        if r.process is not None and not r.process.is_alive():
            self._ended(r)

    def _read(self, r: _Replica) -> None:
        """Take the replica's messages: ("ready", ServedModel) or ("failed", message, field)."""
        while r.conn is not None and r.conn.poll():
            try:
                message = r.conn.recv()
            except (EOFError, OSError):
                r.conn.close()
                r.conn = None
                return
            if message[0] == "ready":
                r.served, r.failures = message[1], 0
                if self.announced:
                    LOG.info("replica %d (pid %d, %s) is ready again", r.index, r.process.pid, r.served.device)
            elif not self.announced and self.failure is None:
                r.refused, self.failure = True, CheemsInputError(message[1], field=message[2])
                self._begin_stop(None)
            else:
                r.refused = True
                LOG.info("replica %d (pid %d) could not start: %s", r.index, r.process.pid,
                         CheemsInputError(message[1], field=message[2]))

    def _ended(self, r: _Replica) -> None:
        """The replica's process ended: log it, and start another while the server runs."""
        self._read(r)
        pid, code, was_ready, refused = r.process.pid, r.process.exitcode, r.served is not None, r.refused
        if r.conn is not None:
            r.conn.close()
        r.process, r.conn, r.served, r.refused = None, None, None, False
        if self.stopping_since is not None:
            if code != 0 and not refused:
                LOG.info("replica %d (pid %d) %s while stopping", r.index, pid, _how(code))
                self.status = 1
            return
        if not self.announced:
            LOG.info("replica %d (pid %d) %s before it was ready; stopping the others", r.index, pid, _how(code))
            self.status = 1
            self._begin_stop(None)
            return
        r.failures = 0 if was_ready else r.failures + 1
        delay = min(RESTART_DELAY_MAX_S, 2.0 ** (r.failures - 1)) if r.failures else 0.0
        what = ("while serving (its requests in flight, if any, fail at their clients)" if was_ready
                else "before it was ready")
        LOG.info("replica %d (pid %d) %s %s; starting another%s", r.index, pid, _how(code), what,
                 f" in {delay:g} s" if delay else "")
        r.restart_at = time.monotonic() + delay

    def _on_time(self) -> None:
        """Start the replicas whose restart is due; kill those that outlive the stop's deadline."""
        now = time.monotonic()
        for r in self.replicas:
            if r.restart_at is not None and r.restart_at <= now and self.stopping_since is None:
                self._start(r)
        timeout = self.job.settings.shutdown_timeout_s + STOP_GRACE_S
        if self.stopping_since is not None and not self.killed_late and now - self.stopping_since > timeout:
            self.killed_late = True
            for r in self.replicas:
                if r.process is not None and r.process.is_alive():
                    LOG.info("replica %d (pid %d) still runs %g s after the stop began; killing it", r.index,
                             r.process.pid, timeout)
                    r.process.kill()

    def _take_signals(self) -> None:
        signals, self.signals = self.signals, []
        for sig in signals:
            if self.stopping_since is None:
                self._begin_stop(signal_name(sig), sig)
            else:
                self._pass_on(sig)  # a second Ctrl+C: the replicas stop at once

    def _begin_stop(self, by: str | None, sig: int = signal.SIGTERM) -> None:
        """Stop every replica: on a signal (``by`` names it), or after a failed start (None)."""
        self.stopping_since, self.stopped_by = time.monotonic(), by
        for r in self.replicas:
            r.restart_at = None
        self.sock.close()  # the replicas hold their own copies: the port closes with the last of them
        if by:
            alive = sum(r.process is not None for r in self.replicas)
            LOG.info("stopping on %s: %d replicas drain their requests in flight (at most %g s, "
                     "%s; Ctrl+C again stops at once)", by, alive,
                     self.job.settings.shutdown_timeout_s, named("shutdown_timeout_s"))
        self._pass_on(sig)

    def _pass_on(self, sig: int) -> None:
        for r in self.replicas:
            if r.process is not None and r.process.pid:
                try:
                    os.kill(r.process.pid, sig)
                except ProcessLookupError:  # ended meanwhile: its sentinel says so next
                    pass

    def _kill_all(self) -> None:
        for r in self.replicas:
            if r.process is not None and r.process.is_alive():
                r.process.kill()
                r.process.join()

    def _end(self) -> int:
        if self.failure is not None:
            raise self.failure
        if self.stopped_by:
            LOG.info("stopped %.3f s after %s: every replica ended", time.monotonic() - self.stopping_since,
                     self.stopped_by)
        return self.status


def _how(exitcode: int | None) -> str:
    if exitcode is not None and exitcode < 0:
        return f"was killed by {signal_name(-exitcode)}"
    return f"exited with status {exitcode}"


class _Stopped(BaseException):
    """A stop signal before the replica served: it ends without serving."""


def _stop_before_serving(sig: int, frame) -> None:
    raise _Stopped


def run_replica(job: ReplicaJob, index: int, sock: socket.socket, conn: Connection) -> None:
    """One replica (see the module docs): load the model on its device, serve on ``sock`` until
    stopped, telling the supervisor through ``conn`` once it listens, or why it cannot start."""
    signal.set_wakeup_fd(-1)  # a forked replica's signals are its own, not the supervisor's
    for sig in STOP_SIGNALS:
        signal.signal(sig, _stop_before_serving)  # uvicorn's handlers take over once it serves
    os.setpgid(0, 0)
    supervisor = os.getppid()
    os.environ.setdefault("LOCAL_WORLD_SIZE", str(job.settings.replicas))
    prefix = f"replica {index}: "
    use_setting_names(job.setting_names)  # a replica started by forkserver or spawn has none yet
    try:
        model_settings = replace(job.model_settings, device=replica_device(job.model_settings.device, index))
        built = build_reward_app(Path(job.model), model_settings, job.engine_settings, job.settings,
                                 notify=lambda line: print(prefix + line, file=sys.stderr, flush=True),
                                 replica=(index, os.getpid()))
        run_server(built, job.settings, lambda url: conn.send(("ready", built.served)), sockets=[sock],
                   stop_when=lambda: None if os.getppid() == supervisor else "the supervisor's exit",
                   log_prefix=prefix)
    except _Stopped:
        return
    except CheemsInputError as e:
        for sig in STOP_SIGNALS:
            signal.signal(sig, signal.SIG_IGN)  # the supervisor's stop is this replica's end already
        conn.send(("failed", e.message, e.field))
        sys.exit(2)
