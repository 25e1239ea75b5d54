"""The figures of the report page, drawn with matplotlib's Agg canvas (no global backend is set).

Each ``draw_*`` function fills a matplotlib ``Figure`` from plain data (lists and dicts taken from
the result files); `figure_svg` turns a drawing into an SVG string to inline in HTML (text drawn as
paths, so Chinese labels need no font in the browser) and `figure_png` into PNG bytes for the
Markdown report. Legends stand beside the axes (`LEGEND_BESIDE`), never on the data.

Chinese labels are drawn with the CJK font of `cheems.curation.bias.cjk_font`, looked up once per
`plotting` session (one page: its HTML and its Markdown). Without one, the session gives one
`MissingFontWarning` naming the Debian/Ubuntu package to install, and matplotlib's warning for every
glyph it cannot draw is silenced while our figures are drawn (and only then).
"""

from __future__ import annotations

import contextlib
import contextvars
import io
import logging
import math
import re
import warnings
from dataclasses import dataclass
from typing import Callable, Iterable, Iterator, Sequence

from cheems.curation.bias import CJK_PACKAGES, LEGEND_BESIDE, cjk_font
from cheems.records import CheemsInputError

__all__ = ["Drawing", "LEGEND_BESIDE", "MAX_LINE_POINTS", "MissingFontWarning", "ScalingLine", "draw_bias_length",
           "draw_bon_curves", "draw_category_bars", "draw_correlation_heatmap", "draw_scaling",
           "draw_training_curves", "figure_png", "figure_svg", "laid_out", "plotting", "thin_points"]

Drawing = Callable[["object"], None]
"""A function that draws into a matplotlib ``Figure``."""

MAX_LINE_POINTS = 2000
"""Most points of one line drawn (a long training log is thinned evenly; the tables keep every value)."""


FIGSIZE = (8.0, 4.4)
SVG_HASH_SALT = "cheems-report"  # fixed ids in the SVG: the same inputs give the same page


class MissingFontWarning(UserWarning):
    """No CJK font is installed: Chinese labels in the plots show as boxes."""


_UNSET = object()


@dataclass
class _FontChoice:
    """The CJK font of one `plotting` session: looked up at its first Chinese label, warned about once."""

    font: object = _UNSET  # str, None (none installed) or _UNSET (not looked up yet)

    def rc(self, texts: Iterable[str]) -> dict:
        if all(t.isascii() for t in texts):
            return {}
        if self.font is _UNSET:
            self.font = cjk_font()
            if self.font is None:
                warnings.warn(f"no CJK font installed: Chinese labels in the plots show as boxes; install one "
                              f"(Debian/Ubuntu: apt-get install {CJK_PACKAGES[0]}, or the smaller "
                              f"{CJK_PACKAGES[1]})", MissingFontWarning, stacklevel=4)
        return {"font.family": ["DejaVu Sans", self.font]} if self.font else {}


_SESSION: contextvars.ContextVar[_FontChoice | None] = contextvars.ContextVar("cheems_plotting", default=None)


@contextlib.contextmanager
def plotting() -> Iterator[None]:
    """A session of figures (one page): the CJK font is looked up once and a missing one warned about
    once. Nested sessions are the outer one; a figure drawn outside any is a session of its own."""
    if _SESSION.get() is not None:
        yield
        return
    token = _SESSION.set(_FontChoice())
    try:
        yield
    finally:
        _SESSION.reset(token)


class _NoGlyphLogs(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        text = str(record.msg)
        return not (text.startswith("findfont") or "missing from font" in text)


@contextlib.contextmanager
def _quiet_glyphs() -> Iterator[None]:
    """Matplotlib's per-glyph complaints (``Glyph 20195 ... missing from font(s) DejaVu Sans``, as warnings,
    and ``findfont`` log lines) silenced while one of our figures is drawn; `MissingFontWarning` says it once."""
    logger, quiet = logging.getLogger("matplotlib.font_manager"), _NoGlyphLogs()
    logger.addFilter(quiet)
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=r"Glyph \d+ .*missing from font", category=UserWarning)
            warnings.filterwarnings("ignore", message=r"findfont", category=UserWarning)
            yield
    finally:
        logger.removeFilter(quiet)


def _figure(size: tuple[float, float]):
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError:
        raise CheemsInputError("the report's plots need matplotlib: pip install 'cheems[plot]'") from None
    fig = Figure(figsize=size, dpi=100)
    FigureCanvasAgg(fig)
    return fig


def laid_out(draw: Drawing, size: tuple[float, float] = FIGSIZE):
    """A matplotlib ``Figure`` of ``size`` inches with ``draw`` drawn on it and its layout made tight (axes,
    labels and the legends beside them all inside the figure)."""
    fig = _figure(size)
    draw(fig)
    fig.tight_layout()
    return fig


