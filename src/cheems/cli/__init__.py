"""The ``cheems`` command line: parse flags, call one library function, print or write.

:data:`app` imports each command's module when the command is first looked up
(:mod:`cheems.cli.app`), so a command starts without the others' dependencies."""

from __future__ import annotations

import logging
import sys

from cheems.cli.app import app

__all__ = ["MULTI_VALUE_FLAGS", "app", "expand_multi_value_flags", "main"]


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

