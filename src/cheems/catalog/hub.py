"""An entry's raw rows, read through Hugging Face ``datasets.load_dataset``.

The same call reads the hub repository (downloaded once into the ``datasets`` cache) or a
local folder laid out like it (``--source``: an offline mirror, a fork, the tests' fixtures).
Rows come out in batches of Arrow records turned into Python dicts at once (much faster than
indexing a ``Dataset`` row by row); streaming entries are read as a stream and stop as soon
as enough rows were converted. Every failure of ``datasets`` becomes one line: unknown split
or config (with the ones there are), not found, gated, offline without a cached copy.
"""

from __future__ import annotations

import gzip
import json
import logging
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

from cheems.catalog.entry import Entry
from cheems.records import CheemsInputError

__all__ = ["BATCH_ROWS", "HUB_ID", "SOURCE_REMEDY", "UNPARSED", "HubRows", "MISSING_EXTRA", "NoHubAccess",
           "first_line_not_json", "first_non_utf8_line", "mirror_advice", "mirror_source", "offline", "open_rows"]

MISSING_EXTRA = "reading datasets by name needs the datasets extra: pip install 'cheems[datasets]'"
BATCH_ROWS = 1000
"""Rows turned from Arrow into Python at a time."""
HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*/[\w.-]+")
"""A hub repository id, ``owner/name``."""


@dataclass
class HubRows:
    """The rows of one split: ``rows`` yields ``(index, row)``; ``total`` is the number of rows
    when ``datasets`` knows it before reading (not for streams)."""

    rows: Iterator[tuple[int, dict]]
    total: int | None
    where: str  # the hub id or the folder read, for messages


def mirror_source(hub_id: str) -> str | None:
    """The copy of ``hub_id`` in the folder ``$CHEEMS_HUB_MIRROR`` names (``OWNER/NAME``
    folders laid out like the hub repositories: an offline mirror on a shared disk), if any."""
    mirror = os.environ.get("CHEEMS_HUB_MIRROR", "").strip()
    if not mirror:
        return None
    folder = Path(mirror).expanduser() / hub_id.removeprefix("github:")
    return str(folder) if folder.is_dir() else None


SOURCE_REMEDY = ("source", "or point {} at a local copy")
"""What to do when the hub cannot be read, where the call takes a ``source`` (`get_dataset`)."""


def mirror_advice(entry: Entry) -> str:
    """What to do when the hub cannot be read, where the call takes no ``source`` (a name given
    where a data file goes): put a copy where ``$CHEEMS_HUB_MIRROR`` makes every name read it,
    naming the files the entry reads where it names them."""
    files = sorted({name for names in entry.file_names().values() for name in names})
    holding = f" holding {', '.join(files)}" if files else ""
    mirror = os.environ.get("CHEEMS_HUB_MIRROR", "").strip()
    if mirror:
        return (f"or put a copy in {Path(mirror).expanduser() / entry.mirror_folder}{holding} "
                "(that folder of $CHEEMS_HUB_MIRROR is missing)")
    return f"or set CHEEMS_HUB_MIRROR to a folder with a copy in {entry.mirror_folder}/{holding}"


class NoHubAccess(CheemsInputError):
    """The hub could not be read (offline without a cached copy, gated, unreachable): the
    ``reason``, then the advice to read a local copy instead: by default the remedy names the
    setting ``source`` (:data:`SOURCE_REMEDY`); :meth:`for_mirror` advises ``$CHEEMS_HUB_MIRROR``
    instead, for the calls that read a name where a data file goes and take no source."""

    def __init__(self, reason: str, *, advice: str | None = None, file: str | None = None,
                 line: int | None = None, field: str | None = None):
        self.reason = reason
        super().__init__(f"{reason}; {advice}" if advice else reason, file=file, line=line, field=field,
                         remedy=None if advice else SOURCE_REMEDY)

    def for_mirror(self, entry: Entry) -> "NoHubAccess":
        """The same error, advising ``$CHEEMS_HUB_MIRROR`` (:func:`mirror_advice`) instead of ``source``."""
        return NoHubAccess(self.reason, advice=mirror_advice(entry), file=self.file, line=self.line, field=self.field)


