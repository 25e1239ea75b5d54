"""The `cheems` Typer application that every command module registers on, and what their flags share.

The commands live by group: :mod:`cheems.cli.data` (tasks, rank, validate, stats, example-data),
:mod:`cheems.cli.evaluate` (eval, score), :mod:`cheems.cli.models` (train, init-model, convert),
:mod:`cheems.cli.serve` (serve), :mod:`cheems.cli.report` (bon, compare, correlate, report),
:mod:`cheems.cli.catalog` (data), :mod:`cheems.cli.experiment` (experiment), :mod:`cheems.cli.curate`
(curate, analyze) and :mod:`cheems.cli.annotate` (annotate). Each module registers its commands
on :data:`app` when imported, and the application imports a command's module only when the
command is looked up (:class:`CommandGroup`): ``cheems rank`` imports the data commands and
nothing of scoring, curation, training or serving.
"""

from __future__ import annotations

import importlib
from typing import Optional

import typer
from typer.core import TyperGroup

from cheems.cli.coercion import install as _install_plain_coercion
from cheems.formats import FORMAT_NAMES

_install_plain_coercion()  # plain flag values converted without importing pydantic

__all__ = ["COMMAND_MODULES", "FORMAT_HELP", "CommandGroup", "app", "load_commands"]

FORMAT_HELP = f"Read every row as this format instead of detecting it row by row: {', '.join(FORMAT_NAMES)}."

COMMAND_MODULES = {
    **dict.fromkeys(("tasks", "rank", "validate", "stats", "example-data", "sample"), "cheems.cli.data"),
    **dict.fromkeys(("eval", "score"), "cheems.cli.evaluate"),
    **dict.fromkeys(("train", "init-model", "convert"), "cheems.cli.models"),
    "serve": "cheems.cli.serve",
    **dict.fromkeys(("bon", "compare", "correlate", "report"), "cheems.cli.report"),
    "data": "cheems.cli.catalog",
    "experiment": "cheems.cli.experiment",
    **dict.fromkeys(("curate", "analyze"), "cheems.cli.curate"),
    "annotate": "cheems.cli.annotate",
}
"""Each top-level command (or group) of `cheems`, in the order help lists them, and the module
that registers it."""


def load_commands(module: Optional[str] = None) -> None:
    """Import ``module`` (None: every command module, in help order); importing a module
    registers its commands on :data:`app`, once."""
    for name in dict.fromkeys(COMMAND_MODULES.values()) if module is None else (module,):
        importlib.import_module(name)


class CommandGroup(TyperGroup):
    """The `cheems` group, its commands built from what the imported modules registered.

    Looking a command up imports its module (:data:`COMMAND_MODULES`; every module for a name
    not there, so that an unknown name is corrected against them all); reading ``commands``
    (help, completion, a name to correct) imports them all."""

    _commands: dict

    @property
    def commands(self) -> dict:
        load_commands()
        return self._refresh()

    @commands.setter
    def commands(self, value) -> None:
        self._commands = value

    def get_command(self, ctx, cmd_name: str):
        if cmd_name not in self._commands:
            load_commands(COMMAND_MODULES.get(cmd_name))
            self._refresh()
        return self._commands.get(cmd_name)

    def _refresh(self) -> dict:
        """The commands registered so far, as typer builds them, in help order."""
        built = typer.main.get_group(app)._commands
        self._commands = {**{n: built[n] for n in COMMAND_MODULES if n in built}, **built}
        return self._commands


def _no_options() -> None:
    """The group's own options: none (a command group with nothing registered yet is still a group)."""


app = typer.Typer(cls=CommandGroup, callback=_no_options, add_completion=False, no_args_is_help=True,
                  pretty_exceptions_enable=False, help="Build and evaluate Chinese reward models (Cheems).")
