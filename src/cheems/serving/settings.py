"""The settings of the reward server, declared once: where `cheems serve` listens and what it lets in.

:class:`ServeSettings` are the flags of ``cheems serve`` that are about HTTP (how the model runs
is :class:`~cheems.scoring.model_settings.ModelSettings`, how requests are batched
:class:`~cheems.serving.engine.EngineSettings`; ``replicas`` runs several copies of the model behind
the one address, :mod:`cheems.serving.replicas`). :func:`read_api_key` reads the bearer token
from its file once, at start. The standard library and the core package only: the CLI builds its
flags from this class without the ``[serve]`` extra installed.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path

from cheems.common_settings import ListenSettings, ServerToken
from cheems.records import CheemsInputError
from cheems.settings import check_settings, setting

__all__ = ["ServeSettings", "read_api_key"]


@dataclass(frozen=True)
class ServeSettings(ServerToken, ListenSettings):
    """Where the reward server listens (``host``, ``port``: :class:`~cheems.common_settings.ListenSettings`',
    as the annotation server's), who may call it (``api_key_file``:
    :class:`~cheems.common_settings.ServerToken`', as its clients') and how much one request may ask."""

    max_body_bytes: int = setting(256 << 20, min=1, help="Largest request body, in bytes (larger: 413): room "
                                  "for a whole rollout batch of --max-queries long texts as json.dumps escapes them")
    max_header_bytes: int = setting(64 << 10, min=1024, help="Largest request head (request line and headers), "
                                    "in bytes (larger: 431, and the connection is closed)")
    header_timeout_s: float = setting(10.0, gt=0, help="Seconds a client has to send a request's head from the "
                                      "first byte (or from connecting); slower: 408, and the connection is closed")
    max_queries: int = setting(16384, min=1, help="Most texts (queries, inputs or responses) in one request "
                               "(more: 413)")
    max_query_chars: int = setting(200_000, min=1, help="Longest text in a request, in characters (longer: 413)")
    served_model_name: str | None = setting(None, default_text="the model folder's name",
                                            help="The model's name in /classify replies and /health")
    log_requests: bool = setting(True, help="One access-log line per request on stderr (method, path, status, "
                                 "seconds, and the reason of a refusal); refused requests are logged either way")
    shutdown_timeout_s: float = setting(30.0, gt=0, help="On SIGTERM or Ctrl+C: seconds the requests in flight "
                                        "have to be answered (/health says 503 meanwhile, new requests get 503) "
                                        "before the server closes their connections and stops")
    replicas: int = setting(1, min=1, help="Copies of the model behind the one address, each in a process of its "
                            "own (the connections shared out by the kernel; a replica that dies is started again). "
                            "Devices: --device cuda puts replica i on GPU i (round robin over the visible GPUs, "
                            "CUDA_VISIBLE_DEVICES chooses them); cpu or cuda:N puts every replica there")

    def __post_init__(self) -> None:
        check_settings(self)


def read_api_key(path: str | os.PathLike) -> str:
    """The bearer token in the file ``path`` (surrounding whitespace stripped). Refused (field
    ``--api-key-file``) when the file is missing, empty, or readable by every user of the
    machine: a token anyone can read protects nothing."""
    f = Path(path)
    try:
        mode = f.stat().st_mode
        text = f.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise CheemsInputError.about("api_key_file", f"no such file: {f}") from None
    except (OSError, UnicodeDecodeError) as e:
        raise CheemsInputError.about("api_key_file", f"cannot read {f}: {e}") from None
    if os.name == "posix" and mode & stat.S_IROTH:
        raise CheemsInputError.about("api_key_file", f"{f} is readable by every user; make it private (chmod 600 {f})")
    token = text.strip()
    if not token:
        raise CheemsInputError.about("api_key_file", f"{f} is empty; write the token into it")
    if any(c.isspace() for c in token):
        raise CheemsInputError.about("api_key_file", f"{f} holds more than one word; the token is one word")
    return token
