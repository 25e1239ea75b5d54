"""`cheems serve MODEL`: a reward model as an HTTP service (OpenRLHF's /get_reward, vLLM's /classify and
/pooling, SGLang's /classify and /v1/embeddings, LLaMA-Factory's /v1/score/evaluation, cheems' /v1/score),
concurrent requests gathered into shared forward batches."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import typer

from cheems.cli.app import app
from cheems.cli.console import reports_input_errors, say
from cheems.cli.flags import build_settings, settings_flags
from cheems.common_settings import TruncationSettings
from cheems.records import CheemsInputError
from cheems.scoring.model_settings import ModelSettings
from cheems.serving.engine import EngineSettings
from cheems.serving.settings import ServeSettings

__all__ = ["flag_names", "ready_line", "serve"]

MODEL_FLAGS_NOT_TAKEN = ("batch_size", "token_budget", "check", "truncation")
"""ModelSettings the server leaves out: the engine's --max-batch and --token-budget size its
batches, the batch-invariance check needs rows to check on (run `cheems score --check`), and
the side a long conversation is cut on is --truncation (TruncationSettings), which also says
whether the server cuts at all."""


@app.command("serve")
@reports_input_errors
@settings_flags(ServeSettings, into="serve_flags")
@settings_flags(EngineSettings, into="engine_flags", exclude=("truncate",))
@settings_flags(ModelSettings, into="model_flags", exclude=MODEL_FLAGS_NOT_TAKEN)
@settings_flags(TruncationSettings, into="cut_flags", aliases={"--truncate": ("truncation", "left")})
def serve(model: Path = typer.Argument(..., help="Reward model folder (what `cheems score --model` takes)."),
          serve_flags: dict = None, engine_flags: dict = None, model_flags: dict = None, cut_flags: dict = None):
    """Serve a reward model over HTTP until SIGTERM or Ctrl+C (requests in flight are answered first).

    POST /get_reward (OpenRLHF: chat-formatted texts, no special tokens added), POST /classify
    (vLLM's with input, as verl calls it; SGLang's with text), POST /pooling (vLLM), POST
    /v1/embeddings (SGLang's, as verl calls it), POST /v1/score/evaluation (LLaMA-Factory), POST
    /v1/score (cheems rows; the chat template applied as `cheems score` applies it), GET /health,
    GET /metrics (Prometheus). A conversation longer than --max-length is refused (422) unless
    --truncation left or right is given. Prints one line when ready,
    then one access line per request (method, path, status, seconds; a refusal's reason) to
    stderr. On SIGTERM or Ctrl+C, /health answers 503 while the requests in flight are answered;
    Ctrl+C again stops at once. --replicas N: N copies of the model, each in its own process,
    behind the one address (see --replicas for their devices); one that dies is started again."""
    side, cuts = build_settings(TruncationSettings, cut_flags).server_cut()
    settings = build_settings(ServeSettings, serve_flags)
    engine_settings = build_settings(EngineSettings, {**engine_flags, "truncate": cuts})
    model_settings = build_settings(ModelSettings, {**model_flags, **side})
    _need_extra()
    import cheems

    def ready(url: str, served: list) -> None:
        print(ready_line(url, served), file=sys.stderr, flush=True)

    status = cheems.serve(model, model_settings=model_settings, engine_settings=engine_settings, settings=settings,
                          on_ready=ready, notify=say, setting_names=flag_names())
    if status:
        raise typer.Exit(status)


def flag_names() -> dict[str, str]:
    """How the server's refusals and log lines name its settings: by this command's flags (the
    engine's ``truncate`` is ``--truncation left`` here)."""
    from cheems.cli.console import cli_name
    from cheems.cli.flags import FLAGS_OF

    command = f"{serve.__module__}.{serve.__qualname__}"
    return {**{spec.field: cli_name(spec.field, command) for spec in FLAGS_OF[command]},
            "truncate": "--truncation left"}


def ready_line(url: str, served: list) -> str:
    """The line saying the server is ready: where, and what it serves (``served``: a
    :class:`~cheems.serving.server.ServedModel` per replica)."""
    m = served[0]
    devices = list(dict.fromkeys(s.device for s in served))
    replicas = f", {len(served)} replicas on {', '.join(devices)}" if len(served) > 1 else ""
    token = "; a bearer token is asked" if m.protected else ""
    return (f"cheems serve: ready at {url} (model {m.name}, {m.layout or 'vllm'}, max length {m.max_length}, reward "
            f"read at {m.reward_position}{replicas}{token}); Ctrl+C stops")


def _need_extra() -> None:
    missing = [m for m in ("fastapi", "uvicorn", "httptools") if importlib.util.find_spec(m) is None]
    if missing:
        raise CheemsInputError(f"{', '.join(missing)} not installed: `pip install 'cheems[serve]'`")
