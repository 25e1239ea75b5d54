"""What cheems writes besides prompt rows: the rows of a SCORES file.

Prompt rows are written as :meth:`cheems.records.Prompt.to_dict` writes them (and, on the plain
path of ``cheems rank``, as :meth:`~cheems.formats.columnar.ColumnarBatch.ranked_rows` writes the same
bytes); :func:`cheems.io.write_jsonl` writes either kind atomically.
"""

from __future__ import annotations

from typing import Iterator

__all__ = ["score_rows"]


def score_rows(scores: dict[tuple[str, str], float]) -> Iterator[dict]:
    """The rows ``{prompt_id, response_id, score}`` of a SCORES file, one per (pid, rid) of ``scores``,
    as :func:`~cheems.formats.read.read_scores` reads them back."""
    for (pid, rid), s in scores.items():
        yield {"prompt_id": pid, "response_id": rid, "score": s}
