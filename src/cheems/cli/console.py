"""What the commands share for talking to the user: the two consoles, one-line errors and
exit codes, the skipped-rows and reworded-questions notes, number formatting, progress bars,
and the judge back-end choice of `eval --judge` and `curate judge`."""

from __future__ import annotations

import contextlib
import functools
from typing import Optional

import typer
from rich.console import Console

from cheems.records import CheemsInputError, Notice

__all__ = ["EXIT_BAD_INPUT", "data_paths", "err", "fmt", "judge_backend_for", "out", "print_reworded", "print_skipped",
           "progress", "refuse_no_rows", "reports_input_errors", "say"]

# markup and emoji codes off: file names and messages may contain [brackets] and ":100:"
# (a line number) that rich would turn into markup or an emoji; colour goes through style=
out = Console(highlight=False, markup=False, emoji=False)
if not out.is_terminal:  # pipes and CI logs: wide enough that tables keep one line per row
    out = Console(highlight=False, markup=False, emoji=False, width=120)
err = Console(stderr=True, highlight=False, markup=False, emoji=False, width=None if out.is_terminal else 120)

EXIT_BAD_INPUT = 2


def reports_input_errors(fn):
    """Turn CheemsInputError into one readable line on stderr and exit code 2, naming the
    settings it mentions by this command's flags (:func:`cli_name`)."""
    command = f"{fn.__module__}.{fn.__qualname__}"

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except CheemsInputError as e:
            err.print("error:", style="bold red", end=" ")
            err.print(e.render(functools.partial(cli_name, command=command)), soft_wrap=True)
            raise typer.Exit(EXIT_BAD_INPUT) from None

    return wrapper


def cli_name(setting: str, command: str | None = None) -> str:
    """The flag that sets ``setting`` (a settings field) where a library error or note names it:
    the flag ``command`` (a command function's module and name, as in ``FLAGS_OF``) gives it,
    else the flag any command gives it, else ``--`` and the name with dashes."""
    from cheems.cli.flags import FLAGS_OF, NO_VALUE, flag_name

    for specs in ([FLAGS_OF.get(command, [])] if command else []) + list(FLAGS_OF.values()):
        for spec in specs:
            if spec.field == setting and spec.alias_value is NO_VALUE:  # never a hidden old spelling
                return spec.flag
    return flag_name(setting)


def say(line: str, style: str | None = None) -> None:
    """Print a library note (``notify``) on stderr, its settings named by their flags."""
    err.print(line.render(cli_name) if isinstance(line, Notice) else line, style=style, soft_wrap=True)


def print_skipped(errors: list[CheemsInputError], limit: int = 10) -> None:
    if not errors:
        return
    errors = sorted(errors, key=lambda e: (e.file or "", e.line or 0))
    err.print(f"skipped {len(errors)} invalid row(s):", style="yellow")
    for e in errors[:limit]:
        err.print(f"  {e}", soft_wrap=True)
    if len(errors) > limit:
        err.print(f"  ... and {len(errors) - limit} more (run `cheems validate` for all)")


def print_reworded(reworded) -> None:
    """The note on the questions whose scored rows word them differently, joined under their
    question id (a :class:`~cheems.formats.RewordedQuestions`; nothing when there are none)."""
    if reworded:
        err.print(f"note: {reworded.note()}", soft_wrap=True)


def fmt(x: Optional[float], digits: int = 4) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


@contextlib.contextmanager
def progress(what: str):
    """A progress bar with ETA on stderr; yields the progress(done, total) callback. Drawn on a
    terminal only: to a file or a pipe it writes nothing (not even the bar's closing newline,
    which would stand before an error line)."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    with Progress(TextColumn(what), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(),
                  console=err, transient=True, disable=not err.is_terminal) as bar:
        task = bar.add_task(what, total=None)

        def update(done: int, total: int) -> None:
            bar.update(task, completed=done, total=total)

        yield update


def data_paths(paths):
    """The files ``paths`` stand for: each existing file as it is; a catalogue name or an
    ``hf:ID[:config][@split]`` converted once into the cache (a bar while it downloads and
    converts), so a command reads datasets by name as it reads files. ``None`` stays ``None``.
    An existing file that holds no rows is refused (:func:`refuse_no_rows`)."""
    from pathlib import Path

    if paths is None:
        return None
    if isinstance(paths, (str, Path)):
        return data_paths([paths])[0]
    resolved = []
    for p in paths:
        if p is None or Path(p).exists():
            refuse_no_rows(p)
            resolved.append(p)
            continue
        from cheems.catalog.get import parse_spec, resolve_data

        if parse_spec(str(p)) is None:  # a missing file: the command says so when it reads it
            resolved.append(p)
            continue
        with progress(f"reading {p}") as bar:
            resolved.append(resolve_data(p, progress=bar, notify=say))
    return resolved


def refuse_no_rows(path) -> None:
    """An input file of 0 bytes or of blank lines only holds no rows: almost surely the wrong file
    (or a stage that kept nothing), and a command would write an output of nothing from it. One
    CheemsInputError naming it; reads up to the first byte that is not white space."""
    import os
    import stat

    try:
        if path is None or not stat.S_ISREG(os.stat(path).st_mode):
            return  # a folder, a pipe: the readers say what is wrong with it
        with open(path, "rb") as f:
            size = 0
            while chunk := f.read(1 << 16):
                size += len(chunk)
                if chunk.strip():
                    return
    except OSError:
        return  # the reader says why it cannot be read
    what = "is empty (0 bytes)" if size == 0 else "holds blank lines only"
    raise CheemsInputError(f"{what}: no rows to read", file=str(path))


def judge_backend_for(backend: str, judge: str, api_base: Optional[str], trust_remote_code: bool):
    """(api_base, generate) for a judge: an endpoint at ``api_base``, or a local vLLM model
    whose ``generate`` answers every conversation offline."""
    if backend == "vllm":
        from cheems.scoring.vllm_backend import load_vllm_chat

        return "offline:vllm", load_vllm_chat(judge, trust_remote_code=trust_remote_code).generate
    if backend != "api":
        raise CheemsInputError(f"unknown judge backend {backend!r} (api or vllm)", field="--judge-backend")
    if not api_base:
        raise CheemsInputError("--judge needs --api-base URL (an OpenAI-compatible endpoint)")
    return api_base, None
