"""Fixed shapes for packed rows: the few lengths a row and its attention tables are padded to.

A packed row holds whatever a batch's sequences add up to, so without padding every forward
batch has a row length of its own, and the variable-length attention's per-segment tables
(cumulative lengths, the key gather) a length of their own too. ``torch.compile`` with static
shapes and CUDA graphs specialise on shapes: they would meet a new one nearly every batch. With
fixed shapes (``--fixed-shapes``) the row is padded up to the next *bucket* by one trailing
padding segment (:func:`cheems.models.packing.pack_sequences` with ``pad_to``), and the tables
are padded with zero-length segments to a bucketed count, so a whole run meets few shapes:

- row lengths: powers of two from ``floor`` below the token budget, then the budget itself
  (:func:`row_buckets`); ``floor`` is at least :data:`ROW_FLOOR` and at least the budget / 64,
  so a row within the budget takes one of at most 7 lengths, within ``torch.compile``'s
  default limit of 8 compiled versions of one function. A lone sequence over the budget (the
  planner lets one through) takes the next power of two, one more length per doubling of
  ``max_length`` over the budget.
- attention tables (:func:`table_length`): a segment count and a key-row length each rounded up
  to a power of two (at least :data:`TABLE_FLOOR`), one of log2(most segments) counts.

The padding costs compute: a row of n tokens runs as its bucket (under 2n; planned rows mostly
fill the budget, whose bucket is the budget itself, so most rows gain few tokens). It helps only
where shapes matter, a GPU with ``--compile``; on a CPU it only adds tokens.
"""

from __future__ import annotations

__all__ = ["MAX_ROW_BUCKETS", "ROW_FLOOR", "TABLE_FLOOR", "row_buckets", "row_length", "table_length"]

ROW_FLOOR = 256
"""The shortest padded row: shorter rows are rare (the last batches of a run) and cheap."""

MAX_ROW_BUCKETS = 7
"""Most row lengths within one budget (the floor rises with the budget to keep to it)."""

TABLE_FLOOR = 8
"""The fewest entries a padded attention table has."""


def _power_of_two_at_least(n: int) -> int:
    return 1 << max(0, n - 1).bit_length()


def _floor(budget: int) -> int:
    """The shortest bucket under ``budget``: ROW_FLOOR, or higher so that at most
    MAX_ROW_BUCKETS - 1 powers of two lie below the budget."""
    return max(ROW_FLOOR, _power_of_two_at_least(budget) >> (MAX_ROW_BUCKETS - 1))


def row_buckets(budget: int) -> list[int]:
    """The row lengths of a run under token budget ``budget``, shortest first: the powers of two
    from the floor (see the module docs) below ``budget``, then ``budget``. At most
    MAX_ROW_BUCKETS of them."""
    out, n = [], _floor(budget)
    while n < budget:
        out.append(n)
        n *= 2
    return out + [budget]


def row_length(tokens: int, budget: int) -> int:
    """The bucket a row of ``tokens`` tokens is padded to under ``budget``: the shortest of
    `row_buckets` that holds it; over the budget, the next power of two. O(1)."""
    if tokens > budget:
        return _power_of_two_at_least(tokens)
    return min(budget, max(_floor(budget), _power_of_two_at_least(tokens)))


def table_length(n: int) -> int:
    """The padded length of an attention table of ``n`` entries: the next power of two, at
    least TABLE_FLOOR."""
    return max(TABLE_FLOOR, _power_of_two_at_least(n))
