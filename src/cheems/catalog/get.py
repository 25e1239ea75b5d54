"""A dataset by name as cheems rows: converted row by row, written once, found again by name.

A *data spec* names a dataset wherever a command takes a data file:

- ``NAME[:CONFIG][@SPLIT][+OPTION]``: a catalogue entry (``hh-rlhf:harmless-base@test``,
  ``pku-saferlhf+safer``);
- ``hf:OWNER/NAME[:CONFIG][@SPLIT]``: any hub dataset; the catalogue's converter when it knows
  the id, else every row read as one of the formats cheems detects (:mod:`cheems.formats`).

An existing file of that name always wins. :func:`resolve_data` converts a spec once into the
cheems cache (``$CHEEMS_CACHE_DIR/catalog/converted/``, the raw download staying in the
``datasets`` cache) and returns the file, so every command reads it as any other file.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

import orjson

from cheems.catalog.entry import Conversion, Entry
from cheems.catalog.hub import HUB_ID, HubRows, NoHubAccess, mirror_source, open_rows
from cheems.catalog.registry import CATALOG, entry_for_hub_id, find_entry
from cheems.records import CheemsInputError, Prompt, identical_responses, validate_prompt

__all__ = ["CONVERTER_VERSION", "SKIP_INVALID", "DataSpec", "generic_entry", "get_dataset", "iter_converted",
           "licence_notice", "parse_spec", "remember_licence_shown", "resolve_data", "resolve_data_paths",
           "source_files"]

CONVERTER_VERSION = 1
"""Bumped when a conversion changes, so converted files cached under an older one are made again."""

SKIP_INVALID = ("skip_invalid", "{} leaves such rows out and counts them")
"""The remedy the error of a row that cannot be converted names: ``skip_invalid``."""

Progress = Callable[[int, "int | None"], None]
Notify = Callable[[str], None]

_SPEC = re.compile(r"(?P<name>[^:@+]+)(?::(?P<config>[^@+]+))?(?:@(?P<split>[^+]+))?(?:\+(?P<option>.+))?")


_FILE_NAME = re.compile(r"\.(jsonl|json|parquet|tsv|csv|txt|gz|zst)$", re.IGNORECASE)


@dataclass(frozen=True)
class DataSpec:
    """A parsed data spec: the entry (a catalogue one, or a generic one for an unknown hub id)
    and the config, split and option it names (``None``: the entry's defaults)."""

    entry: Entry
    config: str | None = None
    split: str | None = None
    option: str | None = None


def generic_entry(hub_id: str) -> Entry:
    """An entry for a hub dataset the catalogue does not know: each row is read as a cheems
    format (prompt/chosen/rejected, HH transcripts, TRL messages, official Cheems rows, ...)."""
    return Entry(name=f"hf:{hub_id}", title=hub_id, hub_id=hub_id, language="?", licence="see the dataset card",
                 size="?", convert=_detected_row, columns=())


def _detected_row(row: dict, index: int, conv: Conversion) -> Iterator[Prompt]:
    from cheems.formats import parse_row

    yield parse_row(row)


def parse_spec(text: str) -> DataSpec | None:
    """The spec ``text`` names, or ``None`` when it names no dataset (then it is a file path).
    An unknown catalogue name is ``None`` too, unless it has a ``:``/``@``/``+`` part."""
    text = str(text).strip()
    if text.startswith("hf:"):
        m = _SPEC.fullmatch(text[3:])
        if not m or not HUB_ID.fullmatch(m["name"]) or m["option"]:
            raise CheemsInputError(f"not a hub spec hf:OWNER/NAME[:CONFIG][@SPLIT]: {text!r}")
        entry = entry_for_hub_id(m["name"]) or generic_entry(m["name"])
        if entry.hub_id != m["name"]:  # an alternative id with the same schema
            entry = _with_hub_id(entry, m["name"])
        return DataSpec(entry, m["config"], m["split"])
    m = _SPEC.fullmatch(text)
    if not m or _FILE_NAME.search(text):
        return None
    name = m["name"]
    if name not in CATALOG and name.lower() not in CATALOG:
        if m["config"] or m["split"] or m["option"]:
            if "/" in name or "." in name:
                return None  # a path with a colon or an @ in it
            find_entry(name)  # one line: no such dataset
        return None
    return DataSpec(find_entry(name), m["config"], m["split"], m["option"])


def _with_hub_id(entry: Entry, hub_id: str) -> Entry:
    from dataclasses import replace

    return replace(entry, hub_id=hub_id, revision=None)


def _checked(spec: DataSpec, split: str | None, config: str | None, option: str | None) -> tuple[str, str | None,
                                                                                                  str | None]:
    entry = spec.entry
    split = split or spec.split or entry.split
    config = config or spec.config or entry.config
    option = option or spec.option
    if entry.option is None and option is not None:
        raise CheemsInputError(f"{entry.name} takes no option (got {option!r})", field="option")
    if entry.option is not None:
        option = option or entry.option.default
        if option not in entry.option.choices:
            raise CheemsInputError(f"{entry.name}: {entry.option.name} must be one of "
                                   f"{', '.join(entry.option.choices)}, got {option!r}", field="option")
    if entry.loader == "lfs" and split not in entry.files:
        raise CheemsInputError(f"{entry.name} has no split {split!r}; splits: {', '.join(entry.files)}",
                               field="split")
    if entry.configs and config is not None and config not in entry.configs:
        raise CheemsInputError(f"{entry.name} has no config {config!r}; configs: {', '.join(entry.configs)}",
                               field="config")
    return split, config, option


def _raw_rows(entry: Entry, *, source: str | None, split: str, config: str | None, revision: str | None,
              skipped: list | None, progress: Progress | None, notify: Notify | None) -> HubRows:
    """The split's raw rows; a line of a release file that is not JSON goes to ``skipped`` when
    it is a list (``skip_invalid``), else is one error saying so."""
    source = source or mirror_source(entry.hub_id)
    if entry.loader == "lfs":
        from cheems.catalog.lfs import fetch_release_file

        path = fetch_release_file(entry, split, revision=revision, source=source, progress=progress, notify=notify)
        return HubRows(_release_rows(path, skipped), None, str(path))
    return open_rows(entry, source=source, split=split, config=config, revision=revision or entry.revision)


def _release_rows(path: Path, skipped: list | None) -> Iterator[tuple[int, dict]]:
    from cheems.formats.rows import iter_rows

    try:
        for line, row in iter_rows(path, errors=skipped):
            yield line - 1, row
    except CheemsInputError as e:
        if e.line is None:  # the file, not one of its rows
            raise
        raise CheemsInputError(e.message, file=e.file, line=e.line, field=e.field, remedy=SKIP_INVALID) from None


def iter_converted(spec: str | Entry | DataSpec, *, source: str | None = None, split: str | None = None,
                   config: str | None = None, option: str | None = None, revision: str | None = None,
                   limit: int | None = None, skip_invalid: bool = False, errors: list | None = None,
                   progress: Progress | None = None, notify: Notify | None = None) -> Iterator[Prompt]:
    """The cheems prompts of a dataset, row by row: the entry's ``keep`` filter, its converter,
    then :func:`~cheems.records.validate_prompt` on each prompt. A row that fails raises one
    error naming the dataset, the row (1-based) and the field, or, with ``skip_invalid``, is
    appended to ``errors`` and skipped. Stops after ``limit`` prompts."""
    spec = _as_spec(spec)
    entry = spec.entry
    split, config, option = _checked(spec, split, config, option)
    shown = licence_notice(entry, notify)
    if skip_invalid and errors is None:
        errors = []
    raw = _raw_rows(entry, source=source, split=split, config=config, revision=revision,
                    skipped=errors if skip_invalid else None,
                    progress=progress if entry.loader == "lfs" else None, notify=notify)
    conv = Conversion(entry.name, split, config, option)
    convert = entry.convert
    fresh = getattr(convert, "fresh", None)  # a converter that groups adjacent rows keeps state per read
    if fresh is not None:
        convert = fresh()
    yielded = twins = 0
    for index, row in raw.rows:
        if entry.keep is not None and not entry.keep(row):
            continue
        for prompt in _converted(convert, row, index, conv, raw.where, skip_invalid, errors):
            yield prompt
            yielded += 1
            twins += identical_responses(prompt) > 0
            if limit is not None and yielded >= limit:
                _say_left_out(conv, twins, notify)
                return
        if progress is not None and entry.loader != "lfs" and index % 256 == 0:
            progress(index + 1, raw.total)
    finish = getattr(convert, "finish", None)
    if finish is not None:
        for prompt in _converted(lambda r, i, c: finish(c), None, -1, conv, raw.where, skip_invalid, errors):
            if limit is None or yielded < limit:
                yield prompt
                yielded += 1
                twins += identical_responses(prompt) > 0
    _say_left_out(conv, twins, notify)
    if shown:
        remember_licence_shown(entry)


def _say_left_out(conv: Conversion, twins: int, notify: Notify | None) -> None:
    """One line per kind of thing the conversion left out on purpose, and one for the rows it
    kept whose responses have identical text (as `cheems validate` says of them)."""
    if notify is None:
        return
    for what, n in conv.left_out.items():
        notify(f"note: {conv.name}@{conv.split}: left out {n} {what}")
    if twins:
        notify(f"warning: {conv.name}@{conv.split}: {twins} row(s) hold two responses of identical text (chosen "
               "equals rejected): evaluation scores them as ties (by its ties rule), training skips their pair")


def _converted(convert, row, index: int, conv: Conversion, where: str, skip_invalid: bool,
               errors: list | None) -> list[Prompt]:
    try:
        prompts = list(convert(row, index, conv))
        for p in prompts:
            validate_prompt(p)
        return prompts
    except CheemsInputError as e:
        located = e.located(file=f"{where}@{conv.split}", line=index + 1 if index >= 0 else None)
        if not skip_invalid:
            raise CheemsInputError(located.message, file=located.file, line=located.line, field=located.field,
                                   remedy=SKIP_INVALID) from None
        if errors is not None:
            errors.append(located)
        return []


def _as_spec(spec: str | Entry | DataSpec) -> DataSpec:
    if isinstance(spec, DataSpec):
        return spec
    if isinstance(spec, Entry):
        return DataSpec(spec)
    parsed = parse_spec(spec)
    if parsed is None:
        find_entry(str(spec))  # one line naming the catalogue
    return parsed


def source_files(spec: str | Entry | DataSpec, source: str | None = None) -> list[Path]:
    """The local files a read of ``spec`` may take its rows from: every file of the folder
    ``source`` names, or of the dataset's copy in the hub mirror (``$CHEEMS_HUB_MIRROR``);
    none when it is read from the hub. An output must be none of them."""
    folder = source or mirror_source(_as_spec(spec).entry.hub_id)
    if folder is None or _is_url(folder) or not Path(folder).expanduser().is_dir():
        return []
    return sorted(p for p in Path(folder).expanduser().rglob("*") if p.is_file())


def _is_url(text: str) -> bool:
    return text.startswith(("http://", "https://"))


def _licences_file() -> Path:
    from cheems.llm.cache import cache_folder

    return cache_folder() / "catalog" / "licences-shown.json"


def _licences_shown() -> set[str]:
    try:
        return set(json.loads(_licences_file().read_text(encoding="utf-8")))
    except (OSError, ValueError, TypeError):
        return set()


def licence_notice(entry: Entry, notify: Notify | None) -> bool:
    """Say a non-commercial licence unless it was said before a read of the set that
    finished; True when said (:func:`remember_licence_shown` records it once the read ends)."""
    if not entry.non_commercial or notify is None or entry.name in _licences_shown():
        return False
    notify(f"note: {entry.name} is licensed {entry.licence}: not for commercial use")
    return True


def remember_licence_shown(entry: Entry) -> None:
    """Record that ``entry``'s licence was said before a read that finished (in the cheems cache)."""
    path = _licences_file()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(sorted(_licences_shown() | {entry.name})), encoding="utf-8")
    except OSError:
        pass  # the notice shows again next time; nothing else depends on it


