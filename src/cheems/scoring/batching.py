"""Forward batches of a scorer that runs here: token-budget batches, packed rows, shared prefixes.

Every back-end that runs a model in this process (:class:`~cheems.scoring.scorer.SequenceScorer`:
the transformers and vLLM reward models, the local judges, the server's engine through them)
batches the same way. :func:`scored_batches` takes encoded sequences and the prompt of each:

- padded (``rm.packing`` false): length-sorted batches of at most ``rm.token_budget`` padded
  tokens (the longest sequence times the batch's size) and ``batch_size`` sequences
  (:func:`cheems.models.sequences.plan_batches`), each run by ``rm.score_ids``;
- packed: the sequences of one prompt form a group whose common prefix is laid down once
  (``rm.share_prefix``); groups are cut into parts within the budget (:func:`prompt_parts`)
  and packed into rows of at most ``token_budget`` tokens and ``batch_size`` sequences, each
  run by ``rm.score_packed`` (with ``rm.fixed_shapes`` the row is padded to a bucket under the
  budget).

:func:`score_items` and :func:`score_prompts` put reward models' (prompt, response) items
through it, each distinct conversation (:func:`conversation_key`) encoded and scored once;
:func:`check_batch_invariance` checks that scores do not depend on the batches. The budget is
the one the scorer resolved when it loaded (:func:`resolve_token_budget`); a call may give
another number for its own batches.

The standard library only at import: the models run torch inside their methods.
"""

from __future__ import annotations

from typing import Callable, Iterator, Sequence

from cheems.models.memory_budget import AUTO, out_of_memory_said
from cheems.models.packing import packed_cost
from cheems.models.sequences import EncodeStats, plan_batches
from cheems.records import CheemsInputError, Prompt, PromptText, prompt_key
from cheems.scoring.scorer import Progress, RowStats, ScoredRows

__all__ = ["check_batch_invariance", "conversation_key", "prompt_parts", "resolve_token_budget", "score_items",
           "score_prompts", "scored_batches"]


def resolve_token_budget(asked: int | str | None, default: int,
                         probe: Callable[[], int] | None = None) -> tuple[int, bool]:
    """(the token budget, whether it came from ``auto``) of a scorer as it loads: ``asked`` when
    a number; ``default`` (the device's, or the back-end's) when None; with ``"auto"``
    ``probe()`` (the largest forward batch that fits), or ``default`` where nothing is probed."""
    if asked is None:
        return default, False
    if asked == AUTO:
        return (probe() if probe is not None else default), True
    return int(asked), False


def conversation_key(prompt: PromptText, response: str) -> tuple:
    """What makes two (prompt, response) items one conversation to the model: equal keys encode
    to the same tokens, so they are encoded and scored once and share the score."""
    return (prompt_key(prompt), response)


def scored_batches(rm, encoded: Sequence[Sequence[int]], prompt_of: Sequence[int], *, batch_size: int,
                   token_budget: int | None = None) -> Iterator[tuple[list[int], list]]:
    """Score the sequences ``encoded`` with ``rm`` (a :class:`~cheems.scoring.scorer.SequenceScorer`)
    batch by batch, yielding (indices, values) per batch (see the module docs). ``token_budget``:
    the most tokens of a batch, None for ``rm.token_budget`` (what the scorer resolved at load)."""
    budget = rm.token_budget if token_budget is None else token_budget
    if budget is None:
        raise CheemsInputError("this scorer has no token budget; give one", field="token_budget")
    auto = token_budget is None and rm.token_budget_auto  # an out-of-memory error says where it came from
    batch_size = rm.max_batch(batch_size)
    if not rm.packing:
        for batch in plan_batches([len(x) for x in encoded], token_budget=budget, max_batch_size=batch_size):
            seqs = [encoded[i] for i in batch]
            with out_of_memory_said(lambda: (budget, len(seqs) * max(map(len, seqs))), auto=auto):
                values = rm.score_ids(seqs)
            yield batch, values
        return
    by_prompt: dict[int, list[int]] = {}
    for i, p in enumerate(prompt_of):
        by_prompt.setdefault(p, []).append(i)
    share = rm.share_prefix
    groups = [part for members in by_prompt.values()
              for part in prompt_parts(members, encoded, budget, batch_size, share)]
    costs = [packed_cost([encoded[i] for i in g], share) for g in groups]
    fixed = {"budget": budget} if rm.fixed_shapes else {}  # rows padded to a bucket under the budget
    for chosen in plan_batches(costs, token_budget=budget, max_batch_size=batch_size, packed=True,
                               sizes=[len(g) for g in groups]):
        seqs, layout = [], []
        for g in chosen:
            layout.append(list(range(len(seqs), len(seqs) + len(groups[g]))))
            seqs.extend(encoded[i] for i in groups[g])
        batch = [i for g in chosen for i in groups[g]]
        with out_of_memory_said(lambda: (budget, sum(costs[g] for g in chosen)), auto=auto):
            values = rm.score_packed(seqs, layout if share else [[k] for k in range(len(seqs))], **fixed)
        yield batch, values


