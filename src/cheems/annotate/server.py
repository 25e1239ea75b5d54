"""Running an ASGI app under uvicorn: the server is told when its sockets listen (so the CLI prints
one line when it is ready, with the real port when 0 was asked for), logs go to a stream, and
SIGTERM or Ctrl+C stop it gracefully: no new connections, the requests in flight answered, the
app's shutdown run, then an ordinary exit (status 0).

:func:`serve_app` and :func:`log_to` are general (`cheems serve` runs the reward server with
them) and import nothing from the annotation extra; :func:`run` is `cheems annotate serve`'s,
whose ready line counts the accounts in the database (the access and error logs of
:mod:`cheems.annotate.guard`)."""

from __future__ import annotations

import logging
import signal
from typing import Callable, TextIO

__all__ = ["listening_url", "log_to", "run", "serve_app", "user_count"]


def user_count(engine) -> int:
    """Accounts in the database of the SQLAlchemy ``engine``."""
    from sqlalchemy import func, select

    from cheems.annotate.db import User

    with engine.connect() as conn:
        return conn.execute(select(func.count()).select_from(User)).scalar() or 0


def log_to(stream: TextIO, name: str = "cheems.annotate") -> None:
    """Send the logs under the logger ``name`` (the annotation server's access lines and errors
    with tracebacks by default) to ``stream``, one line each, time first."""
    logger = logging.getLogger(name)
    for h in list(logger.handlers):
        logger.removeHandler(h)
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logging.Formatter("%(asctime)s %(message)s"))
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False


def serve_app(app, host: str, port: int, on_listening: Callable[[str], None], *,
              graceful_timeout_s: float = 5.0) -> None:
    """Serve the ASGI ``app`` on ``host``:``port`` until SIGTERM or Ctrl+C; ``on_listening`` is
    called once, after the app's startup ran and the sockets listen, with the URL as listening
    (the real port when 0 was asked for). On the signal the server stops accepting, gives the
    requests in flight up to ``graceful_timeout_s`` seconds, runs the app's shutdown and returns
    (a second Ctrl+C stops at once). No banner and no access log of uvicorn's own."""
    import uvicorn

    class Server(uvicorn.Server):
        async def startup(self, sockets=None):
            await super().startup(sockets)
            if self.should_exit or not self.servers:
                return
            on_listening(listening_url(host, self.servers[0].sockets[0].getsockname()[1]))

        def handle_exit(self, sig, frame):
            # uvicorn re-raises a captured signal once it has stopped (the process then dies of
            # SIGTERM); a graceful stop asked for is an ordinary end here
            if self.should_exit and sig == signal.SIGINT:
                self.force_exit = True
            self.should_exit = True

    config = uvicorn.Config(app, host=host, port=port, log_level="warning", access_log=False,
                            timeout_graceful_shutdown=graceful_timeout_s)
    Server(config).run()


def run(app, host: str, port: int, on_ready: Callable[[dict], None]) -> None:
    """Serve ``app`` (from `cheems.annotate.app.create_app`) until interrupted; ``on_ready`` is
    called once, after the sockets listen, with ``url`` (as listening: the real port when 0 was
    asked for), ``database`` (its URL, password hidden) and ``users`` (accounts in it)."""
    def listening(url: str) -> None:
        engine = app.state.engine
        on_ready({"url": url, "users": user_count(engine),
                  "database": engine.url.render_as_string(hide_password=True)})

    serve_app(app, host, port, listening)


def listening_url(host: str, port: int) -> str:
    """``http://HOST:PORT/``, an IPv6 address in brackets."""
    return f"http://{f'[{host}]' if ':' in host else host}:{port}/"
