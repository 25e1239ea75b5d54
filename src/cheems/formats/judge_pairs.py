"""Judges' pairwise test sets: two responses and a human label, a tie kept as a tie.

- ``autoj`` (Auto-J): ``{prompt, 'response 1', 'response 2', label: 0|1|2, scenario}``;
- ``critiquellm`` (CritiqueLLM / AlignBench): ``{question, response_1, response_2, label: 0|1|2,
  category}``;
- ``pandalm`` (PandaLM): ``{instruction, input, response1, response2, annotator1..3: 0|1|2}``, one
  vote per annotator.

Rank and comparisons say the same; a tie ranks both responses 0, so it is never read as a
preference.
"""

from __future__ import annotations

from typing import Any

from cheems.formats.fields import CONSUMED, labelled_pair, prompt_field, question_text, text_responses
from cheems.formats.spec import RowFormat
from cheems.records import CheemsInputError, Comparison, Prompt
from cheems.settings import is_integer

__all__ = ["AUTOJ", "CRITIQUELLM", "PANDALM", "parse_autoj", "parse_critiquellm", "parse_pandalm"]

_FIRST_SECOND_TIE = {0: "g", 1: "b", 2: "s"}  # Auto-J and CritiqueLLM: 0 = the first is better, 2 = tie
_PANDALM_VOTES = {1: "g", 2: "b", 0: "s"}  # PandaLM: 1 = response1 is better, 2 = response2, 0 = tie


def _label_number(v: Any, field: str, meaning: str) -> int:
    """A label 0, 1 or 2, given as an integer, an integral float or its text."""
    n = v
    if isinstance(v, float) and v.is_integer():
        n = int(v)
    elif isinstance(v, str) and v.strip() in ("0", "1", "2"):
        n = int(v)
    if not is_integer(n) or n not in (0, 1, 2):
        raise CheemsInputError(f"must be {meaning}, got {v!r}", field=field)
    return n


def parse_autoj(obj: dict) -> Prompt:
    """An Auto-J pairwise row: ``label`` 0 = response 1 is better, 1 = response 2, 2 = tie;
    the ``scenario`` is the category."""
    prompt = prompt_field(obj, "prompt")
    responses = text_responses(obj, ("response 1", "response 2"))
    label = _label_number(obj.get("label"), "label", "0 (response 1 is better), 1 (response 2) or 2 (tie)")
    scenario = obj.get("scenario")
    if not (scenario is None or isinstance(scenario, str)):
        raise CheemsInputError("scenario must be a string", field="scenario")
    return labelled_pair(obj, prompt, responses, _FIRST_SECOND_TIE[label], source="label",
                         consumed=CONSUMED | {"response 1", "response 2", "label", "scenario"},
                         category=[scenario] if scenario else None)


def parse_critiquellm(obj: dict) -> Prompt:
    """A CritiqueLLM / AlignBench pairwise row: ``label`` 0 = response_1 is better, 1 =
    response_2, 2 = tie (CritiqueLLM's README and evaluation code); ``category`` as given."""
    prompt = prompt_field(obj, "question")
    responses = text_responses(obj, ("response_1", "response_2"))
    label = _label_number(obj.get("label"), "label", "0 (response_1 is better), 1 (response_2) or 2 (tie)")
    return labelled_pair(obj, prompt, responses, _FIRST_SECOND_TIE[label], source="label",
                         consumed=CONSUMED | {"question", "response_1", "response_2", "label"})


def parse_pandalm(obj: dict) -> Prompt:
    """A PandaLM row: each ``annotatorN`` votes 1 (response1 is better), 2 (response2) or 0
    (tie). The rank follows the majority (more than half the votes), a tie without one; each
    vote is kept as a comparison by its annotator."""
    prompt = question_text(obj, "instruction", "input")
    responses = text_responses(obj, ("response1", "response2"))
    voters = sorted((k for k in obj if k.startswith("annotator") and k[9:].isdigit()), key=lambda k: int(k[9:]))
    if not voters:
        raise CheemsInputError("missing annotator votes (annotator1, annotator2, ...)", field="annotator1")
    a, b = responses[0].id, responses[1].id
    votes = [_PANDALM_VOTES[_label_number(obj[k], k, "0 (tie), 1 (response1 is better) or 2 (response2)")]
             for k in voters]
    majority = next((v for v in ("g", "b", "s") if 2 * votes.count(v) > len(votes)), "s")
    comparisons = [Comparison(a, b, v, annotator=k, source="vote") for k, v in zip(voters, votes)]
    return labelled_pair(obj, prompt, responses, majority, source="vote", comparisons=comparisons,
                         consumed=CONSUMED | {"instruction", "response1", "response2", *voters})


AUTOJ = RowFormat("autoj", parse_autoj,
                  "Auto-J pairwise rows {prompt, 'response 1', 'response 2', label: 0|1|2 (2 = tie), scenario}",
                  keys=("response 1", "response 2"))
CRITIQUELLM = RowFormat("critiquellm", parse_critiquellm,
                        "CritiqueLLM / AlignBench pairwise rows {question, response_1, response_2, label: 0|1|2 "
                        "(2 = tie), category}", keys=("response_1", "response_2"))
PANDALM = RowFormat("pandalm", parse_pandalm,
                    "PandaLM rows {instruction, input, response1, response2, annotator1..3: 0 (tie)|1|2}",
                    keys=("response1", "response2"))
