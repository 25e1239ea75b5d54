"""Whole files read into prompts (:func:`read_prompts`, :func:`read_many`), and SCORES files
(:func:`read_scores`, checked row by row).

Each row goes through :func:`~cheems.formats.detect.parse_row_as`; every error is a
:class:`~cheems.records.CheemsInputError` naming file, line and field.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Iterable

from cheems.formats.detect import check_format, parse_row_as
from cheems.formats.join import join_scored_rows
from cheems.formats.result import ReadResult
from cheems.formats.scored import RANKED_BY
from cheems.formats.rows import iter_rows
from cheems.io import gc_paused
from cheems.records import CheemsInputError, Prompt, is_number

__all__ = ["ReadResult", "Scores", "read_many", "read_prompts", "read_scores"]


def read_prompts(path: str | os.PathLike, *, skip_invalid: bool = False, require_rank: bool = False,
                 default_subset: str | None = None, fmt: str | None = None) -> ReadResult:
    """Read every row of a file into prompts.

    Without ``skip_invalid`` the first bad row raises CheemsInputError (file, line, field);
    with it, bad rows are skipped and returned in ``errors``. A file-level problem (missing
    file, broken JSON list) always raises. ``default_subset`` fills rows that have no subset.
    Each row's format is detected unless ``fmt`` names one of
    :data:`~cheems.formats.registry.FORMAT_NAMES` for all. Scored rows of one prompt are joined
    (:func:`~cheems.formats.join.join_scored_rows`).
    """
    res = _read_rows(path, skip_invalid=skip_invalid, require_rank=require_rank, default_subset=default_subset,
                     fmt=fmt)
    join_scored_rows(res)
    return res


def _read_rows(path: str | os.PathLike, *, skip_invalid: bool = False, require_rank: bool = False,
               default_subset: str | None = None, fmt: str | None = None) -> ReadResult:
    """:func:`read_prompts` without the joining of scored rows."""
    if fmt is not None:
        check_format(fmt)
    name = str(path)
    prompts: list[Prompt] = []
    errors: list[CheemsInputError] = []
    lines: list[int] = []
    formats: list[str] = []
    with gc_paused():
        for lineno, obj in iter_rows(path, errors if skip_invalid else None):
            try:
                p, as_format = parse_row_as(obj, fmt)
                if require_rank and p.rank is None and RANKED_BY not in p.extra:  # scored rows: ranked once joined
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
            formats.append(as_format)
    errors.sort(key=lambda e: e.line or 0)
    return ReadResult(prompts, errors, lines, [name] * len(prompts), formats)


def read_many(paths: Iterable[str | os.PathLike], *, fmt: str | None = None, **kw: Any) -> ReadResult:
    """Read several files (``fmt`` and ``kw`` as for :func:`read_prompts`); each file's stem
    is the default subset of its rows."""
    out = ReadResult([], [], [])
    for p in paths:
        r = _read_rows(p, default_subset=Path(p).stem, fmt=fmt, **kw)
        out.prompts.extend(r.prompts)
        out.errors.extend(r.errors)
        out.lines.extend(r.lines)
        out.files.extend([str(p)] * len(r.prompts))
        out.formats.extend(r.formats)
    join_scored_rows(out)  # once, over every file: a prompt's rows may lie in several (one file per model)
    return out


class Scores(dict):
    """The scores of a SCORES file, ``{(prompt_id, response_id): score}``, and ``repeated``: how
    many rows gave a pair the score an earlier row had already given it (counted once)."""

    repeated: int = 0


def read_scores(path: str | os.PathLike) -> Scores:
    """Read a SCORES file: rows ``{prompt_id, response_id, score}`` -> {(pid, rid): score}.

    Every row is checked: a score must be a finite number (NaN, infinity, text or a bool is an
    error naming the line and field ``score``); two rows for one (prompt id, response id) with
    different scores are an error naming both lines; the same score twice counts once
    (``Scores.repeated``). Ids are read as strings (``7`` and ``"7"`` are one id)."""
    name = str(path)
    scores = Scores()
    first_line: dict[tuple[str, str], int] = {}
    for lineno, obj in iter_rows(path):
        if not isinstance(obj, dict):
            raise CheemsInputError("row must be a JSON object", file=name, line=lineno)
        for k in ("prompt_id", "response_id", "score"):
            if k not in obj:
                raise CheemsInputError(f"missing '{k}'", file=name, line=lineno, field=k)
        s = obj["score"]
        if not is_number(s):
            why = " (NaN and infinity are not scores)" if isinstance(s, float) else ""
            raise CheemsInputError(f"score must be a number, got {s!r}{why}", file=name, line=lineno,
                                   field="score")
        key = (str(obj["prompt_id"]), str(obj["response_id"]))
        earlier = scores.get(key)
        if earlier is None:
            scores[key] = float(s)
            first_line[key] = lineno
        elif earlier == s:
            scores.repeated += 1
        else:
            raise CheemsInputError(f"prompt {key[0]!r} response {key[1]!r} has two different scores: {earlier!r} "
                                   f"at line {first_line[key]} and {float(s)!r} at line {lineno}", file=name,
                                   line=lineno, field="score")
    return scores
