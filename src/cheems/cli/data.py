"""`cheems tasks`, `rank`, `validate`, `stats` and `example-data`: the commands over data files."""

from __future__ import annotations

import re
from collections import Counter
from enum import Enum
from importlib import resources
from pathlib import Path
from typing import List

import typer
from rich.table import Table

import cheems
from cheems.cli.app import app
from cheems.cli.console import data_paths, err, out, print_reworded, print_skipped, reports_input_errors
from cheems.cli.flags import build_settings, settings_flags
from cheems.common_settings import ExtraOutputs, OutputSettings, ReadSettings, StatisticsSettings
from cheems.records import CheemsInputError

__all__ = ["error_kind", "example_data", "format_groups", "rank", "stats", "tasks", "validate"]

# ----------------------------------------------------------------------------- tasks

class Design(str, Enum):
    circular = "circular"
    cover = "cover"


@app.command()
@reports_input_errors
@settings_flags(OutputSettings, into="out_flags", only=("output",), short={"output": "-o"}, required=("output",),
                helps={"output": "Where to write the tasks (JSONL)"})
@settings_flags(StatisticsSettings, into="stats_flags", only=("seed",), defaults={"seed": None},
                helps={"seed": "Shuffle each prompt's responses with this seed before forming tasks "
                       "(default: keep file order)"})
@settings_flags(ReadSettings, into="read_flags", only=("skip_invalid", "format"))
def tasks(
    file: Path = typer.Argument(..., help="Prompts with responses (any cheems format)."),
    design: Design = typer.Option(Design.circular, help="circular: the paper's adjacent triples; "
                                  "cover: add triples until every pair is covered."),
    out_flags: dict = None, stats_flags: dict = None, read_flags: dict = None,
):
    """Write the triple-wise annotation tasks of every prompt (paper §3.2)."""
    output, read = build_settings(OutputSettings, out_flags).output, build_settings(ReadSettings, read_flags)
    stats = build_settings(StatisticsSettings, stats_flags)
    made = cheems.make_tasks(data_paths(file), output, design=design.value, statistics=stats, read=read)
    print_skipped(made.errors)
    coverage = made.coverage
    full = sum(c == 1.0 for c in coverage)
    mean = sum(coverage) / len(coverage) if coverage else 0.0
    out.print(f"{made.tasks} tasks for {made.prompts} prompts -> {output}")
    out.print(f"pair coverage: mean {mean:.1%}, {full}/{len(coverage)} prompts fully covered")


# ----------------------------------------------------------------------------- rank

@app.command()
@reports_input_errors
@settings_flags(OutputSettings, into="out_flags", only=("output",), short={"output": "-o"}, required=("output",),
                helps={"output": "Benchmark file to write (JSONL, rows with rank)"})
@settings_flags(ExtraOutputs, into="extra_flags", only=("report",))
@settings_flags(ReadSettings, into="read_flags", only=("skip_invalid", "format"))
def rank(
    annotations: List[Path] = typer.Argument(..., help="Annotation files: rows with comparisons and/or triples."),
    keep_comparisons: bool = typer.Option(False, help="Keep the input comparisons in the output rows."),
    out_flags: dict = None, extra_flags: dict = None, read_flags: dict = None,
):
    """Resolve annotation conflicts into partial rankings (paper Algorithm 1)."""
    output, read = build_settings(OutputSettings, out_flags).output, build_settings(ReadSettings, read_flags)
    ranked = cheems.rank(data_paths(annotations), output, report=extra_flags.get("report"),
                         keep_comparisons=keep_comparisons, read=read)
    print_skipped(ranked.errors)
    print_reworded(ranked.reworded)
    if not ranked.prompts:
        raise CheemsInputError("no valid prompts to rank; nothing written")
    _print_conflicts(ranked.report)
    out.print(f"wrote {len(ranked.prompts)} ranked prompts -> {output}")


