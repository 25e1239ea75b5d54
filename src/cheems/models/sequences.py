"""Conversations as token sequences, in batches: what scoring and training feed a reward model.

Each (prompt, response) goes through the tokenizer's chat template as one conversation
(:func:`encode_conversation`) and ends where the model's reward is read
(:mod:`cheems.models.reward_position`: at the end-of-turn token for what `cheems train` trains);
the scoring back-ends all encode through `ConversationEncoder`, so each hands its model the same
tokens. Sequences are packed into batches under a padded-token budget (:func:`plan_batches`,
:func:`pack_in_order`), padded on the right to each batch's longest sequence only
(:func:`pad_right`), and the reward is read at each sequence's own last real token
(:func:`reward_at_last_token`), so scores do not depend on batch size or order.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Any, Sequence

from cheems.models.checkpoints import require_torch
from cheems.models.reward_position import TRAINED, RewardPosition
from cheems.records import CheemsInputError, PromptText

__all__ = ["DEFAULT_TOKEN_BUDGET", "ConversationEncoder", "EncodeStats", "apply_head", "chat_text",
           "default_token_budget", "device_tensor",
           "encode_conversation", "encode_conversations", "pack_in_order", "pad_right", "plan_batches",
           "reward_at_last_token"]

# Padded tokens per forward batch, measured with benchmarks/bench_scoring.py: on a GPU every
# budget from 8k to 32k ran ~29x faster than one sequence at a time; on a 2-core CPU only small
# batches (~1k tokens) beat one at a time, larger ones were slower (activations leave the cache).
DEFAULT_TOKEN_BUDGET = {"cpu": 1024, "cuda": 16384}


def default_token_budget(device) -> int:
    """The padded-token budget of one forward batch on ``device`` (see DEFAULT_TOKEN_BUDGET)."""
    return DEFAULT_TOKEN_BUDGET["cuda" if str(device).startswith("cuda") else "cpu"]


@dataclass
class EncodeStats:
    """What happened while turning conversations into token ids."""

    sequences: int = 0
    truncated: int = 0
    doubled_bos: int = 0
    no_chat_template: bool = False


def encode_conversation(tokenizer, prompt: PromptText, response: str, *, max_length: int, truncation: str,
                        stats: EncodeStats, reward_position: str | RewardPosition = TRAINED) -> list[int]:
    """Token ids of (prompt turns + response as the assistant turn) through the chat template,
    ending where ``reward_position`` reads the reward (a rule or a built `RewardPosition`;
    default: the rule `cheems train` trains with; :mod:`cheems.models.reward_position`).

    A BOS written by the template and added again by the tokenizer is removed once and
    counted; sequences over ``max_length`` are cut (``left`` keeps the end) and counted.
    """
    return encode_conversations(tokenizer, [(prompt, response)], max_length=max_length, truncation=truncation,
                                stats=stats, reward_position=reward_position)[0]


def encode_conversations(tokenizer, items: Sequence[tuple[PromptText, str]], *, max_length: int, truncation: str,
                         stats: EncodeStats, reward_position: str | RewardPosition = TRAINED,
                         chunk: int = 1024) -> list[list[int]]:
    """`encode_conversation` of every (prompt, response) in ``items``, in order. The tokenizer
    gets the rendered conversations ``chunk`` at a time: a fast tokenizer encodes a list on
    all cores, several times quicker than one text per call."""
    position = (reward_position if isinstance(reward_position, RewardPosition)
                else RewardPosition.of(tokenizer, reward_position))
    out: list[list[int]] = []
    bos = tokenizer.bos_token_id
    for start in range(0, len(items), chunk):
        texts = [_conversation_text(tokenizer, prompt, response, stats)
                 for prompt, response in items[start:start + chunk]]
        for ids in tokenizer(texts, add_special_tokens=True)["input_ids"]:
            if bos is not None and len(ids) > 1 and ids[0] == bos and ids[1] == bos:
                stats.doubled_bos += 1  # the template wrote BOS and the tokenizer added another
                ids = ids[1:]
            ids = position.sequence(ids)  # ends where the reward is read
            stats.sequences += 1
            if len(ids) > max_length:
                stats.truncated += 1
                ids = ids[-max_length:] if truncation == "left" else ids[:max_length]
            out.append(ids)
    return out


def _conversation_text(tokenizer, prompt: PromptText, response: str, stats: EncodeStats) -> str:
    """The conversation as the chat template writes it (role-prefixed lines without one)."""
    messages = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else list(prompt)
    messages = messages + [{"role": "assistant", "content": response}]
    if getattr(tokenizer, "chat_template", None):
        return chat_text(tokenizer, messages)
    stats.no_chat_template = True
    return "\n".join(f"{m['role']}: {m['content']}" for m in messages)


def chat_text(tokenizer, messages: list[dict], **kwargs) -> str:
    """``messages`` rendered by the tokenizer's chat template (``apply_chat_template`` with
    ``kwargs``); a template that fails on them (``raise_exception(...)``, an undefined name)
    is one error naming the model whose template it is and the template's message."""
    import jinja2

    try:
        return tokenizer.apply_chat_template(messages, tokenize=False, **kwargs)
    except jinja2.TemplateError as e:
        raise CheemsInputError(f"the chat template failed on a conversation: {e.message or type(e).__name__}",
                               file=str(getattr(tokenizer, "name_or_path", "") or "") or None) from None