def _render(draw: Drawing, texts: Iterable[str], fmt: str, size: tuple[float, float]) -> bytes:
    from matplotlib import rc_context

    with plotting():
        rc = {**_SESSION.get().rc(list(texts)), "svg.fonttype": "path", "svg.hashsalt": SVG_HASH_SALT}
        with rc_context(rc), _quiet_glyphs():
            fig = laid_out(draw, size)
            out = io.BytesIO()
            metadata = {"Date": None} if fmt == "svg" else {"Software": None}
            fig.savefig(out, format=fmt, metadata=metadata, bbox_inches="tight", pad_inches=0.05)
    return out.getvalue()


def figure_svg(draw: Drawing, texts: Iterable[str] = (), size: tuple[float, float] = FIGSIZE) -> str:
    """The drawing as an ``<svg>`` element to inline in HTML (no XML prolog, no DOCTYPE); text is
    drawn as paths. ``texts``: the labels it shows, so a CJK font is chosen when one is Chinese."""
    svg = _render(draw, texts, "svg", size).decode("utf-8")
    svg = re.sub(r"^\s*<\?xml[^>]*\?>\s*", "", svg)
    svg = re.sub(r"^\s*<!DOCTYPE[^>]*>\s*", "", svg)
    svg = re.sub(r"<metadata>.*?</metadata>\s*", "", svg, count=1, flags=re.S)
    return svg.strip()


def figure_png(draw: Drawing, texts: Iterable[str] = (), size: tuple[float, float] = FIGSIZE) -> bytes:
    """The drawing as PNG bytes (for the Markdown report)."""
    return _render(draw, texts, "png", size)


def thin_points(xs: Sequence[float], ys: Sequence[float], limit: int = MAX_LINE_POINTS) -> tuple[list, list]:
    """At most ``limit`` evenly spaced points of a line (the last one always kept)."""
    n = len(xs)
    if n <= limit:
        return list(xs), list(ys)
    keep = sorted({round(i * (n - 1) / (limit - 1)) for i in range(limit)})
    return [xs[i] for i in keep], [ys[i] for i in keep]


