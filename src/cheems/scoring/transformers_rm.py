"""Discriminative reward models through transformers (the ``[models]`` extra).

Both checkpoint layouts of :mod:`cheems.models.checkpoints` are scored: ``seq-cls`` (any
``*ForSequenceClassification`` with one label) and ``v-head`` (the official Cheems causal LM +
linear ``v_head``). Each (prompt, response) goes through the tokenizer's chat template as one
conversation, and each distinct conversation is scored once. By default a batch's sequences are
packed end to end into one row under a token budget, a prompt's responses together with their
shared prefix laid down once (:mod:`cheems.models.packing`); with ``packing=False`` they are
sorted by length and padded on the right to each batch's longest sequence (see
:mod:`cheems.models.sequences`). Either way scores do not depend on batch size or order
(``check_batch_invariance`` verifies it). Only the base model and the reward head run: no LM
head is ever computed. With ``fixed_shapes`` each packed row is padded to one of a few lengths
(:mod:`cheems.models.fixed_shapes`), so that compiled layers meet few shapes; the scores stay
the same and the padding is counted (`RowStats`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator, Sequence

from cheems.models.checkpoints import (best_attention, detect_layout, load_classifier, load_tensors, load_tokenizer,
                                       quiet_transformers, require_torch, resolve_dtype, value_head_source,
                                       weights_that_fit)
from cheems.models.fixed_shapes import row_length
from cheems.models.memory_budget import AUTO, out_of_memory_said, probe_sequences, probe_token_budget
from cheems.models.packing import (pack_sequences, packed_backend, packed_cost, padded_attention, prepare_attention,
                                   rewards_at, use_packed_attention)
from cheems.models.reward_position import UNRECORDED, recorded_reward_position
from cheems.models.sequences import (ConversationEncoder, EncodeStats, default_token_budget, pad_right, plan_batches,
                                     reward_at_last_token)
from cheems.models.threads import use_available_cores
from cheems.records import CheemsInputError, Prompt, PromptText, prompt_key
from cheems.scoring.model_settings import ModelSettings

__all__ = ["PROBE_CEILING", "RowStats", "TransformersRewardModel", "check_batch_invariance", "conversation_key",
           "load_reward_model", "probe_scoring_budget", "score_head", "score_items", "score_prompts"]


@dataclass
class RowStats:
    """What the packed rows computed: ``rows`` forward rows, ``real_tokens`` the sequences'
    tokens (whole), ``row_tokens`` the rows' lengths (shared prefixes once, padding included),
    ``padding_tokens`` the fixed shapes' padding among them."""

    rows: int = 0
    real_tokens: int = 0
    row_tokens: int = 0
    padding_tokens: int = 0