def offline() -> bool:
    """Whether ``datasets`` was told to stay offline (``HF_DATASETS_OFFLINE`` or ``HF_HUB_OFFLINE``)."""
    return any(os.environ.get(v, "").strip().lower() in ("1", "true", "yes", "on")
               for v in ("HF_DATASETS_OFFLINE", "HF_HUB_OFFLINE"))


def _load_kwargs(entry: Entry, *, local: bool, split: str, config: str | None, revision: str | None,
                 streaming: bool) -> dict[str, Any]:
    kwargs: dict[str, Any] = {"split": split, "streaming": streaming}
    if config is not None:
        kwargs["data_dir" if entry.config_is_data_dir else "name"] = config
    if entry.data_files is not None:
        kwargs["data_files"] = entry.data_files
    if revision is not None and not local:
        kwargs["revision"] = revision
    if local:  # datasets keys a folder's cache by its path, not its files: an edited copy would read stale rows
        kwargs["download_mode"] = "force_redownload"
    return kwargs


def open_rows(entry: Entry, *, source: str | None = None, split: str, config: str | None = None,
              revision: str | None = None, streaming: bool | None = None) -> HubRows:
    """The rows of ``split`` of ``entry`` (from ``source`` when given: a local folder laid out
    like the hub repository, or another hub id with the same schema)."""
    try:
        import datasets
    except ImportError:
        raise CheemsInputError(MISSING_EXTRA) from None
    where = source or entry.hub_id
    local = Path(where).expanduser().is_dir()
    if source is not None and not local and not HUB_ID.fullmatch(source):
        raise CheemsInputError("no such folder", file=source,
                               remedy=("source", "{} is a local folder or a hub id owner/name"))
    if local and entry.data_files is None:
        _check_one_format(entry, Path(where).expanduser(), config if entry.config_is_data_dir else None)
    stream = entry.streaming if streaming is None else streaming
    kwargs = _load_kwargs(entry, local=local, split=split, config=config, revision=revision, streaming=stream)
    path = str(Path(where).expanduser()) if local else where
    logging.getLogger("huggingface_hub").setLevel(logging.ERROR)  # its retry warnings; the failure is one line
    logging.getLogger("datasets.packaged_modules").setLevel(logging.CRITICAL)  # "Failed to read file": raised too
    dataset = _call_datasets(datasets.load_dataset, path, kwargs, entry, where)
    if stream:
        return HubRows(enumerate(_guarded(iter(dataset), entry, where)), None, where)
    return HubRows(_utf8_checked(_batched_rows(dataset), entry, where), dataset.num_rows, where)


_FORMATS = [(re.compile(r"\.parquet$", re.I), "Parquet"),
            (re.compile(r"\.(jsonl|json)(\.(gz|zst|bz2|xz))?$", re.I), "JSON"),
            (re.compile(r"\.(csv|tsv)(\.(gz|zst|bz2|xz))?$", re.I), "CSV"),
            (re.compile(r"\.arrow$", re.I), "Arrow")]
"""The data file formats ``datasets`` reads, each by its file names (compressed or not)."""


def _check_one_format(entry: Entry, folder: Path, data_dir: str | None) -> None:
    """Refuse a local folder whose data files come in several formats (Parquet and JSON
    Lines, say) when its card declares no ``configs:``: ``datasets`` would read the files of
    one format and leave the others out without a word."""
    card = folder / "README.md"
    if card.is_file() and re.search(r"^configs:", card.read_text(encoding="utf-8", errors="replace"), re.M):
        return
    root = folder / data_dir if data_dir else folder
    counts: dict[str, int] = {}
    for path in root.rglob("*") if root.is_dir() else ():
        parts = path.relative_to(folder).parts
        kind = next((k for pattern, k in _FORMATS if pattern.search(path.name)), None)
        if kind and not any(p.startswith((".", "_")) for p in parts) and path.is_file():
            counts[kind] = counts.get(kind, 0) + 1
    if len(counts) > 1:
        found = ", ".join(f"{n} {kind} file{'s' if n > 1 else ''}" for kind, n in sorted(counts.items()))
        raise CheemsInputError(f"{entry.name}: the folder holds data files of several formats ({found}); datasets "
                               "would read one format only and leave the other rows out: keep one format, or "
                               "declare each split's files under configs: in its README.md", file=str(root))


