"""Annotator bias analysis: does an annotator favour longer responses, or one position?
(paper Appendix D.3, Figure 15).

Convention: in a comparison, ``a`` is the response shown first (position A) and ``b`` the one
shown second (position B); label ``g`` means A was chosen, ``b`` that B was chosen, ``s`` a
tie. Lengths are :func:`~cheems.curation.filters.text_length` (non-whitespace characters).

A table answers two questions for one set of annotations:

- length: in bins of the length difference ``len(A) - len(B)``, how often was A chosen? An
  annotator blind to length gives about the same P(A chosen) in every bin; one who favours
  long answers gives a rising curve.
- position: overall, how often was A chosen, B chosen, or a tie called? Among strict
  judgements, is P(A chosen) different from 0.5 (two-sided exact binomial test)?

Judged ``comparisons`` are analysed when the rows carry any. Rows without them, such as
chosen/rejected pairs, carry only a ``rank``, which records no order of presentation: then the
ranking's pairs are analysed for length alone (each pair's A and B fixed by a coin flip that
does not depend on which response won, as a randomised presentation would do), and the table
says why position is missing (``position``: ``{"available": false, "reason": ...}``).
"""

from __future__ import annotations

import math
import os
import warnings
import zlib
from bisect import bisect_right
from pathlib import Path
from typing import Iterable, Iterator, Sequence

from cheems.curation.filters import text_length
from cheems.io import atomic_open
from cheems.records import LABELS, CheemsInputError, Prompt, check_comparisons, check_rank, rank_comparisons
from cheems.settings import is_number

LEGEND_BESIDE = {"loc": "upper left", "bbox_to_anchor": (1.01, 1.0), "borderaxespad": 0.0, "fontsize": "small"}
"""Where every legend of a plot goes: outside the axes, to the right of their top corner, so that
it covers no data (the figure is saved with room for it)."""

__all__ = ["CJK_FONTS", "CJK_PACKAGES", "DEFAULT_BINS", "NO_ORDER", "Z95", "analyze_bias", "bias_table",
           "cjk_font", "cjk_font_rc", "format_bias_table", "length_bins", "plot_bias", "plot_length_bias",
           "wilson_interval"]

DEFAULT_BINS = (50, 200, 500)
"""Positive edges of the length-difference bins. Edges ``t1 < ... < tk`` give ``2k + 1``
symmetric bins: ``(-inf, -tk]``, ..., ``(-t2, -t1]``, ``(-t1, t1)``, ``[t1, t2)``, ...,
``[tk, inf)``; the defaults give (-inf,-500], (-500,-200], (-200,-50], (-50,50), [50,200),
[200,500), [500,inf)."""

Z95 = 1.959963984540054  # the standard normal quantile at 0.975, for 95% intervals

NO_ORDER = "rows carry no presentation order (ranked pairs, not judged comparisons)"
"""Why a table of ranked pairs has no position analysis."""


def wilson_interval(k: int, n: int, *, z: float = Z95) -> tuple[float, float] | None:
    """Wilson score interval for a proportion of ``k`` successes in ``n`` trials (95% by
    default); None when ``n`` is 0. Unlike the normal interval it stays inside [0, 1] and is
    sensible for proportions near 0 or 1 and small ``n``."""
    if n == 0:
        return None
    p = k / n
    z2 = z * z
    denom = 1 + z2 / n
    center = (p + z2 / (2 * n)) / denom
    half = z / denom * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n))
    lo = 0.0 if k == 0 else max(0.0, center - half)  # exact at the ends, where rounding
    hi = 1.0 if k == n else min(1.0, center + half)  # would leave a hair off 0 or 1
    return lo, hi