@dataclass
class TransformersRewardModel(ConversationEncoder):
    """A loaded reward model: tokenizer, network, layout, and how to batch it. Encodes
    conversations with `ConversationEncoder` (``encode``, ``encode_many``)."""

    tokenizer: object
    model: object
    layout: str
    device: str
    max_length: int = 2048
    truncation: str = "left"
    stats: EncodeStats = field(default_factory=EncodeStats)
    v_head: object = None
    packing: bool = False  # one row per batch (the model then runs packed attention only)
    share_prefix: bool = True  # with packing: a prompt's common prefix laid down once
    auto_budget: int | None = None  # the token budget --token-budget auto found (probed once)
    fixed_shapes: bool = False  # with packing: rows padded to a few lengths (cheems.models.fixed_shapes)
    row_stats: RowStats = field(default_factory=RowStats)
    reward_position: str = UNRECORDED  # where the reward is read (cheems.models.reward_position)

    # ------------------------------------------------------------------ forward
    def score_ids(self, batch: Sequence[Sequence[int]]) -> list[float]:
        """Scores of already-encoded sequences, as one right-padded batch."""
        torch = require_torch()
        input_ids, mask = pad_right(batch, self.tokenizer.pad_token_id, self.device)
        with torch.inference_mode(), padded_attention(self.model):
            if self.layout == "v-head":
                hidden = self.model(input_ids=input_ids, attention_mask=mask).last_hidden_state
                values = reward_at_last_token(hidden, mask, self.v_head)
            else:
                head = score_head(self.model)
                base = getattr(self.model, getattr(self.model, "base_model_prefix", ""), None)
                if head is not None and base is not None:
                    hidden = base(input_ids=input_ids, attention_mask=mask).last_hidden_state
                    values = reward_at_last_token(hidden, mask, head)
                else:  # an unfamiliar architecture: its own pooling, which finds the pad token
                    values = self.model(input_ids=input_ids, attention_mask=mask).logits[:, 0]
        return values.float().cpu().tolist()

    def score_packed(self, seqs: Sequence[Sequence[int]], groups: Sequence[Sequence[int]] | None = None, *,
                     budget: int | None = None) -> list[float]:
        """Scores of already-encoded sequences, packed into one row; each group of ``groups``
        (indices into ``seqs``) shares its common prefix (see :mod:`cheems.models.packing`).
        With ``fixed_shapes`` the row is padded to its bucket under ``budget`` (default: the
        row's own length, the one bucket then)."""
        torch = require_torch()
        pad_to = (lambda row: row_length(row, budget or row)) if self.fixed_shapes else None  # the row's bucket
        pad_id = self.tokenizer.pad_token_id
        batch = pack_sequences(seqs, self.device, groups=groups, backend=packed_backend(self.device), pad_to=pad_to,
                               pad_id=0 if pad_id is None else pad_id)
        if self.fixed_shapes:
            prepare_attention(batch)  # the layout's tables built here, not traced in a compiled layer
        kwargs = {**batch.forward_kwargs(), "use_cache": False}  # no key-value cache: one forward, nothing kept
        with torch.inference_mode():
            if self.layout == "v-head":
                values = rewards_at(self.model(**kwargs).last_hidden_state, batch, self.v_head)
            else:
                base = getattr(self.model, self.model.base_model_prefix)
                values = rewards_at(base(**kwargs).last_hidden_state, batch, score_head(self.model))
        stats = self.row_stats
        stats.rows += 1
        stats.real_tokens += batch.real_tokens
        stats.row_tokens += batch.row_tokens
        stats.padding_tokens += batch.padding
        return values.float().cpu().tolist()

    def token_budget(self, asked: int | str | None = None) -> int:
        """``asked``, or the default for this device (see DEFAULT_TOKEN_BUDGET); ``"auto"``: on a
        GPU the largest forward batch that fits, probed once (`probe_scoring_budget`)."""
        if asked != AUTO:
            return asked if asked is not None else default_token_budget(self.device)
        if self.auto_budget is None:
            self.auto_budget = probe_scoring_budget(self)
        return self.auto_budget

    def max_batch(self, asked: int) -> int:
        """Most sequences in one forward batch: ``asked``."""
        return asked

    def score(self, items: Sequence[tuple[PromptText, str]], *, token_budget: int | None = None,
              batch_size: int = 64) -> list[float]:
        """The scorer interface: one float per (prompt, response), in input order."""
        return score_items(self, items, token_budget=token_budget, batch_size=batch_size)


def encode_all(rm, items: Sequence[tuple[PromptText, str]]) -> list[list[int]]:
    """``rm.encode_many(items)`` where the backend has it, else ``rm.encode`` one by one."""
    many = getattr(rm, "encode_many", None)
    return many(items) if many is not None else [rm.encode(*item) for item in items]


