"""Putting the reward server together and running it: what `cheems serve MODEL` does below its flags.

:func:`build_reward_app` checks the folder, reads the bearer token, loads the model as
``cheems score --model`` loads it (:func:`cheems.scoring.run.load_scorer`) and wraps it in a
:class:`~cheems.serving.engine.ScoringEngine` and the app of :mod:`cheems.serving.app`.
:func:`run_server` serves that app under uvicorn with the server's own connections
(:mod:`cheems.serving.connections`: request heads bounded in size and time, refusal reasons in
the status line) and stop (:mod:`cheems.serving.drain`: the ready callback once the sockets
listen, the drain on SIGTERM or Ctrl+C), its logs on a stream: one access line per request (a
refusal's with its reason), the stop's start and end, and the traceback of any error no check
foresaw.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable, TextIO

from cheems.scoring.model_settings import ModelSettings
from cheems.serving.engine import EngineSettings
from cheems.serving.serve_metrics import ServeMetrics
from cheems.serving.settings import ServeSettings, read_api_key

if TYPE_CHECKING:
    from cheems.serving.drain import Drain

__all__ = ["RewardApp", "build_reward_app", "run_server"]


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


def build_reward_app(model: str | os.PathLike, model_settings: ModelSettings, engine_settings: EngineSettings,
                     settings: ServeSettings, notify: Callable[[str], None] | None = None) -> RewardApp:
    """The reward server's app for the model folder ``model`` (see the module docs); the folder
    and the token file are checked before the model loads. ``notify`` gets the loading lines."""
    from cheems.scoring.run import load_scorer
    from cheems.serving.app import create_app
    from cheems.serving.drain import Drain
    from cheems.serving.engine import ScoringEngine

    if model_settings.backend == "transformers":
        from cheems.models.checkpoints import detect_layout

        detect_layout(model)  # checks the folder (weights, tokenizer, one label) before anything loads
    api_key = read_api_key(settings.api_key_file) if settings.api_key_file is not None else None
    rm = load_scorer(model, model_settings, [], notify)
    name = settings.served_model_name or Path(model).resolve().name
    engine, drain = ScoringEngine(rm, engine_settings), Drain()
    app = create_app(engine, settings, model_name=name, api_key=api_key, drain=drain,
                     classify_activation=_problem_type(model) != "regression")
    return RewardApp(app, name, getattr(rm, "layout", None), rm.max_length, api_key is not None, drain,
                     engine.metrics, rm.position.describe())


def _problem_type(model: str | os.PathLike) -> str | None:
    """The ``problem_type`` of the model's config.json (what vLLM's classify activation follows)."""
    try:
        return json.loads((Path(model) / "config.json").read_text(encoding="utf-8")).get("problem_type")
    except (OSError, ValueError, AttributeError):
        return None


def run_server(built: RewardApp, settings: ServeSettings, on_ready: Callable[[str], None], *,
               log_stream: TextIO = sys.stderr) -> None:
    """Serve ``built.app`` on ``settings.host``:``settings.port`` until SIGTERM or Ctrl+C;
    ``on_ready(url)`` once it listens (the real port when 0 was asked for). On the signal the
    drain begins (:mod:`cheems.serving.drain`): the requests in flight are answered (up to
    ``settings.shutdown_timeout_s``; a second Ctrl+C stops at once), and the call returns."""
    import uvicorn

    from cheems.annotate.server import listening_url, log_to
    from cheems.serving.app import log_request
    from cheems.serving.connections import HeadLimits, bounded_protocol
    from cheems.serving.drain import RewardServer

    log_to(log_stream, "cheems.serving")

    def refused(status: int, reason: str, seconds: float) -> None:  # a head refused before the app saw it
        built.metrics.observe_request("other", status, seconds)
        log_request(None, "-", status, seconds, reason)

    protocol = bounded_protocol(HeadLimits(settings.max_header_bytes, settings.header_timeout_s), refused)
    config = uvicorn.Config(built.app, host=settings.host, port=settings.port, http=protocol, ws="none",
                            log_level="warning", access_log=False)
    server = RewardServer(config, built.drain, lambda port: on_ready(listening_url(settings.host, port)),
                          timeout_s=settings.shutdown_timeout_s)
    server.run()
