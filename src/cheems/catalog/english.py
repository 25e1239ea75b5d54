"""The English preference sets of the paper's Table 3, part 1: HH-RLHF, Chatbot Arena,
MathPreference, Nectar, PKU-SafeRLHF and Skywork.

Each converter reads one hub row as the dataset publishes it and keeps what the dataset says:
a tie stays a tie (equal ranks), Nectar's 7-wise ranking keeps all seven answers, Chatbot
Arena's two models stay on their responses. A row without an id of its own gets one derived
from its prompt and response texts (:func:`cheems.records.prompt_id`), so it is the same on
every read. A row the converter cannot read raises CheemsInputError naming the field.
"""

from __future__ import annotations

from typing import Any, Iterator

from cheems.catalog.entry import (Conversion, Entry, Option, need_columns, pair_prompt, scored_prompt,
                                  text_value)
from cheems.formats.fields import chat_messages, conversation_prompt
from cheems.formats.transcripts import parse_hh_rlhf, parse_trl, transcript_turns
from cheems.records import CheemsInputError, Prompt, PromptText, is_integer, is_number

__all__ = ["ENTRIES", "PKU_AXIS", "convert_chatbot_arena", "convert_hh_rlhf", "convert_math_preference",
           "convert_nectar", "convert_pku_saferlhf", "convert_skywork", "nectar_prompt"]


def _subset(conv: Conversion) -> str:
    """The config read (HH-RLHF's folder, PKU-SafeRLHF's model), or the entry's name for the
    hub's default, which holds them all."""
    return conv.config if conv.config and conv.config != "default" else conv.name


# ----------------------------------------------------------------------------- HH-RLHF

HH_COLUMNS = ("chosen", "rejected")


def convert_hh_rlhf(row: dict, index: int, conv: Conversion) -> Iterator[Prompt]:
    """Two whole transcripts ``\\n\\nHuman: … \\n\\nAssistant: …``: the prompt is the
    conversation they share before their last Assistant turn (one Human turn: plain text),
    ``chosen`` ranks above ``rejected``."""
    need_columns(row, HH_COLUMNS, dataset=conv.name)
    pair = parse_hh_rlhf({"chosen": row["chosen"], "rejected": row["rejected"]})
    chosen, rejected = (r.content for r in pair.responses)
    yield pair_prompt(None, pair.prompt, chosen, rejected, subset=_subset(conv))


# ----------------------------------------------------------------------------- Chatbot Arena

ARENA_COLUMNS = ("question_id", "model_a", "model_b", "winner", "conversation_a", "conversation_b", "language")
ARENA_SCORES = {"model_a": (1, 0), "model_b": (0, 1), "tie": (0, 0), "tie (bothbad)": (0, 0)}
"""The vote as scores of (a, b): the winner 1, the loser 0; both ties (good or bad) equal."""


def _arena_prompt(conv_a: list[dict], conv_b: list[dict]) -> PromptText | None:
    """The conversation both models answered last: what precedes their last assistant turns,
    when it is the same in both; None when an earlier answer differs (a multi-turn battle in
    which each model saw its own earlier replies, so no one prompt leads to both last ones)."""
    for name, conversation in (("conversation_a", conv_a), ("conversation_b", conv_b)):
        if conversation[-1]["role"] != "assistant" or len(conversation) < 2:
            raise CheemsInputError("must end with the model's (assistant) reply to a user turn", field=name)
    users_a = [m["content"] for m in conv_a if m["role"] == "user"]
    users_b = [m["content"] for m in conv_b if m["role"] == "user"]
    if users_a != users_b:
        raise CheemsInputError("the user turns differ from conversation_a's: a battle puts one conversation "
                               "to both models", field="conversation_b")
    if conv_a[:-1] != conv_b[:-1]:
        return None
    return conversation_prompt(conv_a[:-1], "conversation_a")


