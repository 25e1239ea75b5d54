"""Read and write prompt rows in every format cheems understands, detected row by row.

Accepted row shapes (JSONL, a JSON list, or Parquet with the ``parquet`` extra), by the name
``--format`` / ``fmt=`` forces (:data:`FORMATS`; ``docs/formats.md`` shows one row of each and
how it maps), and the module that reads them:

- ``cheems``, ``cheems-pairwise``, ``task``: official Cheems rows, ranked lists, pairwise rows and
  annotated tasks (:mod:`~cheems.formats.official`)
- ``pair`` (RewardBench style), ``medicalgpt``: chosen / rejected pairs (:mod:`~cheems.formats.pairs`)
- ``sharegpt``, ``alpaca``, ``alpaca-ranking``: LLaMA-Factory (:mod:`~cheems.formats.llamafactory`)
- ``autoj``, ``critiquellm``, ``pandalm``: judges' labelled pairs, a tie kept as a tie
  (:mod:`~cheems.formats.judge_pairs`)
- ``rmb``, ``rmb-bon``: RMB pairwise and best-of-N rows (:mod:`~cheems.formats.rmb`)
- ``hh-rlhf``, ``trl``: chat transcripts (:mod:`~cheems.formats.transcripts`)

:mod:`~cheems.formats.registry` lists them all once; :mod:`~cheems.formats.detect` tells a row's
format from its keys; :mod:`~cheems.formats.rows` reads raw rows from a file,
:mod:`~cheems.formats.read` whole files into prompts, :mod:`~cheems.formats.columnar` cheems rows
straight into arrays, no prompt made, and :mod:`~cheems.formats.columnar_input` the rows of a file
into such arrays or, one at a time where they must, into prompts (what ``cheems rank`` and
``cheems stats`` take first: :func:`rank_columns`, :func:`columnar_stats`; ``cheems curate resolve``
and ``debias`` read :func:`batches_of` and :func:`columnar_scores`); :mod:`~cheems.formats.join`
joins the rows of one prompt;
:mod:`~cheems.formats.write` holds the rows cheems writes.

A row without ``id`` gets :func:`cheems.records.prompt_id` of its prompt and response contents,
so rows that repeat a prompt with other responses are separate items; :func:`group_by_prompt`
joins them back into one prompt where that is wanted (training). Every error is a
:class:`~cheems.records.CheemsInputError` naming file, line and field.
"""

from __future__ import annotations

from cheems.formats.columnar import ColumnarBatch, columnar_scores, dump_row
from cheems.formats.columnar_rank import RankedColumns, rank_columns, rankable_prompts
from cheems.formats.columnar_sums import columnar_stats
from cheems.formats.detect import check_format, detect_format, parse_row
from cheems.formats.fields import CONSUMED, category_field, prompt_field, row_id, subset_field
from cheems.formats.join import (RepeatedRows, check_unique_ids, group_by_prompt, key_repeated_rows, merge_prompts,
                                 occurrence_id)
from cheems.formats.llamafactory import SHAREGPT_ROLES
from cheems.formats.official import ANNOTATION_LABELS, COMPARISON_KEYS, RESPONSE_KEYS
from cheems.formats.read import ReadResult, Scores, read_many, read_prompts, read_scores
from cheems.formats.result import RewordedQuestions
from cheems.formats.registry import FORMAT_NAMES, FORMATS, ROW_FORMATS
from cheems.formats.columnar_input import RowSource, batches_of, row_sources, source_chunks
from cheems.formats.rows import NotPlain, iter_rows, row_chunks
from cheems.formats.spec import RowFormat
from cheems.formats.write import score_rows

__all__ = ["ANNOTATION_LABELS", "COMPARISON_KEYS", "CONSUMED", "ColumnarBatch", "FORMAT_NAMES", "FORMATS",
           "RESPONSE_KEYS", "ROW_FORMATS", "RankedColumns", "RepeatedRows", "RewordedQuestions", "RowFormat",
           "RowSource", "SHAREGPT_ROLES", "Scores",
           "category_field", "check_format", "check_unique_ids", "columnar_scores",
           "batches_of", "columnar_stats", "detect_format", "dump_row",
           "group_by_prompt", "iter_rows", "key_repeated_rows", "merge_prompts", "NotPlain", "occurrence_id",
           "parse_row", "prompt_field", "rank_columns", "rankable_prompts", "read_many", "read_prompts", "read_scores", "ReadResult",
           "row_chunks", "row_id", "row_sources", "score_rows", "source_chunks", "subset_field"]
