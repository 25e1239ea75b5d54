"""The Chinese preference sets of the catalogue: translated HH-RLHF, Huozi, Kyara, Zhihu,
DPO-En-Zh-20k's Chinese half and COIG-P.

Each converter reads one hub row into one preference pair (:func:`~cheems.catalog.entry.pair_prompt`):
the row's own id where the dataset has one, else an id derived from the prompt and the two
texts; a tie where the dataset marks one (Zhihu's equal vote counts); the subset is the config
read (``zh``) or the entry's name; the category is the dataset's own field where it has one.
A row with an empty prompt or response is refused with an error naming the field.
"""

from __future__ import annotations

from typing import Any, Iterable

from cheems.catalog.entry import Conversion, Entry, need_columns, pair_prompt
from cheems.formats.fields import chat_messages, conversation_prompt
from cheems.formats.llamafactory import SHAREGPT_ROLES
from cheems.records import CheemsInputError, Prompt, PromptText

__all__ = ["ENTRIES", "convert_coig_p", "convert_dpo_en_zh", "convert_hh_rlhf_cn", "convert_huozi",
           "convert_kyara", "convert_zhihu"]


# ----------------------------------------------------------------------------- reading fields

def _blank(value: Any) -> bool:
    """None, NaN (an empty CSV cell) or a string of white space."""
    return value is None or (isinstance(value, float) and value != value) or (
        isinstance(value, str) and not value.strip())


def _text(row: dict, key: str) -> str:
    """``row[key]`` as a non-empty string; an empty cell (None, NaN, white space) is "is empty"."""
    value = row.get(key)
    if _blank(value):
        raise CheemsInputError("is empty", field=key)
    if not isinstance(value, str):
        raise CheemsInputError(f"must be a string, got {type(value).__name__}", field=key)
    return value


def _subset(conv: Conversion) -> str:
    """The config read (``zh``) where the dataset has configs, else the entry's name."""
    return conv.config or conv.name


def _row_id(row: dict) -> str | None:
    """The dataset's own ``id``, when the row has one (else the id is derived from the texts)."""
    rid = row.get("id")
    if _blank(rid):
        return None
    if isinstance(rid, bool) or not isinstance(rid, (str, int)):
        raise CheemsInputError("id must be a string or an integer", field="id")
    return str(rid)


def _category(row: dict, *keys: str) -> list[str]:
    """The first of ``keys`` the row has, as category tiers ([] when none)."""
    for key in keys:
        value = row.get(key)
        if _blank(value):
            continue
        if isinstance(value, str):
            return [value]
        if isinstance(value, list) and value and all(isinstance(v, str) for v in value):
            return list(value)
        raise CheemsInputError("must be a string or a list of strings", field=key)
    return []


def _check_prompt(prompt: PromptText, field: str) -> PromptText:
    """Refuse a prompt whose (last) user turn is empty."""
    last = prompt if isinstance(prompt, str) else prompt[-1]["content"]
    if _blank(last):
        raise CheemsInputError("is empty", field=field)
    return prompt


# ----------------------------------------------------------------------------- ShareGPT rows

def _sharegpt_turns(turns: Any, field: str = "conversations") -> list[dict]:
    """ShareGPT turns ``[{from, value}]`` as chat messages ``[{role, content}]``."""
    if not isinstance(turns, list) or not turns:
        raise CheemsInputError("must be a non-empty list of turns {from, value}", field=field)
    messages = []
    for i, turn in enumerate(turns):
        if not isinstance(turn, dict) or not isinstance(turn.get("value"), str):
            raise CheemsInputError("a turn must be {from, value} with a string value", field=f"{field}[{i}]")
        sender = turn.get("from")
        role = SHAREGPT_ROLES.get(sender) if isinstance(sender, str) else None
        if role is None:
            raise CheemsInputError(f"'from' must be system, human or gpt, got {sender!r}", field=f"{field}[{i}].from")
        messages.append({"role": role, "content": turn["value"]})
    return messages


def _reply(row: dict, key: str) -> str:
    """A response given as text or as one ShareGPT turn ``{from, value}``."""
    value = row.get(key)
    if isinstance(value, dict):
        value = value.get("value", value.get("content"))
    return _text({key: value}, key)


def _sharegpt_prompt(row: dict) -> PromptText:
    """The conversation before the pair, ending with the user's turn; a ``system`` column (or a
    system turn) leads it. One user turn alone is plain text."""
    messages = _sharegpt_turns(row.get("conversations"))
    system = row.get("system")
    if not _blank(system) and messages[0]["role"] != "system":
        messages.insert(0, {"role": "system", "content": _text(row, "system")})
    return _check_prompt(conversation_prompt(messages, "conversations"), "conversations")


