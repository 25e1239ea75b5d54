"""Chat transcripts as preference pairs: HH-RLHF and TRL.

- ``hh-rlhf``: ``{chosen: '\\n\\nHuman: … \\n\\nAssistant: …', rejected: …}``, two whole transcripts;
- ``trl``: TRL's conversational preference rows ``{prompt?, chosen: [messages], rejected: [messages]}``,
  the prompt explicit or shared by the two message lists.

Both find the prompt the two transcripts share and read the two last assistant turns as the pair.
"""

from __future__ import annotations

import re
from typing import Any

from cheems.formats.fields import assemble_prompt, chat_messages, number_twins, conversation_prompt, preferred_rank
from cheems.formats.pairs import PAIR_CONSUMED, parse_pair
from cheems.formats.spec import RowFormat
from cheems.records import CheemsInputError, Prompt, Response, response_id

__all__ = ["HH_RLHF", "TRL", "is_transcript", "parse_hh_rlhf", "parse_trl", "transcript_turns"]

_HH_TURN = re.compile(r"\n\n(Human|Assistant):")
_HH_ROLES = {"Human": "user", "Assistant": "assistant"}


def is_transcript(text: str) -> bool:
    """Whether ``text`` is an HH-RLHF transcript: "Human:" first, an Assistant turn after."""
    return text.lstrip().startswith("Human:") and "\n\nAssistant:" in text


def transcript_turns(text: Any, field: str) -> list[dict]:
    """The turns of an HH-RLHF transcript as messages; it must end with an Assistant turn (its
    content may be empty, as in prompts that leave the last turn to the answers)."""
    if not isinstance(text, str):
        raise CheemsInputError("missing or not a string", field=field)
    parts = _HH_TURN.split("\n\n" + text.lstrip())  # ["", "Human", " …", "Assistant", " …", ...]
    if parts[0].strip() or len(parts) < 5:
        raise CheemsInputError("not an HH-RLHF transcript '\\n\\nHuman: … \\n\\nAssistant: …'", field=field)
    turns = [{"role": _HH_ROLES[parts[i]], "content": parts[i + 1].strip()} for i in range(1, len(parts), 2)]
    if turns[-1]["role"] != "assistant":
        raise CheemsInputError("the transcript must end with an '\\n\\nAssistant:' turn", field=field)
    return turns


def parse_hh_rlhf(obj: dict) -> Prompt:
    """An HH-RLHF pair: the prompt is the conversation the two transcripts share before their
    last Assistant turn (messages; one Human turn is plain text), the responses those turns."""
    chosen = transcript_turns(obj.get("chosen"), "chosen")
    rejected = transcript_turns(obj.get("rejected"), "rejected")
    if chosen[:-1] != rejected[:-1]:
        raise CheemsInputError("the conversation before the last Assistant turn differs from chosen's: "
                               "a pair needs one shared prompt", field="rejected")
    if chosen[-2]["role"] != "user":
        raise CheemsInputError("the last Assistant turn must follow a Human turn", field="chosen")
    prompt = chosen[0]["content"] if len(chosen) == 2 else chosen[:-1]
    responses = [Response(response_id(t[-1]["content"]), t[-1]["content"]) for t in (chosen, rejected)]
    number_twins(responses)
    return assemble_prompt(obj, prompt, responses, preferred_rank(responses), consumed=PAIR_CONSUMED)


def parse_trl(obj: dict) -> Prompt:
    """TRL's conversational preference row: ``chosen`` and ``rejected`` are message lists that
    end with one assistant message each; the prompt is ``prompt`` (text or messages) or, when
    absent, the messages the two share up to the last user turn (TRL's implicit prompt). A row
    of plain strings is TRL's standard format, read as a pair."""
    if isinstance(obj.get("chosen"), str) and isinstance(obj.get("rejected"), str):
        return parse_pair(obj)
    chosen, rejected = chat_messages(obj.get("chosen"), "chosen"), chat_messages(obj.get("rejected"), "rejected")
    raw = obj.get("prompt")
    if raw is None:
        n = 0
        while n < min(len(chosen), len(rejected)) and chosen[n] == rejected[n]:
            n += 1
        while n and chosen[n - 1]["role"] != "user":  # the prompt ends with the user's turn
            n -= 1
        if n == 0:
            raise CheemsInputError("missing prompt: no 'prompt' field, and chosen and rejected share no "
                                   "conversation up to a user turn", field="prompt")
        prompt, tails = conversation_prompt(chosen[:n], "chosen"), (chosen[n:], rejected[n:])
    else:
        prompt = raw if isinstance(raw, str) else conversation_prompt(chat_messages(raw, "prompt"), "prompt")
        tails = (chosen, rejected)
    responses = []
    for name, tail in zip(("chosen", "rejected"), tails):
        if len(tail) != 1 or tail[0]["role"] != "assistant":
            raise CheemsInputError("must hold one assistant message after the prompt", field=name)
        responses.append(Response(response_id(tail[0]["content"]), tail[0]["content"]))
    number_twins(responses)
    return assemble_prompt(obj, prompt, responses, preferred_rank(responses), consumed=PAIR_CONSUMED)


HH_RLHF = RowFormat("hh-rlhf", parse_hh_rlhf,
                    "HH-RLHF transcripts {chosen: '\\n\\nHuman: … \\n\\nAssistant: …', rejected: …}")
TRL = RowFormat("trl", parse_trl,
                "TRL conversational preference rows {prompt?, chosen: [messages], rejected: [messages]}")