def _finite(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def draw_category_bars(title: str, categories: list[str], series: dict[str, list[tuple]],
                       y_label: str = "accuracy") -> Drawing:
    """Per-category accuracy bars, one colour per model (paper Figure 4). ``series``: model ->
    one ``(accuracy, ci or None)`` per category (accuracy None: no bar); a CI draws a whisker."""

    def draw(fig) -> None:
        ax = fig.add_subplot()
        width = 0.8 / max(len(series), 1)
        for m, (name, values) in enumerate(series.items()):
            xs = [i - 0.4 + width * (m + 0.5) for i in range(len(categories))]
            ys = [v if _finite(v) else 0.0 for v, _ in values]
            ax.bar(xs, ys, width=width * 0.95, label=name)
            lo = [y - ci[0] if ci else 0.0 for y, (_, ci) in zip(ys, values)]
            hi = [ci[1] - y if ci else 0.0 for y, (_, ci) in zip(ys, values)]
            if any(ci for _, ci in values):
                ax.errorbar(xs, ys, yerr=[lo, hi], color="black", capsize=2, linestyle="none", linewidth=0.8)
        ax.set_xticks(range(len(categories)))
        ax.set_xticklabels(categories, rotation=20)
        ax.set_ylim(0, 1)
        ax.set_ylabel(y_label)
        ax.set_title(title)
        ax.legend(**LEGEND_BESIDE)
    return draw


def draw_bon_curves(curves: dict[str, list[dict]], title: str = "Best-of-n",
                    x_label: str = "n (responses to pick from)",
                    y_label: str = "expected quality of the pick") -> Drawing:
    """Best-of-n curves of every model in one plot: expected gold quality against n (log scale),
    with the 95% CI as a band where the points carry one."""

    def draw(fig) -> None:
        ax = fig.add_subplot()
        for name, points in curves.items():
            pts = [p for p in points if _finite(p.get("expected_gold"))]
            xs = [p["n"] for p in pts]
            ys = [p["expected_gold"] for p in pts]
            line = ax.plot(xs, ys, marker="o", label=name)[0]
            band = [p for p in pts if p.get("ci")]
            if band:
                ax.fill_between([p["n"] for p in band], [p["ci"][0] for p in band], [p["ci"][1] for p in band],
                                color=line.get_color(), alpha=0.2, linewidth=0)
        ax.set_xscale("log", base=2)
        ns = sorted({p["n"] for points in curves.values() for p in points if _finite(p.get("n"))})
        if ns:
            ax.set_xticks(ns)
            ax.set_xticklabels([str(n) for n in ns])
            ax.minorticks_off()
        ax.set_xlabel(x_label)
        ax.set_ylabel(y_label)
        ax.set_title(title)
        ax.legend(**LEGEND_BESIDE)
    return draw


def draw_correlation_heatmap(title: str, rows: list[str], cols: list[str], values: list[list]) -> Drawing:
    """A heat map of correlation coefficients in [-1, 1] (paper Figure 5), each cell annotated;
    None cells are blank."""

    def draw(fig) -> None:
        ax = fig.add_subplot()
        grid = [[v if _finite(v) else math.nan for v in row] for row in values]
        image = ax.imshow(grid, cmap="RdBu_r", vmin=-1, vmax=1, aspect="auto")
        for i, row in enumerate(grid):
            for j, v in enumerate(row):
                if math.isfinite(v):
                    ax.text(j, i, f"{v:.2f}", ha="center", va="center", fontsize=9,
                            color="white" if abs(v) > 0.6 else "black")
        ax.set_xticks(range(len(cols)))
        ax.set_xticklabels(cols, rotation=20)
        ax.set_yticks(range(len(rows)))
        ax.set_yticklabels(rows)
        ax.set_title(title)
        fig.colorbar(image, ax=ax)
    return draw


def draw_bias_length(bins: list[str], groups: dict[str, list[tuple]], title: str = "Annotator length bias",
                     x_label: str | None = None, y_label: str | None = None) -> Drawing:
    """Annotator length bias (paper Figure 15): P(A chosen) per length-difference bin, one line per
    group with Wilson whiskers; ``groups``: name -> one ``(p_a or None, ci or None)`` per bin."""
    from cheems.curation.bias import plot_length_bias

    def draw(fig) -> None:
        ax = fig.add_subplot()
        plot_length_bias(ax, bins, groups, title)
        ax.legend(**LEGEND_BESIDE)  # in place of the one plot_length_bias puts on the axes
        if x_label:
            ax.set_xlabel(x_label)
        if y_label:
            ax.set_ylabel(y_label)
    return draw


def draw_training_curves(title: str, losses: dict[str, tuple[list, list]], evals: dict[str, tuple[list, list]],
                         step_label: str = "step", loss_label: str = "loss",
                         eval_label: str = "evaluation") -> Drawing:
    """Training curves: the loss terms against the step (left) and the eval metrics at their
    steps (right, only when there are any). Each value is ``(steps, values)``; lines are thinned
    to `MAX_LINE_POINTS`."""

    def draw(fig) -> None:
        axes = fig.subplots(1, 2 if evals else 1, squeeze=False)[0]
        for name, (xs, ys) in losses.items():
            axes[0].plot(*thin_points(xs, ys), label=name, linewidth=1)
        axes[0].set_xlabel(step_label)
        axes[0].set_ylabel(loss_label)
        axes[0].set_title(title)
        axes[0].legend(**LEGEND_BESIDE)
        if evals:
            for name, (xs, ys) in evals.items():
                axes[1].plot(*thin_points(xs, ys), marker="o", label=name)
            axes[1].set_xlabel(step_label)
            axes[1].set_title(eval_label)
            axes[1].legend(**LEGEND_BESIDE)
    return draw


@dataclass
class ScalingLine:
    """One line of a scaling plot: ``points`` are ``(x, y, half-width or None)``; lines of one ``colour``
    (an index into matplotlib's colour cycle) belong together, ``marker`` and ``dashed`` tell their kinds
    apart (a pretrained and an instruct base model)."""

    label: str
    points: list[tuple]
    colour: int = 0
    marker: str = "o"
    dashed: bool = False


def draw_scaling(title: str, lines: list[ScalingLine], x_label: str, y_label: str, *, log_x: bool = True,
                 ticks: list[tuple[float, str]] | None = None) -> Drawing:
    """A scaling plot (paper Figures 6 and 7): y against x, one line per `ScalingLine`, with whiskers where a
    point has a half-width; ``log_x``: a logarithmic x axis; ``ticks``: ``(x, label)`` of the x axis (else
    matplotlib's)."""

    def draw(fig) -> None:
        ax = fig.add_subplot()
        for line in lines:
            pts = sorted((p for p in line.points if _finite(p[0]) and _finite(p[1])), key=lambda p: p[0])
            if not pts:
                continue
            xs, ys = [p[0] for p in pts], [p[1] for p in pts]
            errors = [p[2] if _finite(p[2]) else 0.0 for p in pts]
            ax.errorbar(xs, ys, yerr=errors if any(errors) else None, color=f"C{line.colour % 10}",
                        marker=line.marker, linestyle="--" if line.dashed else "-", capsize=3, label=line.label)
        if log_x:
            ax.set_xscale("log")
        if ticks:
            ax.set_xticks([x for x, _ in ticks])
            ax.set_xticklabels([label for _, label in ticks], rotation=20 if len(ticks) > 4 else 0)
            ax.minorticks_off()
        ax.set_xlabel(x_label)
        ax.set_ylabel(y_label)
        ax.set_title(title)
        ax.grid(alpha=0.3)
        ax.legend(**LEGEND_BESIDE)
    return draw