def convert_chatbot_arena(row: dict, index: int, conv: Conversion) -> Iterator[Prompt]:
    """One battle: ``model_a``'s and ``model_b``'s last replies (response ids ``a`` and ``b``,
    each with its model), ranked by the vote; ``tie`` and ``tie (bothbad)`` rank both equal.
    The id is ``question_id``, the category the detected ``language``. A multi-turn battle
    whose earlier replies differ is left out (see :func:`_arena_prompt`)."""
    need_columns(row, ARENA_COLUMNS, dataset=conv.name)
    winner = row["winner"]
    if winner not in ARENA_SCORES:
        raise CheemsInputError(f"unknown vote {winner!r} (expected one of {', '.join(ARENA_SCORES)})",
                               field="winner")
    conv_a = chat_messages(row["conversation_a"], "conversation_a")
    conv_b = chat_messages(row["conversation_b"], "conversation_b")
    prompt = _arena_prompt(conv_a, conv_b)
    if prompt is None:
        return
    language = row["language"]
    category = [language] if isinstance(language, str) and language.strip() else []
    yield scored_prompt(text_value(row, "question_id"), prompt, [conv_a[-1]["content"], conv_b[-1]["content"]],
                        ARENA_SCORES[winner], ids=("a", "b"),
                        models=(text_value(row, "model_a"), text_value(row, "model_b")),
                        category=category, subset=_subset(conv), extra={"winner": winner})


# ----------------------------------------------------------------------------- MathPreference

MATH_COLUMNS = ("instruction", "chosen_response", "rejected_response", "chosen_rating", "rejected_rating")


def _rating(row: dict, key: str) -> float:
    value = row[key]
    if not is_number(value):
        raise CheemsInputError(f"must be a number, got {value!r}", field=key)
    return float(value)


def convert_math_preference(row: dict, index: int, conv: Conversion) -> Iterator[Prompt]:
    """A math question (``instruction``) and two rated solutions: ``chosen_response`` ranks
    above ``rejected_response``, both equal when their ratings are."""
    need_columns(row, MATH_COLUMNS, dataset=conv.name)
    tie = _rating(row, "chosen_rating") == _rating(row, "rejected_rating")
    yield pair_prompt(None, text_value(row, "instruction"), text_value(row, "chosen_response"),
                      text_value(row, "rejected_response"), tie=tie, subset=_subset(conv))


# ----------------------------------------------------------------------------- Nectar

NECTAR_COLUMNS = ("prompt", "answers")


def nectar_prompt(text: Any, field: str = "prompt") -> PromptText:
    """Nectar's prompt ``\\n\\nHuman: …\\n\\nAssistant: …\\n\\nHuman: …\\n\\nAssistant:``, a
    transcript that ends with the empty Assistant turn the answers fill: one Human turn as
    plain text, more as chat messages (earlier Assistant turns included)."""
    turns = transcript_turns(text, field)
    if turns[-1]["content"]:
        raise CheemsInputError("must end with the empty '\\n\\nAssistant:' turn the answers fill", field=field)
    messages = turns[:-1]
    if any(a["role"] == b["role"] for a, b in zip(messages, messages[1:])):
        raise CheemsInputError("Human and Assistant turns must alternate", field=field)
    return conversation_prompt(messages, field)


def _nectar_answers(raw: Any) -> tuple[list[str], list[float], list[str | None]]:
    if not isinstance(raw, list) or len(raw) < 2:
        raise CheemsInputError("must be a list of at least two answers {answer, model, rank}", field="answers")
    contents, ranks, models = [], [], []
    for i, a in enumerate(raw):
        if not isinstance(a, dict) or not isinstance(a.get("answer"), str):
            raise CheemsInputError("must be {answer, model, rank} with a string answer", field=f"answers[{i}]")
        if not is_number(a.get("rank")):
            raise CheemsInputError(f"must be a number, got {a.get('rank')!r}", field=f"answers[{i}].rank")
        model = a.get("model")
        contents.append(a["answer"])
        ranks.append(float(a["rank"]))
        models.append(model if isinstance(model, str) and model else None)
    return contents, ranks, models