def _print_conflicts(stats: dict) -> None:
    table = Table(title="Conflict resolution")
    for col in ("subset", "prompts", "comparisons", "conflicts", "conflict ratio", "merged cycles",
                "prompts with cycles", "tie groups"):
        table.add_column(col, justify="left" if col == "subset" else "right")
    for name, s in stats.items():
        table.add_row(name, str(s["prompts"]), str(s["comparisons"]), str(s["conflicts"]),
                      f"{s['conflict_ratio']:.4f}", str(s["merged_cycles"]), str(s["prompts_with_cycles"]),
                      str(s["tie_groups"]))
    out.print(table)
    uncompared = stats["total"]["uncompared_responses"]
    if uncompared:
        err.print(f"warning: {uncompared} response(s) appear in no comparison; they are ranked 0 (nothing is "
                  "known to beat them), so check the annotations cover every response", style="yellow")


# ----------------------------------------------------------------------------- validate / stats

@app.command()
@reports_input_errors
@settings_flags(ReadSettings, into="read_flags", only=("format",))
def validate(files: List[Path] = typer.Argument(..., help="Files to check (any cheems format)."),
             show_all: bool = typer.Option(False, "--all", help="Print every bad row, not the first few of each "
                                           "kind of error."),
             read_flags: dict = None):
    """Check files row by row: counts, the format of each file (of each group of rows when they
    mix formats), what `eval` and `train` would refuse (the errors, grouped by kind) or note.
    Exit 1 if any row is bad."""
    bad, read = 0, build_settings(ReadSettings, read_flags)
    for f, path in zip(files, data_paths(files)):
        found = cheems.validate(path, read=read)
        res = found.read
        status = "ok" if not res.errors else f"{len(res.errors)} invalid row(s)"
        out.print(f"{f}: {len(res.prompts)} valid row(s), {found.responses} responses, {found.ranked} ranked, "
                  f"{found.compared} with comparisons; {format_groups(res.formats)}", end="", soft_wrap=True)
        out.print(status, style="green" if not res.errors else "red")
        _print_row_notes(found)
        _print_errors(res.errors, show_all)
        bad += len(res.errors)
    if bad:
        raise typer.Exit(1)


def format_groups(formats: list[str]) -> str:
    """``"format: pair; "``, or ``"format: pair (120 rows), hh-rlhf (3 rows); "`` when rows mix
    formats (most rows first); empty without rows."""
    counts = Counter(formats).most_common()
    if not counts:
        return ""
    if len(counts) == 1:
        return f"format: {counts[0][0]}; "
    return "format: " + ", ".join(f"{name} ({n} row{'s' if n > 1 else ''})" for name, n in counts) + "; "


def _print_row_notes(found) -> None:
    """What `eval` and `train` say about the valid rows (a :class:`cheems.api.data_files.Validation`):
    rows counted under an occurrence id, rows with responses of identical text, rows without a
    rank or any judgement."""
    notes = [(found.exact_repeats, "repeat an earlier row exactly: `eval` and `score` count each as an item, keyed "
              "'id#n' (its n-th row); `eval --dedupe` counts them once"),
             (found.differing_repeats, "reuse an earlier row's prompt id with other content or other keys: each is an "
              "item, keyed 'id#n' (its n-th row)"),
             (found.identical, "hold two responses of identical text: `eval` scores them (a tie under --ties), `train` "
              "skips their pair"),
             (found.unranked, "have no rank: `eval` refuses them (run `cheems rank` first); `train` uses their "
              "comparisons"),
             (found.unjudged, "have neither a rank nor comparisons: `train` gets no pair from them")]
    for n, what in notes:
        if n:
            out.print(f"  {'warning' if what.startswith('hold') else 'note'}: {n} row(s) {what}", style="yellow",
                      soft_wrap=True)
    if found.read.reworded:
        out.print(f"  note: {found.read.reworded.note()}", style="yellow", soft_wrap=True)


ERRORS_SHOWN_PER_KIND = 3


def error_kind(e: CheemsInputError) -> tuple[str, str]:
    """What makes two row errors the same mistake: the field without its indices and the
    message without the values it quotes."""
    field = re.sub(r"\[\d+\]", "[]", e.field or "")
    message = re.sub(r"'[^']*'|\"[^\"]*\"|\b\d+\b", "…", e.message)
    return field, message


