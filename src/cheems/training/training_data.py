"""The data a training run reads: training prompts encoded into batching items and pairs, and
the ranked eval benchmarks encoded for scoring.

Every response goes through the tokenizer's chat template as one conversation
(:func:`cheems.models.sequences.encode_conversations`), exactly as the scorers encode it, so a
trained model scores at serving time the sequences it was trained on.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from cheems.benchmark import read_benchmark
from cheems.formats import group_by_prompt, read_prompts
from cheems.models.sequences import EncodeStats, encode_conversations
from cheems.records import CheemsInputError, Prompt, identical_responses, preference_pairs

__all__ = ["EvalSet", "Notify", "SKIPPED_SHOWN", "TrainingData", "encode_eval_set", "encode_training_data",
           "notify_skipped", "read_training_prompts", "training_pairs"]

Notify = Callable[[str], None]
SKIPPED_SHOWN = 10
"""How many skipped rows a warning names one by one."""


@dataclass
class TrainingData:
    """Encoded training responses: batching items, pairs and token ids.

    ``items[i] = (prompt_index, response_index, length)``, ``ids[i]`` its token ids;
    ``pairs_by_prompt[p]`` lists ``(better, worse)`` response indices of prompt p whose
    sequences both survived the length limit.
    """

    items: list[tuple[int, int, int]]
    ids: list[list[int]]
    pairs_by_prompt: dict[int, list[tuple[int, int]]]
    n_pairs: int
    dropped: int  # sequences over max_length left out
    truncated: int  # sequences cut to max_length (truncate=True)
    dropped_pairs: int
    n_sequences: int = 0  # responses of prompts with pairs, encoded (kept + dropped)
    identical_pairs: int = 0  # pairs between responses of identical text, skipped (no signal)


def training_pairs(prompts: list[Prompt]) -> tuple[list[tuple[int, Prompt, list[tuple[str, str]]]], int]:
    """``(prompt index, prompt, its (better, worse) pairs)`` of every prompt with a pair to train
    on (:func:`~cheems.records.preference_pairs`), and how many pairs were skipped because both
    responses hold the same text (such a pair carries no signal: one text, one score)."""
    judged, identical = [], 0
    for pi, p in enumerate(prompts):
        pairs = preference_pairs(p)
        if not pairs:
            continue
        text = {r.id: r.content for r in p.responses}
        kept = [(a, b) for a, b in pairs if text[a] != text[b]]
        identical += len(pairs) - len(kept)
        if kept:
            judged.append((pi, p, kept))
    return judged, identical


def encode_training_data(prompts: list[Prompt], tokenizer, *, max_length: int, truncate: bool) -> TrainingData:
    """Encode the responses of every prompt that has training pairs (see `TrainingData`).

    Pairs between responses of identical text are skipped (``identical_pairs``). Raises
    CheemsInputError when nothing is left to train on: no rankings or comparisons, only ties
    (or pairs of identical text), or every sequence over ``max_length``.
    """
    with_judgements = sum(1 for p in prompts if p.rank is not None or p.comparisons)
    if not with_judgements:
        raise CheemsInputError("no training pairs: no prompt has a 'rank' or 'comparisons'", field="rank")
    encode_stats = EncodeStats()
    items, ids, pairs_by_prompt = [], [], {}
    n_pairs = dropped = dropped_pairs = n_sequences = 0
    judged, identical = training_pairs(prompts)
    encoded = iter(encode_conversations(tokenizer, [(p.prompt, r.content) for _, p, _ in judged for r in p.responses],
                                        stats=encode_stats, truncation="left",
                                        max_length=max_length if truncate else 1 << 62))
    for pi, p, pairs in judged:
        index = {r.id: k for k, r in enumerate(p.responses)}
        kept: set[int] = set()
        for k, r in enumerate(p.responses):
            n_sequences += 1
            seq = next(encoded)
            if len(seq) > max_length:
                dropped += 1
                continue
            kept.add(k)
            items.append((pi, k, len(seq)))
            ids.append(seq)
        usable = [(index[a], index[b]) for a, b in pairs if index[a] in kept and index[b] in kept]
        dropped_pairs += len(pairs) - len(usable)
        if usable:
            pairs_by_prompt[pi] = usable
            n_pairs += len(usable)
    if n_sequences == 0:
        raise CheemsInputError(f"no training pairs: every ranking or comparison of the {with_judgements} "
                               "judged prompt(s) is a tie or between responses of identical text", field="rank")
    if dropped == n_sequences:
        raise CheemsInputError(f"every sequence is longer than max_length {max_length} tokens "
                               "(raise max_length or truncate)", field="max_length")
    if n_pairs == 0:
        raise CheemsInputError(f"no training pairs left: {dropped} sequence(s) over max_length {max_length} "
                               "took every pair with them", field="max_length")
    # sequences of prompts whose pairs all went with dropped responses would train only the regulariser
    keep = [i for i, (pi, _, _) in enumerate(items) if pi in pairs_by_prompt]
    return TrainingData([items[i] for i in keep], [ids[i] for i in keep], pairs_by_prompt, n_pairs,
                        dropped, encode_stats.truncated, dropped_pairs, n_sequences, identical)


def read_training_prompts(paths: list[str], *, skip_invalid: bool = False,
                          notify: Notify | None = None) -> list[Prompt]:
    """Every prompt of the training files, rows of one prompt joined into one (responses
    deduplicated by content, each row's pairs kept; :func:`cheems.formats.group_by_prompt`),
    as the official loader does, so a prompt's responses share forward batches.

    With ``skip_invalid`` bad rows are left out instead of raising; ``notify(line)`` hears of
    them, and of rows holding two responses of identical text (their pair is skipped)."""
    prompts, errors = [], []
    for path in paths:
        res = read_prompts(path, skip_invalid=skip_invalid)
        prompts.extend(res.prompts)
        errors.extend(res.errors)
    if notify is not None:
        notify_skipped(errors, notify)
        twins = sum(identical_responses(p) > 0 for p in prompts)
        if twins:
            notify(f"warning: {twins} row(s) hold two responses of identical text; a pair between them carries "
                   "no signal and is skipped")
    return group_by_prompt(prompts)


def notify_skipped(errors: list[CheemsInputError], notify: Notify) -> None:
    """One warning naming how many rows were skipped, then the first few of them."""
    if not errors:
        return
    notify(f"warning: skipped {len(errors)} invalid row(s):")
    for e in errors[:SKIPPED_SHOWN]:
        notify(f"  {e}")
    if len(errors) > SKIPPED_SHOWN:
        notify(f"  ... and {len(errors) - SKIPPED_SHOWN} more")


@dataclass
class EvalSet:
    """Ranked eval prompts with every response encoded: ``ids[i]`` is the sequence of
    ``keys[i] = (prompt id, response id)``."""

    prompts: list[Prompt]
    ids: list[list[int]]
    keys: list[tuple[str, str]]


def encode_eval_set(paths: list[str], tokenizer, *, max_length: int, skip_invalid: bool = False,
                    notify: Notify | None = None) -> EvalSet:
    """The ranked benchmarks at ``paths`` read as ``cheems eval`` reads them
    (:func:`cheems.benchmark.read_benchmark`: each file its own subset unless rows name one,
    every row an item, a repeated prompt id keyed ``id#n``), every response encoded; sequences
    over ``max_length`` keep their last tokens. ``skip_invalid`` and ``notify`` as for
    :func:`read_training_prompts`."""
    res, _ = read_benchmark(paths, skip_invalid=skip_invalid, require_rank=True)
    prompts = res.prompts
    if notify is not None:
        notify_skipped(res.errors, notify)
    encode_stats = EncodeStats()
    # scores are needed for every response: over-long ones keep their end
    ids = encode_conversations(tokenizer, [(p.prompt, r.content) for p in prompts for r in p.responses],
                               max_length=max_length, truncation="left", stats=encode_stats)
    keys = [(p.id, r.id) for p in prompts for r in p.responses]
    return EvalSet(prompts, ids, keys)
