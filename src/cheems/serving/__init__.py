"""The HTTP reward server (``cheems serve``, the ``[serve]`` extra): a loaded reward model behind
a request queue that gathers concurrent requests into shared forward batches
(:mod:`cheems.serving.engine`), its Prometheus metrics (:mod:`cheems.serving.serve_metrics`)
and the HTTP contracts on top (:mod:`cheems.serving.contracts`, :mod:`cheems.serving.app`),
served with bounded request heads (:mod:`cheems.serving.connections`) and stopped by a drain
(:mod:`cheems.serving.drain`).

Importing this package imports neither torch nor FastAPI: the CLI builds its flags from
:class:`~cheems.serving.engine.EngineSettings` without the extras installed.
"""

from cheems.serving.engine import EngineSettings, EngineStoppedError, EngineUnavailable, QueueFullError, ScoringEngine
from cheems.serving.serve_metrics import PROMETHEUS_CONTENT_TYPE, ServeMetrics

__all__ = ["EngineSettings", "EngineStoppedError", "EngineUnavailable", "PROMETHEUS_CONTENT_TYPE", "QueueFullError",
           "ScoringEngine", "ServeMetrics"]