def get_dataset(spec: str | Entry | DataSpec, output: str | os.PathLike, *, progress: Progress | None = None,
                notify: Notify | None = None, **kw) -> dict:
    """Convert a dataset into the cheems JSONL ``output`` (written atomically: a failure leaves
    nothing). ``kw`` as :func:`iter_converted`. Returns rows, skipped, errors, seconds and the
    path."""
    from cheems.io import atomic_open, writes_into

    errors: list[CheemsInputError] | None = kw.pop("errors", None)
    errors = [] if errors is None else errors
    start = time.perf_counter()
    n = 0
    with writes_into(output), atomic_open(output) as f:
        for prompt in iter_converted(spec, errors=errors, progress=progress, notify=notify, **kw):
            f.write(orjson.dumps(prompt.to_dict()) + b"\n")
            n += 1
        if n == 0:  # raised inside: the temp file goes, and a file already at ``output`` stays
            first = f" (the first: {errors[0]})" if errors else ""
            raise CheemsInputError(f"no rows converted, {len(errors)} skipped{first}; nothing written",
                                   file=str(output))
    return {"rows": n, "skipped": len(errors), "errors": errors, "seconds": time.perf_counter() - start,
            "output": str(output)}


def _cache_file(spec_text: str, spec: DataSpec) -> Path:
    from cheems.llm.cache import cache_folder

    key = json.dumps([spec_text, spec.entry.hub_id, spec.entry.revision, mirror_source(spec.entry.hub_id),
                      CONVERTER_VERSION])
    digest = hashlib.sha256(key.encode("utf-8")).hexdigest()[:12]
    slug = re.sub(r"[^A-Za-z0-9._-]+", "_", spec_text.removeprefix("hf:"))[:80]
    return cache_folder() / "catalog" / "converted" / digest / f"{slug}.jsonl"  # the stem names rows' subset


def resolve_data(arg: str | os.PathLike, *, progress: Progress | None = None, notify: Notify | None = None) -> Path:
    """The file ``arg`` stands for: itself when it exists (or names no dataset); else the
    dataset it names, converted once into the cache and reused after."""
    path = Path(arg)
    if path.exists():
        return path
    spec = parse_spec(str(arg))
    if spec is None:
        return path
    cached = _cache_file(str(arg), spec)
    if cached.is_file():
        return cached
    try:
        summary = get_dataset(spec, cached, progress=progress, notify=notify, skip_invalid=True)
    except NoHubAccess as e:  # a name read where a data file goes has no source: the mirror is the way
        raise e.for_mirror(spec.entry) from None
    if summary["skipped"] and notify is not None:
        notify(f"note: {summary['skipped']} row(s) of {arg} could not be converted and were left out "
               "(getting it with skip_invalid names each)")
    return cached


def resolve_data_paths(args, *, progress: Progress | None = None, notify: Notify | None = None) -> list[Path]:
    """:func:`resolve_data` of each of ``args``."""
    return [resolve_data(a, progress=progress, notify=notify) for a in args]
