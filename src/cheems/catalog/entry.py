"""One catalogue entry: a public preference dataset by name, where it lives and how its rows
become cheems rows.

An :class:`Entry` names the dataset (``hh-rlhf-cn``), its hub id and revision (pinned where known), its
configs and splits, licence, language and size, the columns its converter reads, and the
converter: a function from one hub row to zero or more :class:`~cheems.records.Prompt`.
Converters share the builders below (:func:`pair_prompt`, :func:`scored_prompt`,
:func:`need_columns`) so that ties stay ties, rankings keep their order, and a missing column
is one error naming it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Sequence

from cheems.records import CheemsInputError, Prompt, PromptText, Response, prompt_id

__all__ = ["Conversion", "Converter", "Entry", "Option", "need_columns", "pair_prompt", "ranks_from_scores",
           "scored_prompt", "text_value"]


@dataclass(frozen=True)
class Conversion:
    """What a converter is told beside the row: the entry's option value (``None`` when the
    entry has no option), the config and split being read, and the entry's name (ids and
    subsets are made from it). ``left_out`` counts what the converter leaves out on purpose."""

    name: str
    split: str
    config: str | None = None
    option: str | None = None
    left_out: dict[str, int] = field(default_factory=dict, compare=False, repr=False)

    def leave_out(self, what: str) -> None:
        """Count one thing the converter leaves out on purpose (``what``: a plural phrase such
        as "prompts with one response (nothing to rank)"); the read says how many of each."""
        self.left_out[what] = self.left_out.get(what, 0) + 1


Converter = Callable[[dict, int, Conversion], Iterable[Prompt]]
"""``convert(row, index, conversion) -> prompts``: one hub row (``index``: its position in the
split) as zero or more cheems prompts; a row it cannot read raises CheemsInputError naming
the field."""


@dataclass(frozen=True)
class Option:
    """A choice an entry's conversion depends on (PKU-SafeRLHF's axis, HelpSteer2's
    attribute): chosen with ``cheems data get --option`` or ``NAME+VALUE``."""

    name: str
    choices: tuple[str, ...]
    default: str
    help: str


@dataclass(frozen=True)
class Entry:
    """A named public preference dataset and its conversion to cheems rows.

    ``configs`` are the hub config names (``load_dataset(hub_id, name=...)``) or, with
    ``config_is_data_dir``, the folders of the repository (``data_dir=...``, as HH-RLHF's
    ``harmless-base``); ``config`` is the one read by default (``None``: the hub's default).
    ``data_files`` reads files directly (a TSV the hub has no builder for). ``streaming``
    entries are read as a stream (very large sets, read and filtered row by row); ``keep``
    drops hub rows before conversion (a filter on the raw row). ``loader`` is ``"hub"``
    (Hugging Face ``datasets``) or ``"lfs"`` (Git LFS files of a GitHub repository, see
    :mod:`cheems.catalog.lfs`).
    """

    name: str
    title: str  # the name papers use (the paper's Table 3 row where there is one)
    hub_id: str
    language: str  # "zh" or "en"
    licence: str
    size: str  # e.g. "~100k pairs"
    convert: Converter
    columns: tuple[str, ...]  # the hub columns the converter reads
    description: str = ""
    splits: tuple[str, ...] = ("train",)
    split: str = "train"
    configs: tuple[str, ...] = ()
    config: str | None = None
    config_is_data_dir: bool = False
    data_files: Any = None
    revision: str | None = None  # a pinned commit; None reads the latest
    streaming: bool = False
    keep: Callable[[dict], bool] | None = None
    non_commercial: bool = False
    gated: bool = False
    option: Option | None = None
    alternatives: tuple[str, ...] = ()  # other hub ids with the same schema
    loader: str = "hub"
    files: dict[str, dict] = field(default_factory=dict)  # lfs: split -> {path, sha256, size}

    @property
    def mirror_folder(self) -> str:
        """``OWNER/NAME``: the folder under ``$CHEEMS_HUB_MIRROR`` that holds a copy of the dataset."""
        return self.hub_id.removeprefix("github:")

    def file_names(self) -> dict[str, tuple[str, ...]]:
        """The repository's files each split is read from (paths inside the repository), where
        the entry names them: its ``data_files``, or its Git LFS ``files``. Empty where
        ``datasets`` finds a split's files by the repository's own layout (its card's
        ``configs:``, or files named after the split)."""
        if self.loader == "lfs":
            return {split: (spec["path"],) for split, spec in self.files.items()}
        files = self.data_files
        if files is None:
            return {}
        if not isinstance(files, dict):
            files = {self.split: files}
        return {split: (f,) if isinstance(f, str) else tuple(f) for split, f in files.items()}

    def layout(self, quote: str = "") -> str:
        """What a local copy of the dataset (``$CHEEMS_HUB_MIRROR/OWNER/NAME``, or a ``--source``
        folder) holds for the entry to read it, in one line: each file read (between ``quote``
        marks) and its splits."""
        splits_of: dict[str, list[str]] = {}
        for split, names in self.file_names().items():
            for name in names:
                splits_of.setdefault(name, []).append(split)
        if splits_of:
            return ", ".join(f"{quote}{name}{quote} ({', '.join(splits)})" for name, splits in splits_of.items())
        folders = (f"; a folder per config ({', '.join(c + '/' for c in self.configs)})"
                   if self.config_is_data_dir and self.configs else "")
        return f"the repository as it is on the hub (its README.md card and data files){folders}"


# ----------------------------------------------------------------------------- what converters share

def need_columns(row: dict, columns: Sequence[str], *, dataset: str) -> None:
    """Raise one error naming every column of ``columns`` the row lacks (a schema that is not
    the one the converter was written for)."""
    missing = [c for c in columns if c not in row]
    if missing:
        raise CheemsInputError(f"{dataset}: the data has no column(s) {', '.join(missing)} "
                               f"(columns: {', '.join(sorted(row)) or 'none'}); is it this dataset's schema?",
                               field=missing[0])


def text_value(row: dict, key: str) -> str:
    """``row[key]`` as a non-empty string, or an error naming the field."""
    value = row.get(key)
    if not isinstance(value, str):
        raise CheemsInputError(f"must be a string, got {type(value).__name__}", field=key)
    if not value.strip():
        raise CheemsInputError("is empty", field=key)
    return value


def _response(content: str, rid: str, model: str | None) -> Response:
    return Response(rid, content, model)


def pair_prompt(pid: str | None, prompt: PromptText, chosen: str, rejected: str, *, tie: bool = False,
                models: tuple[str | None, str | None] = (None, None), category: Sequence[str] = (),
                subset: str | None = None, extra: dict | None = None) -> Prompt:
    """A preference pair: ``chosen`` ranks above ``rejected`` (both rank 0 when ``tie``).
    Response ids are ``chosen``/``rejected`` (``a``/``b`` for a tie, where neither is chosen);
    ``pid`` ``None`` derives the id from the prompt and the two texts."""
    ids = ("a", "b") if tie else ("chosen", "rejected")
    responses = [_response(chosen, ids[0], models[0]), _response(rejected, ids[1], models[1])]
    rank = {ids[0]: 0, ids[1]: 0 if tie else 1}
    if pid is None:
        pid = prompt_id(prompt, [chosen, rejected])
    return Prompt(pid, prompt, responses, rank, category=list(category), subset=subset, extra=dict(extra or {}))


def ranks_from_scores(scores: Sequence[float], *, higher_is_better: bool = True) -> list[int]:
    """Dense ranks (0 = best) of ``scores``; equal scores share a rank, a tie."""
    distinct = sorted(set(scores), reverse=higher_is_better)
    level = {s: i for i, s in enumerate(distinct)}
    return [level[s] for s in scores]


def scored_prompt(pid: str | None, prompt: PromptText, contents: Sequence[str], scores: Sequence[float], *,
                  higher_is_better: bool = True, ids: Sequence[str] | None = None,
                  models: Sequence[str | None] | None = None, category: Sequence[str] = (),
                  subset: str | None = None, extra: dict | None = None) -> Prompt:
    """A ranked list from per-response scores (ratings, votes, GPT-4 ranks): equal scores are
    tied; ``higher_is_better`` False for ranks where 1 is best. Response ids default to
    ``"0"``, ``"1"``, ... in the dataset's order."""
    if len(contents) != len(scores):
        raise CheemsInputError(f"{len(contents)} responses but {len(scores)} scores", field="scores")
    ids = list(ids) if ids is not None else [str(i) for i in range(len(contents))]
    models = list(models) if models is not None else [None] * len(contents)
    responses = [_response(c, i, m) for c, i, m in zip(contents, ids, models)]
    rank = dict(zip(ids, ranks_from_scores(scores, higher_is_better=higher_is_better)))
    if pid is None:
        pid = prompt_id(prompt, contents)
    return Prompt(pid, prompt, responses, rank, category=list(category), subset=subset, extra=dict(extra or {}))
