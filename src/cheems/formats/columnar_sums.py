"""``cheems stats`` on columns: the paper's Table 1 sums (:class:`cheems.metrics.StatsSums`)
of a file read into :class:`~cheems.formats.columnar.ColumnarBatch` es, no
:class:`~cheems.records.Prompt` made but for the few rows no batch takes, which the general
readers read one at a time (:mod:`cheems.formats.columnar_input`).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from cheems.formats.columnar import ColumnarBatch
from cheems.formats.columnar_input import batches_of, read_positions, row_sources, source_chunks
from cheems.formats.join import join_scored_rows
from cheems.formats.result import RewordedQuestions
from cheems.formats.rows import NotPlain
from cheems.records import CheemsInputError

if TYPE_CHECKING:
    import numpy as np

    from cheems.metrics import StatsSums

__all__ = ["columnar_stats"]


def columnar_stats(path: str | os.PathLike, errors: list | None = None,
                   reworded: RewordedQuestions | None = None) -> StatsSums | None:
    """The sums of :class:`~cheems.metrics.StatsSums` over the prompts
    :func:`~cheems.formats.read.read_prompts` reads from a file, as
    :func:`cheems.metrics.dataset_stats` counts them: a ranked row gives every pair of different
    ranks, any other row its ``g`` and ``b`` comparisons (repeats included). Columnar rows are
    summed in batches, the rows no batch takes read by the general readers, their scored rows
    joined (the questions they word differently added to ``reworded`` when given, as
    ``read_prompts`` gives them in :attr:`~cheems.formats.result.ReadResult.reworded`). A bad row
    makes it None, or, when an ``errors`` list is given, is skipped and its error appended there
    (as ``read_prompts(path, skip_invalid=True)`` skips it). None, with nothing appended, for a
    file of no prompt or one the general path reads whole (Parquet, TSV, a broken JSON list...).
    O(bytes + Σ n_p log n_p) for prompts of n_p responses."""
    from cheems.io import gc_paused
    from cheems.metrics import StatsSums

    total, refused = StatsSums(), []
    with gc_paused():
        try:
            sources = row_sources([path], default_subsets=False)
            for batch in batches_of(source_chunks(sources), keep_rows=False):
                total += _batch_sums(batch)
                refused += batch.refused
        except NotPlain:
            return None
        res, _ = read_positions(sources, sorted(refused))
        if res.errors and errors is None:
            return None
        try:
            join_scored_rows(res)
        except CheemsInputError:  # raised by the general path, after what it prints of earlier files
            return None
        total += StatsSums.of(res.prompts)
    if not total.prompts:
        return None
    if errors is not None:
        errors.extend(res.errors)
    if reworded is not None:
        reworded.add(res.reworded)
    return total


def _batch_sums(batch: ColumnarBatch) -> StatsSums:
    """:class:`StatsSums` of one batch, vectorised: the pairs of a ranked prompt are counted from
    its responses sorted by rank, those of an unranked one from its comparisons."""
    import numpy as np

    from cheems.metrics import StatsSums

    if not len(batch):
        return StatsSums()
    offsets, a, b, lab, owner = batch.arrays()
    chars = np.frombuffer(batch.content_chars, np.int64) if len(batch.content_chars) else np.zeros(0, np.int64)
    ranked = np.array(batch.has_rank, bool)
    judged = ~ranked[owner] & (lab != 2)  # g: a is chosen, b: b is chosen; ties give no pair
    chosen = np.where(lab == 0, a, b)[judged]
    rejected = np.where(lab == 0, b, a)[judged]
    sums = StatsSums(len(batch), len(batch.response_ids), int(judged.sum()), sum(batch.prompt_chars),
                     int(chars[chosen].sum()), int(chars[rejected].sum()))
    if len(batch.rank_values):
        node_owner = np.repeat(np.arange(len(batch)), np.diff(offsets))
        in_ranked = ranked[node_owner]
        worse, better = _rank_pair_counts(node_owner[in_ranked], np.frombuffer(batch.rank_values, np.int64))
        ranked_chars = chars[in_ranked]
        sums.comparisons += int(worse.sum())
        sums.chosen_chars += int((ranked_chars * worse).sum())
        sums.rejected_chars += int((ranked_chars * better).sum())
    return sums


def _rank_pair_counts(owner: np.ndarray, rank: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For every node, how many nodes of its prompt rank worse (a higher rank) and how many
    better: its pairs as the chosen and as the rejected response. Nodes sorted by (prompt,
    rank); runs of one prompt and of one (prompt, rank) bound the counts. O(V log V)."""
    import numpy as np

    order = np.lexsort((rank, owner))
    o, r = owner[order], rank[order]
    n = len(o)
    new_prompt = np.r_[True, o[1:] != o[:-1]]
    new_level = new_prompt | np.r_[True, r[1:] != r[:-1]]
    prompt_start = np.flatnonzero(new_prompt)
    level_start = np.flatnonzero(new_level)
    prompt_end = np.r_[prompt_start[1:], n]
    level_end = np.r_[level_start[1:], n]
    p, lv = np.cumsum(new_prompt) - 1, np.cumsum(new_level) - 1  # each sorted node's prompt run and level run
    worse, better = np.empty(n, np.int64), np.empty(n, np.int64)
    worse[order] = prompt_end[p] - level_end[lv]
    better[order] = level_start[lv] - prompt_start[p]
    return worse, better
