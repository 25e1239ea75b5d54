"""The `cheems` Typer application that every command module registers on, and what their flags share.

The commands live by group: :mod:`cheems.cli.data` (tasks, rank, validate, stats, example-data),
:mod:`cheems.cli.evaluate` (eval, score), :mod:`cheems.cli.models` (train, init-model, convert),
:mod:`cheems.cli.serve` (serve), :mod:`cheems.cli.report` (bon, compare, correlate, report),
:mod:`cheems.cli.catalog` (data), :mod:`cheems.cli.experiment` (experiment), :mod:`cheems.cli.curate`
(curate, analyze) and :mod:`cheems.cli.annotate` (annotate). Each module registers its commands
on :data:`app` when imported, and the application imports a command's module only when the
command is looked up (:class:`CommandGroup`): ``cheems rank`` imports the data commands and
nothing of scoring, curation, training or serving.

A command that needs a package of an extra that is not installed (torch for ``init-model``,
matplotlib for ``report``) ends in one line naming the extra that installs it, whatever command it
is: :meth:`CommandGroup.main` turns the ModuleNotFoundError into that line, from the extras of
pyproject.toml (:func:`extras_by_module`).
"""

from __future__ import annotations

import functools
import importlib
import importlib.metadata
import re
import sys
from typing import Optional, Sequence

import typer
from typer._click.exceptions import BadParameter, MissingParameter
from typer.core import TyperGroup

from cheems.cli.coercion import install as _install_plain_coercion
from cheems.cli.console import EXIT_BAD_INPUT, err
from cheems.formats import FORMAT_NAMES
from cheems.records import CheemsInputError

_install_plain_coercion()  # plain flag values converted without importing pydantic

__all__ = ["COMMAND_MODULES", "FORMAT_HELP", "IMPORT_NAMES", "SERVER_CLIENT_HELPS", "CheemsApp", "CommandGroup", "app",
           "extra_for", "extras_by_module", "load_commands", "missing_extra_line"]

FORMAT_HELP = f"Read every row as this format instead of detecting it row by row: {', '.join(FORMAT_NAMES)}."
SERVER_CLIENT_HELPS = {"api_key_file": "File holding the server's bearer token"}
"""How the commands that score with a running `cheems serve` (--server) word the token file
(:class:`~cheems.common_settings.ServerToken`, whose help text words the server's side)."""

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


# ----------------------------------------------------------------------------- missing extras

IMPORT_NAMES = {"pyyaml": "yaml", "argon2-cffi": "argon2", "markdown-it-py": "markdown_it",
                "mkdocs-material": "material"}
"""The top-level module of each distribution of the extras whose import name is not its own name
(lower case, ``-`` and ``.`` as ``_``)."""

NOT_ADVISED = ("dev",)
"""Extras never named in an error: the development bundle of all the others."""

_REQUIREMENT = re.compile(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(?:\[([^\]]*)\])?")
_EXTRA_MARKER = re.compile(r"""\bextra\s*==\s*["']([^"']+)["']""")


@functools.lru_cache(maxsize=1)
def extras_by_module() -> dict[str, tuple[str, ...]]:
    """Each top-level module an extra of cheems installs -> the extras that install it, those
    that list it themselves first (in pyproject order), then those that include such an extra
    (``train = ["cheems[models]", ...]``). Read from the installed package's metadata, which is
    pyproject.toml's ``[project.optional-dependencies]``; empty when cheems is not installed."""
    try:
        requirements = importlib.metadata.requires("cheems") or []
    except importlib.metadata.PackageNotFoundError:
        return {}
    direct: dict[str, list[str]] = {}  # extra -> modules it lists
    included: dict[str, list[str]] = {}  # extra -> extras it includes
    for requirement in requirements:
        requirement, _, marker = requirement.partition(";")
        extra, named = _EXTRA_MARKER.search(marker), _REQUIREMENT.match(requirement)
        if extra is None or named is None or extra[1] in NOT_ADVISED:
            continue  # a core dependency, or the development bundle
        name = named[1].lower()
        if name == "cheems":
            included.setdefault(extra[1], []).extend(e.strip() for e in (named[2] or "").split(","))
        else:
            direct.setdefault(extra[1], []).append(IMPORT_NAMES.get(name, re.sub(r"[-.]", "_", name)))
    found: dict[str, list[str]] = {}
    for extra, modules in direct.items():
        for module in modules:
            found.setdefault(module, []).append(extra)
    for extra, bundled in included.items():  # one level deep: no extra of ours includes a bundle
        for module in {m for e in bundled for m in direct.get(e, ())}:
            found[module].append(extra)
    return {module: tuple(dict.fromkeys(extras)) for module, extras in found.items()}