def _batched_rows(dataset) -> Iterator[tuple[int, dict]]:
    """Every row of an Arrow-backed ``Dataset``, a batch at a time (``to_pylist`` converts a
    whole batch in C++; indexing row by row re-formats each row in Python).

    A JSON Lines column whose rows hold values of different types (a string here, a number
    there) is kept by ``datasets`` as each value's JSON text; it is decoded back, so that the
    converter sees ``7`` where the file has ``7`` (and refuses it) and ``答`` where it has ``"答"``."""
    features = dataset.features
    mixed = features is not None and any(type(f).__name__ == "Json" for f in features.values())
    index = 0
    for table in dataset.with_format("arrow").iter(batch_size=BATCH_ROWS):
        if mixed:
            columns = features.decode_batch(table.to_pydict())
            rows = [dict(zip(columns, values)) for values in zip(*columns.values())]
        else:
            rows = table.to_pylist()
        for row in rows:
            yield index, row
            index += 1


def _utf8_checked(rows: Iterator[tuple[int, dict]], entry: Entry, where: str) -> Iterator[tuple[int, dict]]:
    """``rows``, with text that is not UTF-8 (Arrow's JSON reader keeps its bytes; they fail
    only when turned into Python) as one error naming the file and line."""
    try:
        yield from rows
    except UnicodeDecodeError as e:
        raise _load_error(e, entry, where) from None


_TEXT_FILE = re.compile(r"\.(jsonl|json|csv|tsv|txt)(\.gz)?$", re.IGNORECASE)


def first_non_utf8_line(folder: str | os.PathLike) -> CheemsInputError | None:
    """The first line of a text data file (JSON, JSON Lines, CSV, TSV, text; gzipped or not)
    under ``folder`` that is not UTF-8, as an error naming its file and line; None when every
    one is UTF-8 (or ``folder`` is no local folder)."""
    root = Path(folder).expanduser()
    if not root.is_dir():
        return None
    for path in sorted(p for p in root.rglob("*") if _TEXT_FILE.search(p.name) and p.is_file()):
        opener = gzip.open if path.name.lower().endswith(".gz") else open
        try:
            with opener(path, "rb") as f:
                for number, line in enumerate(f, 1):
                    try:
                        line.decode("utf-8")
                    except UnicodeDecodeError as e:
                        return CheemsInputError(f"is not UTF-8 text (byte 0x{line[e.start]:02x} at byte {e.start + 1} "
                                                "of the line); save the file as UTF-8", file=str(path), line=number)
        except (OSError, EOFError):
            continue  # a file that cannot be read is the reader's to report
    return None


def _guarded(rows: Iterator[dict], entry: Entry, where: str) -> Iterator[dict]:
    """A stream's rows, with the errors a stream raises only when read (network, a bad file)
    as one line."""
    while True:
        try:
            row = next(rows)
        except StopIteration:
            return
        except (OSError, ValueError) as e:
            raise _load_error(e, entry, where) from None
        yield row


def _call_datasets(load, path: str, kwargs: dict, entry: Entry, where: str):
    try:
        return load(path, **kwargs)
    except ImportError as e:  # a builder's own dependency (e.g. zstandard for .zst files)
        raise CheemsInputError(f"{entry.name}: reading {where} needs a package that is missing: {e}") from None
    except Exception as e:  # datasets raises many types; each becomes one line
        raise _load_error(e, entry, where) from None


def _load_error(e: Exception, entry: Entry, where: str) -> CheemsInputError:
    if isinstance(e, UnicodeDecodeError):
        found = first_non_utf8_line(where)
        if found is not None:
            return found
    text = _EXTENSION_LIST.sub("", str(e).strip().splitlines()[0]) if str(e).strip() else type(e).__name__
    name = type(e).__name__
    lowered = text.lower()
    if offline() and ("offline" in lowered or "connection" in lowered or name in ("ConnectionError",
                                                                                  "OfflineModeIsEnabled")):
        return NoHubAccess(f"{entry.name}: {where} is not in the datasets cache and HF_DATASETS_OFFLINE/"
                           "HF_HUB_OFFLINE is set; unset it to download once")
    if "gated" in lowered or "401" in text or "403" in text or "authenticat" in lowered:
        return NoHubAccess(f"{entry.name}: {where} is gated: accept its terms on the hub and log in "
                           f"(`hf auth login` or HF_TOKEN) ({text})")
    if name in ("DatasetNotFoundError", "FileNotFoundError", "EmptyDatasetError", "DataFilesNotFoundError"):
        return _not_found(entry, where, text)
    if "split" in lowered and ("unknown" in lowered or "should be one of" in lowered):
        return CheemsInputError(f"{entry.name}: {text}", field="split")
    if "config" in lowered and ("not found" in lowered or "available" in lowered):
        return CheemsInputError(f"{entry.name}: {text}", field="config")
    if name in ("ConnectionError", "ReadTimeout", "ConnectTimeout", "HTTPError") or "connection" in lowered:
        return NoHubAccess(f"{entry.name}: could not reach the hub for {where} ({text})")
    if name == "DatasetGenerationError":
        return _not_parsed(e, entry, where)
    return CheemsInputError(f"{entry.name}: datasets could not read {where}: {name}: {text}")


