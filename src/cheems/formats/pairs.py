"""Preference pairs: one ``chosen`` response ranked above one ``rejected`` response.

- ``pair`` (RewardBench style): ``{prompt|input, chosen, rejected, subset?}``; the LLaMA-Factory,
  HH-RLHF and TRL readers end here once they have found the prompt (:func:`parse_pair`);
- ``medicalgpt``: the same pair under MedicalGPT's keys ``{question, response_chosen,
  response_rejected, system?, history?}``.
"""

from __future__ import annotations

from typing import Any

from cheems.formats.fields import (CONSUMED, assemble_prompt, chat_prompt, preferred_rank, prompt_field,
                                   question_text, text_responses)
from cheems.formats.spec import RowFormat
from cheems.records import Prompt

__all__ = ["MEDICALGPT", "PAIR", "PAIR_CONSUMED", "parse_medicalgpt", "parse_pair"]

PAIR_CONSUMED = CONSUMED | {"chosen", "rejected"}
"""The keys a pair's reader consumes (the rest stay on the row)."""


def parse_pair(obj: dict, prompt: Any = None, consumed: set[str] | frozenset[str] = PAIR_CONSUMED) -> Prompt:
    """A pair: ``chosen`` ranks above ``rejected``; the prompt is ``prompt`` (or ``input``) unless
    the caller has read it from the row's own fields."""
    if prompt is None:
        prompt = prompt_field(obj, "prompt", "input")
    responses = text_responses(obj, ("chosen", "rejected"), objects=True)
    return assemble_prompt(obj, prompt, responses, preferred_rank(responses), consumed=consumed)


def parse_medicalgpt(obj: dict) -> Prompt:
    """MedicalGPT's reward row: ``question`` after the optional ``system`` and ``history``."""
    responses = text_responses(obj, ("response_chosen", "response_rejected"))
    return assemble_prompt(obj, chat_prompt(obj, question_text(obj, "question")), responses,
                           preferred_rank(responses),
                           consumed=CONSUMED | {"question", "response_chosen", "response_rejected", "system",
                                                "history"})


PAIR = RowFormat("pair", parse_pair, "pairs, RewardBench style {prompt|input, chosen, rejected, subset?}")
MEDICALGPT = RowFormat("medicalgpt", parse_medicalgpt,
                       "MedicalGPT reward rows {question, response_chosen, response_rejected, system?, history?}",
                       keys=("response_chosen", "response_rejected"))
