"""Command-line flags generated from the settings dataclasses, and laid over YAML one way.

A settings dataclass (:mod:`cheems.settings`) declares each field once: its default, help text
and allowed range or choices. :func:`settings_flags` turns the fields into Typer options of a
command, in the spirit of Hugging Face's ``HfArgumentParser``: the flag's name is the field's
(``max_length`` -> ``--max-length``, or a name given in ``names``), its help is
:func:`cheems.settings.flag_help` (the field's help and default), and its value is checked by
:func:`cheems.settings.check_settings` when the settings are built, so flags, YAML files and
Python code meet the same checks and the same messages. The command receives the flags the user
gave as one mapping (field -> value; a flag left out is absent), and :func:`build_settings`
lays that mapping over an optional YAML section.

Flag shapes by field type: ``bool`` defaulting to False is an on-switch (``--check``); ``bool``
defaulting to True has both forms (``--packing/--no-packing``); ``int``/``float``/``str`` take
one value; a path takes one path; a list of paths repeats the flag (``--train a --train b``);
a tuple of strings takes one comma-separated value (``--rules empty,garbled``).
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import os
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, List, Optional

import typer

from cheems.records import CheemsInputError
from cheems.settings import check_settings, flag_help, setting_kind, settings_from_mapping

__all__ = ["FLAGS_OF", "NO_VALUE", "FlagSpec", "build_settings", "flag", "flag_name", "settings_flags"]


NO_VALUE: Any = type("NoValue", (), {"__repr__": lambda self: "NO_VALUE"})()
"""A FlagSpec's default or alias value when it has none (the field's own default applies)."""


@dataclass(frozen=True)
class FlagSpec:
    """One generated option: the settings class and field it comes from, and its flag name."""

    cls: type
    field: str
    flag: str
    when: str | None
    help: str | None = None
    """This command's wording of the help (what *its* output is), or None: the field's."""
    default: Any = NO_VALUE
    """This command's default for the setting, or NO_VALUE: the field's."""
    required: bool = False
    """The flag must be given (click refuses the command line without it)."""
    alias_value: Any = NO_VALUE
    """A hidden old spelling: the value of the setting it stands for (NO_VALUE: a flag of its own)."""


FLAGS_OF: dict[str, list[FlagSpec]] = {}
"""Every generated option, by the module and qualified name of the command function that has it
(``cheems.cli.evaluate.eval_``), for the tests that check flags against their settings."""


def flag(cls, name: str, when: str | None = None, help: str | None = None,
         default: Any = NO_VALUE) -> str:
    """The help text of a flag, taken from the setting ``name`` of the dataclass ``cls`` (with
    its default; ``help`` and ``default``: one command's wording and default), prefixed with
    ``With WHEN:`` for flags that only matter with another one."""
    text = flag_help(cls, name, help) if default is NO_VALUE else flag_help(cls, name, help, default)
    if not when:
        return text
    first = text.split(None, 1)[0]
    if first[1:] == first[1:].lower():  # "Seconds" -> "seconds"; "API", "SQLite", "OpenAI-compatible" stay
        text = text[0].lower() + text[1:]
    return f"With {when}: {text}"


def flag_name(field: str) -> str:
    return "--" + field.replace("_", "-")


def _option(cls, f: dataclasses.Field, hint: Any, spec: FlagSpec, extra: tuple[str, ...]):
    """(annotation, typer.Option) of the flag ``spec`` for field ``f`` (see the module docstring)."""
    kind, flag_ = setting_kind(hint), spec.flag
    help_ = flag(cls, f.name, spec.when, spec.help, spec.default)
    if spec.alias_value is not NO_VALUE:
        old = f"The old spelling of {flag_name(f.name)} {spec.alias_value}."
        return bool, typer.Option(False, flag_, hidden=True, help=old)
    if kind == "bool":
        if f.default is True:
            no = "--no-" + flag_[2:]
            return Optional[bool], typer.Option(None, f"{flag_}/{no}", *extra, help=help_)
        return bool, typer.Option(False, flag_, *extra, help=help_)
    annotation = {"int": Optional[int], "float": Optional[float], "str": Optional[str], "path": Optional[Path],
                  "int_or_word": Optional[str],
                  "paths": Optional[List[Path]], "strings": Optional[str]}.get(kind)
    if annotation is None:
        raise TypeError(f"no flag shape for setting {cls.__name__}.{f.name} ({kind})")
    return annotation, typer.Option(... if spec.required else None, flag_, *extra, help=help_, show_default=False)


def _flag_value(value: Any, hint: Any, on_switch: bool) -> Any:
    """What a flag's parsed value becomes for its field: a comma-separated text -> tuple of
    strings; an on-switch (``--check``) left off -> not given (``--no-packing`` is given)."""
    kind = setting_kind(hint)
    if value is None or (on_switch and value is False):
        return None
    if kind == "strings":
        return tuple(x.strip() for x in value.split(",") if x.strip())
    if kind == "paths":
        return list(value)
    if kind == "int_or_word" and value.strip().lstrip("-").isdigit():
        return int(value)
    return value


def settings_flags(cls, *, into: str, only: tuple[str, ...] | None = None, exclude: tuple[str, ...] = (),
                   names: dict[str, str] | None = None, when: str | None = None,
                   plain: tuple[str, ...] = (), short: dict[str, str] | None = None,
                   helps: dict[str, str] | None = None, defaults: dict[str, Any] | None = None,
                   aliases: dict[str, tuple[str, Any]] | None = None, required: tuple[str, ...] = ()) -> Callable:
    """Decorator: add one option per setting of ``cls`` (``only`` these fields, or all but
    ``exclude``) to a Typer command; the command receives the flags given as a mapping in its
    parameter ``into``. ``names`` renames flags (field -> "--flag"), ``short`` adds a short
    form ("-o"), ``when`` prefixes the help ("With --model: ..."), except for fields in
    ``plain``. ``helps`` words a field's help for this command, ``defaults`` gives this
    command's default (put in the mapping when the flag is left out), and ``aliases`` adds
    hidden old spellings ("--truncate": ("truncation", "left")) that set a field to a value;
    the flags of ``required`` must be given."""
    hints = typing.get_type_hints(cls)
    fields = [f for f in dataclasses.fields(cls) if "help" in f.metadata and f.init
              and (only is None or f.name in only) and f.name not in exclude]
    if only is not None and {f.name for f in fields} != set(only):
        raise TypeError(f"{cls.__name__} has no setting(s) {set(only) - {f.name for f in fields}}")
    look = _Look(names or {}, short or {}, when, plain, helps or {}, defaults or {}, aliases or {}, required)

    def decorate(fn: Callable) -> Callable:
        sig = inspect.signature(fn)
        own = [p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for p in sig.parameters.values() if p.name != into]
        params, param_of = _flag_parameters(cls, fields, hints, {p.name for p in own}, into, look,
                                            f"{fn.__module__}.{fn.__qualname__}")
        switches = {f.name for f in fields if setting_kind(hints[f.name]) == "bool" and f.default is not True}

        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            given = {**look.defaults, **_given(kwargs, param_of, hints, switches)}
            return fn(*args, **{into: {**kwargs.pop(into, {}), **given}}, **kwargs)

        wrapper.__signature__ = sig.replace(parameters=own + params)
        return wrapper

    return decorate


def _given(kwargs: dict, param_of: dict, hints: dict, switches: set) -> dict:
    """field -> value of the flags given (popped from ``kwargs``); an alias gives its value
    unless the field's own flag is given too."""
    given, aliased = {}, {}
    for pname, (field, alias) in param_of.items():
        value = kwargs.pop(pname, None)
        if alias is not NO_VALUE:
            if value:
                aliased[field] = alias
            continue
        value = _flag_value(value, hints[field], field in switches)
        if value is not None:
            given[field] = value
    return {**aliased, **given}


@dataclass(frozen=True)
class _Look:
    """How :func:`settings_flags` shows the fields of one class on one command."""

    names: dict
    short: dict
    when: str | None
    plain: tuple
    helps: dict
    defaults: dict
    aliases: dict
    required: tuple


def _flag_parameters(cls, fields, hints, taken: set[str], into: str, look: _Look,
                     command: str) -> tuple[list[inspect.Parameter], dict[str, tuple[str, Any]]]:
    """The signature parameters of the generated options, and parameter name -> (field, the
    value of a hidden alias or NO_VALUE); records the options in FLAGS_OF under ``command``."""
    params, param_of = [], {}
    by_field = {f.name: f for f in fields}
    specs = [(f, FlagSpec(cls, f.name, look.names.get(f.name, flag_name(f.name)),
                          None if f.name in look.plain else look.when, look.helps.get(f.name),
                          look.defaults.get(f.name, NO_VALUE), f.name in look.required)) for f in fields]
    specs += [(by_field[field], FlagSpec(cls, field, alias, None, alias_value=value))
              for alias, (field, value) in look.aliases.items()]
    for f, spec in specs:
        pname = f.name if f.name not in taken else f"{into}_{f.name}"
        if spec.alias_value is not NO_VALUE:
            pname = f"{into}_{spec.flag[2:].replace('-', '_')}_alias"
        extra = (look.short[f.name],) if f.name in look.short and spec.alias_value is NO_VALUE else ()
        annotation, option = _option(cls, f, hints[f.name], spec, extra)
        params.append(inspect.Parameter(pname, inspect.Parameter.KEYWORD_ONLY, default=option, annotation=annotation))
        FLAGS_OF.setdefault(command, []).append(spec)
        param_of[pname] = (f.name, spec.alias_value)
    return params, param_of


def _flags_of(cls) -> dict[str, str]:
    """field -> flag name for every generated option of ``cls`` (any command)."""
    return {s.field: s.flag for specs in FLAGS_OF.values() for s in specs
            if s.cls is cls and s.alias_value is NO_VALUE}


def build_settings(cls, given: dict, *, config: str | os.PathLike | None = None, section: dict | None = None,
                   prefix: str = "", config_flag: bool = False):
    """An instance of settings dataclass ``cls``: the flags ``given`` laid over ``section`` (the
    part of the YAML file ``config`` that holds these settings; {} without a file), checked
    once by :func:`cheems.settings.check_settings`.

    A bad value from the file names the file and key; a bad value from a flag names the flag;
    required settings given nowhere are named together (``config_flag``: the command also
    takes them from a ``--config`` file, and the message says so)."""
    file = str(config) if config is not None else None
    section = section or {}
    flags = _flags_of(cls)
    required = [f.name for f in dataclasses.fields(cls) if f.init and f.default is dataclasses.MISSING
                and f.default_factory is dataclasses.MISSING]
    missing = [flags.get(k, flag_name(k)) for k in required if k not in given and k not in section]
    if missing and config is None:
        hint = f" (or give {'them' if len(missing) > 1 else 'it'} in --config)" if config_flag else ""
        raise CheemsInputError(f"missing {', '.join(missing)}{hint}")
    try:
        settings = settings_from_mapping(cls, section, file=file, prefix=prefix, overrides=given)
        check_settings(settings)
    except CheemsInputError as e:
        key = e.field[len(prefix):] if e.field and e.field.startswith(prefix) else e.field
        if key in given:  # the flag's value, not the file's
            raise CheemsInputError(e.message, field=flags.get(key, flag_name(key)), remedy=e.remedy) from None
        raise
    return settings
