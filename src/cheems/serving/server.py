"""Putting the reward server together and running it: what `cheems serve MODEL` does below its flags.

:func:`build_reward_app` checks the folder, reads the bearer token, loads the model as
``cheems score --model`` loads it (:func:`cheems.scoring.run.load_scorer`) and wraps it in a
:class:`~cheems.serving.engine.ScoringEngine` and the app of :mod:`cheems.serving.app`.
:func:`run_server` serves that app under uvicorn with the server's own connections
(:mod:`cheems.serving.connections`: request heads bounded in size and time, refusal reasons in
the status line) and stop (:mod:`cheems.serving.drain`: the ready callback once the sockets
listen, the drain on SIGTERM or Ctrl+C), its logs on a stream: one access line per request (a
refusal's with its reason), the stop's start and end, and the traceback of any error no check
foresaw. Several replicas of the same app behind one address (``--replicas``) run these two in
processes of their own, on one shared socket: :mod:`cheems.serving.replicas`.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import sys
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Callable, TextIO

from cheems.scoring.model_settings import ModelSettings
from cheems.serving.engine import EngineSettings
from cheems.serving.serve_metrics import ServeMetrics
from cheems.serving.settings import ServeSettings, read_api_key

if TYPE_CHECKING:
    from cheems.serving.drain import Drain

__all__ = ["RewardApp", "ServedModel", "SharedListener", "build_reward_app", "run_server"]


@dataclass(frozen=True)
class ServedModel:
    """What the ready line says about the model served (by one replica: on its device)."""

    name: str
    layout: str | None
    max_length: int
    reward_position: str  # where the reward is read, in words (RewardPosition.describe)
    protected: bool  # a bearer token is asked
    device: str


@dataclass
class RewardApp:
    """The app ready to serve, and what the ready line says about it."""

    app: object
    model_name: str
    layout: str | None
    max_length: int
    protected: bool  # a bearer token is asked
    drain: Drain  # the app's, shared with the server that stops it
    metrics: ServeMetrics
    reward_position: str = ""  # where the reward is read, in words (RewardPosition.describe)
    device: str = "cpu"

    @property
    def served(self) -> ServedModel:
        return ServedModel(self.model_name, self.layout, self.max_length, self.reward_position, self.protected,
                           self.device)


def build_reward_app(model: str | os.PathLike, model_settings: ModelSettings, engine_settings: EngineSettings,
                     settings: ServeSettings, notify: Callable[[str], None] | None = None, *,
                     replica: tuple[int, int] | None = None) -> RewardApp:
    """The reward server's app for the model folder ``model`` (see the module docs); the folder
    and the token file are checked before the model loads (:func:`check_reward_model`).
    ``notify`` gets the loading lines; ``replica`` (index, process id) is what ``/health`` and
    ``/metrics`` say of one replica among several."""
    from cheems.scoring.run import load_scorer
    from cheems.serving.app import create_app
    from cheems.serving.drain import Drain
    from cheems.serving.engine import ScoringEngine

    api_key = check_reward_model(model, model_settings, settings)
    # the engine's token budget is resolved as the model loads (auto: probed once, then)
    rm = load_scorer(model, replace(model_settings, token_budget=engine_settings.token_budget), [], notify)
    name = settings.served_model_name or Path(model).resolve().name
    engine, drain = ScoringEngine(rm, engine_settings), Drain()
    app = create_app(engine, settings, model_name=name, api_key=api_key, drain=drain,
                     classify_activation=_problem_type(model) != "regression", replica=replica)
    return RewardApp(app, name, rm.layout, rm.max_length, api_key is not None, drain,
                     engine.metrics, rm.position.describe(), model_settings.device)


def check_reward_model(model: str | os.PathLike, model_settings: ModelSettings, settings: ServeSettings) -> str | None:
    """Check what can be checked before the model loads: the folder (weights, tokenizer, one
    label; the transformers back-end) and the token file; the bearer token, or None."""
    if model_settings.backend == "transformers":
        from cheems.models.checkpoints import detect_layout

        detect_layout(model)
    return read_api_key(settings.api_key_file) if settings.api_key_file is not None else None


class SharedListener(socket.socket):
    """A listening socket one replica shares with others. asyncio takes a server's ``backlog``
    both for the size of the accept queue (``listen``) and for the most connections one wake-up
    accepts; on a shared socket every replica wakes for a new connection and the first awake
    would take a whole burst of them (a trainer's pool of keep-alive connections, all on one
    replica). The replica's server is given a backlog of 1, so that each wake-up accepts one
    connection and a burst is spread over the replicas, and ``listen`` leaves the queue the size
    the supervisor gave it."""

    @classmethod
    def take_over(cls, sock: socket.socket) -> SharedListener:
        return cls(sock.family, sock.type, sock.proto, fileno=sock.detach())

    def listen(self, backlog: int = 0) -> None:
        pass


def _problem_type(model: str | os.PathLike) -> str | None:
    """The ``problem_type`` of the model's config.json (what vLLM's classify activation follows)."""
    try:
        return json.loads((Path(model) / "config.json").read_text(encoding="utf-8")).get("problem_type")
    except (OSError, ValueError, AttributeError):
        return None


def run_server(built: RewardApp, settings: ServeSettings, on_ready: Callable[[str], None], *,
               log_stream: TextIO = sys.stderr, sockets: list[socket.socket] | None = None,
               stop_when: Callable[[], str | None] | None = None, log_prefix: str = "") -> None:
    """Serve ``built.app`` on ``settings.host``:``settings.port`` until SIGTERM or Ctrl+C;
    ``on_ready(url)`` once it listens (the real port when 0 was asked for). On the signal the
    drain begins (:mod:`cheems.serving.drain`): the requests in flight are answered (up to
    ``settings.shutdown_timeout_s``; a second Ctrl+C stops at once), and the call returns.
    A replica (:mod:`cheems.serving.replicas`) gives the listening ``sockets`` it shares with
    the others (taken over: see :class:`SharedListener`), what else stops it (``stop_when``) and
    the words its log lines start with (``log_prefix``)."""
    import uvicorn

    from cheems.annotate.server import listening_url, log_to
    from cheems.serving.app import log_request
    from cheems.serving.connections import HeadLimits, bounded_protocol
    from cheems.serving.drain import RewardServer

    log_to(log_stream, "cheems.serving")
    if log_prefix:
        for handler in logging.getLogger("cheems.serving").handlers:
            handler.setFormatter(logging.Formatter(f"%(asctime)s {log_prefix}%(message)s"))

    def refused(status: int, reason: str, seconds: float) -> None:  # a head refused before the app saw it
        built.metrics.observe_request("other", status, seconds)
        log_request(None, "-", status, seconds, reason)

    protocol = bounded_protocol(HeadLimits(settings.max_header_bytes, settings.header_timeout_s), refused)
    if sockets is not None:
        sockets = [SharedListener.take_over(sock) for sock in sockets]
    config = uvicorn.Config(built.app, host=settings.host, port=settings.port, http=protocol, ws="none",
                            log_level="warning", access_log=False, backlog=1 if sockets else 2048)
    server = RewardServer(config, built.drain, lambda port: on_ready(listening_url(settings.host, port)),
                          timeout_s=settings.shutdown_timeout_s, stop_when=stop_when)
    server.run(sockets=sockets)
