"""Whole files read into prompts (:func:`read_prompts`, :func:`read_many`), and SCORES files.

Each row goes through :func:`~cheems.formats.detect.parse_row`; every error is a
:class:`~cheems.records.CheemsInputError` naming file, line and field.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

from cheems.formats.detect import check_format, parse_row
from cheems.formats.rows import iter_rows
from cheems.io import gc_paused
from cheems.records import CheemsInputError, Prompt
from cheems.settings import is_integer

__all__ = ["ReadResult", "read_many", "read_prompts", "read_scores"]


@dataclass
class ReadResult:
    prompts: list[Prompt]
    errors: list[CheemsInputError] = field(default_factory=list)  # rows skipped
    lines: list[int] = field(default_factory=list)  # where each prompt was read (line or item)
    files: list[str] = field(default_factory=list)  # and from which file (read_many)

    def locations(self) -> list[tuple[str, int]]:
        return list(zip(self.files, self.lines))


def read_prompts(path: str | os.PathLike, *, skip_invalid: bool = False, require_rank: bool = False,
                 default_subset: str | None = None, fmt: str | None = None) -> ReadResult:
    """Read every row of a file into prompts.

    Without ``skip_invalid`` the first bad row raises CheemsInputError (file, line, field);
    with it, bad rows are skipped and returned in ``errors``. A file-level problem (missing
    file, broken JSON list) always raises. ``default_subset`` fills rows that have no subset.
    Each row's format is detected unless ``fmt`` names one of
    :data:`~cheems.formats.registry.FORMAT_NAMES` for all.
    """
    if fmt is not None:
        check_format(fmt)
    name = str(path)
    prompts: list[Prompt] = []
    errors: list[CheemsInputError] = []
    lines: list[int] = []
    with gc_paused():
        for lineno, obj in iter_rows(path, errors if skip_invalid else None):
            try:
                p = parse_row(obj, fmt)
                if require_rank and p.rank is None:
                    raise CheemsInputError("no 'rank' (run `cheems rank` on annotations first)", field="rank")
            except CheemsInputError as e:
                err = e.located(file=name, line=lineno)
                if not skip_invalid:
                    raise err from None
                errors.append(err)
                continue
            if p.subset is None:
                p.subset = default_subset
            prompts.append(p)
            lines.append(lineno)
    errors.sort(key=lambda e: e.line or 0)
    return ReadResult(prompts, errors, lines, [name] * len(prompts))


def read_many(paths: Iterable[str | os.PathLike], *, fmt: str | None = None, **kw: Any) -> ReadResult:
    """Read several files (``fmt`` and ``kw`` as for :func:`read_prompts`); each file's stem
    is the default subset of its rows."""
    out = ReadResult([], [], [])
    for p in paths:
        r = read_prompts(p, default_subset=Path(p).stem, fmt=fmt, **kw)
        out.prompts.extend(r.prompts)
        out.errors.extend(r.errors)
        out.lines.extend(r.lines)
        out.files.extend([str(p)] * len(r.prompts))
    return out


def read_scores(path: str | os.PathLike) -> dict[tuple[str, str], float]:
    """Read a SCORES file: rows ``{prompt_id, response_id, score}`` -> {(pid, rid): score}.

    A later row for the same pair replaces an earlier one (appended, resumed runs)."""
    name = str(path)
    scores: dict[tuple[str, str], float] = {}
    for lineno, obj in iter_rows(path):
        if not isinstance(obj, dict):
            raise CheemsInputError("row must be a JSON object", file=name, line=lineno)
        for k in ("prompt_id", "response_id", "score"):
            if k not in obj:
                raise CheemsInputError(f"missing '{k}'", file=name, line=lineno, field=k)
        s = obj["score"]
        if not (is_integer(s) or isinstance(s, float)) or s != s:  # not is_number: an infinite score passes
            raise CheemsInputError(f"score must be a number, got {s!r}", file=name, line=lineno,
                                   field="score")
        scores[(str(obj["prompt_id"]), str(obj["response_id"]))] = float(s)
    return scores
