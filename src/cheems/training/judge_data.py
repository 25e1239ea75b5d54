"""The examples a generative reward model trains on: pairwise judge prompts with their verdict.

Every ranked pair of a prompt (its strict pairs, :func:`cheems.records.preference_pairs`)
becomes two examples, one per presentation order, so the model cannot learn a side:

    (better as A, worse as B) -> verdict 0 ("A")
    (worse as A, better as B) -> verdict 1 ("B")

With ``ties`` every tied pair (equal rank, or an ``s`` comparison) becomes two more, both
with verdict 2 ("C"). A strict pair between two responses of identical text is skipped: it
would ask for both A and B on the same prompt. The prompt text is a
:class:`~cheems.llm.verdict_template.VerdictTemplate`'s messages; the verdict is an index into
``template.letters(ties)``.

:func:`judge_pairs` lists the pairs themselves. :func:`encode_judge_data` turns the examples
into token ids up to the generation prompt (:mod:`cheems.models.judge_sequences`), and
:func:`encode_judge_eval_set` every ranked pair of the eval benchmarks, in both orders (what
the held-out verdict accuracy is computed over). Imports no torch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, NamedTuple

from cheems.llm.verdict_template import VerdictTemplate, load_verdict_template, verdict_template
from cheems.models.judge_sequences import encode_judge_prompts, verdict_token_ids
from cheems.models.sequences import EncodeStats
from cheems.records import CheemsInputError, Prompt, preference_pairs, rank_comparisons, ranked_pairs
from cheems.training.config import TrainConfig

__all__ = ["VERDICT_A", "VERDICT_B", "VERDICT_TIE", "JudgeData", "JudgeEvalSet", "JudgeExample", "JudgePair",
           "encode_judge_data", "encode_judge_eval_set", "judge_examples", "judge_pairs", "judge_template_of",
           "tied_pairs", "verdict_ids"]

Notify = Callable[[str], None]

VERDICT_A, VERDICT_B, VERDICT_TIE = 0, 1, 2
"""Indices into ``VerdictTemplate.letters(ties)``: A better, B better, a tie."""


class JudgeExample(NamedTuple):
    """One training example: the judge conversation and the index of its verdict letter."""

    messages: list[dict]
    verdict: int


@dataclass(frozen=True)
class JudgePair:
    """One pair of prompt ``prompt_index``: response ids ``first`` and ``second``; ``first`` is
    the better one unless ``tied``."""

    prompt_index: int
    first: str
    second: str
    tied: bool = False


def tied_pairs(p: Prompt) -> list[tuple[str, str]]:
    """The tied pairs of ``p``: equal ranks of its ranking, else its ``s`` comparisons (each
    unordered pair once, in order of first appearance)."""
    if p.rank is not None:
        found = [(c.a, c.b) for c in rank_comparisons(p.rank) if c.label == "s"]
    else:
        found = [(c.a, c.b) for c in p.comparisons if c.label == "s" and c.a != c.b]
    seen: set[frozenset] = set()
    out = []
    for a, b in found:
        if frozenset((a, b)) not in seen:
            seen.add(frozenset((a, b)))
            out.append((a, b))
    return out


def judge_pairs(prompts: list[Prompt], *, ties: bool) -> list[JudgePair]:
    """Every strict pair of every prompt (better first), then with ``ties`` its tied pairs,
    prompts in order; strict pairs between responses of identical text are left out. O(pairs)."""
    out = []
    for pi, p in enumerate(prompts):
        text = {r.id: r.content for r in p.responses}
        out.extend(JudgePair(pi, better, worse) for better, worse in preference_pairs(p)
                   if text[better] != text[worse])
        if ties:
            out.extend(JudgePair(pi, a, b, tied=True) for a, b in tied_pairs(p))
    return out


def judge_examples(prompts: list[Prompt], template: VerdictTemplate, *, ties: bool) -> list[JudgeExample]:
    """Both presentation orders of every pair of :func:`judge_pairs` as judge conversations
    with their verdict (see the module docs), in a deterministic order: prompt by prompt, its
    strict pairs (better-first order, then swapped), then its tied pairs (both orders)."""
    out = []
    for pair in judge_pairs(prompts, ties=ties):
        p = prompts[pair.prompt_index]
        text = {r.id: r.content for r in p.responses}
        first, second = text[pair.first], text[pair.second]
        verdicts = (VERDICT_TIE, VERDICT_TIE) if pair.tied else (VERDICT_A, VERDICT_B)
        out.append(JudgeExample(template.messages(p.prompt, first, second, ties=ties), verdicts[0]))
        out.append(JudgeExample(template.messages(p.prompt, second, first, ties=ties), verdicts[1]))
    return out


# ---------------------------------------------------------------------------- encoded

def judge_template_of(config: TrainConfig) -> VerdictTemplate:
    """The judge template of a run: ``config.judge_template`` when given, else the built-in
    one of ``config.judge_language``."""
    if config.judge_template:
        return load_verdict_template(config.judge_template)
    return verdict_template(config.judge_language)


def verdict_ids(tokenizer, template: VerdictTemplate, *, ties: bool) -> list[int]:
    """The first reply token of each verdict letter of ``template`` (A, B, and C with ``ties``)."""
    return verdict_token_ids(tokenizer, template.letters(ties), template.messages("?", "1", "2", ties=ties))


@dataclass
class JudgeData:
    """Encoded training examples: ``ids[i]`` the judge prompt up to the generation prompt,
    ``targets[i]`` the index of its verdict letter."""

    ids: list[list[int]]
    targets: list[int]
    pairs: int  # judge pairs (each gives two examples)
    dropped: int  # examples over max_length left out
    truncated: int  # examples cut to their last max_length tokens (truncate=True)


def encode_judge_data(prompts: list[Prompt], tokenizer, template: VerdictTemplate, *, ties: bool,
                      max_length: int, truncate: bool) -> JudgeData:
    """Every example of :func:`~cheems.training.judge_data.judge_examples` encoded. Over
    ``max_length`` an example is left out, or with ``truncate`` keeps its last tokens (the
    verdict question stays). Raises CheemsInputError when nothing is left to train on."""
    examples = judge_examples(prompts, template, ties=ties)
    if not examples:
        raise CheemsInputError("no training pairs: no prompt has a strict ranking or comparison", field="rank",
                               remedy=None if ties else ("judge_ties", "ties train only with {}"))
    stats = EncodeStats()
    encoded = encode_judge_prompts(tokenizer, [e.messages for e in examples], stats=stats,
                                   max_length=max_length if truncate else 1 << 62)
    keep = [i for i, seq in enumerate(encoded) if len(seq) <= max_length]
    if not keep:
        raise CheemsInputError(f"every judge prompt is longer than max_length {max_length} tokens (raise "
                               "max_length or truncate)", field="max_length")
    return JudgeData([encoded[i] for i in keep], [examples[i].verdict for i in keep], len(examples) // 2,
                     len(examples) - len(keep), stats.truncated)


@dataclass
class JudgeEvalSet:
    """Ranked eval prompts and every ranked pair of them; ``ids[2k]`` is pair k's judge prompt
    with the better response as A, ``ids[2k + 1]`` with it as B."""

    prompts: list[Prompt]
    pairs: list[JudgePair]
    ids: list[list[int]]


def encode_judge_eval_set(paths: list, tokenizer, template: VerdictTemplate, *, ties: bool, max_length: int,
                          skip_invalid: bool = False, notify: Notify | None = None) -> JudgeEvalSet:
    """The ranked benchmarks at ``paths`` read as ``cheems eval`` reads them, every ranked pair
    of every prompt (identical texts included: CheemsBench counts them) as two judge prompts;
    prompts over ``max_length`` keep their last tokens."""
    from cheems.benchmark import read_benchmark
    from cheems.training.training_data import notify_skipped

    if not paths:
        return JudgeEvalSet([], [], [])
    res, _ = read_benchmark(paths, skip_invalid=skip_invalid, require_rank=True)
    if notify is not None:
        notify_skipped(res.errors, notify)
    prompts = res.prompts
    pairs = [JudgePair(pi, w, l) for pi, p in enumerate(prompts) for w, l in ranked_pairs(p.rank)]
    conversations = []
    for pair in pairs:
        p = prompts[pair.prompt_index]
        text = {r.id: r.content for r in p.responses}
        better, worse = text[pair.first], text[pair.second]
        conversations.append(template.messages(p.prompt, better, worse, ties=ties))
        conversations.append(template.messages(p.prompt, worse, better, ties=ties))
    ids = encode_judge_prompts(tokenizer, conversations, max_length=max_length, stats=EncodeStats())
    return JudgeEvalSet(prompts, pairs, ids)
