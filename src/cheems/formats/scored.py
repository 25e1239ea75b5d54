"""Scored responses: one response per row with a numeric score, the rows of one prompt ranked by it.

``scored`` reads, row by row:

- LLMEval-2's human and GPT-4 score files: ``{question_uuid, dialog_uuid, llm_name, dialog: [{role:
  user, content}, {role: llm, content}], hint, type, stars: {dimension: stars}}``, ranked by the
  sum of the ``stars`` (LLMEval-2's total);
- AlignBench's pointwise judgments: ``{question_id, category, subcategory, question, reference,
  model_id, answer_id, answer, judgment, rating: {dimension: 1-10}, score}``, ranked by ``score``;
- HelpSteer-style ratings: ``{prompt, response, helpfulness, correctness, coherence, complexity,
  verbosity}``, ranked by ``helpfulness`` unless another attribute is chosen;
- the rows of a TSV with a rank column (:mod:`~cheems.formats.tsv`): ``{prompt, response, rank}``,
  a lower rank better.

Each row is one prompt with one response (:func:`parse_scored`); its prompt id is the row's question
id (``question_id``, ``question_uuid``, ``prompt_id``) or, without one, the prompt's
(:func:`~cheems.records.prompt_id`), so every row of one prompt carries the same id. The rows of one
prompt are joined as the rows of one task are (:func:`cheems.formats.join.join_scored_rows`), then
:func:`rank_by_score` ranks the joined responses: higher score better, equal scores tied, rank 0 best.
The question id is the source's key: rows of one id that word the question differently are one
prompt, worded as the first (LLMEval-2), and responses are told apart by their answer ids, so two
models' answers of the same text stay two responses.
"""

from __future__ import annotations

import math
from typing import Any

from cheems.formats.fields import category_field, prompt_field, subset_field
from cheems.formats.spec import RowFormat
from cheems.records import CheemsInputError, Prompt, PromptText, Response, prompt_id, response_id
from cheems.settings import is_integer

__all__ = ["DEFAULT_ATTRIBUTES", "RANKED_BY", "SCORED", "parse_scored", "rank_by_score", "rank_scored",
           "score_value"]

DEFAULT_ATTRIBUTES = ("score", "rating", "helpfulness", "stars", "rank")
"""The attributes a row is ranked by when none is chosen: the first that holds a number (``stars``:
a mapping of numbers, summed). ``rank`` is the only one where lower is better."""

RANKED_BY = "ranked_by"
"""The prompt key that names the attribute its responses are ranked by."""

_PROMPT_ID_KEYS = ("question_id", "question_uuid", "prompt_id")
_RESPONSE_ID_KEYS = ("answer_id", "dialog_uuid", "response_id")
_MODEL_KEYS = ("llm_name", "model_id", "model")
_PROMPT_LEVEL = frozenset(("prompt", "question", "dialog", "category", "subcategory", "subset", "reference",
                           "hint", "type") + _PROMPT_ID_KEYS)
"""Keys that describe the prompt: kept on the prompt. The row's other keys describe its response."""
_ASSISTANT_ROLES = ("llm", "assistant")


def parse_scored(obj: dict, attribute: str | None = None) -> Prompt:
    """One scored row as a prompt with one response, not yet ranked (:func:`rank_by_score` ranks
    the joined rows). ``attribute``: what to rank by (a key, or ``key.sub`` inside a mapping such
    as ``stars.Correctness``); default the first of :data:`DEFAULT_ATTRIBUTES` the row holds."""
    prompt, content, used = _prompt_and_response(obj)
    attribute = attribute or _default_attribute(obj)
    score_value(obj, attribute)  # checked here, where the row's line is known
    if attribute == "score" and obj["score"] == -1 and "judgment" in obj:
        raise CheemsInputError("score is -1: AlignBench writes -1 when it could not parse the judge's rating; "
                               "drop the row or judge it again", field="score")
    rid = _text_key(obj, _RESPONSE_ID_KEYS) or response_id(content)
    model = _text_key(obj, _MODEL_KEYS)
    skip = used | _PROMPT_LEVEL | set(_RESPONSE_ID_KEYS) | set(_MODEL_KEYS)
    response = Response(rid, content, model, {k: v for k, v in obj.items() if k not in skip})
    pid = _text_key(obj, _PROMPT_ID_KEYS) or prompt_id(prompt)
    category = category_field(obj)
    sub = obj.get("subcategory")
    if isinstance(sub, str) and sub:
        category.append(sub)
    extra = {k: v for k, v in obj.items() if k in _PROMPT_LEVEL and k not in used and k not in _PROMPT_ID_KEYS
             and k not in ("category", "subcategory", "subset")}
    extra[RANKED_BY] = attribute
    return Prompt(pid, prompt, [response], None, [], category, subset_field(obj), extra)


