"""Stopping the reward server: the drain between SIGTERM (or Ctrl+C) and the port closing.

:class:`Drain` is shared by the app and the server running it. The app counts each request
while it is in flight (:meth:`Drain.enter`, :meth:`Drain.leave`); once the drain has begun
(:meth:`Drain.begin`) it answers ``/health`` 503 ``stopping`` and every new request but
``/health`` and ``/metrics`` 503, so that a load balancer or a trainer's retry loop moves on
while the requests already taken are answered.

:class:`RewardServer` is uvicorn's server with that stop. uvicorn's own closes the listening
socket at once (probes then meet a refused connection, never a 503) and, when a second Ctrl+C
cuts the wait short, leaves the requests in flight and the app's shutdown to be cancelled, each
with a ``CancelledError`` traceback. Here, on the first signal: the drain begins (logged, with the
requests in flight) and the port stays open; once no request is in flight the port closes, idle
connections close, the app shuts down (the engine drains its queue) and the end is logged. When
``timeout_s`` passes first, or a second Ctrl+C comes, the requests still in flight are abandoned
(:meth:`Drain.abandon`): their connections are closed, the engine fails what is queued rather
than scoring it (the forward pass already running ends), and the app shuts down as usual, with
one log line saying how many were left unanswered and no traceback. A signal asked for the stop,
so the process then ends normally (exit status 0), where uvicorn would re-raise the signal.
``stop_when``, when given, is asked every tick (0.1 s) and starts the same stop when it names a
reason (a replica whose supervisor is gone, :mod:`cheems.serving.replicas`).
"""

from __future__ import annotations

import asyncio
import logging
import signal
from typing import Callable

import uvicorn

from cheems.serving.naming import named

__all__ = ["Drain", "RewardServer", "signal_name"]

LOG = logging.getLogger("cheems.serving.server")
POLL_S = 0.05  # how often a wait looks again (a signal handler cannot wake an asyncio event safely)
ABANDONED_WAIT_S = 2.0  # how long abandoned requests get to notice their closed connection or failed queue


class Drain:
    """Whether the server is stopping, and the requests in flight (see the module docs). Used
    from the event loop's thread only."""

    def __init__(self) -> None:
        self.stopping = False  # /health answers 503, new requests are refused
        self.abandoned = False  # the requests still in flight will not be answered
        self.in_flight = 0

    def enter(self) -> int:
        """A request arrived; the requests now in flight."""
        self.in_flight += 1
        return self.in_flight

    def leave(self) -> int:
        """A request was answered (or given up); the requests now in flight."""
        self.in_flight -= 1
        return self.in_flight

    def begin(self) -> None:
        self.stopping = True

    def abandon(self) -> None:
        self.stopping = True
        self.abandoned = True

    async def wait(self, timeout_s: float, stop_now: Callable[[], bool]) -> bool:
        """Wait until no request is in flight (True), or until ``timeout_s`` seconds pass or
        ``stop_now()`` is true (False)."""
        return await wait_until(lambda: not self.in_flight, timeout_s, stop_now)


async def wait_until(done: Callable[[], bool], timeout_s: float, stop_now: Callable[[], bool] = lambda: False) -> bool:
    """Poll ``done()`` until it is true (True), ``timeout_s`` seconds pass or ``stop_now()`` is
    true (False)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while not done():
        if stop_now() or loop.time() >= deadline:
            return False
        await asyncio.sleep(POLL_S)
    return True


class RewardServer(uvicorn.Server):
    """uvicorn's server with the reward server's stop (see the module docs): ``on_listening(port)``
    once the sockets listen (the real port when 0 was asked for), the drain of ``drain`` on
    SIGTERM or Ctrl+C for up to ``timeout_s`` seconds, and a second Ctrl+C stopping at once;
    the same stop when ``stop_when()`` names a reason."""

    def __init__(self, config: uvicorn.Config, drain: Drain, on_listening: Callable[[int], None], *,
                 timeout_s: float, stop_when: Callable[[], str | None] | None = None):
        super().__init__(config)
        self.drain = drain
        self.on_listening = on_listening
        self.timeout_s = timeout_s
        self.stop_when = stop_when
        self.stopped_by: str | None = None

    async def startup(self, sockets=None) -> None:
        await super().startup(sockets)
        if self.should_exit or not self.servers:
            return
        self.on_listening(self.servers[0].sockets[0].getsockname()[1])

    async def on_tick(self, counter: int) -> bool:
        if not self.should_exit and self.stop_when is not None and (reason := self.stop_when()):
            self.stopped_by, self.should_exit = reason, True
        return await super().on_tick(counter)

    def handle_exit(self, sig: int, frame) -> None:
        # not recorded for uvicorn to re-raise once stopped: a stop asked for is an ordinary end
        if self.should_exit and sig == signal.SIGINT:
            self.force_exit = True
        self.stopped_by = self.stopped_by or signal_name(sig)
        self.should_exit = True

    async def shutdown(self, sockets=None) -> None:
        loop = asyncio.get_running_loop()
        began = loop.time()
        self.drain.begin()
        n, by = self.drain.in_flight, self.stopped_by or "request"
        if n:
            LOG.info("stopping on %s: %s in flight; /health answers 503 and new requests are refused until %s "
                     "answered (at most %g s, %s; Ctrl+C again stops at once)", by, _requests(n),
                     "it is" if n == 1 else "they are", self.timeout_s, named("shutdown_timeout_s"))
        else:
            LOG.info("stopping on %s: no request in flight", by)
        answered = await self.drain.wait(self.timeout_s, lambda: self.force_exit)
        for server in self.servers:
            server.close()  # the port closes once nothing is left to answer
        if answered:
            for connection in list(self.server_state.connections):
                connection.shutdown()  # idle ones close now, busy ones after their response
            left = began + self.timeout_s - loop.time()
            answered = await wait_until(self._idle, left, lambda: self.force_exit)
        if not answered:
            self._abandon(loop.time() - began)
        await self.lifespan.shutdown()  # the engine drains its queue, or fails it once abandoned
        if not answered:
            await wait_until(lambda: not self.server_state.tasks, ABANDONED_WAIT_S)
        LOG.info("stopped %.3f s after %s%s", loop.time() - began, self.stopped_by or "the request to stop",
                 ", every request in flight answered" if answered else "")

    def _idle(self) -> bool:
        return not self.server_state.connections and not self.server_state.tasks

    def _abandon(self, seconds: float) -> None:
        """Give up the requests still in flight: log how many, close their connections."""
        self.drain.abandon()
        n = self.drain.in_flight
        why = "Ctrl+C again" if self.force_exit else f"{self.timeout_s:g} s passed ({named('shutdown_timeout_s')})"
        LOG.info("stopping at once (%s, after %.3f s): %s in flight left unanswered, %s connection closed", why,
                 seconds, _requests(n), "its" if n == 1 else "their")
        for connection in list(self.server_state.connections):
            transport = getattr(connection, "transport", None)
            if transport is not None and not transport.is_closing():
                transport.close()


def signal_name(sig: int) -> str:
    """A signal as the logs name it: SIGTERM, "Ctrl+C (SIGINT)"."""
    try:
        name = signal.Signals(sig).name
    except ValueError:
        return f"signal {sig}"
    return "Ctrl+C (SIGINT)" if name == "SIGINT" else name


def _requests(n: int) -> str:
    return f"{n} request" if n == 1 else f"{n} requests"