# ----------------------------------------------------------------------------- converters

_HH_RLHF_CN = ("prompt", "chosen", "rejected")


def convert_hh_rlhf_cn(row: dict, index: int, conv: Conversion) -> Iterable[Prompt]:
    """A translated HH-RLHF pair ``{prompt, chosen, rejected}``, three texts."""
    need_columns(row, _HH_RLHF_CN, dataset=conv.name)
    prompt, chosen, rejected = (_text(row, k) for k in _HH_RLHF_CN)
    yield pair_prompt(None, prompt, chosen, rejected, subset=_subset(conv))


_HUOZI = ("prompt", "chosen", "reject")


def convert_huozi(row: dict, index: int, conv: Conversion) -> Iterable[Prompt]:
    """A Huozi RLHF pair ``{prompt, chosen, reject}`` (the dataset's own spelling ``reject``);
    an ``id`` and a ``category`` are kept where the row has them."""
    need_columns(row, _HUOZI, dataset=conv.name)
    prompt, chosen, rejected = (_text(row, k) for k in _HUOZI)
    yield pair_prompt(_row_id(row), prompt, chosen, rejected, category=_category(row, "category"),
                      subset=_subset(conv))


def _last_reply(messages: list[dict], field: str) -> str:
    """The assistant's answer that ends a message list."""
    if messages[-1]["role"] != "assistant":
        raise CheemsInputError("must end with an assistant message", field=f"{field}[{len(messages) - 1}].role")
    return _text({field: messages[-1]["content"]}, field)


def _kyara_prompt(row: dict, conv: Conversion) -> PromptText:
    """Kyara's prompt: the ``prompt`` column (text or messages) or, where the pair is two whole
    conversations without one, the messages they share before their answers."""
    raw, chosen, rejected = row.get("prompt"), row.get("chosen"), row.get("rejected")
    if isinstance(raw, list):
        return _check_prompt(conversation_prompt(chat_messages(raw, "prompt"), "prompt"), "prompt")
    if raw is not None or not isinstance(chosen, list):
        need_columns(row, ("prompt",), dataset=conv.name)
        return _text(row, "prompt")
    a, b = chat_messages(chosen, "chosen"), chat_messages(rejected, "rejected")
    if len(a) < 2 or a[:-1] != b[:-1]:
        raise CheemsInputError("chosen and rejected must share the conversation before their answers",
                               field="rejected")
    return _check_prompt(conversation_prompt(a[:-1], "chosen"), "chosen")


def _kyara_reply(row: dict, key: str) -> str:
    """One of Kyara's answers: text, or a message list ending with it."""
    value = row.get(key)
    if isinstance(value, list):
        return _last_reply(chat_messages(value, key), key)
    return _reply(row, key)


def convert_kyara(row: dict, index: int, conv: Conversion) -> Iterable[Prompt]:
    """A Kyara DPO pair: ``prompt`` with ``chosen`` and ``rejected`` as texts, or (TRL's
    conversational layout) as message lists ending with the answers."""
    need_columns(row, ("chosen", "rejected"), dataset=conv.name)
    prompt = _kyara_prompt(row, conv)
    chosen, rejected = _kyara_reply(row, "chosen"), _kyara_reply(row, "rejected")
    yield pair_prompt(_row_id(row), prompt, chosen, rejected, category=_category(row, "category"),
                      subset=_subset(conv))


_ZHIHU = ("prompt", "chosen", "rejected")
_ZHIHU_EXTRA = ("question_id", "upvotes_chosen", "upvotes_rejected")


def _votes(row: dict, key: str) -> float | None:
    """A vote count (an int or, from a TSV cell, a float); None when the cell is empty."""
    value = row.get(key)
    if _blank(value):
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise CheemsInputError(f"must be a number, got {type(value).__name__}", field=key)
    return value


def convert_zhihu(row: dict, index: int, conv: Conversion) -> Iterable[Prompt]:
    """A Zhihu pair: two answers to one question, the one with more upvotes ``chosen``. Equal
    upvote counts are a tie; the question id and the counts are kept on the row."""
    need_columns(row, _ZHIHU, dataset=conv.name)
    prompt, chosen, rejected = (_text(row, k) for k in _ZHIHU)
    up_chosen, up_rejected = _votes(row, "upvotes_chosen"), _votes(row, "upvotes_rejected")
    tie = up_chosen is not None and up_chosen == up_rejected
    extra = {k: row[k] for k in _ZHIHU_EXTRA if not _blank(row.get(k))}
    yield pair_prompt(None, prompt, chosen, rejected, tie=tie, subset=_subset(conv), extra=extra)


_SHAREGPT = ("conversations", "chosen", "rejected")