def length_bins(bins: Sequence[float] | None = None) -> list[dict]:
    """The length-difference bins for positive edges ``bins`` (default `DEFAULT_BINS`): a
    list of ``{"bin": label, "low": ..., "high": ...}`` from most negative to most positive,
    where ``low``/``high`` are None for an infinite end."""
    edges = _edges(bins)
    k = len(edges)
    out = [{"bin": f"(-inf, {_num(-edges[-1])}]", "low": None, "high": -edges[-1]}]
    for i in range(k - 1, 0, -1):
        out.append({"bin": f"({_num(-edges[i])}, {_num(-edges[i - 1])}]", "low": -edges[i], "high": -edges[i - 1]})
    out.append({"bin": f"({_num(-edges[0])}, {_num(edges[0])})", "low": -edges[0], "high": edges[0]})
    for i in range(k - 1):
        out.append({"bin": f"[{_num(edges[i])}, {_num(edges[i + 1])})", "low": edges[i], "high": edges[i + 1]})
    out.append({"bin": f"[{_num(edges[-1])}, inf)", "low": edges[-1], "high": None})
    return out


def _edges(bins: Sequence[float] | None) -> tuple[float, ...]:
    if bins is None:
        return DEFAULT_BINS
    try:
        edges = tuple(bins)
    except TypeError:
        raise CheemsInputError("bins must be a list of positive edges such as 50,200,500",
                               field="bins") from None
    if not edges:
        raise CheemsInputError("bins needs at least one edge, such as 50,200,500", field="bins")
    for e in edges:
        if not is_number(e) or e <= 0:
            raise CheemsInputError(f"each bin edge must be a positive finite number, got {e!r}", field="bins")
    if any(x >= y for x, y in zip(edges, edges[1:])):
        raise CheemsInputError(f"bin edges must increase strictly, got {list(edges)}", field="bins")
    return edges


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else f"{x:g}"


def _bin_index(d: int, edges: tuple[float, ...]) -> int:
    """Index into `length_bins` of a length difference ``d``; the middle bin is ``len(edges)``."""
    k = len(edges)
    if d >= edges[0]:
        return k + bisect_right(edges, d)
    if d <= -edges[0]:
        return k - bisect_right(edges, -d)
    return k


def _binom_p(k: int, n: int) -> float | None:
    if n == 0:
        return None
    from scipy.stats import binomtest

    return float(binomtest(k, n, 0.5).pvalue)


def _ci(k: int, n: int) -> list[float] | None:
    ci = wilson_interval(k, n)
    return list(ci) if ci is not None else None


def _shares(a: int, b: int, tie: int) -> dict:
    n = a + b + tie
    return {"n": n, "a": a, "b": b, "tie": tie,
            "p_a": a / n if n else None, "p_b": b / n if n else None, "p_tie": tie / n if n else None,
            "p_a_ci": _ci(a, n)}


def bias_table(prompts: Iterable[Prompt], *, bins: Sequence[float] | None = None) -> dict:
    """Length and position preferences over every comparison of ``prompts`` (Appendix D.3).

    Returns a JSON-ready dict:

    - ``n``: judged comparisons analysed; ``n_prompts``: prompts seen; ``bins``: the edges used.
    - ``pairs``: what was analysed: ``"comparisons"``, or ``"rankings"`` when no prompt has a
      comparison and some have a ``rank`` (``n_ranked_pairs`` of them then fill the length
      rows; ``n`` stays 0), or None without either. ``ranked_prompts_left_out``: prompts with a
      rank but no comparison, left out because others carry comparisons.
    - ``position``: ``{"available": bool, "reason": str | None}``; without comparisons the
      reason is `NO_ORDER` (ranked pairs) or ``"no comparisons"``.
    - ``by_length``: one entry per bin of `length_bins` (even an empty one): ``bin`` label,
      ``low``/``high``, counts ``n``, ``a`` (A chosen), ``b`` (B chosen), ``tie``, the shares
      ``p_a`` = a/n, ``p_b``, ``p_tie`` and ``p_a_ci``, the 95% Wilson interval of ``p_a``.
      A bin without data has ``n`` 0 and None for every share. A ranked pair's A and B come
      from a coin flip on the prompt and the two response ids (not on which one won).
    - ``by_position``: the same counts and shares over all comparisons, plus ``n_strict`` =
      a + b, ``p_a_strict`` = a / (a + b) with its Wilson interval ``p_a_strict_ci`` and
      ``p_value``, the two-sided exact binomial test of ``p_a_strict`` = 0.5 (all empty
      when ``position`` is not available).
    - ``longer_won``: among strict comparisons (or ranked pairs) whose responses differ in
      length, ``n``, ``longer`` (how many the longer one won), ``share`` with ``share_ci`` and
      ``p_value`` (binomial test of share = 0.5); ``equal_length`` counts the strict ones left out.

    One pass over the pairs, O(total response characters + pairs); a ranking of k responses
    has k (k - 1) / 2 pairs.
    """
    edges = _edges(bins)
    prompts = list(prompts)
    judged = any(p.comparisons for p in prompts)
    ranked = [p for p in prompts if p.rank is not None and not p.comparisons]
    counts, (longer, differ, equal) = _tally(_judged_pairs(prompts) if judged else _ranked_pairs(ranked), edges)
    a, b, tie = (sum(cnt[i] for cnt in counts) for i in range(3))
    n_pairs = a + b + tie
    return {
        "n": n_pairs if judged else 0,
        "n_prompts": len(prompts),
        "bins": list(edges),
        "pairs": "comparisons" if judged else "rankings" if ranked else None,
        "n_ranked_pairs": 0 if judged else n_pairs,
        "ranked_prompts_left_out": len(ranked) if judged else 0,
        "position": {"available": judged,
                     "reason": None if judged else NO_ORDER if ranked else "no comparisons"},
        "by_length": [{**b, **_shares(*cnt)} for b, cnt in zip(length_bins(edges), counts)],
        "by_position": _position(a, b, tie) if judged else _position(0, 0, 0),
        "longer_won": {"n": differ, "longer": longer, "share": longer / differ if differ else None,
                       "share_ci": _ci(longer, differ), "p_value": _binom_p(longer, differ),
                       "equal_length": equal},
    }