def score_items(rm, items: Sequence[tuple[PromptText, str]], *, token_budget: int | None,
                batch_size: int) -> list[float]:
    """Encode (prompt, response) items with ``rm.encode`` (each distinct conversation once),
    score them in batches (`scored_batches`) and return the scores in input order (any backend
    with ``encode``, ``score_ids`` and ``token_budget``)."""
    index: dict[tuple, int] = {}
    first = [index.setdefault(conversation_key(p, r), i) for i, (p, r) in enumerate(items)]
    distinct = sorted(index.values())
    encoded = encode_all(rm, [items[i] for i in distinct])
    prompts: dict[tuple, int] = {}
    prompt_of = [prompts.setdefault(prompt_key(items[i][0]), len(prompts)) for i in distinct]
    scores: dict[int, float] = {}
    for batch, values in scored_batches(rm, encoded, prompt_of, token_budget=token_budget, batch_size=batch_size):
        scores.update((distinct[k], v) for k, v in zip(batch, values))
    return [scores[j] for j in first]


def scored_batches(rm, encoded: Sequence[Sequence[int]], prompt_of: Sequence[int], *, token_budget: int | None,
                   batch_size: int) -> Iterator[tuple[list[int], list[float]]]:
    """Score the sequences ``encoded`` batch by batch, yielding (indices, scores) per batch.

    Padded (``rm.packing`` false): length-sorted batches of at most ``token_budget`` padded
    tokens. Packed: the sequences of one prompt (equal ``prompt_of``) form a group whose common
    prefix is laid down once (``rm.share_prefix``); groups are cut into parts within the budget
    and packed into rows of at most ``token_budget`` tokens and ``batch_size`` sequences.
    """
    budget = rm.token_budget(token_budget)
    batch_size = rm.max_batch(batch_size)
    if not getattr(rm, "packing", False):
        for batch in plan_batches([len(x) for x in encoded], token_budget=budget, max_batch_size=batch_size):
            seqs = [encoded[i] for i in batch]
            with out_of_memory_said(lambda: (budget, len(seqs) * max(map(len, seqs))), auto=token_budget == AUTO):
                values = rm.score_ids(seqs)
            yield batch, values
        return
    by_prompt: dict[int, list[int]] = {}
    for i, p in enumerate(prompt_of):
        by_prompt.setdefault(p, []).append(i)
    share = rm.share_prefix
    groups = [part for members in by_prompt.values()
              for part in _parts_within(members, encoded, budget, batch_size, share)]
    costs = [packed_cost([encoded[i] for i in g], share) for g in groups]
    for chosen in plan_batches(costs, token_budget=budget, max_batch_size=batch_size, packed=True,
                               sizes=[len(g) for g in groups]):
        seqs, layout = [], []
        for g in chosen:
            layout.append(list(range(len(seqs), len(seqs) + len(groups[g]))))
            seqs.extend(encoded[i] for i in groups[g])
        batch = [i for g in chosen for i in groups[g]]
        fixed = {"budget": budget} if getattr(rm, "fixed_shapes", False) else {}  # rows padded to a bucket
        with out_of_memory_said(lambda: (budget, sum(costs[g] for g in chosen)), auto=token_budget == AUTO):
            values = rm.score_packed(seqs, layout if share else [[k] for k in range(len(seqs))], **fixed)
        yield batch, values


PROBE_CEILING = 1 << 18
"""The largest scoring budget probed (262,144 tokens): beyond it a GPU gains nothing."""


def probe_scoring_budget(rm) -> int:
    """The largest forward batch of ``rm`` (a `TransformersRewardModel`) that fits its GPU: probes
    of one worst-case batch each (sequences of ``rm.max_length`` random tokens, packed or padded
    as ``rm`` runs), see :func:`cheems.models.memory_budget.probe_token_budget`; on CPU the default."""
    torch = require_torch()
    if not str(rm.device).startswith("cuda"):
        return default_token_budget(rm.device)
    vocab = int(getattr(rm.model.config, "vocab_size", 0) or 32000)
    generator = torch.Generator().manual_seed(0)

    def run(budget: int) -> None:
        seqs = probe_sequences(budget, rm.max_length, vocab, generator)
        rm.score_packed(seqs, budget=budget) if rm.packing else rm.score_ids(seqs)

    budget, _ = probe_token_budget(run, start=default_token_budget(rm.device), ceiling=PROBE_CEILING)
    return budget