def _print_errors(errors: list[CheemsInputError], show_all: bool) -> None:
    """Every error with ``show_all``; else the errors grouped by kind, most frequent first,
    each with its count and its first few rows."""
    if show_all:
        for e in errors:
            out.print(f"  {e}", soft_wrap=True)
        return
    groups: dict[tuple[str, str], list[CheemsInputError]] = {}
    for e in errors:
        groups.setdefault(error_kind(e), []).append(e)
    for kind_errors in sorted(groups.values(), key=len, reverse=True):
        if len(kind_errors) > 1:
            out.print(f"  {len(kind_errors)} row(s) with this error:", soft_wrap=True)
        for e in kind_errors[:ERRORS_SHOWN_PER_KIND]:
            out.print(f"  {e}", soft_wrap=True)
        if len(kind_errors) > ERRORS_SHOWN_PER_KIND:
            out.print(f"  ... and {len(kind_errors) - ERRORS_SHOWN_PER_KIND} more like these (--all prints them)")


@app.command()
@reports_input_errors
@settings_flags(ReadSettings, into="read_flags", only=("skip_invalid", "format"))
def stats(
    files: List[Path] = typer.Argument(..., help="Datasets (any cheems format)."),
    read_flags: dict = None,
):
    """The paper's Table 1 statistics: prompts, responses, comparisons, average lengths."""
    read = build_settings(ReadSettings, read_flags)
    found = cheems.stats(data_paths(files), read=read)
    table = Table(title="Dataset statistics")
    table.add_column("file", overflow="fold")
    for col in ("prompts", "responses/prompt", "comparisons", "prompt chars", "chosen chars", "rejected chars"):
        table.add_column(col, justify="right")
    for f, s, errors in zip(files, found.files, found.errors):
        print_skipped(errors)
        _stats_row(table, str(f), s)
    if found.total is not None:
        _stats_row(table, "total", found.total)
    print_reworded(found.reworded)
    out.print(table)


def _stats_row(table: Table, name: str, s: dict) -> None:
    table.add_row(name, f"{s['prompts']:,}", f"{s['responses_per_prompt']:.2f}", f"{s['comparisons']:,}",
                  f"{s['prompt_chars']:.1f}", f"{s['chosen_chars']:.1f}", f"{s['rejected_chars']:.1f}")


# ----------------------------------------------------------------------------- example data

@app.command("example-data")
@settings_flags(OutputSettings, into="out_flags", only=("output",), short={"output": "-o"},
                defaults={"output": Path("cheems-sample")},
                helps={"output": "Folder to copy the bundled sample data into"})
def example_data(out_flags: dict = None):
    """Copy the bundled Chinese sample annotations (subsets open and human) into a folder."""
    _copy_example_data(out_flags)


@reports_input_errors
def _copy_example_data(out_flags: dict) -> None:
    from cheems.io import atomic_open, check_output_folder

    output = Path(build_settings(OutputSettings, out_flags).output)
    src = resources.files("cheems") / "data" / "sample" / "annotations"
    dst = output / "annotations"
    check_output_folder(dst)
    items = {item.name: item.read_bytes() for item in src.iterdir() if item.name.endswith(".jsonl")}
    for name, data in items.items():  # a file of the user's is never replaced by ours
        if (dst / name).exists() and (dst / name).read_bytes() != data:
            raise CheemsInputError("already exists and differs from the sample; choose another folder",
                                   file=str(dst / name))
    for name, data in sorted(items.items()):
        with atomic_open(dst / name) as f:
            f.write(data)
    out.print(f"copied {', '.join(sorted(items))} -> {dst}")


@app.command("sample", hidden=True)
@settings_flags(OutputSettings, into="out_flags", only=("output",), short={"output": "-o"},
                defaults={"output": Path("cheems-sample")},
                helps={"output": "Folder to copy the bundled sample data into"})
def sample_alias(out_flags: dict = None):
    """The old name of `cheems example-data`."""
    err.print("note: `cheems sample` is now `cheems example-data` (`cheems curate sample` samples responses)")
    _copy_example_data(out_flags)
