"""How the reward server names its settings in its refusals and log lines.

A refusal that a setting explains ("larger than 16777216 bytes (max_body_bytes)") names the
setting whose value to raise. A server started from Python (:func:`cheems.serve`) names the
settings by their own names, the fields of :class:`~cheems.serving.settings.ServeSettings` and
:class:`~cheems.serving.engine.EngineSettings`; ``cheems serve`` gives its flags instead
(``--max-body-bytes``), so that an operator reads the flag to change. The names are set once per
server process, before it serves (:func:`use_setting_names`), and travel with a replica's job.

Core module: the standard library only.
"""

from __future__ import annotations

from typing import Mapping

__all__ = ["named", "setting_names", "use_setting_names"]

_NAMES: dict[str, str] = {}


def use_setting_names(names: Mapping[str, str] | None) -> None:
    """Name the settings as ``names`` says (setting -> its name; None or {}: their own names)."""
    _NAMES.clear()
    _NAMES.update(names or {})


def setting_names() -> dict[str, str]:
    """The names in use (for a replica process to take along)."""
    return dict(_NAMES)


def named(setting: str) -> str:
    """How this server names ``setting`` in a refusal or a log line."""
    return _NAMES.get(setting, setting)
