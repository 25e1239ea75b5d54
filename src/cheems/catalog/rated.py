"""English catalogue entries whose preferences come from ratings: Stack Exchange votes,
UltraFeedback's GPT-4 scores, HelpSteer2's attribute ratings and preference strengths.

Every converter keeps ties as ties (equal ratings share a rank) and keeps a whole ranking
together (four UltraFeedback completions are one row, not six pairs). Row ids are the
dataset's own where it has one (a Stack Exchange question id, UltraFeedback's ``prompt_id``),
else derived from the prompt and its responses (:func:`cheems.records.prompt_id`), so they
are the same on every run.
"""

from __future__ import annotations

from typing import Any, Iterable
from urllib.parse import urlsplit

from cheems.catalog.entry import Conversion, Entry, Option, need_columns, pair_prompt, scored_prompt, text_value
from cheems.catalog.html_text import html_text
from cheems.records import CheemsInputError, Prompt, PromptText, is_number

__all__ = ["ENTRIES", "HELPSTEER2_ATTRIBUTES", "HelpSteer2Rankings", "MATH_SITE", "convert_helpsteer2_preference",
           "convert_stack_exchange", "convert_ultrafeedback", "convert_ultrafeedback_raw", "is_math_question"]

MATH_SITE = "math.stackexchange.com"
HELPSTEER2_ATTRIBUTES = ("helpfulness", "correctness", "coherence", "complexity", "verbosity")


# ----------------------------------------------------------------------------- Stack Exchange

def is_math_question(row: dict) -> bool:
    """Whether a stack-exchange-preferences row is a math.stackexchange.com question: its
    ``metadata`` links (question, site and author URLs) name that host. A row whose metadata
    holds no URL is kept: the entry reads the site's own folder, so it is that site's."""
    hosts = {urlsplit(item).hostname for item in row.get("metadata") or () if isinstance(item, str) and "://" in item}
    hosts.discard(None)
    return not hosts or MATH_SITE in hosts


def _site(row: dict) -> str | None:
    for item in row.get("metadata") or ():
        if isinstance(item, str) and "://" in item and urlsplit(item).hostname:
            return urlsplit(item).hostname
    return None


def convert_stack_exchange(row: dict, index: int, conv: Conversion) -> Iterable[Prompt]:
    """One question with its answers as one ranking: prompt and responses are the HTML bodies
    as plain text (:func:`~cheems.catalog.html_text.html_text`), ranked by ``pm_score``
    (log2(1 + upvotes), +1 if accepted; higher is better, equal scores tie). A question with
    fewer than two answers that have text yields nothing. Id: the question id; response ids:
    the answer ids; category: the site."""
    need_columns(row, ("qid", "question", "answers"), dataset=conv.name)
    answers = row["answers"]
    if not isinstance(answers, list):
        raise CheemsInputError(f"must be a list of answers, got {type(answers).__name__}", field="answers")
    ids, contents, scores = [], [], []
    for i, answer in enumerate(answers):
        if not isinstance(answer, dict):
            raise CheemsInputError("must be an object", field=f"answers[{i}]")
        aid, score, text = answer.get("answer_id"), answer.get("pm_score"), answer.get("text")
        if aid is None or isinstance(aid, bool):
            raise CheemsInputError("is missing", field=f"answers[{i}].answer_id")
        if not is_number(score):
            raise CheemsInputError(f"must be a number, got {score!r}", field=f"answers[{i}].pm_score")
        if not isinstance(text, str):
            raise CheemsInputError(f"must be a string, got {type(text).__name__}", field=f"answers[{i}].text")
        content = html_text(text)
        if content:  # an answer whose body has no text (an image without alt) has nothing to rank
            ids.append(str(aid))
            contents.append(content)
            scores.append(score)
    if len(contents) < 2:
        conv.leave_out("questions with fewer than two answers with text (nothing to rank)")
        return []
    if len(set(ids)) != len(ids):
        raise CheemsInputError("two answers share an answer_id", field="answers")
    question = html_text(text_value(row, "question"))
    if not question:
        raise CheemsInputError("has no text once its HTML is read", field="question")
    qid = row["qid"]
    if isinstance(qid, bool) or not isinstance(qid, (int, str)) or qid == "":
        raise CheemsInputError(f"must be the question's id, got {qid!r}", field="qid")
    site = _site(row)
    return [scored_prompt(str(qid), question, contents, scores, ids=ids,
                          category=[site] if site else [], subset=conv.name)]