def _tally(pairs: Iterable[tuple[int, str]], edges: tuple[float, ...]) -> tuple[list[list[int]], tuple[int, int, int]]:
    """Per length bin the counts of g, b and s over ``(len(A) - len(B), label)`` pairs, and
    (longer won, strict of unequal length, strict of equal length)."""
    counts = [[0, 0, 0] for _ in range(2 * len(edges) + 1)]
    slot = {label: i for i, label in enumerate(LABELS)}
    longer = differ = equal = 0
    for d, label in pairs:
        counts[_bin_index(d, edges)][slot[label]] += 1
        if label != "s":
            if d == 0:
                equal += 1
            else:
                differ += 1
                longer += (d > 0) == (label == "g")
    return counts, (longer, differ, equal)


def _judged_pairs(prompts: list[Prompt]) -> Iterator[tuple[int, str]]:
    """``(len(a) - len(b), label)`` of every comparison, checked prompt by prompt."""
    for p in prompts:
        if not p.comparisons:
            continue
        check_comparisons(p)
        lengths = {r.id: text_length(r.content) for r in p.responses}
        for c in p.comparisons:
            yield lengths[c.a] - lengths[c.b], c.label


def _ranked_pairs(prompts: list[Prompt]) -> Iterator[tuple[int, str]]:
    """``(len(A) - len(B), label)`` of every pair of each prompt's ranking (a tie: ``s``). A is
    the first or the second of the two response ids in sorted order as the parity of a CRC-32
    of the prompt id and those ids says: fixed, and blind to which response won."""
    for p in prompts:
        lengths = {r.id: text_length(r.content) for r in p.responses}
        check_rank(p.rank, lengths, lead=f"prompt {p.id!r}: ")
        for c in rank_comparisons(p.rank):  # c.a is the better one (or the first of a tie)
            lo, hi = sorted((c.a, c.b))
            first = lo if zlib.crc32(f"{p.id}\0{lo}\0{hi}".encode("utf-8", "surrogatepass")) & 1 else hi
            if first == c.a:
                yield lengths[c.a] - lengths[c.b], c.label
            else:
                yield lengths[c.b] - lengths[c.a], "b" if c.label == "g" else "s"


def _position(a: int, b: int, tie: int) -> dict:
    """The ``by_position`` entry: shares of A, B and ties, and P(A chosen | strict) tested."""
    position = _shares(a, b, tie)
    position.update({"n_strict": a + b, "p_a_strict": a / (a + b) if a + b else None,
                     "p_a_strict_ci": _ci(a, a + b), "p_value": _binom_p(a, a + b)})
    return position


