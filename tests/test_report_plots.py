"""The report's plots (cheems.report.plots): without a CJK font a report run says so once, naming the package to
install, and none of matplotlib's per-glyph warnings reach the user, while outside our plotting matplotlib warns as
it always does; and every legend stands beside its axes, off the data.

The font tests make the report's font lookup find nothing (`cheems.report.plots.cjk_font`); the machine may well
have a CJK font installed.
"""

from __future__ import annotations

import logging
import warnings

import pytest

from cheems.report import plots
from cheems.report.plots import (LEGEND_BESIDE, MissingFontWarning, ScalingLine, draw_bias_length, draw_bon_curves,
                                 draw_category_bars, draw_correlation_heatmap, draw_scaling, draw_training_curves,
                                 figure_png, laid_out)
from tests.test_report_page import write_sample_results


@pytest.fixture
def no_cjk_font(monkeypatch):
    monkeypatch.setattr(plots, "cjk_font", lambda: None)


def test_a_report_without_a_cjk_font_warns_once_in_one_line(tmp_path, run_cli, no_cjk_font):
    samples = write_sample_results(tmp_path / "in")  # Chinese model, category and group names
    chosen = [samples[k] for k in ("eval_a.json", "eval_b.json", "bias.json")]
    font_logger = logging.getLogger("matplotlib.font_manager")
    filters, log_filters = list(warnings.filters), list(font_logger.filters)
    done = run_cli("report", *chosen, "-o", "report.html", "--markdown", "report.md")
    assert done.returncode == 0, done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr[:2000]  # the HTML's figures and the Markdown's: one warning in all
    assert lines[0].startswith("warning: no CJK font installed")
    assert "fonts-noto-cjk" in lines[0] and "fonts-wqy-microhei" in lines[0]
    assert "Glyph" not in done.stderr and "findfont" not in done.stderr
    assert warnings.filters == filters and font_logger.filters == log_filters  # nothing left behind in the process


def test_glyph_warnings_are_silenced_only_around_our_plots(no_cjk_font):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    bars = draw_category_bars("各类别", ["代码", "数学"], {"奖励模型": [(0.7, None), (0.6, (0.5, 0.7))]})
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert figure_png(bars, ["各类别", "代码", "数学", "奖励模型"]).startswith(b"\x89PNG")
        assert [w.category for w in caught] == [MissingFontWarning]
        fig = Figure()  # a library user's own figure: matplotlib's warnings are theirs to see
        FigureCanvasAgg(fig)
        fig.add_subplot().set_title("代码")
        fig.canvas.draw()
    assert any("missing from font" in str(w.message) for w in caught[1:])


def test_chinese_labels_draw_without_any_warning_when_a_cjk_font_is_installed():
    from cheems.curation.bias import CJK_PACKAGES, cjk_font

    if cjk_font() is None:
        pytest.skip(f"no CJK font installed (Debian: apt-get install {CJK_PACKAGES[0]} or {CJK_PACKAGES[1]})")
    bars = draw_category_bars("各类别", ["代码"], {"奖励模型": [(0.7, None)]})
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        figure_png(bars, ["各类别", "代码", "奖励模型"])
    assert [str(w.message) for w in caught] == []


# ----------------------------------------------------------------------------- legends

def _bon_points(base: float) -> list[dict]:
    return [{"n": n, "expected_gold": base + 0.05 * k, "ci": [base + 0.05 * k - 0.04, base + 0.05 * k + 0.04]}
            for k, n in enumerate((1, 2, 4, 8))]


LEGENDED = {  # every draw_* function with a legend, on small data that fills its axes up to the corners
    "draw_category_bars": lambda: draw_category_bars(
        "by category", ["coding", "math", "writing"],
        {"model-a": [(0.98, (0.9, 1.0)), (0.5, None), (0.97, None)],
         "model-b": [(0.99, None), (0.2, None), (1.0, None)]}),
    "draw_bon_curves": lambda: draw_bon_curves({"model-a": _bon_points(0.3), "model-b": _bon_points(0.25)}),
    "draw_bias_length": lambda: draw_bias_length(
        ["(-inf, -50]", "(-50, 50)", "[50, inf)"],
        {"human (n=84)": [(0.95, (0.9, 0.99)), (0.5, (0.4, 0.6)), (0.97, (0.92, 1.0))],
         "judge (n=84)": [(0.9, None), (None, None), (0.99, (0.95, 1.0))]}),
    "draw_training_curves": lambda: draw_training_curves(
        "training", {"loss": ([1, 2, 3, 4], [0.7, 0.5, 0.4, 0.35]), "reg": ([1, 2, 3, 4], [0.7, 0.7, 0.7, 0.7])},
        {"eval/accuracy": ([2, 4], [0.6, 0.7]), "eval/overall": ([2, 4], [0.7, 0.6])}),
    "draw_scaling": lambda: draw_scaling(
        "Fig. 6", [ScalingLine("open (pretrained)", [(1000, 0.9, 0.02), (10000, 0.95, None)]),
                   ScalingLine("open (instruct)", [(1000, 0.91, None), (10000, 0.96, 0.01)], marker="s", dashed=True)],
        "training pairs", "accuracy"),
}


def test_every_draw_function_is_checked_for_its_legend():
    drawn = {name for name in plots.__all__ if name.startswith("draw_")}
    assert drawn == set(LEGENDED) | {"draw_correlation_heatmap"}  # a new plot gets its legend checked here
    heatmap = laid_out(draw_correlation_heatmap("r", ["acc"], ["win"], [[0.5]]))
    assert all(ax.get_legend() is None for ax in heatmap.axes)  # a colour bar, no legend


@pytest.mark.parametrize("name", sorted(LEGENDED))
def test_legends_stand_beside_the_axes_off_the_data(name):
    fig = laid_out(LEGENDED[name]())
    renderer = fig.canvas.get_renderer()
    legends = [ax.get_legend() for ax in fig.axes if ax.get_legend() is not None]
    assert legends and len(legends) == len(fig.axes)
    figure_box = fig.bbox
    for legend in legends:
        box = legend.get_window_extent(renderer)
        for ax in fig.axes:  # no axes of the figure (so none of their data) under any legend
            assert not box.overlaps(ax.get_window_extent(renderer)), (name, box, ax.get_window_extent(renderer))
        assert figure_box.x0 <= box.x0 and box.x1 <= figure_box.x1 + 0.5, (name, box, figure_box)  # not cut off
        assert figure_box.y0 <= box.y0 and box.y1 <= figure_box.y1 + 0.5, (name, box, figure_box)
        assert legend.get_texts()[0].get_fontsize() == pytest.approx(legends[0].get_texts()[0].get_fontsize())
    assert LEGEND_BESIDE["loc"] == "upper left" and LEGEND_BESIDE["bbox_to_anchor"][0] > 1
