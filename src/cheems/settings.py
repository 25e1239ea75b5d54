"""Declaring and checking settings: one way for every config of cheems.

A config is a dataclass whose fields are declared with :func:`setting`: the default, a help
text (what ``--help`` prints, with the default appended by :func:`flag_help`) and the allowed
range. :func:`check_settings` checks an instance against its declarations, whoever built it
(a YAML file, command-line flags, Python code), and raises one
:class:`~cheems.records.CheemsInputError` naming the field. :func:`settings_from_mapping`
builds an instance from a mapping (a YAML section), refusing unknown keys and coercing what
YAML leaves as text: PyYAML reads ``1e-3`` as the string ``"1e-3"``, and a float setting
given that string gets the number.

Types come from the field annotations: ``int``, ``float``, ``bool``, ``str``, a path
(``str | os.PathLike``), an integer or a word (``int | str``, the words listed in ``words``:
``token_budget`` takes a number or ``auto``), ``list[str]``, ``list[str | os.PathLike]``, ``tuple[str, ...]``, a list of another settings
dataclass, each optionally ``| None``. Ranges: ``min`` / ``max`` (inclusive), ``gt``
(exclusive lower bound), ``lt`` (exclusive upper bound), ``choices``, ``nonempty``.

Core module: the standard library only. ``is_integer`` / ``is_number`` are defined in
:mod:`cheems.records` (whose checks need them) and offered here beside the other checks.
"""

from __future__ import annotations

import dataclasses
import os
import re
import types
import typing
from collections.abc import Iterable, Mapping
from typing import Any

from cheems.records import CheemsInputError, is_integer, is_number

__all__ = ["as_settings", "check_settings", "flag_help", "is_integer", "is_number", "setting", "setting_kind",
           "settings_from_mapping"]

_NO_DEFAULT = dataclasses.MISSING

LARGEST_INTEGER = 2**63 - 1
"""The largest integer a setting takes (int64: what numpy, torch and SQLite hold); past it no
seed, count or size means anything, and a count that large would never finish."""


def setting(default: Any = _NO_DEFAULT, *, help: str, default_factory: Any = _NO_DEFAULT,
            min: float | None = None, max: float | None = None, gt: float | None = None,
            lt: float | None = None, choices: tuple | None = None, choice_name: str = "value",
            pattern: str | None = None, pattern_text: str | None = None,
            nonempty: bool = False, default_text: str | None = None, kw_only: Any = _NO_DEFAULT,
            repr: bool = True, words: tuple[str, ...] = ()) -> Any:
    """A dataclass field with its help text and allowed range (see the module docstring).

    ``default_text`` replaces the default in help texts where the default needs words
    (``token_budget`` None means "micro batch size alone"); ``choice_name`` names what the
    choices are in the error message ("unknown rule(s) 'x'; known: ..."). ``pattern`` is a
    regular expression a text must match whole, ``pattern_text`` says it in words for the
    error message ("cpu, cuda or cuda:N"). ``words`` are the texts an ``int | str`` setting takes
    besides integers ("auto")."""
    meta = {"words": words, "help": help, "min": min, "max": max, "gt": gt, "lt": lt, "choices": choices,
            "choice_name": choice_name, "nonempty": nonempty, "default_text": default_text,
            "pattern": pattern, "pattern_text": pattern_text}
    kw: dict[str, Any] = {"metadata": meta, "repr": repr}
    if default is not _NO_DEFAULT:
        kw["default"] = default
    if default_factory is not _NO_DEFAULT:
        kw["default_factory"] = default_factory
    if kw_only is not _NO_DEFAULT:
        kw["kw_only"] = kw_only
    return dataclasses.field(**kw)


# ----------------------------------------------------------------------------- types

def _hints(cls) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _split_optional(tp: Any) -> tuple[Any, bool]:
    """(the type without ``None``, whether None is allowed)."""
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        optional = len(args) < len(typing.get_args(tp))
        if len(args) == 1:
            return args[0], optional
        return tuple(args), optional
    return tp, False