def _parts_within(members: list[int], encoded, budget: int, batch_size: int, share: bool) -> list[list[int]]:
    """One prompt's sequences, in order, cut into parts of at most ``budget`` row tokens and
    ``batch_size`` sequences (a part has at least one sequence); alone each without sharing.
    A part's row tokens are kept up to date as sequences join it (its common prefix can only
    shrink), so a prompt of k sequences costs O(k x prefix)."""
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


def score_head(model):
    """The linear reward head of a decoder *ForSequenceClassification model, if it has one."""
    torch = require_torch()
    head = getattr(model, "score", None)
    if isinstance(head, torch.nn.Linear) and head.out_features == 1:
        return head
    return None


def load_reward_model(path: str | Path, *, device: str = "cpu", dtype: str = "auto", max_length: int = 2048,
                      truncation: str = "left", trust_remote_code: bool = False, packing: bool = True,
                      share_prefix: bool = True, liger_kernels: bool = False, compile: bool = False,
                      fixed_shapes: bool = False, reward_position: str | None = None) -> TransformersRewardModel:
    """Load a reward model folder with ``from_pretrained``, detecting its layout.

    ``dtype="auto"``: bfloat16 on CUDA, float32 on CPU. ``packing`` (default) scores packed
    rows with the packed attention (:mod:`cheems.models.packing`), ``share_prefix`` laying a
    prompt's common prefix down once; without packing, right-padded batches run SDPA attention
    (or flash-attention 2 on CUDA when installed). ``liger_kernels`` swaps in Liger's fused
    RMSNorm, SwiGLU and RoPE kernels (CUDA, the ``[gpu]`` extra); ``compile`` compiles each
    decoder layer (:func:`cheems.models.kernels.compile_layers`). ``fixed_shapes`` pads packed
    rows to a few lengths (:mod:`cheems.models.fixed_shapes`; scores unchanged), and with
    ``compile`` the layers are compiled for static shapes. ``reward_position``: where the reward
    is read (:mod:`cheems.models.reward_position`); None: the rule the checkpoint's config.json
    records, ``template_end`` when it records none.
    """
    torch = require_torch()
    from transformers import AutoModel

    path = Path(path)
    ModelSettings(device=device, dtype=dtype, max_length=max_length, truncation=truncation,
                  trust_remote_code=trust_remote_code, packing=packing, share_prefix=share_prefix,
                  liger_kernels=liger_kernels, compile=compile, fixed_shapes=fixed_shapes,
                  reward_position=reward_position)  # checked as the flags are: one declaration, one check
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise CheemsInputError("--device cuda asked for, but no CUDA device is available", field="device")
    if liger_kernels and not device.startswith("cuda"):
        raise CheemsInputError("Liger kernels run on CUDA GPUs only; leave out --liger-kernels or use --device cuda",
                               field="liger_kernels")
    layout = detect_layout(path)  # checks the folder before anything loads: weights whole, tokenizer, one label
    if device.startswith("cpu"):
        use_available_cores()  # torch's default is every core of the machine, busy or not
    torch_dtype = resolve_dtype(dtype, device)
    kwargs = {"dtype": torch_dtype, "trust_remote_code": trust_remote_code}
    if device.startswith("cuda"):
        kwargs["attn_implementation"] = best_attention()
    with quiet_transformers():
        tokenizer = load_tokenizer(path, trust_remote_code=trust_remote_code)
    tokenizer.padding_side = "right"
    v_head = None
    if layout == "seq-cls":
        model, _ = load_classifier(path, tokenizer, **kwargs)
    else:
        with quiet_transformers(), weights_that_fit(path):
            model = AutoModel.from_pretrained(path, **kwargs)
        v_head = _load_v_head(path).to(device=device, dtype=torch_dtype).eval()
    model = model.to(device).eval()
    if liger_kernels:
        from cheems.models.kernels import use_liger_kernels

        use_liger_kernels(model)
    if packing and layout == "seq-cls" and (score_head(model) is None or
                                            getattr(model, getattr(model, "base_model_prefix", ""), None) is None):
        packing = False  # an unfamiliar architecture scores with its own pooling, padded
    packing = packing and use_packed_attention(model)
    if compile:
        from cheems.models.kernels import compile_layers

        compile_layers(model, dynamic=not (fixed_shapes and packing))  # fixed shapes: a few static ones
    rule = reward_position or recorded_reward_position(model.config, file=str(path / "config.json"))
    return TransformersRewardModel(tokenizer, model, layout, device, max_length, truncation, v_head=v_head,
                                   packing=packing, share_prefix=share_prefix, fixed_shapes=fixed_shapes and packing,
                                   reward_position=rule)


