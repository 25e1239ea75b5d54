"""The `cheems` Typer application that every command module registers on, and what their flags share.

The commands live by group: :mod:`cheems.cli.data` (tasks, rank, validate, stats, example-data),
:mod:`cheems.cli.evaluate` (eval, score), :mod:`cheems.cli.models` (train, init-model, convert),
:mod:`cheems.cli.curate` (curate, analyze), :mod:`cheems.cli.report` (bon, compare, correlate,
report) and :mod:`cheems.cli.annotate` (annotate); :mod:`cheems.cli` imports them all.
"""

from __future__ import annotations

import typer

from cheems.formats import FORMAT_NAMES

__all__ = ["FORMAT_HELP", "app"]

FORMAT_HELP = f"Read every row as this format instead of detecting it row by row: {', '.join(FORMAT_NAMES)}."

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="Build and evaluate Chinese reward models (Cheems).")