# ----------------------------------------------------------------------------- UltraFeedback

def _messages(row: dict, key: str) -> list[dict]:
    value = row.get(key)
    if not isinstance(value, list) or not value:
        raise CheemsInputError("must be a non-empty list of messages", field=key)
    messages = []
    for i, m in enumerate(value):
        if not isinstance(m, dict) or not isinstance(m.get("content"), str) or not isinstance(m.get("role"), str):
            raise CheemsInputError("must be a message {role, content}", field=f"{key}[{i}]")
        messages.append({"role": m["role"], "content": m["content"]})
    return messages


def _chat_prompt(messages: list[dict]) -> PromptText:
    """The conversation before the answer: one user turn as its text, more as messages."""
    if len(messages) == 1 and messages[0]["role"] == "user":
        return messages[0]["content"]
    return messages


def convert_ultrafeedback(row: dict, index: int, conv: Conversion) -> Iterable[Prompt]:
    """A binarized UltraFeedback pair: ``chosen`` and ``rejected`` are the same conversation
    ending in different assistant turns, scored ``score_chosen`` and ``score_rejected`` (GPT-4
    overall scores); equal scores are a tie. Id: ``prompt_id``; subset: the split."""
    need_columns(row, ("prompt_id", "chosen", "rejected", "score_chosen", "score_rejected"), dataset=conv.name)
    chosen, rejected = _messages(row, "chosen"), _messages(row, "rejected")
    for key, messages in (("chosen", chosen), ("rejected", rejected)):
        if messages[-1]["role"] != "assistant" or len(messages) < 2:
            raise CheemsInputError("must end with an assistant turn after the prompt", field=key)
    if chosen[:-1] != rejected[:-1]:
        raise CheemsInputError("is not the same conversation as chosen up to its last turn", field="rejected")
    for key in ("score_chosen", "score_rejected"):
        if not is_number(row[key]):
            raise CheemsInputError(f"must be a number, got {row[key]!r}", field=key)
    tie = row["score_chosen"] == row["score_rejected"]
    return [pair_prompt(text_value(row, "prompt_id"), _chat_prompt(chosen[:-1]), chosen[-1]["content"],
                        rejected[-1]["content"], tie=tie, subset=conv.split)]


_UF_SCORES = {"overall": "overall_score", "fine-grained": "fine-grained_score"}


def convert_ultrafeedback_raw(row: dict, index: int, conv: Conversion) -> Iterable[Prompt]:
    """One UltraFeedback instruction with its (usually four) completions as one ranking by
    the option's score: ``overall_score`` (GPT-4's 1-10 overall rating, the default) or
    ``fine-grained_score`` (the mean of the four aspect ratings); higher is better, equal
    scores tie. Response ids are the completions' positions, ``model`` the model that wrote
    each. Id: derived from the instruction and the responses; category: ``source``."""
    need_columns(row, ("source", "instruction", "completions"), dataset=conv.name)
    key = _UF_SCORES[conv.option or "overall"]
    completions = row["completions"]
    if not isinstance(completions, list):
        raise CheemsInputError(f"must be a list, got {type(completions).__name__}", field="completions")
    contents, scores, models = [], [], []
    for i, completion in enumerate(completions):
        if not isinstance(completion, dict):
            raise CheemsInputError("must be an object", field=f"completions[{i}]")
        response, score = completion.get("response"), completion.get(key)
        if not isinstance(response, str):
            raise CheemsInputError(f"must be a string, got {type(response).__name__}",
                                   field=f"completions[{i}].response")
        if not is_number(score):
            raise CheemsInputError(f"must be a number, got {score!r}", field=f"completions[{i}].{key}")
        contents.append(response)
        scores.append(score)
        models.append(completion.get("model") if isinstance(completion.get("model"), str) else None)
    if len(contents) < 2:
        conv.leave_out("instructions with fewer than two rated completions (nothing to rank)")
        return []
    source = row["source"]
    return [scored_prompt(None, text_value(row, "instruction"), contents, scores, models=models,
                          category=[source] if isinstance(source, str) and source else [], subset=conv.name)]