_EXTENSION_LIST = re.compile(r" with any supported extension \[[^\]]*\]")
"""What ``datasets`` appends to a file it did not find: every extension it reads (about 400)."""


def _not_found(entry: Entry, where: str, text: str) -> CheemsInputError:
    """A repository, folder or file that is not there: where the entry names the files it reads,
    the one missing and the files a copy must hold."""
    missing = re.search(r"Unable to find '([^']+)'", text)
    expected = [name for names in entry.file_names().values() for name in names]
    named = next((name for name in expected if missing and missing[1].endswith(name)), None)
    if named is None:
        return CheemsInputError(f"{entry.name}: {where} not found or holds no data files for this "
                                f"split/config ({text})")
    return CheemsInputError(f"{entry.name}: {where} has no {named}; {entry.name} reads {entry.layout()}")


UNPARSED = ("skip_invalid", "{} leaves out rows that do not convert, not lines that do not parse (datasets "
            "reads each file whole): mend or delete that line")
"""The remedy of a line that does not parse (as JSON, as a CSV row): what ``skip_invalid`` cannot do."""


def _not_parsed(e: Exception, entry: Entry, where: str) -> CheemsInputError:
    """A data file ``datasets`` could not turn into rows: the first line that is not JSON where
    the folder is local and one is found, else the reader's own reason (pandas names the CSV
    line)."""
    found = first_line_not_json(where)
    if found is not None:
        return CheemsInputError(found.message, file=found.file, line=found.line, remedy=UNPARSED)
    cause = e.__cause__ or e.__context__ or e
    text = str(cause).strip().splitlines()[0] if str(cause).strip() else type(cause).__name__
    return CheemsInputError(f"{entry.name}: datasets could not read {where}: {type(cause).__name__}: {text}",
                            remedy=UNPARSED)


_JSON_FILE = re.compile(r"\.(jsonl|json)(\.gz)?$", re.IGNORECASE)


def first_line_not_json(folder: str | os.PathLike) -> CheemsInputError | None:
    """The first line of a JSON or JSON Lines file (gzipped or not) under ``folder`` that does not
    parse, as an error naming its file and line; None when every one parses (or ``folder`` is no
    local folder). A file that parses whole is one JSON document; one that does not and starts
    with ``[`` is a broken document (its error's line); any other is one object a line."""
    root = Path(folder).expanduser()
    files = sorted(p for p in root.rglob("*") if _JSON_FILE.search(p.name) and p.is_file()) if root.is_dir() else []
    for path in files:
        opener = gzip.open if path.name.lower().endswith(".gz") else open
        try:
            with opener(path, "rt", encoding="utf-8") as f:
                text = f.read()
            json.loads(text)
            continue  # one JSON document (or a file of one line) that parses
        except (OSError, EOFError, UnicodeDecodeError):
            continue  # the reader's to report (first_non_utf8_line names bytes that are not UTF-8)
        except json.JSONDecodeError as whole:
            bad = (whole.lineno, whole.colno, whole.msg) if text.lstrip().startswith("[") else _first_bad_line(text)
        if bad is not None:
            return CheemsInputError(f"is not JSON ({bad[2]}, column {bad[1]})", file=str(path), line=bad[0])
    return None


def _first_bad_line(text: str) -> tuple[int, int, str] | None:
    """(line, column, what is wrong) of the first line of ``text`` (JSON Lines) that is not JSON."""
    for number, line in enumerate(text.split("\n"), 1):
        try:
            if line.strip():
                json.loads(line)
        except json.JSONDecodeError as e:
            return number, e.colno, e.msg
    return None