def analyze_bias(groups: dict[str, list[Prompt]], *, bins: Sequence[float] | None = None) -> dict:
    """One `bias_table` per group of annotations, such as ``{"human": [...], "judge": [...]}``
    (one group per input file), in the groups' order."""
    if not groups:
        raise CheemsInputError("no annotation groups to analyse")
    edges = _edges(bins)
    return {name: bias_table(prompts, bins=edges) for name, prompts in groups.items()}


# ----------------------------------------------------------------------------- text

def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def _interval(ci: list[float] | None) -> str:
    return "-" if ci is None else f"[{100 * ci[0]:.1f}, {100 * ci[1]:.1f}]"


def _pvalue(p: float | None) -> str:
    return "-" if p is None else f"{p:.3g}"


def _rows(header: list[str], rows: list[list[str]]) -> list[str]:
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]

    def line(cells: list[str]) -> str:  # first column left-aligned, numbers right-aligned
        return "  ".join(c.ljust(w) if i == 0 else c.rjust(w)
                         for i, (c, w) in enumerate(zip(cells, widths))).rstrip()

    return [line(header), line(["-" * w for w in widths]), *map(line, rows)]


def format_bias_table(tables: dict) -> str:
    """The tables of `analyze_bias` as plain text for a terminal, one section per group:
    P(A chosen) by length difference, then position preference and the longer-won share."""
    out: list[str] = []
    for name, t in tables.items():
        if out:
            out.append("")
        ranked = t.get("pairs") == "rankings"
        if ranked:
            out.append(f"== {name}: 0 comparisons; {t['n_ranked_pairs']} ranked pairs over {t['n_prompts']} prompts")
            out.append("length difference len(A) - len(B), in characters (ranked pairs: A and B by a fixed coin "
                       "flip, blind to the winner):")
        else:
            out.append(f"== {name}: {t['n']} comparisons over {t['n_prompts']} prompts")
            out.append("length difference len(A) - len(B), in characters:")
        rows = [[r["bin"], str(r["n"]), _pct(r["p_a"]), _interval(r["p_a_ci"]), _pct(r["p_b"]), _pct(r["p_tie"])]
                for r in t["by_length"]]
        out.extend(_rows(["bin", "n", "P(A)", "95% CI", "P(B)", "P(tie)"], rows))
        out.extend(_position_lines(t))
        lw = t["longer_won"]
        out.append(f"longer response won {_pct(lw['share'])} {_interval(lw['share_ci'])} of "
                   f"{lw['n']} strict {'ranked pairs' if ranked else 'comparisons'} of unequal length "
                   f"(p = {_pvalue(lw['p_value'])}; {lw['equal_length']} of equal length left out)")
        if t.get("ranked_prompts_left_out"):
            out.append(f"{t['ranked_prompts_left_out']} ranked prompt(s) without comparisons left out")
    return "\n".join(out)


def _position_lines(t: dict) -> list[str]:
    position = t.get("position", {"available": True})
    if not position["available"]:
        return [f"position: not available: {position['reason']}"]
    pos = t["by_position"]
    return ["position:", *_rows(["", "n", "P(A)", "P(B)", "P(tie)", "P(A|strict)", "95% CI", "p"],
                                [["all", str(pos["n"]), _pct(pos["p_a"]), _pct(pos["p_b"]), _pct(pos["p_tie"]),
                                  _pct(pos["p_a_strict"]), _interval(pos["p_a_strict_ci"]),
                                  _pvalue(pos["p_value"])]])]


# ----------------------------------------------------------------------------- plots

CJK_FONTS = ("Noto Sans CJK SC", "Noto Sans SC", "Source Han Sans SC", "Source Han Sans CN", "WenQuanYi Zen Hei",
             "WenQuanYi Micro Hei", "SimHei", "Microsoft YaHei", "PingFang SC", "Heiti SC",
             "Noto Sans CJK JP", "Noto Sans CJK TC", "Noto Sans CJK KR", "Droid Sans Fallback")
"""Fonts tried, in order, for group names outside ASCII (such as ``人工``). The Noto CJK
collections of Debian's ``fonts-noto-cjk`` show up in matplotlib under their first face's
name, ``Noto Sans CJK JP``; every face covers all CJK ideographs."""