def _kind(tp: Any) -> str:
    if tp is bool:
        return "bool"
    if tp is int:
        return "int"
    if tp is float:
        return "float"
    if tp is str:
        return "str"
    if isinstance(tp, tuple) and set(tp) == {int, str}:  # a number, or one of a few words
        return "int_or_word"
    if isinstance(tp, tuple) and str in tp:  # str | os.PathLike
        return "path"
    origin = typing.get_origin(tp)
    if origin in (list, tuple):
        (inner, *_) = typing.get_args(tp) or (Any,)
        if dataclasses.is_dataclass(inner):
            return "dataclasses"
        if typing.get_origin(inner) in (typing.Union, types.UnionType) and str in typing.get_args(inner):
            return "paths"
        return "strings"
    return "any"


def setting_kind(tp: Any) -> str:
    """What a setting of annotation ``tp`` holds, ``None`` aside: "bool", "int", "float", "str",
    "int_or_word", "path", "strings" (a list or tuple of texts), "paths", "dataclasses" or "any"."""
    return _kind(_split_optional(tp)[0])


def _item_class(tp: Any) -> Any:
    return typing.get_args(tp)[0]


# ----------------------------------------------------------------------------- messages

def _fmt(x: float) -> str:
    return re.sub(r"e([+-])0*(\d)", r"e\1\2", f"{x:g}") if isinstance(x, float) else str(x)


def _range_phrase(meta: dict) -> str:
    lo, gt, hi, lt = meta["min"], meta["gt"], meta["max"], meta["lt"]
    if (lo is not None or gt is not None) and (hi is not None or lt is not None):
        left = f"[{_fmt(lo)}" if lo is not None else f"({_fmt(gt)}"
        right = f"{_fmt(hi)}]" if hi is not None else f"{_fmt(lt)})"
        return f"in {left}, {right}"
    if gt == 0:
        return "positive"
    if gt is not None:
        return f"> {_fmt(gt)}"
    if lo == 0:
        return ">= 0"
    if lo is not None:
        return f"at least {_fmt(lo)}"
    if hi is not None:
        return f"at most {_fmt(hi)}"
    if lt is not None:
        return f"< {_fmt(lt)}"
    return ""


def _type_phrase(kind: str, meta: dict) -> str:
    noun = {"int": "an integer", "float": "a number", "bool": "true or false", "str": "a string",
            "path": "a path", "strings": "a list of strings", "paths": "a list of paths",
            "dataclasses": "a list of mappings", "int_or_word": "an integer"}[kind]
    phrase = _range_phrase(meta)
    if not phrase:
        return noun
    if phrase == "positive":
        return f"a positive {'integer' if kind == 'int' else 'number'}"
    if phrase.startswith("at "):
        return f"{noun} of {phrase}"
    return f"{noun} {phrase}"


def _in_range(v: float, meta: dict) -> bool:
    return ((meta["min"] is None or v >= meta["min"]) and (meta["gt"] is None or v > meta["gt"])
            and (meta["max"] is None or v <= meta["max"]) and (meta["lt"] is None or v < meta["lt"]))


# ----------------------------------------------------------------------------- checking

def _show(v: Any, limit: int = 80) -> str:
    """``repr(v)``, cut to ``limit`` characters: a wrong value may be a huge list."""
    text = repr(v)
    return text if len(text) <= limit else text[:limit] + "..."


