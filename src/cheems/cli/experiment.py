"""`cheems experiment run` and `cheems experiment status`: study grids over the experiment folder."""

from __future__ import annotations

import contextlib
import functools
from pathlib import Path
from typing import Optional

import typer

import cheems
from cheems.cli.app import app
from cheems.cli.console import err, fmt, out, reports_input_errors, say
from cheems.cli.experiment_table import register as register_table
from cheems.cli.flags import build_settings, settings_flags
from cheems.common_settings import OutputSettings

__all__ = ["experiment_app", "run", "status"]

experiment_app = typer.Typer(no_args_is_help=True, help="Study grids (paper §6): datasets x base models x data "
                             "sizes x seeds, each cell trained and evaluated, resumable cell by cell.")


@experiment_app.command("run")
@reports_input_errors
@settings_flags(OutputSettings, into="out_flags", only=("output",), short={"output": "-o"}, required=("output",),
                helps={"output": "Experiment folder; a later run with the same folder resumes it (and adds the "
                       "cells of a grown grid)"})
def run(
    exp: Path = typer.Argument(..., help="Experiment YAML: benchmarks, base_models, datasets, data_sizes, seeds, "
                               "train, eval (see docs)."),
    ray: Optional[str] = typer.Option(None, "--ray", help="Run every cell at once as a Ray task of its own: "
                                      "'auto' (the running cluster), an address, or 'local' (a new local "
                                      "instance)."),
    out_flags: dict = None,
):
    """Train and evaluate every cell of an experiment grid; finished cells are skipped, an
    interrupted one resumes from its last checkpoint."""
    output = build_settings(OutputSettings, out_flags).output
    warn = functools.partial(say, style="yellow")
    with _cells_progress() as bar:
        summary = cheems.run_experiment(exp, output, ray_address=ray, progress=bar, notify=warn)
    already = f" ({len(summary['already'])} finished before)" if summary["already"] else ""
    out.print(f"ran {len(summary['ran'])} of {len(summary['cells'])} cells{already} -> {summary['results']}")


@contextlib.contextmanager
def _cells_progress():
    """On a terminal, two bars on stderr: cells done of all, and the current cell's training
    steps. In a pipe or a CI log (where a bar shows nothing), a line as each cell starts and ends."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    if not err.is_terminal:
        yield _cell_lines
        return
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(),
                  console=err, transient=True) as bar:
        cells = bar.add_task("cells", total=None)
        steps = bar.add_task("training", total=None)

        def update(p) -> None:
            bar.update(cells, completed=p.done, total=p.cells)
            bar.update(steps, description=f"{p.cell}: {p.stage}", completed=p.step, total=p.steps or None)

        yield update


def _cell_lines(p) -> None:
    if p.stage == "skipped":
        out.print(f"cell {p.index + 1}/{p.cells} {p.cell}: finished before, skipped")
    elif p.stage == "done":
        out.print(f"cell {p.cell}: finished ({p.done} of {p.cells} done, {p.cells - p.done} left)")
    elif p.stage in ("prepare", "queued"):
        what = "started" if p.stage == "prepare" else "queued as a Ray task"
        out.print(f"cell {p.index + 1}/{p.cells} {p.cell}: {what}")


@experiment_app.command("status")
@reports_input_errors
def status(folder: Path = typer.Argument(..., help="Experiment folder (the -o of `experiment run`).")):
    """Cells done and left, the last checkpoint of started cells, and each cell's Overall."""
    from rich.table import Table

    st = cheems.experiment_status(folder)
    for note in st["notes"]:
        err.print(f"note: {note}", style="yellow", soft_wrap=True)
    out.print(f"{st['done']} of {len(st['cells'])} cells done, {st['left']} left ({st['folder']})")
    table = Table("cell", "state", "checkpoint", "pairs", "Overall")
    for c in st["cells"]:
        table.add_row(c["cell"], c["state"], "-" if c["checkpoint"] is None else str(c["checkpoint"]),
                      "-" if c["pairs"] is None else str(c["pairs"]), fmt(c["overall"]))
    out.print(table)


register_table(experiment_app)
app.add_typer(experiment_app, name="experiment")
