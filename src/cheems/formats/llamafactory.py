"""LLaMA-Factory's preference data: ShareGPT rows and alpaca rows, pairwise or ranked.

- ``sharegpt``: ``{conversations: [{from, value}], chosen, rejected, system?}``;
- ``alpaca``: ``{instruction, input?, chosen, rejected, system?, history?}``;
- ``alpaca-ranking``: ``{instruction, input?, output: [best, ...], system?, history?}``.

The alpaca question is ``instruction``, a newline and ``input`` (when not empty), as LLaMA-Factory
joins them; ``system`` and ``history`` make it chat messages.
"""

from __future__ import annotations

from typing import Any

from cheems.formats.fields import (assemble_prompt, chat_prompt, number_twins, preferred_rank,
                                   question_text)
from cheems.formats.pairs import PAIR_CONSUMED, parse_pair
from cheems.formats.spec import RowFormat
from cheems.records import CheemsInputError, Prompt, Response, response_id

__all__ = ["ALPACA", "ALPACA_RANKING", "SHAREGPT", "SHAREGPT_ROLES", "parse_alpaca", "parse_alpaca_ranking",
           "parse_sharegpt"]

SHAREGPT_ROLES = {"system": "system", "human": "user", "user": "user", "gpt": "assistant",
                  "assistant": "assistant"}
_ALPACA_CONSUMED = PAIR_CONSUMED | {"instruction", "system", "history"}


def parse_sharegpt(obj: dict) -> Prompt:
    """A ShareGPT preference row: the conversation, ending with a human turn, is the prompt."""
    conv = obj.get("conversations")
    if not isinstance(conv, list) or not conv:
        raise CheemsInputError("missing prompt: conversations must be a non-empty list",
                               field="conversations")
    messages = []
    system = obj.get("system")  # LLaMA-Factory's optional system column, unless a turn is the system's
    has_system_turn = isinstance(conv[0], dict) and conv[0].get("from") == "system"
    if isinstance(system, str) and system.strip() and not has_system_turn:
        messages.append({"role": "system", "content": system})
    for i, m in enumerate(conv):
        if not isinstance(m, dict) or not isinstance(m.get("value"), str):
            raise CheemsInputError("a turn must be {from, value} with a string value",
                                   field=f"conversations[{i}]")
        sender = m.get("from")
        role = SHAREGPT_ROLES.get(sender) if isinstance(sender, str) else None  # a list or dict is no role
        if role is None:
            raise CheemsInputError(f"'from' must be system, human or gpt, got {m.get('from')!r}",
                                   field=f"conversations[{i}].from")
        messages.append({"role": role, "content": m["value"]})
    if messages[-1]["role"] != "user":
        raise CheemsInputError("the last turn must be from 'human'", field="conversations")
    prompt: Any = messages[0]["content"] if len(messages) == 1 else messages
    return parse_pair(obj, prompt, PAIR_CONSUMED | {"conversations", "system"})


def parse_alpaca(obj: dict) -> Prompt:
    """LLaMA-Factory's alpaca pairwise row: the prompt is ``instruction`` + newline + ``input``
    (when non-empty), after the ``system`` text and ``history`` turns when given."""
    return parse_pair(obj, chat_prompt(obj, question_text(obj, "instruction", "input")), _ALPACA_CONSUMED)


def parse_alpaca_ranking(obj: dict) -> Prompt:
    """LLaMA-Factory's alpaca ranking row: ``output`` lists the responses, best first."""
    prompt = chat_prompt(obj, question_text(obj, "instruction", "input"))
    raw = obj.get("output")
    if not isinstance(raw, list) or len(raw) < 2:
        raise CheemsInputError("output must list two or more responses, best first (a row with one "
                               "output is for fine-tuning: it compares nothing)", field="output")
    fields = [f"output[{i}]" for i in range(len(raw))]
    responses = []
    for v, f in zip(raw, fields):
        if not isinstance(v, str):
            raise CheemsInputError("missing or not a string", field=f)
        responses.append(Response(response_id(v), v))
    number_twins(responses)
    return assemble_prompt(obj, prompt, responses, preferred_rank(responses), consumed=_ALPACA_CONSUMED | {"output"})


SHAREGPT = RowFormat("sharegpt", parse_sharegpt,
                     "LLaMA-Factory ShareGPT preference rows {conversations: [{from, value}], chosen, rejected, "
                     "system?}")
ALPACA = RowFormat("alpaca", parse_alpaca,
                   "LLaMA-Factory alpaca pairwise rows {instruction, input?, chosen, rejected, system?, history?}")
ALPACA_RANKING = RowFormat("alpaca-ranking", parse_alpaca_ranking,
                           "LLaMA-Factory alpaca ranking rows {instruction, input?, output: [best, ...], system?, "
                           "history?}")