CJK_PACKAGES = ("fonts-noto-cjk", "fonts-wqy-microhei")
"""Debian / Ubuntu packages that provide one of `CJK_FONTS`."""

_CJK_FILE_HINTS = ("cjk", "wqy", "wenquanyi", "sourcehan", "simhei", "msyh", "pingfang", "droidsansfallback")


def plot_bias(tables: dict, out_dir: str | os.PathLike) -> list[Path]:
    """Draw the tables of `analyze_bias` as two PNG files in ``out_dir`` and return their paths:

    - ``bias_length.png``: P(A chosen) per length-difference bin, one line with 95% Wilson
      error bars per group, and a dashed line at 0.5 (empty bins are left out of a line);
    - ``bias_position.png``: per group, bars of P(A chosen), P(B chosen), P(tie) and
      P(A chosen | strict) with its 95% Wilson error bar, the legend giving the binomial-test
      p-value of P(A chosen | strict) = 0.5, and a dashed line at 0.5.

    Axis labels are English. Group names outside ASCII are drawn with the first installed
    font of `CJK_FONTS` (see `cjk_font_rc`; without one a warning names the package to
    install and such names show as boxes). Each file is written atomically. Needs matplotlib (the
    ``plot`` extra); only its Agg canvas is used, so no global backend is changed.
    """
    try:
        from matplotlib import rc_context
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError:
        raise CheemsInputError("plots need matplotlib: pip install 'cheems[plot]'") from None
    if not tables:
        raise CheemsInputError("no bias tables to plot")
    labels = [[r["bin"] for r in t["by_length"]] for t in tables.values()]
    for name, other in zip(tables, labels):
        if other != labels[0]:
            raise CheemsInputError(f"group {name!r} has other length bins than the first group", field="bins")
    out_dir = Path(out_dir)
    names = list(tables)
    with rc_context(cjk_font_rc(names)):
        paths = [out_dir / "bias_length.png", out_dir / "bias_position.png"]
        for path, draw in zip(paths, (_draw_length, _draw_position)):
            fig = Figure(figsize=(8, 4.8), dpi=100)
            FigureCanvasAgg(fig)
            draw(fig, tables)
            fig.tight_layout()
            _save_png(fig, path)
    return paths


def cjk_font() -> str | None:
    """The first installed font of `CJK_FONTS` that matplotlib can use, or None.

    Matplotlib lists the fonts it found when it built its font cache; a font installed later
    (``apt-get install fonts-noto-cjk`` after matplotlib first ran) is not in that list. So
    when no font of `CJK_FONTS` is listed, the system's font files whose names suggest CJK
    are added to matplotlib's font manager (``FontManager.addfont``) and the list is read again.
    """
    from matplotlib import font_manager

    manager = font_manager.fontManager
    found = _first_listed(manager)
    if found is None:
        known = {f.fname for f in manager.ttflist}
        for path in font_manager.findSystemFonts():
            name = Path(path).name.lower().replace("-", "").replace("_", "")
            if path not in known and any(hint in name for hint in _CJK_FILE_HINTS):
                try:
                    manager.addfont(path)
                except (OSError, RuntimeError, ValueError):  # unreadable: not ours to judge
                    continue
        found = _first_listed(manager)
    return found


def _first_listed(manager) -> str | None:
    listed = {f.name for f in manager.ttflist}
    return next((f for f in CJK_FONTS if f in listed), None)


def cjk_font_rc(texts: Iterable[str]) -> dict:
    """Matplotlib rc settings under which ``texts`` (Chinese ones included) render.

    All ASCII: no settings. Otherwise ``font.family`` becomes ``["DejaVu Sans", <CJK font>]``
    (:func:`cjk_font`): matplotlib draws each glyph with the first font of that list that has
    it, Latin with DejaVu Sans as in every other plot and Chinese with the CJK font. (A CJK
    font listed only under the generic ``sans-serif`` family is never reached: the generic
    family resolves to one font, DejaVu Sans, and Chinese glyphs come out as boxes.) Without
    a CJK font: no settings, and one ``UserWarning`` naming the Debian packages to install.
    """
    if all(t.isascii() for t in texts):
        return {}
    font = cjk_font()
    if font is None:
        warnings.warn(f"no CJK font installed: Chinese labels in the plots will show as boxes; install one "
                      f"(Debian/Ubuntu: apt-get install {CJK_PACKAGES[0]}, or the smaller {CJK_PACKAGES[1]})",
                      UserWarning, stacklevel=2)
        return {}
    return {"font.family": ["DejaVu Sans", font]}