def _prompt_and_response(obj: dict) -> tuple[PromptText, str, set[str]]:
    """The prompt, the response text, and the keys they were read from."""
    if "dialog" in obj:
        return _dialog(obj["dialog"]) + ({"dialog"},)
    prompt = prompt_field(obj, "prompt", "question")
    key = "response" if "response" in obj else "answer"
    content = obj.get(key)
    if not isinstance(content, str):
        raise CheemsInputError("missing or not a string (a scored row holds one response)", field=key)
    return prompt, content, {"prompt" if "prompt" in obj else "question", key}


def _dialog(dialog: Any) -> tuple[PromptText, str]:
    """LLMEval-2's ``dialog``: the turns before the last ``llm`` turn are the prompt, that turn the response."""
    if not isinstance(dialog, list) or len(dialog) < 2:
        raise CheemsInputError("must list the user's turns and the model's answer", field="dialog")
    messages = []
    for i, m in enumerate(dialog):
        if not isinstance(m, dict) or not isinstance(m.get("content"), str) or not isinstance(m.get("role"), str):
            raise CheemsInputError("a turn must be {role, content} with string values", field=f"dialog[{i}]")
        role = "assistant" if m["role"] in _ASSISTANT_ROLES else m["role"]
        messages.append({"role": role, "content": m["content"]})
    if messages[-1]["role"] != "assistant":
        raise CheemsInputError("the last turn must be the model's answer (role 'llm')", field="dialog")
    prompt = messages[:-1]
    if prompt[-1]["role"] != "user":
        raise CheemsInputError("the answer must follow a user turn", field="dialog")
    return (prompt[0]["content"] if len(prompt) == 1 else prompt), messages[-1]["content"]


def _text_key(obj: dict, keys: tuple[str, ...]) -> str | None:
    for k in keys:
        v = obj.get(k)
        if isinstance(v, str) and v or is_integer(v):
            return str(v)
    return None


def _default_attribute(obj: dict) -> str:
    for k in DEFAULT_ATTRIBUTES:
        v = obj.get(k)
        if _is_number(v) or (k == "stars" and isinstance(v, dict)):
            return k
    raise CheemsInputError(f"no score to rank by: expected a number in one of {', '.join(DEFAULT_ATTRIBUTES)} "
                           "(or name one in the format, scored:ATTRIBUTE); a row with one response and no "
                           "score compares nothing", field="score")


def _is_number(v: Any) -> bool:
    return (is_integer(v) or isinstance(v, float)) and not isinstance(v, bool) and math.isfinite(v)


def score_value(container: dict, attribute: str) -> float:
    """The number ``attribute`` names in a row (or a response's kept keys): a key, or ``key.sub``
    inside a mapping; a mapping of numbers (LLMEval-2's ``stars``) counts as their sum."""
    key, _, sub = attribute.partition(".")
    v = container.get(key)
    if sub and isinstance(v, dict):
        v = v.get(sub)
    if isinstance(v, dict) and not sub and v and all(_is_number(x) for x in v.values()):
        return float(sum(v.values()))
    if not _is_number(v):
        raise CheemsInputError(f"{attribute!r} must be a number to rank by, got {v!r}", field=attribute)
    return float(v)


def rank_by_score(p: Prompt) -> Prompt:
    """``p`` ranked by its responses' scores when it was read from scored rows (it names
    :data:`RANKED_BY`): rank 0 for the best score, equal scores tied, the next lower score one level
    down (a lower ``rank`` is better). Any other prompt is returned as it is."""
    attribute = p.extra.get(RANKED_BY)
    if attribute is None:
        return p
    sign = 1.0 if attribute == "rank" else -1.0  # sort keys: ascending, best first
    values = {r.id: sign * score_value(r.extra, attribute) for r in p.responses}
    levels = {v: i for i, v in enumerate(sorted(set(values.values())))}
    p.rank = {rid: levels[v] for rid, v in values.items()}
    return p


def rank_scored(prompts: list[Prompt]) -> list[Prompt]:
    """:func:`rank_by_score` of each prompt (after the rows of one prompt were joined)."""
    return [rank_by_score(p) for p in prompts]


SCORED = RowFormat("scored", parse_scored,
                   "scored responses, one a row, ranked by score {prompt|question|dialog, response|answer, "
                   "score|rating|helpfulness|stars|rank, question_id?, model?}",
                   keys=("dialog", "response", "answer"),
                   option="the attribute to rank by, e.g. correctness or stars.Correctness")