def _check_value(name: str, v: Any, tp: Any, meta: dict) -> None:
    tp, optional = _split_optional(tp)
    if v is None and optional:
        return
    kind = _kind(tp)
    ok = {"bool": lambda: isinstance(v, bool),
          "int": lambda: is_integer(v),
          "int_or_word": lambda: is_integer(v) or v in meta.get("words", ()),
          "float": lambda: is_number(v),
          "str": lambda: isinstance(v, str),
          "path": lambda: isinstance(v, (str, os.PathLike)),
          "strings": lambda: isinstance(v, (list, tuple)) and all(isinstance(x, str) for x in v),
          "paths": lambda: isinstance(v, (list, tuple)) and all(isinstance(x, (str, os.PathLike)) for x in v),
          "dataclasses": lambda: isinstance(v, list) and all(isinstance(x, _item_class(tp)) for x in v),
          "any": lambda: True}[kind]()
    if not ok:
        words = " or ".join(repr(w) for w in meta.get("words", ())) if kind == "int_or_word" else ""
        raise CheemsInputError(f"must be {_type_phrase(kind, meta)}{' or ' + words if words else ''}, got {_show(v)}",
                               field=name)
    if kind in ("int", "int_or_word") and is_integer(v) and abs(v) > LARGEST_INTEGER:
        raise CheemsInputError(f"must be at most 2**63 - 1 ({LARGEST_INTEGER}) in size, got {v}", field=name)
    if kind in ("int", "float", "int_or_word") and is_number(v) and not _in_range(v, meta):
        raise CheemsInputError(f"must be {_range_phrase(meta)}, got {v!r}", field=name)
    if meta["choices"] is not None:
        values = v if kind == "strings" else [v]
        unknown = [x for x in values if x not in meta["choices"]]
        if unknown:
            raise CheemsInputError(f"unknown {meta['choice_name']}(s) {', '.join(map(repr, unknown))}; "
                                   f"known: {', '.join(map(str, meta['choices']))}", field=name)
    if meta.get("pattern") and kind == "str" and not re.fullmatch(meta["pattern"], v):
        raise CheemsInputError(f"must be {meta['pattern_text'] or meta['pattern']}, got {v!r}", field=name)
    if meta["nonempty"]:
        if kind == "strings" and (not v or not all(x for x in v)):
            raise CheemsInputError(f"must be a list of non-empty strings, got {_show(v)}", field=name)
        if kind in ("str", "path") and not str(v).strip():
            raise CheemsInputError(f"must be given, got {v!r}", field=name)


def check_settings(obj: Any) -> None:
    """Check every declared field of the dataclass instance ``obj`` (type, range, choices);
    raise CheemsInputError naming the first bad field. Fields without declarations pass."""
    hints = _hints(type(obj))
    for f in dataclasses.fields(obj):
        if "help" in f.metadata:
            _check_value(f.name, getattr(obj, f.name), hints[f.name], f.metadata)


def _coerce(v: Any, tp: Any, name: str, file: str | None) -> Any:
    """What a YAML value becomes for a field of type ``tp``."""
    tp, _ = _split_optional(tp)
    kind = _kind(tp)
    if kind == "int_or_word" and isinstance(v, str) and v.strip().lstrip("-").isdigit():
        return int(v)  # a number given as text (a flag, a quoted YAML value)
    if kind == "float" and isinstance(v, str):
        try:
            return float(v)  # PyYAML leaves 1e-3 (no dot) as text
        except ValueError:
            return v
    if kind in ("strings", "paths"):
        if isinstance(v, str) and typing.get_origin(tp) is list:
            return [v]  # one path where a list is expected
        if isinstance(v, list) and typing.get_origin(tp) is tuple:
            return tuple(v)
    if kind == "dataclasses" and isinstance(v, list):
        item = _item_class(tp)
        out = []
        for i, x in enumerate(v):
            if not isinstance(x, dict):
                raise CheemsInputError("must be a mapping of setting: value", file=file, field=f"{name}[{i}]")
            out.append(settings_from_mapping(item, x, file=file, prefix=f"{name}[{i}]."))
        return out
    return v


