"""The ``cheems`` command line: parse flags, call one library function, print or write."""

from __future__ import annotations

import logging
import sys

from cheems.cli import data, evaluate, models, serve  # noqa: F401  (each registers its commands on the app)
from cheems.cli.annotate import annotate_app
from cheems.cli.catalog import data_app
from cheems.cli.experiment import experiment_app
from cheems.cli.experiment_table import register as register_experiment_table
from cheems.cli.app import app
from cheems.cli.curate import analyze_app, curate_app
from cheems.cli.report import register as register_report_commands

__all__ = ["MULTI_VALUE_FLAGS", "app", "expand_multi_value_flags", "main"]

app.add_typer(data_app, name="data")
register_experiment_table(experiment_app)
app.add_typer(experiment_app, name="experiment")
app.add_typer(curate_app, name="curate")
app.add_typer(analyze_app, name="analyze")
app.add_typer(annotate_app, name="annotate")
register_report_commands(app)


class _QuietCpuFallback(logging.Filter):
    """DeepSpeed, when installed, is imported by transformers and announces at warning level
    that it fell back to the CPU; on a CPU machine that is expected, and it is not ours to say."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "Setting accelerator to CPU" not in record.getMessage()


MULTI_VALUE_FLAGS = {
    ("train",): {"--train", "--eval"},
    ("init-model",): {"--tokenizer-from"},
    ("curate", "merge"): {"--human", "--judge"},
}
"""Flags that take several paths after one flag (``--train a.jsonl b.jsonl``); their commands
have no positional arguments, so every bare word after such a flag is one more path."""


def expand_multi_value_flags(argv: list[str]) -> list[str]:
    """``--train a b`` -> ``--train a --train b`` for the flags of MULTI_VALUE_FLAGS (click
    options take one value each; a shell glob gives several)."""
    flags: set[str] = set()
    for command, names in MULTI_VALUE_FLAGS.items():
        if argv[:len(command)] == list(command):
            flags = names
    out, current = [], None
    for word in argv:
        if word in flags:
            current, values = word, 0
        elif word.startswith("-"):
            current = None
        elif current is not None:
            if values:
                out.append(current)
            values += 1
        out.append(word)
    return out


def main() -> None:
    logging.getLogger("DeepSpeed").addFilter(_QuietCpuFallback())  # the logger DeepSpeed configures later
    for stream in (sys.stdout, sys.stderr):  # a file name that is not UTF-8 prints, escaped, not as a crash
        if hasattr(stream, "reconfigure"):
            stream.reconfigure(errors="backslashreplace")
    app(args=expand_multi_value_flags(sys.argv[1:]), prog_name="cheems")