class ConversationEncoder:
    """How a reward-model back-end turns (prompt, response) items into token ids: `encode` and
    `encode_many` with the back-end's ``tokenizer``, ``max_length`` and ``truncation``, counted
    in its ``stats``. The transformers and vLLM back-ends both inherit it, so a conversation
    becomes the same tokens whichever scores it, ending where its ``reward_position`` reads the
    reward; the back-end declares the five attributes."""

    tokenizer: Any
    max_length: int
    truncation: str  # "left" keeps a long sequence's end, "right" its start
    stats: EncodeStats
    reward_position: str  # where the reward is read (cheems.models.reward_position): the checkpoint's record

    @cached_property
    def position(self) -> RewardPosition:
        """The ``reward_position`` rule for this tokenizer (its template's end found once):
        what every sequence this model scores goes through, rows and texts alike."""
        return RewardPosition.of(self.tokenizer, self.reward_position)

    def encode(self, prompt: PromptText, response: str) -> list[int]:
        """Token ids of the conversation (prompt turns + the response as the assistant turn)."""
        return encode_conversation(self.tokenizer, prompt, response, max_length=self.max_length,
                                   truncation=self.truncation, stats=self.stats, reward_position=self.position)

    def encode_many(self, items: Sequence[tuple[PromptText, str]]) -> list[list[int]]:
        """`encode` of every (prompt, response), the tokenizer taking them in chunks."""
        return encode_conversations(self.tokenizer, items, max_length=self.max_length, truncation=self.truncation,
                                    stats=self.stats, reward_position=self.position)


def device_tensor(values, device, dtype=None):
    """``values`` (a list, or a CPU tensor) as a tensor on ``device`` (long integers unless
    ``dtype`` says otherwise). To a GPU the copy goes from pinned host memory without blocking:
    a copy from ordinary (pageable) memory makes the host wait until the GPU has finished all
    the work queued before it, which would stall the queue between forward batches."""
    torch = require_torch()
    host = values if isinstance(values, torch.Tensor) else torch.tensor(values, dtype=dtype or torch.long)
    if str(device).startswith("cuda"):
        return host.pin_memory().to(device, non_blocking=True)
    return host.to(device)


def pad_right(seqs: Sequence[Sequence[int]], pad_id: int, device):
    """Right-padded (n, longest) input ids and attention mask on ``device``."""
    torch = require_torch()
    width = max(len(s) for s in seqs)
    input_ids = torch.full((len(seqs), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(seqs), width), dtype=torch.long)
    for i, s in enumerate(seqs):
        input_ids[i, :len(s)] = torch.tensor(s, dtype=torch.long)
        mask[i, :len(s)] = 1
    return device_tensor(input_ids, device), device_tensor(mask, device)


def reward_at_last_token(hidden, attention_mask, head):
    """One reward per row: ``head`` applied to the hidden state (n, width, hidden) at each
    row's last real token (right padding: position ``mask.sum() - 1``), whatever the pad
    token is (it may equal the end-of-turn token the chat template writes). Returns (n,)."""
    torch = require_torch()
    last = attention_mask.sum(dim=1) - 1  # (n,)
    return apply_head(head, hidden[torch.arange(len(last), device=hidden.device), last])


def apply_head(head, picked):
    """``head`` on hidden states ``picked`` (n, hidden), cast to the head's dtype when it is
    kept in another (a v_head in float32 on a bf16 model). Returns (n,)."""
    weight = getattr(head, "weight", None)
    if weight is not None and weight.dtype != picked.dtype:
        picked = picked.to(weight.dtype)
    return head(picked).squeeze(-1)


def plan_batches(lengths: Sequence[int], *, token_budget: int = 8192, max_batch_size: int = 64,
                 packed: bool = False, sizes: Sequence[int] | None = None) -> list[list[int]]:
    """Group item indices into batches, longest first, each within a token budget.

    A batch's cost is (its longest sequence) x (its size), the tokens actually computed after
    right padding, or with ``packed`` the sum of the lengths (one packed row); an item longer
    than the budget gets a batch of its own. An item is one sequence, or ``sizes[i]`` of them
    (a group of a packed row, ``lengths[i]`` its tokens there) counted against
    ``max_batch_size``. Every index appears exactly once. O(n log n).
    """
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    return pack_in_order(order, lengths, token_budget=token_budget, max_batch_size=max_batch_size, packed=packed,
                         sizes=sizes)


def pack_in_order(order: Sequence[int], lengths: Sequence[int], *, token_budget: float,
                  max_batch_size: float, packed: bool = False, sizes: Sequence[int] | None = None) -> list[list[int]]:
    """Cut ``order`` into consecutive batches: a batch closes when the next item would push
    its cost over ``token_budget`` or its sequences (``sizes[i]`` per item, else 1) over
    ``max_batch_size``; the cost is (longest x size) when padded, the sum of the lengths when
    ``packed`` into one row. O(n)."""
    batches: list[list[int]] = []
    current: list[int] = []
    longest = total = count = 0
    for i in order:
        n, k = lengths[i], 1 if sizes is None else sizes[i]
        longest_if = max(longest, n)
        cost = total + n if packed else longest_if * (len(current) + 1)
        if current and (cost > token_budget or count + k > max_batch_size):
            batches.append(current)
            current, longest_if, total, count = [], n, 0, 0
        current.append(i)
        longest = longest_if
        total += n
        count += k
    if current:
        batches.append(current)
    return batches
