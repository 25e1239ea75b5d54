"""The tables `cheems eval` prints: the CheemsBench table (the paper's Table 2), bootstrap
intervals, the per-category detail, calibration, a judge's per-order results, and the warnings
about how a model's conversations were encoded."""

from __future__ import annotations

from rich.table import Table

from cheems.cli.console import err, fmt, out

__all__ = ["SUBSETS_AS_COLUMNS", "print_eval", "print_judge", "report_encoding"]


def print_judge(report: dict) -> None:
    orders = report["orders"]
    if len(orders) > 1:
        table = Table(title="Per presentation order")
        table.add_column("order")
        for s in report["subsets"]:
            table.add_column(f"{s} Acc.", justify="right")
            table.add_column(f"{s} Exact.", justify="right")
        table.add_column("Overall", justify="right")
        for name, r in orders.items():
            row = [name]
            for s in r["subsets"].values():
                row += [fmt(s["accuracy"]), fmt(s["exact_match"])]
            table.add_row(*row, fmt(r["overall"]))
        out.print(table)
    pc = report.get("position_consistency")
    fp = report.get("first_position_rate")
    if "judge_backend" in report:
        _print_local_judge(report)
    else:
        out.print(f"judgements {report['judgements']}: {report['requests']} requests sent, {report['cached']} from "
                  f"cache; unparseable {report['unparseable']}, failed {report['errors']}, cut by max tokens "
                  f"{report.get('truncated', 0)} (all count as wrong)")
    out.print(f"position consistency: {fmt(pc)} over {report['consistency_pairs']} pairs judged in both orders; "
              f"share of verdicts for the first answer: {fmt(fp)}")


def _print_local_judge(report: dict) -> None:
    """What a local judge did: the pairs it judged, how each verdict was read, and its ties."""
    pairs = report.get("pairs") or []
    out.print(f"pairs judged: {len(pairs)} ({report['judgements']} judge prompts, {report['judge_backend']}); "
              f"verdict: the most probable of the verdict tokens, {report.get('verdict', 'averaged')}")
    if report.get("judge_ties"):
        ties = sum(p.get("choice") == "tie" for p in pairs)
        out.print(f"tie verdicts: {ties} of {len(pairs)} pairs ({fmt(ties / len(pairs) if pairs else None)}), "
                  "each counted wrong")
    else:
        out.print("tie verdicts: not offered (--judge-ties offers them)")


SUBSETS_AS_COLUMNS = 3
"""Up to this many subsets are columns of the CheemsBench table (as the paper's Table 2); more are rows."""


def print_eval(name: str, report: dict) -> None:
    """Every table of an evaluation report, in reading order."""
    subsets = report["subsets"]
    out.print(_main_table(name, report))
    if report.get("overall_ci"):
        lo, hi = report["overall_ci"]
        out.print(f"Overall 95% CI: [{lo:.4f}, {hi:.4f}]")
    tied = sum(s.get("n_tied", 0) for s in subsets.values())
    if tied:
        rule = ("wrong for Accuracy; Exact Match breaks only beside a reversed pair (--ties official)"
                if report.get("ties") == "official" else "wrong for Accuracy and Exact Match (--ties strict)")
        out.print(f"note: {tied} pair(s) tied: {rule}", soft_wrap=True)
    _print_intervals_and_categories(subsets)
    _print_calibration(subsets)


def _main_table(name: str, report: dict) -> Table:
    """The CheemsBench table: subsets as columns (the paper's Table 2), or as rows when there
    are more than SUBSETS_AS_COLUMNS of them."""
    subsets = report["subsets"]
    table = Table(title="CheemsBench")
    if len(subsets) > SUBSETS_AS_COLUMNS:
        table.title = f"CheemsBench: {name}, Overall {fmt(report['overall'])}"
        for col in ("subset", "prompts", "Acc.", "Exact.", "(Acc.+Exact.)/2"):
            table.add_column(col, justify="left" if col == "subset" else "right")
        for sname, s in subsets.items():
            table.add_row(sname, str(s["n_prompts"]), fmt(s["accuracy"]), fmt(s["exact_match"]), fmt(s["score"]))
        return table
    table.add_column("model")
    for s in subsets:
        table.add_column(f"{s} Acc.", justify="right")
        table.add_column(f"{s} Exact.", justify="right")
    table.add_column("Overall", justify="right")
    row = [name]
    for s in subsets.values():
        row += [fmt(s["accuracy"]), fmt(s["exact_match"])]
    row.append(fmt(report["overall"]))
    table.add_row(*row)
    return table


def _print_intervals_and_categories(subsets: dict) -> None:
    ci_table = Table(title="95% bootstrap CI (prompts resampled)")
    for col in ("subset", "prompts", "comparisons", "Acc. CI", "Exact. CI", "(Acc.+Exact.)/2 CI"):
        ci_table.add_column(col, justify="left" if col == "subset" else "right")
    detail = Table(title="By main category")
    for col in ("subset", "category", "prompts", "comparisons", "Acc.", "Exact."):
        detail.add_column(col, justify="left" if col in ("subset", "category") else "right")
    for sname, s in subsets.items():
        ci = s.get("ci") or {}
        if ci:
            ci_table.add_row(sname, str(s["n_prompts"]), str(s["n_comparisons"]),
                             *(f"[{ci[k][0]:.4f}, {ci[k][1]:.4f}]" for k in ("accuracy", "exact_match", "score")))
        cats = list(s["categories"].items())
        for k, (cname, c) in enumerate(cats):
            detail.add_row(sname, cname, str(c["n_prompts"]), str(c["n_comparisons"]),
                           fmt(c["accuracy"]), fmt(c["exact_match"]), end_section=k == len(cats) - 1)
        if s["n_skipped"]:
            err.print(f"{sname}: {s['n_skipped']} prompt(s) with all responses tied were left out")
    if ci_table.row_count:
        out.print(ci_table)
    out.print(detail)


def _print_calibration(subsets: dict) -> None:
    table = Table(title="Calibration and ranking agreement")
    for col in ("subset", "ECE (5 bins of |diff|)", "Kendall tau-b", "Acc. better longer", "Acc. better shorter"):
        table.add_column(col, justify="left" if col == "subset" else "right")
    for sname, s in subsets.items():
        if "ece" in s:
            length = s.get("length") or {}
            table.add_row(sname, fmt(s["ece"]), fmt(s.get("kendall_tau_b")),
                          *(fmt((length.get(k) or {}).get("accuracy")) for k in ("better_longer", "better_shorter")))
    if table.row_count:
        out.print(table)


def report_encoding(s, truncation: str) -> None:
    """Warnings about how the conversations were encoded (see cheems.models.sequences.EncodeStats)."""
    if s.doubled_bos:
        err.print(f"warning: {s.doubled_bos} sequence(s) had a doubled BOS token (chat template and tokenizer "
                  "both add one); one was removed", style="yellow")
    if s.truncated:
        err.print(f"warning: {s.truncated} of {s.sequences} sequence(s) exceeded --max-length and were "
                  f"truncated ({truncation})", style="yellow")
    if s.no_chat_template:
        err.print("warning: the tokenizer has no chat template; a plain 'role: text' layout was used",
                  style="yellow")