# ----------------------------------------------------------------------------- HelpSteer2

def _rating(row: dict, key: str, field: str | None = None) -> Any:
    value = row.get(key)
    if not is_number(value):
        raise CheemsInputError(f"must be a number, got {value!r}", field=field or key)
    return value


class HelpSteer2Rankings:
    """HelpSteer2's rating rows as rankings: the file holds the responses to one prompt on
    consecutive rows (two per prompt), each rated 0-4 on five attributes. A converter sees one
    row at a time, so this one gathers the rows of the current prompt and, when a row with
    another prompt arrives (or the split ends: :meth:`finish`), yields them as one ranking by
    the option's attribute (higher first; equal ratings tie). A prompt with one response
    yields nothing.

    It keeps state within one read: :meth:`fresh` gives each read its own (the catalogue
    calls it), and a row with index 0 or of another split starts afresh in any case. Id:
    derived from the prompt and its responses; response ids ``0``, ``1``, ... in file order;
    subset: the split.
    """

    def __init__(self) -> None:
        self._rows: list[dict] = []
        self._conv: Conversion | None = None

    def fresh(self) -> "HelpSteer2Rankings":
        """A converter with nothing gathered, for one read."""
        return HelpSteer2Rankings()

    def __call__(self, row: dict, index: int, conv: Conversion) -> Iterable[Prompt]:
        need_columns(row, ("prompt", "response", *HELPSTEER2_ATTRIBUTES), dataset=conv.name)
        prompt = text_value(row, "prompt")
        text_value(row, "response")
        _rating(row, _attribute(conv))
        other_split = self._conv is not None and (self._conv.split, self._conv.config) != (conv.split, conv.config)
        if index == 0 or other_split:
            self._rows, self._conv = [], None  # a new read: what was gathered belongs to another
        done: list[Prompt] = []
        if self._rows and self._rows[0]["prompt"] != prompt:
            done = self.finish(conv)
        self._rows.append(row)
        self._conv = conv
        return done

    def finish(self, conv: Conversion) -> list[Prompt]:
        """The ranking of the rows gathered last (none for a prompt with one response); called
        once the split has no more rows."""
        rows, self._rows, self._conv = self._rows, [], None
        if len(rows) < 2:
            if rows:
                conv.leave_out("prompts with a single response (nothing to rank)")
            return []
        attribute = _attribute(conv)
        return [scored_prompt(None, rows[0]["prompt"], [r["response"] for r in rows], [r[attribute] for r in rows],
                              subset=conv.split)]


def _attribute(conv: Conversion) -> str:
    attribute = conv.option or "helpfulness"
    if attribute not in HELPSTEER2_ATTRIBUTES:
        raise CheemsInputError(f"unknown attribute {attribute!r}; one of {', '.join(HELPSTEER2_ATTRIBUTES)}",
                               field="option")
    return attribute


_PREFERENCE_SPLITS = {"train": "train", "val": "validation", "validation": "validation"}
"""The ``split`` column of HelpSteer2's preference file, as the entry's split names."""