def _draw_length(fig, tables: dict) -> None:
    bins = [r["bin"] for r in next(iter(tables.values()))["by_length"]]
    curves = {}
    for name, t in tables.items():
        n = f"{t['n_ranked_pairs']} ranked pairs" if t.get("pairs") == "rankings" else f"n={t['n']}"
        curves[f"{name} ({n})"] = [(r["p_a"], r["p_a_ci"]) if r["n"] else (None, None) for r in t["by_length"]]
    plot_length_bias(fig.add_subplot(), bins, curves, "Length bias: share of comparisons won by the first response")


def plot_length_bias(ax, bins: list[str], curves: dict[str, list[tuple]], title: str) -> None:
    """Paper Figure 15 on matplotlib axes ``ax``: P(A chosen) per length-difference bin, one line
    per curve (``label -> [(p_a, (lo, hi)), ...]`` per bin; ``(None, None)`` or a missing
    interval where a bin has no data) with its 95% interval as whiskers, the lines set side by
    side so that the whiskers do not overlap, and the 0.5 of no bias dashed."""
    for g, (label, values) in enumerate(curves.items()):
        shift = (g - (len(curves) - 1) / 2) * 0.08
        xs = [i + shift for i in range(len(bins))]
        ys = [v if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) else math.nan
              for v, _ in values]
        lo = [y - ci[0] if ci and math.isfinite(y) else 0.0 for y, (_, ci) in zip(ys, values)]
        hi = [ci[1] - y if ci and math.isfinite(y) else 0.0 for y, (_, ci) in zip(ys, values)]
        ax.errorbar(xs, ys, yerr=[lo, hi], marker="o", capsize=3, label=label)
    ax.axhline(0.5, color="grey", linestyle="--", linewidth=1)
    ax.set_xticks(range(len(bins)))
    ax.set_xticklabels(bins, rotation=20)
    ax.set_ylim(0, 1)
    ax.set_xlabel("length difference len(A) - len(B) (characters)")
    ax.set_ylabel("P(A chosen)")
    ax.set_title(title)
    ax.legend(**LEGEND_BESIDE)


def _draw_position(fig, tables: dict) -> None:
    ax = fig.add_subplot()
    kinds = (("p_a", "A chosen"), ("p_b", "B chosen"), ("p_tie", "tie"), ("p_a_strict", "A chosen | strict"))
    width = 0.8 / len(tables)
    for g, (name, t) in enumerate(tables.items()):
        pos = t["by_position"]
        values = [pos[k] if pos[k] is not None else 0.0 for k, _ in kinds]
        xs = [i - 0.4 + width * (g + 0.5) for i in range(len(kinds))]
        if t.get("position", {"available": True})["available"]:
            label = f"{name} (n={pos['n']}, p={_pvalue(pos['p_value'])})"
        else:
            label = f"{name} (no presentation order)"
        ax.bar(xs, values, width=width * 0.95, label=label)
        ci = pos["p_a_strict_ci"]
        if ci is not None:
            ax.errorbar([xs[3]], [values[3]], yerr=[[values[3] - ci[0]], [ci[1] - values[3]]],
                        color="black", capsize=3, linestyle="none")
    ax.axhline(0.5, color="grey", linestyle="--", linewidth=1)
    ax.set_xticks(range(len(kinds)))
    ax.set_xticklabels([label for _, label in kinds])
    ax.set_ylim(0, 1)
    ax.set_ylabel("share of comparisons")
    ax.set_title("Position bias (p: binomial test of P(A chosen | strict) = 0.5)")
    ax.legend(**LEGEND_BESIDE)


def _save_png(fig, path: Path) -> None:
    with atomic_open(path) as f:
        fig.savefig(f, format="png", bbox_inches="tight")  # the figure grows to hold the legends beside
