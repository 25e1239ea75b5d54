"""`cheems experiment table DIR`: the tables of an experiment folder in the shape of the paper's Tables 3 and 4,
printed and written to ``DIR/tables/`` (Markdown, CSV, JSON)."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.table import Table

import cheems
from cheems.cli.console import err, out, reports_input_errors

__all__ = ["register", "table"]


@reports_input_errors
def table(folder: Path = typer.Argument(..., help="The experiment folder (`cheems experiment run -o DIR`).")):
    """Tables 3 / 4 of an experiment: one per base model and data size, a row per dataset, Acc. and Exact. per
    benchmark subset and Overall (mean ± 95% t-interval over seeds), the paper's figures beside matching
    datasets; written to DIR/tables/table.md, table.csv and table.json."""
    study, written = cheems.experiment_tables(folder)
    _print_tables(study)
    for note in study["notes"]:
        err.print(f"note: {note}", soft_wrap=True)
    out.print(f"tables -> {', '.join(str(p) for p in written)}", soft_wrap=True)


def _print_tables(study: dict) -> None:
    from cheems.experiments.table import table_caption, table_header, table_rows

    for t in study["tables"]:
        rich_table = Table(title=table_caption(t))
        for k, name in enumerate(table_header(study)):
            rich_table.add_column(name, justify="left" if k == 0 else "right", no_wrap=k == 0)
        for row in table_rows(study, t):
            rich_table.add_row(*row)
        out.print(rich_table)
    if study["paper"]:
        out.print(study["paper"]["note"] + ".", soft_wrap=True)


def register(experiment_app: typer.Typer) -> None:
    """Add `table` to the `cheems experiment` group."""
    experiment_app.command("table")(table)