def convert_helpsteer2_preference(row: dict, index: int, conv: Conversion) -> Iterable[Prompt]:
    """A HelpSteer2-Preference pair: ``preference_strength`` from -3 (``response_1`` much
    better) through 0 (about the same: a tie) to 3 (``response_2`` much better). Response ids
    are ``response_1`` and ``response_2``; id: derived from the prompt and both responses.
    The file holds both splits: a row belongs to the split its ``split`` column names
    (``train``, or ``val`` for the entry's ``validation``), which is also its subset."""
    need_columns(row, ("split", "prompt", "response_1", "response_2", "preference_strength"), dataset=conv.name)
    strength = _rating(row, "preference_strength")
    if strength not in (-3, -2, -1, 0, 1, 2, 3):
        raise CheemsInputError(f"must be an integer from -3 to 3, got {strength!r}", field="preference_strength")
    if _PREFERENCE_SPLITS.get(row.get("split")) != conv.split:
        return []  # the file holds both splits; the row's own ``split`` says which it belongs to
    return [scored_prompt(None, text_value(row, "prompt"),
                          [text_value(row, "response_1"), text_value(row, "response_2")], [-strength, strength],
                          ids=("response_1", "response_2"), subset=conv.split)]


# ----------------------------------------------------------------------------- the entries

ENTRIES: list[Entry] = [
    Entry(
        name="math-stack-exchange", title="MathStackExchange", hub_id="HuggingFaceH4/stack-exchange-preferences",
        language="en", licence="cc-by-sa-4.0", size="math part of ~10.7M",
        convert=convert_stack_exchange, columns=("qid", "question", "answers", "metadata"),
        description="Math Stack Exchange questions with two or more answers, ranked by vote score "
                    "(log2(1 + upvotes), +1 when accepted); HTML read as plain text, LaTeX kept.",
        configs=("data/math.stackexchange.com",), config="data/math.stackexchange.com", config_is_data_dir=True,
        streaming=True, keep=is_math_question),
    Entry(
        name="ultrafeedback", title="UltraFeedback", hub_id="HuggingFaceH4/ultrafeedback_binarized",
        language="en", licence="mit", size="~63k pairs",
        convert=convert_ultrafeedback,
        columns=("prompt_id", "chosen", "rejected", "score_chosen", "score_rejected"),
        description="UltraFeedback binarized: the best-scored of four completions against one of the "
                    "other three; equal GPT-4 scores kept as ties.",
        splits=("train_prefs", "test_prefs"), split="train_prefs"),
    Entry(
        name="ultrafeedback-raw", title="UltraFeedback (raw)", hub_id="openbmb/UltraFeedback",
        language="en", licence="mit", size="~64k prompts x 4",
        convert=convert_ultrafeedback_raw, columns=("source", "instruction", "completions"),
        description="UltraFeedback as published: four completions per instruction ranked by GPT-4's "
                    "score, ties kept; category is the instruction's source.",
        option=Option(name="score", choices=("overall", "fine-grained"), default="overall",
                      help="rank by overall_score (GPT-4's 1-10 rating) or fine-grained_score "
                           "(the mean of the four aspect ratings)")),
    Entry(
        name="helpsteer2", title="HelpSteer2", hub_id="nvidia/HelpSteer2",
        language="en", licence="cc-by-4.0", size="~10.7k prompts x 2",
        convert=HelpSteer2Rankings(), columns=("prompt", "response", *HELPSTEER2_ATTRIBUTES),
        description="HelpSteer2: two responses per prompt rated 0-4 on five attributes, ranked by the "
                    "chosen attribute; equal ratings tie.",
        splits=("train", "validation"), split="train",
        data_files={"train": "train.jsonl.gz", "validation": "validation.jsonl.gz"},
        option=Option(name="attribute", choices=HELPSTEER2_ATTRIBUTES, default="helpfulness",
                      help="the attribute whose 0-4 rating ranks the two responses (higher first)")),
    Entry(
        name="helpsteer2-preference", title="HelpSteer2 (preference)", hub_id="nvidia/HelpSteer2",
        language="en", licence="cc-by-4.0", size="~9k pairs",
        convert=convert_helpsteer2_preference,
        columns=("split", "prompt", "response_1", "response_2", "preference_strength"),
        description="HelpSteer2-Preference: pairs with an annotated preference strength from -3 to 3; "
                    "0 (about the same) kept as a tie.",
        splits=("train", "validation"), split="train",
        data_files={"train": "preference/preference.jsonl.gz", "validation": "preference/preference.jsonl.gz"}),
]