def convert_nectar(row: dict, index: int, conv: Conversion) -> Iterator[Prompt]:
    """One prompt and its seven answers ranked by GPT-4 (``rank`` 1 = best; equal ranks tie),
    in the dataset's order with response ids ``"0"``…``"6"`` and each answer's model. The
    category is the prompt's first ``source``; every source is kept as ``source``."""
    need_columns(row, NECTAR_COLUMNS, dataset=conv.name)
    contents, ranks, models = _nectar_answers(row["answers"])
    sources = row.get("source")
    if sources is not None and not (isinstance(sources, list) and all(isinstance(s, str) for s in sources)):
        raise CheemsInputError("must be a list of strings", field="source")
    sources = sources or []
    yield scored_prompt(None, nectar_prompt(row["prompt"]), contents, ranks, higher_is_better=False,
                        models=models, category=sources[:1], subset=_subset(conv),
                        extra={"source": list(sources)} if sources else None)


# ----------------------------------------------------------------------------- PKU-SafeRLHF

PKU_AXIS = Option(name="axis", choices=("better", "safer"), default="better",
                  help="which annotation picks the chosen response: better_response_id (helpfulness) "
                       "or safer_response_id (harmlessness)")
PKU_COLUMNS = ("prompt", "response_0", "response_1", "better_response_id", "safer_response_id")


def _harm_categories(row: dict) -> list[str]:
    """The harm categories flagged on either response, in alphabetical order."""
    flagged: set[str] = set()
    for key in ("response_0_harm_category", "response_1_harm_category"):
        value = row.get(key)
        if value is None:
            continue
        if not isinstance(value, dict):
            raise CheemsInputError("must be an object {category: true/false}", field=key)
        flagged.update(k for k, v in value.items() if v is True)
    return sorted(flagged)


def _source(row: dict, key: str) -> str | None:
    value = row.get(key)
    return value if isinstance(value, str) and value else None


def convert_pku_saferlhf(row: dict, index: int, conv: Conversion) -> Iterator[Prompt]:
    """Two answers to one prompt with two judgements: ``better_response_id`` (helpfulness)
    and ``safer_response_id`` (harmlessness); the entry's ``axis`` option says which picks the
    chosen one. Each response keeps the model that wrote it (``response_N_source``); the
    categories are the harm categories flagged on either response."""
    axis = conv.option or PKU_AXIS.default
    if axis not in PKU_AXIS.choices:
        raise CheemsInputError(f"unknown axis {axis!r} (expected one of {', '.join(PKU_AXIS.choices)})",
                               field="axis")
    key = f"{axis}_response_id"
    need_columns(row, ("prompt", "response_0", "response_1", key), dataset=conv.name)
    best = row[key]
    if not (is_integer(best) and best in (0, 1)):
        raise CheemsInputError(f"must be 0 or 1, got {best!r}", field=key)
    other = 1 - best
    yield pair_prompt(None, text_value(row, "prompt"), text_value(row, f"response_{best}"),
                      text_value(row, f"response_{other}"),
                      models=(_source(row, f"response_{best}_source"), _source(row, f"response_{other}_source")),
                      category=_harm_categories(row), subset=_subset(conv))


# ----------------------------------------------------------------------------- Skywork

SKYWORK_COLUMNS = ("chosen", "rejected", "source")


def convert_skywork(row: dict, index: int, conv: Conversion) -> Iterator[Prompt]:
    """``chosen`` and ``rejected`` message lists: the prompt is the conversation they share up
    to the last user turn (one user message: plain text), the pair their last assistant
    messages; the category is the ``source`` set the pair was drawn from."""
    need_columns(row, SKYWORK_COLUMNS, dataset=conv.name)
    pair = parse_trl({"chosen": row["chosen"], "rejected": row["rejected"]})
    chosen, rejected = (r.content for r in pair.responses)
    source = row["source"]
    category = [source] if isinstance(source, str) and source else []
    yield pair_prompt(None, pair.prompt, chosen, rejected, category=category, subset=_subset(conv))