def _load_v_head(path: Path):
    """The checkpoint's v_head as a ``torch.nn.Linear(hidden, 1)``."""
    torch = require_torch()
    f, keys = value_head_source(path)
    tensors = load_tensors(f, list(keys.values()))
    weight = tensors[keys["weight"]].reshape(1, -1)
    v_head = torch.nn.Linear(weight.shape[1], 1, bias="bias" in keys)
    with torch.no_grad():
        v_head.weight.copy_(weight)
        if "bias" in keys:
            v_head.bias.copy_(tensors[keys["bias"]].reshape(1))
    return v_head


def conversation_key(prompt: PromptText, response: str) -> tuple:
    """What makes two (prompt, response) items one conversation to the model: equal keys encode
    to the same tokens, so they are encoded and scored once and share the score."""
    return (prompt_key(prompt), response)


def score_prompts(rm: TransformersRewardModel, prompts: Sequence[Prompt], *, token_budget: int | None = None,
                  batch_size: int = 64, done: set | None = None,
                  progress: Callable[[int, int], None] | None = None) -> Iterator[list[tuple[str, str, float]]]:
    """Score every response of ``prompts``, yielding one list of (prompt id, response id, score)
    per batch, so the caller can append them to a file as they come.

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
    encoded = encode_all(rm, pending)
    for batch, scores in scored_batches(rm, encoded, prompt_of, token_budget=token_budget, batch_size=batch_size):
        rows = [(pid, rid, s) for i, s in zip(batch, scores) for pid, rid in owners[i]]
        yield rows
        finished += len(rows)
        if progress:
            progress(finished, total)


def check_batch_invariance(rm: TransformersRewardModel, prompts: Sequence[Prompt], *, n: int = 16,
                           token_budget: int | None = None, batch_size: int = 64, tolerance: float = 1e-3) -> dict:
    """Score up to ``n`` responses one at a time and again inside length-sorted batches.

    Returns ``{"n", "max_abs_diff", "tolerance", "ok"}``, the difference taken relative to the
    score where the score exceeds 1 in size; one above the tolerance means padding or position
    ids leak into the scores.
    """
    items = [(p.prompt, r.content) for p in prompts for r in p.responses][:n]
    if not items:
        raise CheemsInputError("nothing to check: no responses")
    saved, rows = rm.stats, getattr(rm, "row_stats", None)
    rm.stats = EncodeStats()  # the check's encodings and rows are not the run's
    if rows is not None:
        rm.row_stats = RowStats()
    alone = [rm.score([it], token_budget=token_budget, batch_size=1)[0] for it in items]
    # the sample again, padded among longer and shorter neighbours
    pool = [(p.prompt, r.content) for p in prompts for r in p.responses][: max(4 * n, n)]
    batched = rm.score(items + pool[n:], token_budget=token_budget, batch_size=batch_size)[:len(items)]
    rm.stats = saved
    if rows is not None:
        rm.row_stats = rows
    # relative above 1: bf16 keeps ~3 significant digits whatever the scale of the scores
    diff = max(abs(a - b) / max(1.0, abs(a)) for a, b in zip(alone, batched))
    return {"n": len(items), "max_abs_diff": diff, "tolerance": tolerance, "ok": diff <= tolerance}
