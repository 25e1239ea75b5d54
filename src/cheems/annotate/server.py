"""Running the annotation app under uvicorn for `cheems annotate serve`: the server is told when
its sockets listen (so the CLI prints one line when it is ready, with the real port when 0 was
asked for), and the access and error logs of :mod:`cheems.annotate.guard` go to a stream."""

from __future__ import annotations

import logging
from typing import Callable, TextIO

from sqlalchemy import func, select
from sqlalchemy.engine import Engine

from cheems.annotate.db import User

__all__ = ["log_to", "run", "user_count"]


def user_count(engine: Engine) -> int:
    with engine.connect() as conn:
        return conn.execute(select(func.count()).select_from(User)).scalar() or 0


def log_to(stream: TextIO) -> None:
    """Send the ``cheems.annotate`` logs (one access line per request, errors with tracebacks) to ``stream``."""
    logger = logging.getLogger("cheems.annotate")
    for h in list(logger.handlers):
        logger.removeHandler(h)
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logging.Formatter("%(asctime)s %(message)s"))
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False


def run(app, host: str, port: int, on_ready: Callable[[dict], None]) -> None:
    """Serve ``app`` (from `cheems.annotate.app.create_app`) until interrupted; ``on_ready`` is
    called once, after the sockets listen, with ``url`` (as listening: the real port when 0 was
    asked for), ``database`` (its URL, password hidden) and ``users`` (accounts in it)."""
    import uvicorn

    class Server(uvicorn.Server):
        async def startup(self, sockets=None):
            await super().startup(sockets)
            if self.should_exit or not self.servers:
                return
            bound = self.servers[0].sockets[0].getsockname()
            engine = app.state.engine
            on_ready({"url": f"http://{_host(host)}:{bound[1]}/", "users": user_count(engine),
                      "database": engine.url.render_as_string(hide_password=True)})

    config = uvicorn.Config(app, host=host, port=port, log_level="warning", access_log=False,
                            timeout_graceful_shutdown=5)
    Server(config).run()


def _host(host: str) -> str:
    return f"[{host}]" if ":" in host else host
