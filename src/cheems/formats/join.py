"""Rows of one prompt: joined into one prompt, and repeated ids found.

- :func:`merge_prompts` joins rows of the same prompt id (one row per annotated task);
- :func:`group_by_prompt` joins rows of the same prompt text (one row per pair, as most public
  formats are written) for training;
- :func:`key_repeated_rows` gives every row of a benchmark its own key, as the benchmarks' own
  evaluators count rows (every row an item), and :func:`check_unique_ids` refuses two rows under
  one id where rows must be unique (the curation stages).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

import orjson

from cheems.formats.result import ReadResult, RewordedQuestions
from cheems.formats.scored import RANKED_BY, rank_scored
from cheems.records import CheemsInputError, Comparison, Prompt, Response, prompt_key, rank_comparisons, response_id

__all__ = ["RepeatedRows", "check_unique_ids", "group_by_prompt", "join_scored_rows", "key_repeated_rows",
           "merge_prompts", "occurrence_id"]


def merge_prompts(prompts: list[Prompt], locations: list[tuple[str, int]] | None = None, *,
                  reworded: RewordedQuestions | None = None) -> list[Prompt]:
    """Join rows of the same prompt id (e.g. one row per annotated task) into one prompt.

    Rows with the same id must hold the same prompt (the first row's category and subset
    are kept); one id naming two different prompts is an error, since scores files address
    responses by (prompt id, response id). With ``reworded`` (scored rows, whose id is the
    source's question id: :func:`join_scored_rows`) such rows are joined all the same, the
    first row's wording kept, and the id is added to ``reworded``. Responses are united by id
    (first-seen order; two responses of the same text under two ids stay two) and comparisons
    concatenated; a response id given two different contents is an error located by
    ``locations[i]`` = (file, line) of row i when given. Rows without an ``id`` share one only
    when they hold the same prompt and responses (:func:`~cheems.formats.fields.row_id`); to
    join the rows that repeat a prompt with other responses, use :func:`group_by_prompt`.
    """
    seen: set[str] = set()
    repeated = {p.id for p in prompts if p.id in seen or seen.add(p.id)}
    if not repeated:
        return list(prompts)
    merged: dict[str, Prompt] = {}
    reworded_ids: set[str] = set()
    for i, p in enumerate(prompts):
        if p.id not in repeated:
            merged[p.id] = p
            continue
        q = merged.get(p.id)
        if q is not None and q.prompt != p.prompt:
            if reworded is None:
                raise CheemsInputError(f"prompt id {p.id!r} names two different prompts; give them distinct ids",
                                       field="id", **_where(locations, i))
            if p.id not in reworded_ids:  # each question once, located at its first reworded row
                reworded_ids.add(p.id)
                reworded.ids.append(p.id)
                reworded.first = reworded.first or (locations[i] if locations else None)
        if q is None:
            merged[p.id] = Prompt(p.id, p.prompt, list(p.responses), p.rank, list(p.comparisons),
                                  p.category, p.subset, dict(p.extra))
            continue
        known = {r.id: r for r in q.responses}
        for r in p.responses:
            if r.id not in known:
                q.responses.append(r)
            elif known[r.id].content != r.content:
                raise CheemsInputError(f"response {r.id!r} of prompt {p.id!r} has a different content "
                                       "than in an earlier row", field="responses", **_where(locations, i))
        q.comparisons.extend(p.comparisons)
        q.rank = None
    return list(merged.values())


def join_scored_rows(res: ReadResult) -> None:
    """Join, in place, the scored rows of one prompt (one response each, :mod:`cheems.formats.scored`)
    into one prompt ranked by score (:func:`merge_prompts`, then
    :func:`~cheems.formats.scored.rank_scored`). The joined prompt takes the place, line and file
    of its first row; other rows stay as they are. The rows' key is the source's question id, so
    rows of one id that word the question differently are one prompt, worded as the first row
    words it (LLMEval-2 showed some models another wording); such questions are added to
    ``res.reworded``. O(rows)."""
    scored = [i for i, p in enumerate(res.prompts) if RANKED_BY in p.extra]
    if not scored:
        return
    locations = res.locations()
    joined = {p.id: p for p in rank_scored(merge_prompts([res.prompts[i] for i in scored],
                                                         [locations[i] for i in scored], reworded=res.reworded))}
    keep, placed = [], set()
    for i, p in enumerate(res.prompts):
        if RANKED_BY not in p.extra:
            keep.append((p, i))
        elif p.id not in placed:
            placed.add(p.id)
            keep.append((joined[p.id], i))
    res.prompts = [p for p, _ in keep]
    for name in ("lines", "files", "formats"):
        values = getattr(res, name)
        if len(values) == len(locations):
            setattr(res, name, [values[i] for _, i in keep])


def group_by_prompt(prompts: list[Prompt]) -> list[Prompt]:
    """Join the rows that hold the same prompt into one prompt each, in first-seen order.

    Files such as LLaMA-Factory's DPO data, RewardBench or RMB hold one row per pair, so a
    prompt answered several times is several rows (several ids). The same prompt means the
    same text, or the same chat messages (one user message equals its text). A prompt held by
    one row is returned as it is (the same object). Rows that share a prompt become one
    :class:`Prompt` with:

    - the first row's id, prompt, category, subset and extra keys;
    - the rows' responses united by content, in first-seen order; a response keeps its id
      unless an earlier, different content holds it in the group (then it takes the md5 of
      its content, :func:`~cheems.records.response_id`);
    - no rank: a rank orders only its own row's responses. Each ranked row contributes its
      rank's comparisons (:func:`~cheems.records.rank_comparisons`: ``g`` for every ordered
      pair, ``s`` for a tie; ``source="rank"``) and each unranked row its comparisons, so
      :func:`~cheems.records.preference_pairs` of the joined prompt is the union of the rows'
      pairs (as a ranked row's own comparisons are ignored there, they are left out here too).

    Contradicting rows give contradicting pairs; :func:`cheems.graph.resolve_conflicts`
    resolves them. O(total responses + comparisons).
    """
    groups: dict[Any, list[Prompt]] = {}
    for p in prompts:
        groups.setdefault(prompt_key(p.prompt), []).append(p)
    return [rows[0] if len(rows) == 1 else _join_rows(rows) for rows in groups.values()]


def _join_rows(rows: list[Prompt]) -> Prompt:
    """The rows of one prompt as one prompt (see :func:`group_by_prompt`)."""
    by_content: dict[str, str] = {}  # content -> its id in the joined prompt
    used: set[str] = set()  # the ids of the joined prompt's responses
    responses: list[Response] = []
    comparisons: list[Comparison] = []
    for p in rows:
        ids: dict[str, str] = {}  # this row's response id -> the joined one
        for r in p.responses:
            rid = by_content.get(r.content)
            if rid is None:
                rid = r.id if r.id not in used else _free_id(r.content, used)
                by_content[r.content] = rid
                used.add(rid)
                responses.append(r if rid == r.id else Response(rid, r.content, r.model, dict(r.extra)))
            ids[r.id] = rid
        if p.rank is not None:
            comparisons += [Comparison(ids[c.a], ids[c.b], c.label, source="rank") for c in rank_comparisons(p.rank)]
            continue
        for c in p.comparisons:
            a, b = ids[c.a], ids[c.b]
            comparisons.append(c if (a, b) == (c.a, c.b) else
                               Comparison(a, b, c.label, c.annotator, c.source, dict(c.extra)))
    first = rows[0]
    return Prompt(first.id, first.prompt, responses, None, comparisons, list(first.category), first.subset,
                  dict(first.extra))


def _free_id(content: str, taken: set[str]) -> str:
    """The md5 of ``content``, suffixed until no id in ``taken`` holds it."""
    rid, n = response_id(content), 1
    while rid in taken:
        rid, n = f"{response_id(content)}-{n}", n + 1
    return rid


def _where(locations: list[tuple[str, int]] | None, i: int) -> dict:
    if not locations:
        return {}
    file, line = locations[i]
    return {"file": file, "line": line}


@dataclass
class RepeatedRows:
    """How :func:`key_repeated_rows` counted the rows that reuse an earlier row's prompt id."""

    exact: int = 0  # rows that repeat an earlier row exactly (every key the same)
    differing: int = 0  # rows under an earlier row's id that differ from it (other keys, or content)
    dropped: int = 0  # exact repeats removed (``dedupe``); the others are keyed ``id#n``

    @property
    def keyed(self) -> int:
        """Rows that were given an occurrence id (``id#n``)."""
        return self.exact + self.differing - self.dropped


def occurrence_id(pid: str, n: int, taken: set[str]) -> str:
    """The key of the ``n``-th row (n >= 2) under prompt id ``pid``: ``pid#n``, or the next
    ``pid#k`` that no id in ``taken`` holds; the key is added to ``taken``."""
    key = f"{pid}#{n}"
    while key in taken:
        n += 1
        key = f"{pid}#{n}"
    taken.add(key)
    return key


def key_repeated_rows(res: ReadResult, *, dedupe: bool = False) -> RepeatedRows:
    """Give, in place, every row of ``res`` its own prompt id, counting rows as RewardBench, RMB
    and the official Cheems evaluator do: every row is an item, exact repeats included.

    The first row under an id keeps it; the n-th row under it (n >= 2, in file order across the
    files) gets :func:`occurrence_id` ``id#n``, whether it repeats an earlier row exactly or
    differs from it (PandaLM's repeated rows differ only in other keys; RMB repeats prompts).
    Keys do not depend on ``dedupe``: with it, rows that repeat an earlier row exactly are
    removed and the others keep the key they have without it, so one SCORES file serves both.
    O(rows); only the rows of a repeated id are compared (as their sorted-key JSON).
    """
    counts = Counter(p.id for p in res.prompts)
    repeated = {pid for pid, n in counts.items() if n > 1}
    if not repeated:
        return RepeatedRows()
    taken = set(counts)
    seen: dict[str, set[bytes]] = {}
    occurrences: Counter = Counter()
    out, keep = RepeatedRows(), []
    for i, p in enumerate(res.prompts):
        if p.id not in repeated:
            keep.append(i)
            continue
        rows = seen.setdefault(p.id, set())
        row = orjson.dumps(p.to_dict(), option=orjson.OPT_SORT_KEYS | orjson.OPT_SERIALIZE_NUMPY)
        exact = row in rows
        rows.add(row)
        occurrences[p.id] += 1
        if occurrences[p.id] > 1:
            out.exact += exact
            out.differing += not exact
            p.id = occurrence_id(p.id, occurrences[p.id], taken)
        if dedupe and exact:
            out.dropped += 1
            continue
        keep.append(i)
    if out.dropped:
        n = len(res.prompts)
        for name in ("prompts", "lines", "files", "formats"):
            values = getattr(res, name)
            if len(values) == n:  # lists a hand-made ReadResult leaves empty stay empty
                setattr(res, name, [values[i] for i in keep])
    return out


def check_unique_ids(prompts: list[Prompt], locations: list[tuple[str, int]] | None = None) -> None:
    """Raise CheemsInputError at the second row that reuses a prompt id, naming the first.

    Two rows share an id when both give it, or when neither does and they hold the same
    prompt and responses (:func:`~cheems.formats.fields.row_id`); the message says whether their
    contents differ.
    """
    first: dict[str, int] = {}
    for i, p in enumerate(prompts):
        j = first.setdefault(p.id, i)
        if j != i:
            earlier = f" (first at {locations[j][0]}:{locations[j][1]})" if locations else ""
            q = prompts[j]
            same = q.prompt == p.prompt and sorted(r.content for r in q.responses) == sorted(
                r.content for r in p.responses)
            what = ("the two rows repeat one prompt and its responses: drop one" if same else
                    "by two rows of different content (prompt or responses): give them distinct ids")
            raise CheemsInputError(f"prompt id {p.id!r} is used twice{earlier}, {what}; scores could not tell "
                                   "the two apart", field="id", **_where(locations, i))