# ----------------------------------------------------------------------------- the entries

ENTRIES: list[Entry] = [
    Entry(
        name="hh-rlhf", title="HH-RLHF", hub_id="Anthropic/hh-rlhf", language="en", licence="MIT",
        size="~170k pairs", convert=convert_hh_rlhf, columns=HH_COLUMNS,
        description="Anthropic's helpful and harmless dialogues: two whole transcripts per row, the "
                    "preferred one and the other. Configs are the repository's folders (read with "
                    "data_dir); without one, every folder's files are read. red-team-attempts holds "
                    "no preference pairs and is not a config.",
        splits=("train", "test"),
        configs=("harmless-base", "helpful-base", "helpful-online", "helpful-rejection-sampled"),
        config_is_data_dir=True),
    Entry(
        name="chatbot-arena", title="ChatbotArena", hub_id="lmsys/chatbot_arena_conversations", language="en",
        licence="CC-BY-4.0 (user prompts), CC-BY-NC-4.0 (model outputs)", size="~33k battles",
        convert=convert_chatbot_arena, columns=ARENA_COLUMNS,
        description="Chatbot Arena battles (April-June 2023): one user conversation put to two anonymous "
                    "models and the user's vote; ties (good or bad) kept as ties. Multilingual; the "
                    "category is the detected language. Gated: accept the terms on the hub first.",
        non_commercial=True, gated=True),
    Entry(
        name="math-preference", title="MathPreference", hub_id="argilla/distilabel-math-preference-dpo",
        language="en", licence="Apache-2.0", size="~2.4k pairs", convert=convert_math_preference,
        columns=MATH_COLUMNS,
        description="Math questions with two rated solutions (distilabel, GPT-4 ratings); equal ratings "
                    "are a tie."),
    Entry(
        name="nectar", title="Nectar", hub_id="berkeley-nest/Nectar", language="en",
        licence="Apache-2.0, on condition that it is not used to compete with OpenAI",
        size="~183k prompts x 7", convert=convert_nectar, columns=NECTAR_COLUMNS,
        description="Chat prompts from several sources, each with seven answers from different models "
                    "ranked by GPT-4 (7-wise); every answer kept with its rank."),
    Entry(
        name="pku-saferlhf", title="PKU-SafeRLHF", hub_id="PKU-Alignment/PKU-SafeRLHF", language="en",
        licence="CC-BY-NC-4.0", size="~83k pairs", convert=convert_pku_saferlhf,
        columns=PKU_COLUMNS,
        description="Safety preference pairs with two judgements each, helpfulness (better) and "
                    "harmlessness (safer); the axis option picks one. Configs are the answering models "
                    "(alpaca-7b, alpaca2-7b, alpaca3-8b); the default holds all three.",
        splits=("train", "test"), configs=("default", "alpaca-7b", "alpaca2-7b", "alpaca3-8b"),
        non_commercial=True, option=PKU_AXIS),
    Entry(
        name="skywork", title="Skywork", hub_id="Skywork/Skywork-Reward-Preference-80K-v0.2", language="en",
        licence="no licence on the card; the pairs keep their sources' licences (HelpSteer2, OffsetBias, "
                "WildGuardMix, Magpie)",
        size="~77k pairs", convert=convert_skywork, columns=SKYWORK_COLUMNS,
        description="Skywork's reward-model training mix, v0.2 (v0.1 without the pairs that overlap "
                    "RewardBench's prompts); the category is the source set.",
        alternatives=("Skywork/Skywork-Reward-Preference-80K-v0.1",)),
]
