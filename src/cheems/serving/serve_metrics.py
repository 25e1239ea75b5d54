"""What the reward server counts, exposed at ``GET /metrics`` in the Prometheus text format.

The format (version 0.0.4), written here without a client library: per metric family a
``# HELP name text`` line (backslash and line feed escaped) and a ``# TYPE name counter|gauge|
histogram`` line, then one sample per line, ``name{label="value",...} number`` (label values
escape backslash, double quote and line feed), the text ending with a line feed. A histogram
family ``h`` has cumulative ``h_bucket{le="bound"}`` samples ending with ``le="+Inf"``, then
``h_sum`` and ``h_count`` (which equals the ``+Inf`` bucket). Counters end in ``_total``.

Throughput: ``rate(cheems_serve_tokens_total[1m])`` is the tokens scored per second;
``cheems_serve_tokens_per_second`` is the same over the last minute, for a glance without
Prometheus. Standard library only; every method may be called from any thread.
"""

from __future__ import annotations

import math
import threading
import time
from collections import deque
from typing import Iterable, Sequence

__all__ = ["BATCH_BUCKETS", "LATENCY_BUCKETS", "PROMETHEUS_CONTENT_TYPE", "ServeMetrics"]

PROMETHEUS_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)  # seconds
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)  # sequences in one forward batch
THROUGHPUT_WINDOW_S = 60.0


class _Histogram:
    """Observations of one labelled series counted into fixed buckets (upper bounds, inclusive)."""

    def __init__(self, bounds: Sequence[float]):
        self.bounds = tuple(bounds)
        self.counts = [0] * len(self.bounds)  # per bucket, not cumulative
        self.sum = 0.0
        self.count = 0

    def observe(self, value: float) -> None:
        for k, bound in enumerate(self.bounds):
            if value <= bound:
                self.counts[k] += 1
                break
        self.sum += value
        self.count += 1

    def samples(self, name: str, labels: tuple) -> Iterable[str]:
        running = 0
        for bound, n in zip(self.bounds, self.counts):
            running += n
            yield _sample(f"{name}_bucket", labels + (("le", _number(bound)),), running)
        yield _sample(f"{name}_bucket", labels + (("le", "+Inf"),), self.count)
        yield _sample(f"{name}_sum", labels, self.sum)
        yield _sample(f"{name}_count", labels, self.count)