def settings_from_mapping(cls, data: dict, *, file: str | None = None, prefix: str = "",
                          overrides: dict | None = None):
    """An instance of the settings dataclass ``cls`` from a mapping of its field names.

    A key that is no field, a value of the wrong type or out of its range, or a required field
    that is missing, is an error naming ``prefix + key`` in ``file``; values are coerced as
    YAML needs (see the module docstring); what the instance's own checks refuse is located
    the same way. ``overrides`` (command-line flags) win over ``data`` and are left to the
    instance's own checks, since they do not come from ``file``."""
    if not isinstance(data, dict):
        raise CheemsInputError("must be a mapping of setting: value", file=file, field=prefix.rstrip(".") or None)
    fields_ = {f.name: f for f in dataclasses.fields(cls) if f.init}
    for key in data:
        if key not in fields_:
            raise CheemsInputError(f"unknown setting {key!r} (known: {', '.join(sorted(fields_))})",
                                   file=file, field=f"{prefix}{key}")
    hints = _hints(cls)
    values = {}
    for k, v in data.items():
        values[k] = _coerce(v, hints[k], f"{prefix}{k}", file)
        if "help" in fields_[k].metadata:
            try:
                _check_value(k, values[k], hints[k], fields_[k].metadata)
            except CheemsInputError as e:
                raise CheemsInputError(e.message, file=file, field=f"{prefix}{e.field}") from None
    values.update(overrides or {})
    for name, f in fields_.items():
        if name not in values and f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            raise CheemsInputError("missing", file=file, field=f"{prefix}{name}")
    try:
        return cls(**values)
    except TypeError as e:
        raise CheemsInputError(str(e), file=file, field=prefix.rstrip(".") or None) from None
    except CheemsInputError as e:
        if e.file is not None:
            raise
        raise CheemsInputError(e.message, file=file, field=f"{prefix}{e.field}" if e.field else None) from None


def as_settings(cls, value: Any, name: str, *, default: Any = None, uses: Iterable[str] | None = None):
    """The settings a call's parameter ``name`` was given, as an instance of the settings
    dataclass ``cls``: ``value`` itself when it is one, ``default`` (else the class's defaults)
    when None, and a mapping of field names laid over ``default`` (so ``{"seed": 1}`` keeps the
    call's own default of the other fields).

    A mapping's unknown key or bad value is a :class:`~cheems.records.CheemsInputError` naming
    ``name.key``; so is anything else given. ``uses`` lists the fields the call acts on: another
    field set away from its declared default would be silently ignored, and is refused."""
    if isinstance(value, cls):
        found = value
    elif value is None:
        found = default if default is not None else settings_from_mapping(cls, {}, prefix=f"{name}.")
    elif isinstance(value, Mapping):
        base = {} if default is None else {f.name: getattr(default, f.name) for f in dataclasses.fields(cls) if f.init}
        found = settings_from_mapping(cls, {**base, **value}, prefix=f"{name}.")
    else:
        raise CheemsInputError(f"must be a {cls.__name__} or a mapping of its settings, got {_show(value)}",
                               field=name)
    if uses is not None:
        uses = tuple(uses)
        for f in dataclasses.fields(cls):
            if f.init and f.name not in uses and f.default is not _NO_DEFAULT and getattr(found, f.name) != f.default:
                raise CheemsInputError(f"not used by this call (it uses {', '.join(uses)}): leave it at "
                                       f"{f.default!r}", field=f"{name}.{f.name}")
    return found


def flag_help(cls, name: str, help: str | None = None, default: Any = _NO_DEFAULT) -> str:
    """The help text of setting ``name`` of ``cls`` with its default, for a command-line flag:
    ``"Passes over the data (default 2)."``. ``help`` and ``default`` word it for one command
    (what *its* output is, its own default) in place of the field's."""
    f = next(f for f in dataclasses.fields(cls) if f.name == name)
    meta = f.metadata
    text = (help or meta["help"]).rstrip(".")
    if default is _NO_DEFAULT and meta.get("default_text"):
        return f"{text} (default: {meta['default_text']})."
    d = f.default if default is _NO_DEFAULT else default
    if d is dataclasses.MISSING or d is False or d is None:  # nothing to show
        return text + "."
    shown = ("on" if d else "off") if isinstance(d, bool) else ",".join(d) if isinstance(d, tuple) else _fmt(d)
    return f"{text} (default {shown})."
