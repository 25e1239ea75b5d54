"""Verdict-first judge prompts as token sequences: what a generative reward model trains on
and what a local judge scores.

:func:`encode_judge_prompts` renders each conversation (system + user messages of a
:class:`~cheems.llm.verdict_template.VerdictTemplate`) through the tokenizer's chat template
with the generation prompt, so the next token the model writes is its verdict.
:func:`verdict_token_ids` finds that token for each verdict letter: it renders the same
conversation with the letter as the assistant's reply and takes the first token after the
generation prompt, so tokenizers that glue a space or a marker to the first word (``▁A``)
are handled, and it refuses letters that are not one distinct token each.
"""

from __future__ import annotations

from typing import Sequence

from cheems.models.sequences import EncodeStats, chat_text
from cheems.records import CheemsInputError

__all__ = ["encode_judge_prompts", "verdict_token_ids"]


def _render(tokenizer, messages: list[dict], *, reply: str | None, stats: EncodeStats) -> str:
    """The conversation as text: through the chat template (with the generation prompt, or
    with ``reply`` as the assistant turn), else role-prefixed lines ending in ``assistant:``."""
    if getattr(tokenizer, "chat_template", None):
        if reply is None:
            return chat_text(tokenizer, messages, add_generation_prompt=True)
        return chat_text(tokenizer, messages + [{"role": "assistant", "content": reply}])
    stats.no_chat_template = True
    head = "\n".join(f"{m['role']}: {m['content']}" for m in messages) + "\nassistant:"
    return head if reply is None else f"{head} {reply}"


def _ids(tokenizer, texts: list[str], stats: EncodeStats) -> list[list[int]]:
    bos = tokenizer.bos_token_id
    out = []
    for ids in tokenizer(texts, add_special_tokens=True)["input_ids"]:
        if bos is not None and len(ids) > 1 and ids[0] == bos and ids[1] == bos:
            stats.doubled_bos += 1
            ids = ids[1:]
        out.append(ids)
    return out


def encode_judge_prompts(tokenizer, conversations: Sequence[list[dict]], *, max_length: int, stats: EncodeStats,
                         chunk: int = 512) -> list[list[int]]:
    """Token ids of each judge conversation up to and including the generation prompt. A
    prompt over ``max_length`` keeps its last ``max_length`` tokens (the verdict question and
    the end of response B stay; the start of the material is cut), and is counted."""
    out: list[list[int]] = []
    for start in range(0, len(conversations), chunk):
        texts = [_render(tokenizer, c, reply=None, stats=stats) for c in conversations[start:start + chunk]]
        for ids in _ids(tokenizer, texts, stats):
            stats.sequences += 1
            if len(ids) > max_length:
                stats.truncated += 1
                ids = ids[-max_length:]
            out.append(ids)
    return out


def verdict_token_ids(tokenizer, verdicts: Sequence[str], messages: list[dict] | None = None) -> list[int]:
    """The token id the model writes first for each verdict letter, in ``verdicts`` order.
    Raises CheemsInputError when a letter's reply does not start with one token of its own or
    two letters share their first token."""
    messages = messages or [{"role": "user", "content": "?"}]
    stats = EncodeStats()
    prompt = _ids(tokenizer, [_render(tokenizer, messages, reply=None, stats=stats)], stats)[0]
    found = []
    for verdict in verdicts:
        full = _ids(tokenizer, [_render(tokenizer, messages, reply=verdict, stats=stats)], stats)[0]
        if full[:len(prompt)] != prompt or len(full) == len(prompt):
            raise CheemsInputError(f"the tokenizer's chat template does not continue the generation prompt with "
                                   f"the reply {verdict!r}; a judge needs a template whose assistant turn follows it")
        token = full[len(prompt)]
        if tokenizer.decode([token]).strip() != verdict.strip():
            raise CheemsInputError(f"the verdict {verdict!r} is not one token of this tokenizer (its reply starts with "
                                   f"{tokenizer.decode([token])!r}); choose single-token verdicts in the template")
        found.append(token)
    if len(set(found)) != len(found):
        raise CheemsInputError(f"the verdicts {', '.join(map(repr, verdicts))} share a first token; choose distinct "
                               "single-token verdicts")
    return found