def prompt_parts(members: list[int], encoded, budget: int, batch_size: int, share: bool) -> list[list[int]]:
    """One prompt's sequences (``members``, indices into ``encoded``), in order, cut into parts
    of at most ``budget`` row tokens and ``batch_size`` sequences (a part has at least one
    sequence); without ``share`` each alone. A part's row tokens are kept up to date as
    sequences join it (its common prefix can only shrink), so a prompt of k sequences costs
    O(k x prefix)."""
    if not share:
        return [[i] for i in members]
    parts: list[list[int]] = []
    lcp = shortest = total = 0  # of the current part: common prefix (uncapped), shortest sequence, tokens
    for i in members:
        s = encoded[i]
        if parts and len(parts[-1]) < batch_size:
            first = encoded[parts[-1][0]]
            common = 0
            while common < min(lcp, len(s)) and s[common] == first[common]:
                common += 1
            k = len(parts[-1]) + 1
            new_lcp, new_shortest, new_total = common, min(shortest, len(s)), total + len(s)
            if new_total - (k - 1) * min(new_lcp, new_shortest - 1) <= budget:
                parts[-1].append(i)
                lcp, shortest, total = new_lcp, new_shortest, new_total
                continue
        parts.append([i])
        lcp, shortest, total = len(s), len(s), len(s)
    return parts


def score_items(rm, items: Sequence[tuple[PromptText, str]], *, batch_size: int,
                token_budget: int | None = None) -> list[float]:
    """Encode (prompt, response) items with ``rm.encode_many`` (each distinct conversation once),
    score them in batches (:func:`scored_batches`) and return the scores in input order."""
    index: dict[tuple, int] = {}
    first = [index.setdefault(conversation_key(p, r), i) for i, (p, r) in enumerate(items)]
    distinct = sorted(index.values())
    encoded = rm.encode_many([items[i] for i in distinct])
    prompts: dict[tuple, int] = {}
    prompt_of = [prompts.setdefault(prompt_key(items[i][0]), len(prompts)) for i in distinct]
    scores: dict[int, float] = {}
    for batch, values in scored_batches(rm, encoded, prompt_of, token_budget=token_budget, batch_size=batch_size):
        scores.update((distinct[k], v) for k, v in zip(batch, values))
    return [scores[j] for j in first]


def score_prompts(rm, prompts: Sequence[Prompt], *, batch_size: int = 64, token_budget: int | None = None,
                  done: set | None = None, progress: Progress | None = None) -> ScoredRows:
    """Score every response of ``prompts`` with the reward model ``rm``, yielding one list of
    (prompt id, response id, score) per batch, so the caller can append them to a file as they come.

    Each distinct conversation is encoded and scored once and its score given to every
    response that repeats it, so identical responses score identically whatever the batch
    size (and the model does less work). Pairs in ``done`` are skipped (resuming).
    ``progress(done_responses, total)`` is called after each batch.
    """
    done = done or set()
    index: dict[tuple, int] = {}
    owners: list[list[tuple[str, str]]] = []  # per distinct conversation, the (prompt id, response id) it scores
    pending: list[tuple[PromptText, str]] = []  # per distinct conversation, what it encodes
    prompt_of: list[int] = []  # per distinct conversation, its prompt (a prompt's responses share a prefix)
    prompt_index: dict[tuple, int] = {}
    for p in prompts:
        for r in p.responses:
            if (p.id, r.id) in done:
                continue
            key = conversation_key(p.prompt, r.content)
            j = index.get(key)
            if j is None:
                j = index[key] = len(pending)
                pending.append((p.prompt, r.content))
                prompt_of.append(prompt_index.setdefault(key[0], len(prompt_index)))
                owners.append([])
            owners[j].append((p.id, r.id))
    total, finished = sum(map(len, owners)), 0
    if progress:
        progress(0, total)
    encoded = rm.encode_many(pending)
    for batch, scores in scored_batches(rm, encoded, prompt_of, token_budget=token_budget, batch_size=batch_size):
        rows = [(pid, rid, s) for i, s in zip(batch, scores) for pid, rid in owners[i]]
        yield rows
        finished += len(rows)
        if progress:
            progress(finished, total)


def check_batch_invariance(rm, prompts: Sequence[Prompt], *, n: int = 16, batch_size: int = 64,
                           tolerance: float = 1e-3) -> dict:
    """Score up to ``n`` responses one at a time and again inside length-sorted batches.

    Returns ``{"n", "max_abs_diff", "tolerance", "ok"}``, the difference taken relative to the
    score where the score exceeds 1 in size; one above the tolerance means padding or position
    ids leak into the scores.
    """
    items = [(p.prompt, r.content) for p in prompts for r in p.responses][:n]
    if not items:
        raise CheemsInputError("nothing to check: no responses")
    saved, rows = rm.stats, rm.row_stats
    rm.stats = EncodeStats()  # the check's encodings and rows are not the run's
    if rows is not None:
        rm.row_stats = RowStats()
    alone = [rm.score([it], batch_size=1)[0] for it in items]
    # the sample again, padded among longer and shorter neighbours
    pool = [(p.prompt, r.content) for p in prompts for r in p.responses][: max(4 * n, n)]
    batched = rm.score(items + pool[n:], batch_size=batch_size)[:len(items)]
    rm.stats = saved
    if rows is not None:
        rm.row_stats = rows
    # relative above 1: bf16 keeps ~3 significant digits whatever the scale of the scores
    diff = max(abs(a - b) / max(1.0, abs(a)) for a, b in zip(alone, batched))
    return {"n": len(items), "max_abs_diff": diff, "tolerance": tolerance, "ok": diff <= tolerance}
