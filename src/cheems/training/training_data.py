"""The data a training run reads: training prompts encoded into batching items and pairs, and
the ranked eval benchmarks encoded for scoring.

Every response goes through the tokenizer's chat template as one conversation
(:func:`cheems.models.sequences.encode_conversations`), exactly as the scorers encode it, and
ends where the run reads its rewards (``reward_position``, :mod:`cheems.models.reward_position`,
recorded in the saved model), so a trained model scores at serving time the sequences it was
trained on.

For the dual objective each sequence of a prompt's best response also records where its
response starts (`TrainingData.response_starts`): the LM loss trains on the tokens from there
on, never on the prompt's (`response_start`, `preferred_responses`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from cheems.benchmark import read_benchmark
from cheems.formats import group_by_prompt, read_prompts
from cheems.models.reward_position import TRAINED, RewardPosition
from cheems.models.sequences import EncodeStats, encode_conversations
from cheems.records import CheemsInputError, Prompt, identical_responses, preference_pairs

__all__ = ["EvalSet", "Notify", "SKIPPED_SHOWN", "TrainingData", "encode_eval_set", "encode_training_data",
           "notify_skipped", "preferred_responses", "read_training_prompts", "response_start", "training_pairs"]

Notify = Callable[[str], None]
SKIPPED_SHOWN = 10
"""How many skipped rows a warning names one by one."""


@dataclass
class TrainingData:
    """Encoded training responses: batching items, pairs and token ids.

    ``items[i] = (prompt_index, response_index, length)``, ``ids[i]`` its token ids;
    ``pairs_by_prompt[p]`` lists ``(better, worse)`` response indices of prompt p whose
    sequences both survived the length limit. ``response_starts[i]`` (encoded with
    ``lm_targets``, else None): for a sequence of one of its prompt's best responses
    (`preferred_responses`), the position of its first response token, which the dual
    objective's LM loss trains on from there to the end; None for every other sequence.
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
    response_starts: list[int | None] | None = None  # with lm_targets: see above


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


def preferred_responses(pairs: list[tuple[str, str]]) -> set[str]:
    """The best responses of a prompt by its ``(better, worse)`` training pairs: better in some
    pair and worse in none. For a ranked prompt these are the responses ranked first (ties
    included); for a compared one, those that win a comparison and never lose one (none when
    every winner also loses somewhere, as in a cycle). O(pairs)."""
    worse = {b for _, b in pairs}
    return {a for a, _ in pairs if a not in worse}


def response_start(prompt_ids: list[int], ids: list[int]) -> int:
    """Where the response starts in ``ids`` (a conversation's tokens): the length of its common
    prefix with ``prompt_ids``, the same conversation encoded with an empty response. The
    prompt's tokens, and whatever the chat template writes before an assistant turn's text,
    are that prefix; a token that merges the prompt's last characters with the response's
    first belongs to the response. O(prefix)."""
    n = min(len(prompt_ids), len(ids))
    k = 0
    while k < n and prompt_ids[k] == ids[k]:
        k += 1
    return k


def _encode_responses(tokenizer, judged, *, max_length: int, truncate: bool, lm_targets: bool,
                      stats: EncodeStats, reward_position: str) -> list[tuple[list[int], int | None]]:
    """``(token ids, response start or None)`` of every response of ``judged``, in order; with
    ``truncate`` a sequence over ``max_length`` keeps its last tokens. With ``lm_targets`` the
    best responses of each prompt (`preferred_responses`) get the position of their first
    response token (`response_start`, 0 when truncation cut into the response)."""
    convs = [(p.prompt, r.content) for _, p, _ in judged for r in p.responses]
    position = RewardPosition.of(tokenizer, reward_position)
    if not lm_targets:
        seqs = encode_conversations(tokenizer, convs, stats=stats, truncation="left",
                                    max_length=max_length if truncate else 1 << 62, reward_position=position)
        return [(seq, None) for seq in seqs]
    seqs = iter(encode_conversations(tokenizer, convs, stats=stats, truncation="left", max_length=1 << 62,
                                     reward_position=position))
    heads = encode_conversations(tokenizer, [(p.prompt, "") for _, p, _ in judged], stats=EncodeStats(),
                                 truncation="left", max_length=1 << 62, reward_position=position)
    out = []
    for (_, p, pairs), head in zip(judged, heads):
        best = preferred_responses(pairs)
        for r in p.responses:
            seq = next(seqs)
            start = response_start(head, seq)
            if truncate and len(seq) > max_length:  # as encode_conversations cuts: the end kept
                stats.truncated += 1
                start -= len(seq) - max_length
                seq = seq[-max_length:]
            out.append((seq, max(0, start) if r.id in best else None))
    return out


def encode_training_data(prompts: list[Prompt], tokenizer, *, max_length: int, truncate: bool,
                         lm_targets: bool = False, reward_position: str = TRAINED) -> TrainingData:
    """Encode the responses of every prompt that has training pairs (see `TrainingData`),
    each sequence ending where ``reward_position`` reads the reward; with ``lm_targets`` also
    where the best responses' tokens start (``response_starts``).

    Pairs between responses of identical text are skipped (``identical_pairs``). Raises
    CheemsInputError when nothing is left to train on: no rankings or comparisons, only ties
    (or pairs of identical text), or every sequence over ``max_length``.
    """
    with_judgements = sum(1 for p in prompts if p.rank is not None or p.comparisons)
    if not with_judgements:
        raise CheemsInputError("no training pairs: no prompt has a 'rank' or 'comparisons'", field="rank")
    encode_stats = EncodeStats()
    items, ids, starts, pairs_by_prompt = [], [], [], {}
    n_pairs = dropped = dropped_pairs = n_sequences = 0
    judged, identical = training_pairs(prompts)
    encoded = iter(_encode_responses(tokenizer, judged, max_length=max_length, truncate=truncate,
                                     lm_targets=lm_targets, stats=encode_stats, reward_position=reward_position))
    for pi, p, pairs in judged:
        index = {r.id: k for k, r in enumerate(p.responses)}
        kept: set[int] = set()
        for k, r in enumerate(p.responses):
            n_sequences += 1
            seq, start = next(encoded)
            if len(seq) > max_length:
                dropped += 1
                continue
            kept.add(k)
            items.append((pi, k, len(seq)))
            ids.append(seq)
            starts.append(start)
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
                        dropped, encode_stats.truncated, dropped_pairs, n_sequences, identical,
                        [starts[i] for i in keep] if lm_targets else None)


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
                    notify: Notify | None = None, reward_position: str = TRAINED) -> EvalSet:
    """The ranked benchmarks at ``paths`` read as ``cheems eval`` reads them
    (:func:`cheems.benchmark.read_benchmark`: each file its own subset unless rows name one,
    every row an item, a repeated prompt id keyed ``id#n``), every response encoded; sequences
    over ``max_length`` keep their last tokens, each ending where ``reward_position`` reads the
    reward. ``skip_invalid`` and ``notify`` as for :func:`read_training_prompts`."""
    res, _ = read_benchmark(paths, skip_invalid=skip_invalid, require_rank=True)
    prompts = res.prompts
    if notify is not None:
        notify_skipped(res.errors, notify)
    encode_stats = EncodeStats()
    # scores are needed for every response: over-long ones keep their end
    ids = encode_conversations(tokenizer, [(p.prompt, r.content) for p in prompts for r in p.responses],
                               max_length=max_length, truncation="left", stats=encode_stats,
                               reward_position=reward_position)
    keys = [(p.id, r.id) for p in prompts for r in p.responses]
    return EvalSet(prompts, ids, keys)
