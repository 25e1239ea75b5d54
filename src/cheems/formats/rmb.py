"""RMB's test sets: pairwise rows and best-of-N rows over a chat conversation.

- ``rmb``: ``{conversation_input, chosen: {answer}, reject: {answer}, category_path}``;
- ``rmb-bon``: ``{conversation_input, bon_best: {answer}, loser_list: [{answer}], category_path}``.

The prompt is ``conversation_input``; ``llm_name`` is each answer's model; ``category_path``
("Pairwise_set/Helpfulness/Code/…") gives the category tiers.
"""

from __future__ import annotations

from typing import Any

from cheems.formats.fields import (CONSUMED, assemble_prompt, category_field, chat_messages, number_twins,
                                   conversation_prompt, preferred_rank)
from cheems.formats.spec import RowFormat
from cheems.records import CheemsInputError, Prompt, PromptText, Response, response_id

__all__ = ["RMB", "RMB_BON", "parse_rmb", "parse_rmb_bon"]

_RMB_CONSUMED = CONSUMED | {"conversation_input", "category_path"}


def _rmb_prompt(obj: dict) -> PromptText:
    return conversation_prompt(chat_messages(obj.get("conversation_input"), "conversation_input"),
                               "conversation_input")


def _rmb_answer(v: Any, field: str) -> Response:
    """An RMB answer ``{answer, llm_name?, ...}``: llm_name is the model, other keys are kept."""
    if not isinstance(v, dict) or not isinstance(v.get("answer"), str):
        raise CheemsInputError("must be an object {answer, llm_name?} with a string answer", field=field)
    model = v.get("llm_name")
    return Response(response_id(v["answer"]), v["answer"], model if isinstance(model, str) else None,
                    {k: x for k, x in v.items() if k not in ("answer", "llm_name")})


def _category_path(obj: dict) -> list[str]:
    """RMB's ``category_path`` ("Pairwise_set/Helpfulness/Code/…") as category tiers; the leading
    "…_set" names RMB's test set, not a category, and is left out."""
    path = obj.get("category_path")
    if path is None:
        return category_field(obj)
    if not isinstance(path, str):
        raise CheemsInputError("category_path must be a '/'-separated string", field="category_path")
    tiers = [t for t in path.split("/") if t]
    return tiers[1:] if tiers and tiers[0].endswith("_set") else tiers


def parse_rmb(obj: dict) -> Prompt:
    """An RMB pairwise row: ``chosen`` is better than ``reject``."""
    prompt = _rmb_prompt(obj)
    responses = [_rmb_answer(obj.get("chosen"), "chosen"), _rmb_answer(obj.get("reject"), "reject")]
    number_twins(responses)
    return assemble_prompt(obj, prompt, responses, preferred_rank(responses),
                           consumed=_RMB_CONSUMED | {"chosen", "reject"}, category=_category_path(obj))


def parse_rmb_bon(obj: dict) -> Prompt:
    """An RMB best-of-N row: ``bon_best`` ranks above every loser and the losers tie, so the
    prompt's Exact Match (official tie rule) is RMB's best-of-N accuracy. An answer repeated
    among the losers is kept once (it ties with itself anyway)."""
    prompt = _rmb_prompt(obj)
    best = _rmb_answer(obj.get("bon_best"), "bon_best")
    losers = obj.get("loser_list")
    if not isinstance(losers, list) or not losers:
        raise CheemsInputError("loser_list must be a non-empty list of {answer}", field="loser_list")
    responses, seen = [best], {best.id}
    for i, v in enumerate(losers):
        r = _rmb_answer(v, f"loser_list[{i}]")
        if r.id == best.id:
            raise CheemsInputError("repeats bon_best: the best answer cannot also lose", field=f"loser_list[{i}]")
        if r.id not in seen:
            seen.add(r.id)
            responses.append(r)
    rank = {r.id: 0 if r is best else 1 for r in responses}
    return assemble_prompt(obj, prompt, responses, rank, consumed=_RMB_CONSUMED | {"bon_best", "loser_list"},
                           category=_category_path(obj))


RMB = RowFormat("rmb", parse_rmb,
                "RMB pairwise rows {conversation_input, chosen: {answer}, reject: {answer}, category_path}")
RMB_BON = RowFormat("rmb-bon", parse_rmb_bon,
                    "RMB best-of-N rows {conversation_input, bon_best: {answer}, loser_list: [{answer}], "
                    "category_path}", keys=("bon_best", "loser_list"))
