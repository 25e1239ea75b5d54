"""Plain command-line values converted without pydantic.

Typer (from its 0.2x releases) converts every flag's value with a pydantic ``TypeAdapter``:
the first command of a process pays for importing pydantic (about 0.1 s on a laptop core) and
for building one adapter per flag (a few ms each), which is a tenth of ``cheems rank`` on 30k
prompts. :func:`install` puts :class:`PlainParam` in front of Typer's converter for the
values cheems' flags take: a word for ``str``, True or False for ``bool``, a path for ``Path``, a plain decimal integer
for ``int``, a plain decimal number for ``float``, each optional or a list of them, with no
range, parser or choices. It gives what Typer's converter gives for those (the path checks
are Typer's own :func:`typer._param_types.coerce_cli_path`); any other value (a bad number,
``1_000``, bytes, an empty path) or annotation goes to Typer's converter, whose error message
is then the one the user sees. On a Typer without that converter (before pydantic came in)
nothing is installed and nothing is needed.

An integer flag takes no value past 64 bits (:data:`LARGEST_INTEGER`), whoever converts it: no
seed, count or size of cheems goes further (numpy, torch and SQLite hold 64-bit integers), so
``--seed 2**70`` or ``--epochs 2**70`` is a bad value of the flag, not a traceback or a run that
never ends.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Optional, Union, get_args, get_origin

__all__ = ["LARGEST_INTEGER", "PlainParam", "install", "plain_leaf"]

LARGEST_INTEGER = 2**63 - 1
"""The largest integer a flag takes (int64): past it no seed, count or size means anything."""

_INT = re.compile(r"[+-]?(?:0|[1-9][0-9]{0,17})")
_FLOAT = re.compile(r"[+-]?[0-9]{1,15}(?:\.[0-9]{1,15})?(?:[eE][+-]?[0-9]{1,2})?")
_SLOW = object()  # a value this module leaves to Typer's converter


def _word(value: Any, info: Any, param: Any, ctx: Any) -> Any:
    return value if type(value) is str else _SLOW


def _flag(value: Any, info: Any, param: Any, ctx: Any) -> Any:
    return value if type(value) is bool else _SLOW


def _integer(value: Any, info: Any, param: Any, ctx: Any) -> Any:
    return int(value) if type(value) is str and _INT.fullmatch(value) else _SLOW


def _slow_only(value: Any, info: Any, param: Any, ctx: Any) -> Any:
    return _SLOW


def _in_64_bits(value: Any) -> Any:
    """``value`` (one converted value or a list of them); an integer past 64 bits is a bad value."""
    import typer

    for v in value if isinstance(value, (list, tuple)) else (value,):
        if type(v) is int and abs(v) > LARGEST_INTEGER:
            raise typer.BadParameter(f"must be at most 2**63 - 1 ({LARGEST_INTEGER}) in size, got {v}")
    return value


def _number(value: Any, info: Any, param: Any, ctx: Any) -> Any:
    return float(value) if type(value) is str and _FLOAT.fullmatch(value) else _SLOW


def _path(value: Any, info: Any, param: Any, ctx: Any) -> Any:
    from typer._param_types import coerce_cli_path

    if type(value) is not str or not value or "\0" in value:
        return _SLOW
    return coerce_cli_path(Path(value), info, path_type=Path, param=param, ctx=ctx)


def plain_leaf(annotation: Any, info: Any):
    """The converter of one value of ``annotation`` with the flag's ``info`` (Typer's
    ``ParameterInfo``), or None where the annotation or the flag asks for more than
    :mod:`cheems.cli.coercion` does (a range, a parser, choices, a path type)."""
    if getattr(info, "parser", None) is not None or getattr(info, "click_type", None) is not None:
        return None
    if annotation is str:
        return _word
    if annotation is bool:
        return _flag
    if annotation in (int, float):
        if any(getattr(info, k, None) is not None for k in ("min", "max")) or getattr(info, "clamp", False):
            return None
        return _integer if annotation is int else _number
    if annotation is Path and getattr(info, "path_type", None) is None:
        return _path
    return None


def _unwrapped(annotation: Any) -> tuple[Any, bool]:
    """``(X, many)`` for ``X``, ``Optional[X]``, ``list[X]`` or ``Optional[list[X]]``."""
    if get_origin(annotation) is Union:
        args = [a for a in get_args(annotation) if a is not type(None)]
        if len(args) != 1:
            return None, False
        annotation = args[0]
    if get_origin(annotation) is list:
        args = get_args(annotation)
        return (args[0], True) if len(args) == 1 else (None, False)
    return annotation, False


def _make_plain_param(runtime_param: type, build_slow):
    from dataclasses import dataclass

    @dataclass(frozen=True)
    class PlainParam(runtime_param):
        """Typer's runtime conversion of one flag, plain values converted here, the others by
        the converter Typer would have built (made on first need)."""

        descriptor: Any = None
        leaf: Any = None
        many: bool = False

        def _coerce_value(self, value: Any, param: Any, ctx: Any) -> Any:
            info = self.parameter_info
            if self.many:
                if isinstance(value, (list, tuple)):
                    out = [self.leaf(v, info, param, ctx) for v in value]
                    if _SLOW not in out:
                        return out
                return _in_64_bits(self._slow()._coerce_value(value, param=param, ctx=ctx))
            out = self.leaf(value, info, param, ctx)
            return _in_64_bits(self._slow()._coerce_value(value, param=param, ctx=ctx)) if out is _SLOW else out

        def _slow(self) -> Any:
            slow = self.__dict__.get("_slow_param")
            if slow is None:
                slow = build_slow(self.descriptor)
                object.__setattr__(self, "_slow_param", slow)
            return slow

    return PlainParam


PlainParam: Optional[type] = None
"""The class :func:`install` made (None before, or where Typer has no converter to stand in for)."""

typer_converter: Any = None
"""Typer's own ``build_runtime_param``, which :func:`install` stands in front of (None before)."""


def install() -> bool:
    """Put :class:`PlainParam` in front of Typer's converter, once per process; False (and
    nothing changed) on a Typer that converts values otherwise."""
    global PlainParam, typer_converter
    if PlainParam is not None:
        return True
    try:
        import typer._param_types as param_types
        import typer.core as core
        from typer._coercion import RuntimeParam
    except ImportError:
        return False
    build_slow = getattr(core, "build_runtime_param", None)
    if build_slow is None or not hasattr(RuntimeParam, "_coerce_value") or not hasattr(param_types, "coerce_cli_path"):
        return False
    plain = _make_plain_param(RuntimeParam, build_slow)

    def build_runtime_param(descriptor: Any) -> Any:
        if getattr(descriptor, "file_annotation", None) is None:
            leaf_type, many = _unwrapped(descriptor.annotation)
            leaf = plain_leaf(leaf_type, descriptor.parameter_info) if leaf_type is not None else None
            if leaf is None and leaf_type is int and getattr(descriptor.parameter_info, "parser", None) is None:
                leaf = _slow_only  # Typer's converter (a range), then the 64-bit bound
            if leaf is not None:
                return plain(parameter_info=descriptor.parameter_info, annotation=descriptor.annotation,
                             descriptor=descriptor, leaf=leaf, many=many)
        return build_slow(descriptor)

    core.build_runtime_param = build_runtime_param
    PlainParam, typer_converter = plain, build_slow
    return True