class ServeMetrics:
    """Counters, gauges and histograms of one server (see the module docs for the format).

    The HTTP layer calls :meth:`observe_request` once per request and :meth:`set_in_flight`
    as requests come and go; the engine calls
    :meth:`observe_batch` per forward batch, :meth:`set_queue_depth` and :meth:`count_truncated`.
    """

    def __init__(self, clock=time.monotonic, labels: tuple[tuple[str, str], ...] = ()):
        self.labels = labels  # on every sample: ``(("replica", "0"),)`` for one of several replicas
        self._lock = threading.Lock()
        self._clock = clock
        self._requests: dict[tuple, int] = {}  # (route, status) -> requests
        self._latency: dict[tuple, _Histogram] = {}  # (route,) -> seconds
        self._batch_sizes = _Histogram(BATCH_BUCKETS)
        self._forward = _Histogram(LATENCY_BUCKETS)
        self._recent: deque[tuple[float, int]] = deque()  # (when, tokens) of recent batches
        self.sequences = 0
        self.tokens = 0
        self.truncated = 0
        self.queue_depth = 0
        self.in_flight = 0

    def observe_request(self, route: str, status: int, seconds: float) -> None:
        """One finished request of ``route`` answered with ``status`` after ``seconds``."""
        with self._lock:
            key = (("route", route), ("status", str(status)))
            self._requests[key] = self._requests.get(key, 0) + 1
            self._latency.setdefault((("route", route),), _Histogram(LATENCY_BUCKETS)).observe(seconds)

    def observe_batch(self, sequences: int, tokens: int, seconds: float) -> None:
        """One forward batch of ``sequences`` sequences, ``tokens`` tokens, run in ``seconds``."""
        with self._lock:
            self.sequences += sequences
            self.tokens += tokens
            self._batch_sizes.observe(sequences)
            self._forward.observe(seconds)
            self._recent.append((self._clock(), tokens))

    def set_in_flight(self, requests: int) -> None:
        """Requests now being read, scored or answered."""
        with self._lock:
            self.in_flight = requests

    def set_queue_depth(self, sequences: int) -> None:
        """Sequences now waiting for a batch."""
        with self._lock:
            self.queue_depth = sequences

    def count_truncated(self, n: int = 1) -> None:
        """``n`` sequences cut to the model's max length."""
        with self._lock:
            self.truncated += n

    @property
    def batches(self) -> int:
        """Forward batches run so far."""
        with self._lock:
            return self._batch_sizes.count

    def requests(self, route: str, status: int) -> int:
        """Requests of ``route`` answered with ``status`` so far."""
        with self._lock:
            return self._requests.get((("route", route), ("status", str(status))), 0)

    def tokens_per_second(self) -> float:
        """Tokens scored per second over the last minute."""
        with self._lock:
            return self._throughput()

    def _throughput(self) -> float:
        now = self._clock()
        while self._recent and self._recent[0][0] < now - THROUGHPUT_WINDOW_S:
            self._recent.popleft()
        return sum(t for _, t in self._recent) / THROUGHPUT_WINDOW_S

    def prometheus_text(self) -> str:
        """Every metric in the Prometheus text exposition format (version 0.0.4)."""
        own = self.labels
        with self._lock:
            lines: list[str] = []
            _family(lines, "cheems_serve_requests_total", "counter", "HTTP requests answered, by route and status",
                    [_sample("cheems_serve_requests_total", own + k, v) for k, v in sorted(self._requests.items())])
            _family(lines, "cheems_serve_request_duration_seconds", "histogram",
                    "Seconds from a request's arrival to its answer, by route",
                    [s for k, h in sorted(self._latency.items())
                     for s in h.samples("cheems_serve_request_duration_seconds", own + k)])
            _family(lines, "cheems_serve_requests_in_flight", "gauge",
                    "Requests being read, scored or answered (this scrape among them)",
                    [_sample("cheems_serve_requests_in_flight", own, self.in_flight)])
            _family(lines, "cheems_serve_queue_depth", "gauge", "Sequences waiting for a forward batch",
                    [_sample("cheems_serve_queue_depth", own, self.queue_depth)])
            _family(lines, "cheems_serve_batch_sequences", "histogram", "Sequences in each forward batch",
                    list(self._batch_sizes.samples("cheems_serve_batch_sequences", own)))
            _family(lines, "cheems_serve_forward_seconds", "histogram", "Seconds each forward batch ran",
                    list(self._forward.samples("cheems_serve_forward_seconds", own)))
            for name, kind, text, value in (
                    ("cheems_serve_sequences_total", "counter", "Sequences scored", self.sequences),
                    ("cheems_serve_tokens_total", "counter", "Tokens scored", self.tokens),
                    ("cheems_serve_tokens_per_second", "gauge", "Tokens scored per second over the last minute",
                     self._throughput()),
                    ("cheems_serve_truncated_total", "counter", "Sequences cut to the model's max length",
                     self.truncated)):
                _family(lines, name, kind, text, [_sample(name, own, value)])
            return "\n".join(lines) + "\n"


def _family(lines: list[str], name: str, kind: str, help_text: str, samples: list[str]) -> None:
    help_text = help_text.replace("\\", "\\\\").replace("\n", "\\n")
    lines.extend([f"# HELP {name} {help_text}", f"# TYPE {name} {kind}", *samples])


def _sample(name: str, labels: tuple, value: float) -> str:
    if not labels:
        return f"{name} {_number(value)}"
    inner = ",".join(f'{k}="{_label_value(v)}"' for k, v in labels)
    return f"{name}{{{inner}}} {_number(value)}"


def _label_value(value: str) -> str:
    return str(value).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _number(value: float) -> str:
    """A sample value as the format writes it: integers plain, ``+Inf``/``-Inf``/``NaN`` spelled."""
    if isinstance(value, int):
        return str(value)
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return repr(float(value))
