"""Does the benchmark track what matters downstream (paper §6.2, Fig. 5)?

Across reward models, the correlation (Pearson, Spearman, Kendall) between every benchmark
metric of their reports (Overall; each subset's Accuracy, Exact Match and score; the best-of-n
curve's points) and every downstream metric (human win rate, MT-bench, ...), each with a
bootstrap CI over models (resampling models with replacement; resamples where a metric is
constant are dropped).
"""

from __future__ import annotations

import json
import math

import numpy as np
from scipy import stats as st

from cheems.metrics import quantile_interval
from cheems.records import CheemsInputError, is_number

__all__ = ["benchmark_metrics", "correlate"]

METHODS = {"pearson": st.pearsonr, "spearman": st.spearmanr, "kendall": st.kendalltau}


def _number(value, field: str) -> float | None:
    """``value`` as a float (None stays None); anything but a number is a CheemsInputError naming ``field``."""
    if value is None:
        return None
    if not is_number(value) or not math.isfinite(value):
        raise CheemsInputError(f"expected a number or null, found {json.dumps(value, ensure_ascii=False)[:40]}",
                               field=field)
    return float(value)


def _object(value, field: str) -> dict:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise CheemsInputError(f"expected an object, found a {type(value).__name__}", field=field)
    return value


def benchmark_metrics(report: dict) -> dict[str, float]:
    """The numbers of one eval or bon report, flattened: ``overall``, ``SUBSET/accuracy``, ... ,
    ``bon@N``. A value that is not a number (or null) is a CheemsInputError naming its field."""
    out = {}
    if report.get("kind") == "bon":
        curve = report.get("curve") or []
        if not isinstance(curve, list):
            raise CheemsInputError(f"expected a list, found a {type(curve).__name__}", field="curve")
        for i, point in enumerate(curve):
            point = _object(point, f"curve.{i}")
            value = _number(point.get("expected_gold"), f"curve.{i}.expected_gold")
            if value is not None:
                out[f"bon@{point.get('n')}"] = value
        return out
    overall = _number(report.get("overall"), "overall")
    if overall is not None:
        out["overall"] = overall
    for name, s in _object(report.get("subsets"), "subsets").items():
        s = _object(s, f"subsets.{name}")
        for metric in ("accuracy", "exact_match", "score"):
            value = _number(s.get(metric), f"subsets.{name}.{metric}")
            if value is not None:
                out[f"{name}/{metric}"] = value
    return out


def _r(method: str, x: np.ndarray, y: np.ndarray) -> float | None:
    if len(x) < 3 or np.ptp(x) == 0 or np.ptp(y) == 0:
        return None
    return float(METHODS[method](x, y)[0])


def correlate(reports: dict[str, list[dict]], downstream: dict[str, dict[str, float]], *, n_bootstrap: int = 1000,
              seed: int = 0, confidence: float = 0.95) -> dict:
    """``reports``: model name -> its reports (eval and/or bon); ``downstream``: model name ->
    {metric: value}. Models missing from either side are listed and left out; at least three
    models are needed for a correlation."""
    models = sorted(set(reports) & set(downstream))
    if len(models) < 3:
        raise CheemsInputError(f"{len(models)} model(s) have both a report and downstream results; a correlation "
                               "needs at least 3", field="downstream")
    bench = {m: {k: v for r in reports[m] for k, v in benchmark_metrics(r).items()} for m in models}
    bench_names = sorted({k for m in models for k in bench[m]})
    down_names = sorted({k for m in models for k in downstream[m]})
    rng = np.random.default_rng(seed)
    table: dict = {}
    for b in bench_names:
        for d in down_names:
            have = [m for m in models if b in bench[m] and d in downstream[m]]
            x = np.array([bench[m][b] for m in have])
            y = np.array([float(downstream[m][d]) for m in have])
            cell = {"n": len(have)}
            resamples = rng.integers(0, len(have), size=(n_bootstrap, len(have)))
            for method in METHODS:
                boot = [_r(method, x[idx], y[idx]) for idx in resamples]
                boot = [v for v in boot if v is not None]
                cell[method] = {"r": _r(method, x, y),
                                "ci": quantile_interval(boot, confidence) if boot else None}
            table.setdefault(b, {})[d] = cell
    return {"kind": "correlate", "models": models, "left_out": sorted(set(reports) ^ set(downstream)),
            "benchmark_metrics": bench_names, "downstream_metrics": down_names, "correlations": table,
            "n_bootstrap": n_bootstrap, "seed": seed}
