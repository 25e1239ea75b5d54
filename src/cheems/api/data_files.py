"""The public calls over prompt-row files: read, validate, stats, make_tasks and rank.

Core module: numpy/scipy alone (no torch)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping, Sequence, Union

from cheems.benchmark import RankedBenchmark
from cheems.common_settings import ReadSettings, StatisticsSettings
from cheems.formats import ReadResult, RewordedQuestions
from cheems.records import CheemsInputError
from cheems.settings import as_settings

__all__ = ["DatasetStats", "PathOrPaths", "ROWS_READ", "TaskFile", "Validation", "as_paths", "make_tasks", "rank",
           "read", "stats", "validate"]

PathOrPaths = Union[str, os.PathLike, Sequence[Union[str, os.PathLike]]]
"""One file, or several."""


ROWS_READ = ("format", "skip_invalid")
"""The :class:`~cheems.common_settings.ReadSettings` a call that reads rows without counting
them as benchmark items uses (``dedupe`` is evaluation's)."""


def as_paths(paths: PathOrPaths) -> list:
    """``paths`` as a list of paths: one path becomes a list of one."""
    return [paths] if isinstance(paths, (str, os.PathLike)) else list(paths)


# ----------------------------------------------------------------------------- read / validate

def read(paths: PathOrPaths, *, read: ReadSettings | Mapping | None = None) -> ReadResult:
    """Read the prompt rows of one or more files of any supported format.

    Each row's format is detected on its own (JSONL, JSON, Parquet, TSV; cheems rows, pairs,
    rankings, scored rows, ... see :data:`cheems.formats.FORMAT_NAMES`) and read into one
    :class:`~cheems.records.Prompt`. Each file's stem is the subset of its rows without one.

    Args:
        paths: One file, or several.
        read: How rows are read (a :class:`~cheems.common_settings.ReadSettings`, or a mapping
            of its fields): ``format`` reads every row as this format instead of detecting it
            row by row; ``skip_invalid`` skips bad rows (their errors go to ``errors``) instead
            of raising at the first.

    Returns:
        A :class:`~cheems.formats.ReadResult`: ``prompts``, ``errors`` (the rows skipped), and
        where each prompt was read (``files``, ``lines``) and as which format (``formats``).

    Raises:
        CheemsInputError: A bad ``read`` setting (``dedupe`` is evaluation's), a missing or
            unreadable file, an unknown format, or (without ``skip_invalid``) the first bad
            row, named by file, line and field.
    """
    from cheems.formats import read_many

    how = as_settings(ReadSettings, read, "read", uses=ROWS_READ)
    return read_many(as_paths(paths), fmt=how.format, skip_invalid=how.skip_invalid)


@dataclass
class Validation:
    """What :func:`validate` found in one file: its valid rows, the bad ones, and the notes on
    how evaluation and training would take the valid rows."""

    read: ReadResult  # the valid prompts; ``read.errors`` are the bad rows, ``read.formats`` each row's format
    responses: int = 0
    ranked: int = 0  # rows with a rank (what evaluation takes)
    compared: int = 0  # rows with comparisons
    exact_repeats: int = 0  # rows that repeat an earlier row exactly (evaluated as items of their own, id#n)
    differing_repeats: int = 0  # rows under an earlier row's id with other content or keys
    identical: int = 0  # rows holding two responses of identical text (training skips their pair)
    unranked: int = 0  # rows without a rank (evaluation refuses them)
    unjudged: int = 0  # rows with neither a rank nor comparisons (training gets no pair from them)

    @property
    def errors(self) -> list[CheemsInputError]:
        """The bad rows, one error each (file, line, field)."""
        return self.read.errors


def validate(path: str | os.PathLike, *, read: ReadSettings | Mapping | None = None) -> Validation:
    """Check a file row by row: what evaluation and training would refuse, and what they would note.

    Args:
        path: The file (any supported format).
        read: How rows are read (a :class:`~cheems.common_settings.ReadSettings`, or a mapping
            of its fields): ``format`` reads every row as this format instead of detecting it
            row by row. Bad rows are always reported, whatever ``skip_invalid`` says.

    Returns:
        A :class:`Validation`: the valid rows, the errors of the bad ones, and the counts of
        ranked, compared, repeated, identical-response, unranked and unjudged rows.

    Raises:
        CheemsInputError: A bad ``read`` setting, or a file that cannot be read at all
            (missing, not a JSON list, an unknown format); bad rows are reported in the
            result, not raised.
    """
    from cheems.formats import key_repeated_rows, read_prompts
    from cheems.records import identical_responses

    fmt = as_settings(ReadSettings, read, "read", uses=ROWS_READ).format
    res = read_prompts(path, skip_invalid=True, fmt=fmt)
    found = Validation(res, responses=sum(len(p.responses) for p in res.prompts),
                       ranked=sum(p.rank is not None for p in res.prompts),
                       compared=sum(bool(p.comparisons) for p in res.prompts),
                       identical=sum(identical_responses(p) > 0 for p in res.prompts),
                       unranked=sum(p.rank is None for p in res.prompts),
                       unjudged=sum(p.rank is None and not p.comparisons for p in res.prompts))
    repeated = key_repeated_rows(res)  # last: it keys the repeated rows id#n
    found.exact_repeats, found.differing_repeats = repeated.exact, repeated.differing
    return found


# ----------------------------------------------------------------------------- stats

@dataclass
class DatasetStats:
    """The paper's Table 1 statistics of each file (in the order given) and of all together."""

    files: list[dict]  # per file: prompts, responses_per_prompt, comparisons, prompt/chosen/rejected chars
    total: dict | None = None  # over all files, when there are several
    errors: list[list[CheemsInputError]] = field(default_factory=list)  # per file, the rows skipped
    reworded: RewordedQuestions = field(default_factory=RewordedQuestions)  # scored rows joined across wordings


def stats(paths: PathOrPaths, *, read: ReadSettings | Mapping | None = None) -> DatasetStats:
    """Count prompts, responses per prompt, comparisons (ties excluded) and average lengths.

    JSONL and JSON-list files are summed straight from their columns, others read whole; both
    count as :func:`cheems.metrics.dataset_stats` does.

    Args:
        paths: One file, or several (each gets its own statistics, and a total).
        read: How rows are read (a :class:`~cheems.common_settings.ReadSettings`, or a mapping
            of its fields): ``skip_invalid`` skips bad rows (their errors go to ``errors``)
            instead of raising at the first; ``format`` reads every row as this format instead
            of detecting it row by row.

    Returns:
        A :class:`DatasetStats`: per file and in total, the keys ``prompts``,
        ``responses_per_prompt``, ``comparisons``, ``prompt_chars``, ``chosen_chars``, ``rejected_chars``.

    Raises:
        CheemsInputError: A bad ``read`` setting (``dedupe`` is evaluation's), a file that
            cannot be read, or (without ``skip_invalid``) its first bad row.

    Paper: Table 1 (statistics of CheemsBench and CheemsPreference).
    """
    from cheems.formats.columnar_sums import columnar_stats

    how = as_settings(ReadSettings, read, "read", uses=ROWS_READ)
    paths, skip_invalid, fmt = as_paths(paths), how.skip_invalid, how.format
    skipped: list[list] = [[] for _ in paths]
    reworded = RewordedQuestions()
    sums = [columnar_stats(p, errors if skip_invalid else None, reworded)
            for p, errors in zip(paths, skipped)] if fmt is None else [None]
    if None in sums:  # a file the columnar path leaves to the general readers: all read by them
        return _read_stats(paths, skip_invalid, fmt)
    total = sum(sums[1:], sums[0]).stats() if len(paths) > 1 else None
    return DatasetStats([s.stats() for s in sums], total, skipped, reworded)


def _read_stats(paths: list, skip_invalid: bool, fmt: str | None) -> DatasetStats:
    """:func:`stats` from the prompts the general readers read."""
    from cheems.formats import read_prompts
    from cheems.metrics import dataset_stats

    found, everything = DatasetStats([]), []
    for path in paths:
        res = read_prompts(path, skip_invalid=skip_invalid, fmt=fmt)
        found.errors.append(res.errors)
        found.reworded.add(res.reworded)
        everything.extend(res.prompts)
        found.files.append(dataset_stats(res.prompts))
    if len(paths) > 1:
        found.total = dataset_stats(everything)
    return found


# ----------------------------------------------------------------------------- tasks / rank

@dataclass
class TaskFile:
    """What :func:`make_tasks` wrote: the task rows, each prompt's pair coverage, the rows skipped."""

    output: Path
    tasks: int
    prompts: int
    coverage: list[float]  # per prompt, the share of its response pairs some task covers
    errors: list[CheemsInputError] = field(default_factory=list)


def make_tasks(path: str | os.PathLike, output: str | os.PathLike, *, design: str = "circular",
               statistics: StatisticsSettings | Mapping | None = None,
               read: ReadSettings | Mapping | None = None) -> TaskFile:
    """Write the triple-wise annotation tasks of every prompt of a file (JSONL, one task a row).

    Args:
        path: Prompts with responses (any supported format).
        output: The task file to write; it must not be the input.
        design: ``circular``: the paper's triples of circularly adjacent responses; ``cover``:
            more triples until every pair of responses is covered.
        statistics: The randomness (a :class:`~cheems.common_settings.StatisticsSettings`, or
            a mapping of its fields): ``seed`` shuffles each prompt's responses first (default
            None: keep the file's order).
        read: How rows are read (a :class:`~cheems.common_settings.ReadSettings`, or a mapping
            of its fields): ``skip_invalid`` skips bad rows instead of raising at the first;
            ``format`` reads every row as this format instead of detecting it row by row.

    Returns:
        A :class:`TaskFile`: how many tasks for how many prompts, each prompt's pair coverage,
        the rows skipped.

    Raises:
        CheemsInputError: An unknown design, a bad ``statistics`` or ``read`` setting, an output
            that is an input, a file that cannot be read, or (without ``skip_invalid``) its
            first bad row.

    Paper: §3.2 (Benchmark Labeling: triple-wise comparisons of adjacent responses).
    """
    from cheems.formats import read_prompts
    from cheems.graph import annotation_tasks
    from cheems.io import check_outputs, write_jsonl

    if design not in ("circular", "cover"):
        raise CheemsInputError(f"unknown design {design!r}; choose circular or cover", field="design")
    seed = as_settings(StatisticsSettings, statistics, "statistics", default=StatisticsSettings(seed=None),
                       uses=("seed",)).seed
    how = as_settings(ReadSettings, read, "read", uses=ROWS_READ)
    check_outputs([output], [path])
    res = read_prompts(path, skip_invalid=how.skip_invalid, fmt=how.format)
    rows, coverage = annotation_tasks(res.prompts, design, seed=seed)
    write_jsonl(output, rows)
    return TaskFile(Path(output), len(rows), len(res.prompts), coverage, res.errors)


def rank(annotations: PathOrPaths, output: str | os.PathLike, *, report: str | os.PathLike | None = None,
         keep_comparisons: bool = False, read: ReadSettings | Mapping | None = None) -> RankedBenchmark:
    """Resolve annotation conflicts into a partial ranking of every prompt's responses, written as a benchmark.

    The comparisons of each prompt (pairs, or triple-wise rankings; rows of one prompt joined)
    form a preference graph; its cycles are merged and the layers of what is left give the rank
    (:func:`cheems.graph.resolve_conflicts`). O(rows + comparisons x longest chain).

    Args:
        annotations: Annotation files: rows with comparisons and/or rankings.
        output: The benchmark to write (JSONL rows with ``rank``); it must not be an input.
        report: Also write the conflict report (per subset and in total) as JSON here; both
            files are written, or neither.
        keep_comparisons: Keep the input comparisons in the output rows.
        read: How rows are read (a :class:`~cheems.common_settings.ReadSettings`, or a mapping
            of its fields): ``skip_invalid`` skips bad rows (and prompts without any comparison)
            instead of raising; ``format`` reads every row as this format instead of detecting
            it row by row.

    Returns:
        A :class:`~cheems.benchmark.RankedBenchmark`: the ranked ``prompts`` (empty, and nothing
        written, when no row could be ranked), the conflict ``report``, the ``errors`` of the rows skipped.

    Raises:
        CheemsInputError: A bad ``read`` setting (``dedupe`` is evaluation's), an output that is
            an input, a file that cannot be read, or (without ``skip_invalid``) its first bad
            row or a prompt without comparisons.

    Paper: §3.2 Conflict Resolving, Algorithm 1 and Appendix C (Table 5: conflict ratios).
    """
    from cheems.benchmark import rank_annotations

    how = as_settings(ReadSettings, read, "read", uses=ROWS_READ)
    return rank_annotations(as_paths(annotations), output, report=report, keep_comparisons=keep_comparisons,
                            skip_invalid=how.skip_invalid, fmt=how.format)