def extra_for(module: str, command: Sequence[str] = ()) -> Optional[str]:
    """The extra to install for the missing ``module`` (a dotted name counts by its top level):
    one named like a word of the command (``cheems serve`` -> serve, though annotate has
    fastapi too), else the first that lists it. None for a module no extra installs."""
    extras = extras_by_module().get(module.partition(".")[0], ())
    return next((e for e in extras if e in command), extras[0] if extras else None)


def missing_extra_line(error: ModuleNotFoundError, command: Sequence[str]) -> Optional[str]:
    """The one line that names the extra providing the module ``error`` found missing, for the
    command ``command`` (its words after ``cheems``); None when no extra provides it (a bug).
    A submodule missing from a package that did import is an install too old or broken."""
    extra = extra_for(error.name or "", command)
    if extra is None:
        return None
    words, package = " ".join(("cheems", *command)), error.name.partition(".")[0]
    if package != error.name and package in sys.modules:
        return (f"{words}: {error.name} is missing from the installed {package} (too old, or a broken install): "
                f"pip install -U 'cheems[{extra}]'")
    return f"{words} needs the {extra} extra ({package} is not installed): pip install 'cheems[{extra}]'"


# ----------------------------------------------------------------------------- the commands

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

    def main(self, args: Optional[Sequence[str]] = None, *a, **kw):
        """Run the command line; a module of an extra that is not installed ends it in one
        line naming the extra (:func:`missing_extra_line`) and exit code 2, whichever command
        (or command module) imported it."""
        args = list(sys.argv[1:] if args is None else args)
        try:
            return super().main(args, *a, **kw)
        except ModuleNotFoundError as e:
            line = missing_extra_line(e, self.command_words(args))
            if line is None:
                raise
            err.print("error:", style="bold red", end=" ")
            err.print(line, soft_wrap=True)
            sys.exit(EXIT_BAD_INPUT)

    def invoke(self, ctx):
        """Run the command; a flag or argument value it does not take (a word for a number, a
        number out of the flag's range) is one line naming the flag and exit code 2, as every bad
        input. A missing or unknown flag keeps click's usage message."""
        try:
            return super().invoke(ctx)
        except BadParameter as e:
            if isinstance(e, MissingParameter):
                raise
            opts = getattr(e.param, "opts", None) or [getattr(e.param, "name", None) or "value"]
            err.print("error:", style="bold red", end=" ")
            err.print(str(CheemsInputError(e.message, field=max(opts, key=len))), soft_wrap=True)
            raise typer.Exit(EXIT_BAD_INPUT) from None

    def command_words(self, args: Sequence[str]) -> list[str]:
        """The command and subcommand names at the start of ``args`` (``data get``), read from
        the commands loaded so far (never importing one)."""
        words, commands = [], {**dict.fromkeys(COMMAND_MODULES), **self._commands}
        for word in args:
            if word not in commands:
                break
            words.append(word)
            commands = getattr(commands[word], "commands", None) or {}
        return words

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
        built = app.click_group()._commands
        self._commands = {**{n: built[n] for n in COMMAND_MODULES if n in built}, **built}
        return self._commands


def _registered(typer_app: typer.Typer) -> tuple:
    """What the click commands of ``typer_app`` are built from: its registered commands and
    groups, and theirs (a command module imported later adds to them)."""
    return (tuple(map(id, typer_app.registered_commands)),
            tuple((id(g), _registered(g.typer_instance)) for g in typer_app.registered_groups if g.typer_instance))


class CheemsApp(typer.Typer):
    """The typer application whose click group is built once for each set of registered commands.

    Typer builds the whole click tree (every option of every loaded command, read from the
    functions' signatures) on each call; a process that runs many commands (the Python API's
    callers, the tests, the warm process of a notebook) would rebuild it on every one."""

    _built: tuple = (None, None)  # (what the group was built from, the group)

    def click_group(self) -> TyperGroup:
        """The click group of the commands registered so far (built again only when they changed)."""
        key = _registered(self)
        if self._built[0] != key:
            self._built = (key, typer.main.get_group(self))
        return self._built[1]

    def __call__(self, *args, **kwargs):
        return self.click_group()(*args, **kwargs)


def _no_options() -> None:
    """The group's own options: none (a command group with nothing registered yet is still a group)."""


app = CheemsApp(cls=CommandGroup, callback=_no_options, add_completion=False, no_args_is_help=True,
                  pretty_exceptions_enable=False, help="Build and evaluate Chinese reward models (Cheems).")