def convert_dpo_en_zh(row: dict, index: int, conv: Conversion) -> Iterable[Prompt]:
    """A DPO-En-Zh-20k pair in LLaMA-Factory's ShareGPT layout: ``conversations`` (one or more
    turns, ending with the human's) and ``chosen``/``rejected`` turns ``{from, value}``."""
    need_columns(row, _SHAREGPT, dataset=conv.name)
    prompt = _sharegpt_prompt(row)
    yield pair_prompt(None, prompt, _reply(row, "chosen"), _reply(row, "rejected"), subset=_subset(conv))


def convert_coig_p(row: dict, index: int, conv: Conversion) -> Iterable[Prompt]:
    """A COIG-P pair in the ShareGPT layout ``{conversations, chosen, rejected}``; its domain
    (Chat, Code, Math, Logic, Novel, Role) is the category, and its ``id`` where it has one."""
    need_columns(row, _SHAREGPT, dataset=conv.name)
    prompt = _sharegpt_prompt(row)
    yield pair_prompt(_row_id(row), prompt, _reply(row, "chosen"), _reply(row, "rejected"),
                      category=_category(row, "category", "domain"), subset=_subset(conv))


# ----------------------------------------------------------------------------- the entries

ENTRIES: list[Entry] = [
    Entry(
        name="hh-rlhf-cn", title="HH-RLHF-cn", hub_id="beyond/rlhf-reward-single-round-trans_chinese",
        language="zh", licence="none stated on the dataset card", size="~24.9k pairs",
        convert=convert_hh_rlhf_cn, columns=_HH_RLHF_CN, splits=("train", "test"),
        description="Single-turn HH-RLHF pairs machine-translated into Chinese: prompt, chosen and rejected "
                    "texts. dikw/hh_rlhf_cn is another translation with another schema (context turns and "
                    "chosen/rejected {role, text} objects), so it is not an alternative id of this entry."),
    Entry(
        name="huozi", title="Huozi", hub_id="Skepsun/huozi_rlhf_data_json", language="zh", licence="apache-2.0",
        size="~16.9k pairs", convert=convert_huozi, columns=_HUOZI,
        description="HIT-SCIR's human-annotated preference data for Huozi 2.0 (responses by Huozi models), "
                    "converted to JSON: prompt, chosen and reject texts."),
    Entry(
        name="kyara", title="Kyara", hub_id="zake7749/kyara-chinese-preference-rl-dpo-s0-30K", language="zh",
        licence="not stated in the sources checked; accept the terms on the hub page", size="~30k pairs",
        convert=convert_kyara, columns=("prompt", "chosen", "rejected"), gated=True,
        description="Kyara's RLAIF pairs: Chinese prompts from Magpie-Qwen2-Pro-200K-Chinese, stem_zh_instruction "
                    "and Evol-Instruct-Chinese-GPT4 answered by several LLMs and judged pairwise by an LLM. "
                    "Gated: log in and accept the conditions on the hub first."),
    Entry(
        name="zhihu", title="Zhihu", hub_id="liyucheng/zhihu_rlhf_3k", language="zh", licence="cc-by-2.0",
        size="~3.5k pairs", convert=convert_zhihu, columns=_ZHIHU + _ZHIHU_EXTRA,
        data_files={"train": "zhihu_3k_rlfh.tsv"},
        description="Pairs of Zhihu answers to one question, the more upvoted one chosen; equal upvote "
                    "counts are kept as ties. Read from the repository's TSV file (its .tsv extension selects "
                    "the csv builder with a tab separator); the larger zhihu_26k_rlfh.csv beside it is not read."),
    Entry(
        name="dpo-en-zh", title="DPO-En-Zh-20k (zh)", hub_id="llamafactory/DPO-En-Zh-20k", language="zh",
        licence="apache-2.0", size="~10k pairs (zh)", convert=convert_dpo_en_zh, columns=_SHAREGPT,
        configs=("zh",), config="zh",
        description="The Chinese half of LLaMA-Factory's DPO mix (from wenbopan/Chinese-dpo-pairs), in ShareGPT "
                    "layout: conversations as chat messages, chosen and rejected {from, value} turns."),
    Entry(
        name="coig-p", title="COIG-P", hub_id="m-a-p/COIG-P", language="zh",
        licence="not stated in the sources checked; see the dataset card", size="~1,006k pairs",
        convert=convert_coig_p, columns=_SHAREGPT,
        description="LLM-annotated Chinese preference pairs over six domains (Chat, Code, Math, Logic, Novel, "
                    "Role), chosen and rejected scored by several LLM judges; the domain is the category."),
]
"""The Chinese sets, in the order ``cheems data list`` prints them."""
