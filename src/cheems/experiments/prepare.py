"""A cell's training data: its dataset read, curated as the grid says, and N training pairs
sampled by prompt with the cell's seed (paper Fig. 6 trains on growing samples of one dataset).

Sampling by prompt keeps a prompt's responses together, as training batches them: the prompts
are shuffled with ``numpy.random.default_rng(seed)`` and taken whole in that order while the
running count of training pairs (:func:`cheems.training.training_data.training_pairs`: strict
pairs between responses of different text) stays at most N; a prompt that would overshoot is
skipped and the next one tried, until exactly N are taken or the prompts run out.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Callable

import numpy as np

from cheems.experiments.grid import ALL, DatasetSpec, Grid
from cheems.io import files_fingerprint, write_jsonl
from cheems.records import CheemsInputError, Prompt
from cheems.training.training_data import read_training_prompts, training_pairs

__all__ = ["benchmark_files", "benchmark_names", "curate", "dataset_files", "prepare_cell_data", "sample_by_prompt"]

Notify = Callable[[str], None]


def dataset_files(dataset: DatasetSpec, notify: Notify | None = None) -> list[Path]:
    """The files of ``dataset``: its own, or the catalogue dataset it names converted once into
    the cheems cache (:func:`cheems.catalog.get.resolve_data`)."""
    if dataset.files:
        return [Path(f) for f in dataset.files]
    from cheems.catalog.get import resolve_data

    return [resolve_data(dataset.name, notify=notify)]


def benchmark_files(grid: Grid, notify: Notify | None = None) -> list[Path]:
    """The benchmark files of ``grid`` (catalogue names resolved as for datasets)."""
    from cheems.catalog.get import resolve_data

    return [Path(b) if os.path.isabs(b) else resolve_data(b, notify=notify) for b in grid.benchmarks]


def benchmark_names(grid: Grid, files: list[Path]) -> dict[str, str]:
    """Benchmark name (the file's name, or the catalogue spec) -> fingerprint of its bytes."""
    names = [Path(b).name if os.path.isabs(b) else b for b in grid.benchmarks]
    if len(set(names)) < len(names):  # two files of one name in different folders
        names = list(grid.benchmarks)
    return {n: files_fingerprint([f]) for n, f in zip(names, files)}


def curate(prompts: list[Prompt], steps: tuple[str, ...] | list[str], seed: int) -> list[Prompt]:
    """``prompts`` after each curation step of ``steps`` in order (see
    :data:`cheems.experiments.grid.CURATION_STEPS`)."""
    for step in steps:
        if step == "debias":
            from cheems.curation.debias import length_debias

            prompts, _ = length_debias(prompts, seed=seed)
        elif step == "filter":
            from cheems.curation.filters import filter_prompts

            prompts = filter_prompts(prompts).kept
        else:
            raise CheemsInputError(f"unknown curation step {step!r}", field="curate")
    return prompts


def sample_by_prompt(prompts: list[Prompt], size: int | str, seed: int) -> tuple[list[Prompt], int, int]:
    """``(sampled prompts in input order, their training pairs, the pairs there were)``; see the
    module docstring. ``size`` ``"all"`` keeps every prompt. O(prompts + pairs)."""
    judged, _ = training_pairs(prompts)
    pairs_of = {pi: len(pairs) for pi, _, pairs in judged}
    available = sum(pairs_of.values())
    if size == ALL or size >= available:
        return list(prompts), available, available
    order = np.random.default_rng(seed).permutation(len(prompts))
    taken, count = [], 0
    for pi in order.tolist():
        n = pairs_of.get(pi, 0)
        if n == 0 or count + n > size:
            continue  # no pair to train on, or it would overshoot: try the next
        taken.append(pi)
        count += n
        if count == size:
            break
    return [prompts[pi] for pi in sorted(taken)], count, available


def prepare_cell_data(files: list[Path], curation: tuple[str, ...], size: int | str, seed: int,
                      output: str | os.PathLike, *, skip_invalid: bool = False,
                      notify: Notify | None = None) -> int:
    """Write the training data of one cell to ``output`` (atomically): the prompts of ``files``
    (rows of one prompt joined), curated, sampled by prompt. Returns its training pairs. A
    size over what the data holds is one warning through ``notify``; every pair is used."""
    prompts = read_training_prompts([str(f) for f in files], skip_invalid=skip_invalid, notify=notify)
    prompts = curate(prompts, curation, seed)
    sampled, pairs, available = sample_by_prompt(prompts, size, seed)
    if size != ALL and size > available and notify is not None:
        notify(f"warning: {size} training pairs asked for, but the data holds {available}; using all of them")
    if pairs == 0:
        raise CheemsInputError("no training pairs to sample from (no prompt has a strict ranked pair)",
                               file=str(files[0]))
    write_jsonl(output, (p.to_dict() for p in sampled))
    return pairs
