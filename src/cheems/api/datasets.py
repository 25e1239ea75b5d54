"""The public calls over the catalogue of public preference datasets: list_datasets,
dataset_info, load_dataset.

Listing needs nothing beyond the core; reading a dataset from the hub needs the ``datasets``
extra (a local copy in ``$CHEEMS_HUB_MIRROR`` or a ``source`` folder does not)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Mapping

from cheems.common_settings import ReadSettings
from cheems.settings import as_settings

if TYPE_CHECKING:  # annotations only
    from cheems.catalog.entry import Entry

__all__ = ["dataset_info", "list_datasets", "load_dataset"]


def list_datasets() -> list[Entry]:
    """List every dataset of the catalogue, Chinese sets first.

    Returns:
        The :class:`~cheems.catalog.entry.Entry` of each dataset: ``name``, ``hub_id``,
        ``language``, ``size``, ``licence``, ``non_commercial``, ``gated``, ...

    Raises:
        Nothing: the catalogue is part of the package.
    """
    from cheems.catalog.registry import CATALOG

    return list(CATALOG.values())


def dataset_info(name: str) -> Entry:
    """Look up one dataset of the catalogue by name (case-insensitive).

    Args:
        name: A catalogue name (see :func:`list_datasets`).

    Returns:
        Its :class:`~cheems.catalog.entry.Entry`: hub id, revision, licence, splits, configs,
        option, the columns its conversion reads, the files a local copy must hold.

    Raises:
        CheemsInputError: No dataset of that name (the message lists the names there are).
    """
    from cheems.catalog.registry import find_entry

    return find_entry(name)


def load_dataset(name: str, output: str | os.PathLike, *, split: str | None = None, config: str | None = None,
                 option: str | None = None, revision: str | None = None, limit: int | None = None,
                 source: str | None = None, read: ReadSettings | Mapping | None = None,
                 progress: Callable[[int, int], None] | None = None,
                 notify: Callable[[str], None] | None = None) -> dict:
    """Download a public dataset by name (once, into the datasets cache) and convert it to cheems rows.

    Args:
        name: A catalogue name, ``NAME[:CONFIG][@SPLIT][+OPTION]``, or ``hf:OWNER/NAME[:CONFIG][@SPLIT]``.
        output: The cheems JSONL file to write (atomically: a failure leaves nothing).
        split: The split to read (default: the entry's).
        config: The hub config (or folder) to read.
        option: The entry's option (see :func:`dataset_info`).
        revision: A hub revision: a branch, tag or commit (default: the entry's pinned one, else the latest).
        limit: Stop after this many rows.
        source: Read a local folder laid out like the hub repository, or another hub id with the same schema.
        read: How rows are read (a :class:`~cheems.common_settings.ReadSettings`, or a mapping of
            its fields): ``skip_invalid`` skips rows that cannot be converted instead of raising at
            the first.
        progress: ``progress(done, total)`` while reading.
        notify: Gets the licence notice and the notes on rows left out.

    Returns:
        ``rows`` (written), ``skipped``, ``errors`` (of the rows skipped), ``seconds`` and ``output``.

    Raises:
        CheemsInputError: An unknown name, split, config or option, a bad ``read`` setting (only
            ``skip_invalid`` is used), an output that is one of the dataset's local files, a
            dataset that cannot be reached, or no row converted.
    """
    from cheems.catalog.get import get_dataset, source_files
    from cheems.io import check_outputs

    skip_invalid = as_settings(ReadSettings, read, "read", uses=("skip_invalid",)).skip_invalid
    check_outputs([output], [source] if source and Path(source).exists() else [])
    check_outputs([output], source_files(name, source))  # no source file of the dataset is written over
    return get_dataset(name, output, split=split, config=config, option=option, revision=revision, limit=limit,
                       source=source, skip_invalid=skip_invalid, progress=progress, notify=notify)
