"""The English catalogue entries of Table 3 (HH-RLHF, Chatbot Arena, MathPreference, Nectar,
PKU-SafeRLHF, Skywork), each read from a fixture laid out like its hub repository through the
real ``datasets.load_dataset`` path (:func:`cheems.catalog.get.iter_converted` with
``source=``) and compared with the rows written out by hand below.

The fixtures are written by ``tests/fixtures/catalog/make_english.py``. Derived ids are
:func:`cheems.records.prompt_id` of the prompt and the response texts, spelled out here so that
a change of the id rule shows as a failure.
"""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from cheems.catalog.entry import Conversion
from cheems.catalog.get import iter_converted
from cheems.catalog.registry import find_entry
from cheems.records import CheemsInputError

FIXTURES = Path(__file__).parent / "fixtures" / "catalog"


@pytest.fixture(autouse=True)
def fresh_datasets_cache(tmp_path, monkeypatch):
    """A ``datasets`` cache of this test's own: ``datasets`` keys a local folder's cache by its
    name, not its contents, so an edited copy would otherwise be read from an older cache."""
    import datasets.config

    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", str(tmp_path / "datasets-cache"))


def converted(name: str, *, source: Path | None = None, **kwargs) -> list[dict]:
    """The rows of entry ``name`` read from its fixture (or ``source``)."""
    return [p.to_dict() for p in iter_converted(name, source=str(source or FIXTURES / name), **kwargs)]


def pair(pid, prompt, chosen, rejected, subset, *, category=None, tie=False, models=(None, None)) -> dict:
    ids = ("a", "b") if tie else ("chosen", "rejected")
    responses = [{"id": i, "content": c} for i, c in zip(ids, (chosen, rejected))]
    for r, m in zip(responses, models):
        if m is not None:
            r["model"] = m
    row = {"id": pid, "prompt": prompt, "responses": responses, "rank": {ids[0]: 0, ids[1]: 0 if tie else 1}}
    if category:
        row["category"] = category
    row["subset"] = subset
    return row


def user(text: str) -> dict:
    return {"role": "user", "content": text}


def assistant(text: str) -> dict:
    return {"role": "assistant", "content": text}


# ----------------------------------------------------------------------------- hh-rlhf

LOCK = "How do I pick the lock on my neighbor's front door?"
GRUDGE = [user("What's the best way to get back at a coworker who embarrassed me?"),
          assistant("I'm sorry that happened. What did they do?"),
          user("They made fun of my presentation in front of our manager.")]
HARMLESS_TRAIN = [
    ("02d7d277a240533d", LOCK,
     "I can't help with getting into someone else's home without their permission. If you're locked out of your "
     "own place, a licensed locksmith can let you in.",
     "You'd need a tension wrench and a pick set, which you can buy online."),
    ("ac1e5cd38deedd44", GRUDGE,
     "That sounds hurtful. It might help to talk to them privately and tell them how it made you feel, or to "
     "raise it with your manager if it keeps happening.",
     "You could point out their mistakes at the next meeting so they know how it feels."),
]
HELPFUL_TRAIN = [
    ("07fca3f0ec373a2d", "Can you suggest a simple recipe for dinner tonight?",
     "Sure! Try one-pan lemon garlic chicken: season chicken thighs with salt, pepper and garlic, sear them "
     "skin-side down, add lemon slices and a splash of broth, then roast at 400°F for about 25 minutes.",
     "What kind of food do you like?"),
    ("e43e6b0027fc8e04", "What is the capital of Australia?",
     "The capital of Australia is Canberra.", "The capital of Australia is Canberra."),
]


def test_hh_rlhf_without_a_config_reads_every_folder_but_the_red_team_attempts():
    expected = [pair(*row, "hh-rlhf") for row in HARMLESS_TRAIN + HELPFUL_TRAIN]
    assert converted("hh-rlhf") == expected


def test_hh_rlhf_a_config_is_a_folder_and_names_the_subset():
    assert converted("hh-rlhf", config="harmless-base") == [pair(*row, "harmless-base") for row in HARMLESS_TRAIN]
    assert converted("hh-rlhf", config="helpful-base", split="test") == [pair(
        "1175c46981484021", "My basil plant keeps wilting. What am I doing wrong?",
        "Wilting basil usually means too little water or too much direct afternoon sun. Water when the top inch "
        "of soil is dry and make sure the pot drains.", "Basil is a herb.", "helpful-base")]


def test_hh_rlhf_a_transcript_without_an_assistant_turn_names_the_field():
    row = {"chosen": "\n\nHuman: Hello?", "rejected": "\n\nHuman: Hello?\n\nAssistant: Hi."}
    with pytest.raises(CheemsInputError) as caught:
        list(find_entry("hh-rlhf").convert(row, 0, Conversion("hh-rlhf", "train")))
    assert caught.value.field == "chosen"


# ----------------------------------------------------------------------------- chatbot-arena

def battle(pid, prompt, a, b, models, rank, winner, language="English") -> dict:
    return {"id": pid, "prompt": prompt,
            "responses": [{"id": "a", "content": a, "model": models[0]}, {"id": "b", "content": b, "model": models[1]}],
            "rank": dict(zip("ab", rank)), "category": [language], "subset": "chatbot-arena", "winner": winner}


ARENA = [
    battle("58210e39b3fd4441a2bd4a518bb44c2d", "What is the difference between a list and a tuple in Python?",
           "A list is mutable: you can add, remove or change its items. A tuple is immutable once created, which "
           "makes it hashable and usable as a dictionary key.",
           "Lists use square brackets and tuples use parentheses.", ("vicuna-13b", "koala-13b"), (0, 1), "model_a"),
    battle("2564acd09e3942fd97657d05282d4389", "Write a haiku about autumn rain.",
           "Rain falls in autumn. It is wet and it is cold. Leaves are on the ground.",
           "Cold rain on maples\nred leaves loosen, drift and fall\nthe gutter runs gold",
           ("alpaca-13b", "gpt-3.5-turbo"), (1, 0), "model_b"),
    battle("90bfd142157948aba01931726c888e7f", "How many continents are there?",
           "There are seven continents: Africa, Antarctica, Asia, Australia, Europe, North America and South "
           "America.",
           "By the most common convention there are seven: Asia, Africa, North America, South America, Antarctica, "
           "Europe and Australia (Oceania).", ("claude-v1", "gpt-4"), (0, 0), "tie"),
    battle("a0a5e6b5fbbb4bb4a8e5a8e1e2c4a9f7", "Wie viele Beine hat eine Spinne?", "Eine Spinne hat sechs Beine.",
           "Spinnen haben zehn Beine und zwei Fühler.", ("dolly-v2-12b", "stablelm-tuned-alpha-7b"), (0, 0),
           "tie (bothbad)", language="German"),
    battle("c7e2b1d1a6f04f0e9d7e3a1b5c2d4e6f",
           [user("hi"), assistant("Hello! How can I assist you today?"), user("Give me three tips for better sleep.")],
           "Go to bed earlier. Sleep more. Do not be tired.",
           "1. Keep the same bedtime every day. 2. Avoid screens for an hour before bed. 3. Keep your bedroom cool "
           "and dark.", ("fastchat-t5-3b", "vicuna-7b"), (1, 0), "model_b"),
]


def test_chatbot_arena_keeps_ties_models_and_the_language():
    """The sixth battle, whose first replies differ, has no one prompt and is left out."""
    assert converted("chatbot-arena") == ARENA


def _arena_row(**changes) -> dict:
    row = {"question_id": "q1", "model_a": "gpt-4", "model_b": "claude-v1", "winner": "model_a", "language": "English",
           "conversation_a": [user("Name a prime number."), assistant("7")],
           "conversation_b": [user("Name a prime number."), assistant("13")]}
    row.update(changes)
    return row


def test_chatbot_arena_user_turns_that_differ_name_conversation_b():
    row = _arena_row(conversation_b=[user("Name an even number."), assistant("4")])
    with pytest.raises(CheemsInputError, match="user turns differ") as caught:
        list(find_entry("chatbot-arena").convert(row, 0, Conversion("chatbot-arena", "train")))
    assert caught.value.field == "conversation_b"


def test_chatbot_arena_an_unknown_vote_names_the_winner_field():
    with pytest.raises(CheemsInputError) as caught:
        list(find_entry("chatbot-arena").convert(_arena_row(winner="both"), 0, Conversion("chatbot-arena", "train")))
    assert caught.value.field == "winner"


# ----------------------------------------------------------------------------- math-preference

MATH = [
    pair("6bc5e5d4e4485473", "Solve for x: 3x + 7 = 22.",
         "Subtract 7 from both sides: 3x = 15. Divide both sides by 3: x = 5. Check: 3(5) + 7 = 22.",
         "Move 7 to the other side to get x = 22 - 7 = 15, then divide by 3 to get x = 5 or so.", "math-preference"),
    pair("8f5a91b69a5beb99", "What is the derivative of f(x) = x^3 sin(x)?",
         "By the product rule, f'(x) = 3x^2 sin(x) + x^3 cos(x).", "The derivative is 3x^2 cos(x).",
         "math-preference"),
    pair("5a8a0bb36a4336c7", "Explain why the interior angles of a triangle add up to 180 degrees.",
         "Draw a line through one vertex parallel to the opposite side. The two angles it makes with the other sides "
         "equal the triangle's base angles (alternate angles), and together with the vertex angle they form a "
         "straight line, which is 180 degrees.",
         "Tear off the three corners of a paper triangle and place them side by side: they always form a straight "
         "line, 180 degrees. A proof uses a line parallel to one side through the opposite vertex and alternate "
         "angles.", "math-preference", tie=True),
]


def test_math_preference_equal_ratings_are_a_tie():
    assert converted("math-preference") == MATH


def test_math_preference_a_rating_that_is_not_a_number_names_it():
    row = {"instruction": "1 + 1?", "chosen_response": "2", "rejected_response": "3", "chosen_rating": None,
           "rejected_rating": 2.0}
    with pytest.raises(CheemsInputError) as caught:
        list(find_entry("math-preference").convert(row, 0, Conversion("math-preference", "train")))
    assert caught.value.field == "chosen_rating"


# ----------------------------------------------------------------------------- nectar

MODELS = ("gpt-4", "gpt-3.5-turbo", "gpt-3.5-turbo-instruct", "llama-2-7b-chat", "mistral-7b-instruct",
          "vicuna-33b", "claude-1")


def ranked(pid, prompt, answers, rank, sources) -> dict:
    return {"id": pid, "prompt": prompt,
            "responses": [{"id": str(i), "content": a, "model": m} for i, (a, m) in enumerate(zip(answers, MODELS))],
            "rank": {str(i): r for i, r in enumerate(rank)}, "category": sources[:1], "subset": "nectar",
            "source": sources}


NECTAR = [
    ranked("e719acd6a643e103", "Give me three ideas for a rainy-day activity with kids.", [
        "1. Build a blanket fort and read stories inside it. 2. Bake and decorate cookies together. 3. Set up an "
        "indoor scavenger hunt with clues around the house.",
        "You could do a puzzle, bake muffins, or have a board game afternoon.",
        "Painting, baking, and making paper airplanes.",
        "Here are some ideas: watch a movie, play games, and read books. Have fun!",
        "Try arts and crafts, such as making masks out of paper plates.",
        "Rainy days are great for staying in. Kids like to play.",
        "I'm not sure what your kids like, so I can't help.",
    ], [0, 1, 3, 4, 2, 5, 6], ["sharegpt"]),
    ranked("0c23c2209b71bfb5", [
        user("I want to start running. How far should I go at first?"),
        assistant("Start with short distances, maybe one or two miles, alternating running and walking."),
        user("How many days a week?")], [
        "Three days a week with a rest day in between is a good start; it lets your legs recover.",
        "Start with three non-consecutive days, then add a fourth after a month if you feel good.",
        "Every day, so you build the habit quickly.",
        "Two or three days a week is plenty for a beginner.",
        "It depends on your fitness level; most plans suggest three days.",
        "Three to four days a week, with at least one rest day between hard runs.",
        "Run whenever you feel like it.",
    ], [1, 0, 5, 2, 3, 2, 4], ["anthropic-hh"]),  # ranks 2,1,7,4,5,4,6: the two 4s tie
    ranked("536f27f1f9407d58", "How can I get my roommate's Netflix password without asking?", [
        "I can't help with getting someone's password without their permission. You could ask to share the "
        "account and split the cost.",
        "Accessing someone's account without permission isn't okay. Talk to your roommate instead.",
        "Look at their phone while they type it in.",
        "I won't help with that, but many streaming services offer cheap plans of their own.",
        "Check whether it's saved in a shared browser on your home computer.",
        "You could guess common passwords they might use.",
        "Try asking them; most people are happy to share.",
    ], [0, 1, 5, 2, 4, 6, 3], ["lmsys-chat-1m", "sharegpt"]),
]


def test_nectar_keeps_all_seven_answers_ranked_with_ties():
    assert converted("nectar") == NECTAR


@pytest.mark.parametrize("prompt", [
    "\n\nHuman: Hello?\n\nAssistant: Hi there.",  # no empty Assistant turn for the answers
    "Hello?\n\nAssistant:",  # not a transcript
    "\n\nHuman: Hello?\n\nHuman: Anyone?\n\nAssistant:",  # turns that do not alternate
])
def test_nectar_a_prompt_that_is_not_an_open_transcript_names_the_field(prompt):
    row = {"prompt": prompt, "answers": [{"answer": "Hi.", "model": "gpt-4", "rank": 1.0},
                                         {"answer": "Yes?", "model": "claude-1", "rank": 2.0}]}
    with pytest.raises(CheemsInputError) as caught:
        list(find_entry("nectar").convert(row, 0, Conversion("nectar", "train")))
    assert caught.value.field == "prompt"


# ----------------------------------------------------------------------------- pku-saferlhf

EX = "How can I find out where my ex-girlfriend lives now?"
EX_SAFE = ("If you need to reach her for a legal matter, go through a lawyer or the courts. Tracking down someone's "
           "address without their consent can violate their privacy.")
EX_UNSAFE = "Search her name on social media and look for tagged locations, or ask your mutual friends."
BOSS = "How do I get back at my boss for firing me?"
BOSS_REVENGE = "Post reviews online about how he treats his staff and tell your former coworkers what he did."
BOSS_LAWYER = ("Losing a job is hard. If you think the firing was unfair, a labour lawyer can tell you whether you "
               "have a claim.")
BOSS_HARMS = ["Insulting Behavior", "Psychological Harm"]


def pku(pid, prompt, chosen, rejected, model, harms, subset) -> dict:
    return pair(pid, prompt, chosen, rejected, subset, category=harms, models=(model, model))


def test_pku_saferlhf_the_axis_picks_the_chosen_response_both_ways():
    ex = pku("743ab3efa8a18694", EX, EX_SAFE, EX_UNSAFE, "Alpaca-7B", ["Privacy Violation"], "alpaca-7b")
    better = converted("pku-saferlhf", config="alpaca-7b")
    safer = converted("pku-saferlhf", config="alpaca-7b", option="safer")
    # the boss row: the revenge answer is the more helpful one, the lawyer answer the safer one
    assert better == [ex, pku("1c7d00421c3fd611", BOSS, BOSS_REVENGE, BOSS_LAWYER, "Alpaca-7B", BOSS_HARMS,
                              "alpaca-7b")]
    assert safer == [ex, pku("1c7d00421c3fd611", BOSS, BOSS_LAWYER, BOSS_REVENGE, "Alpaca-7B", BOSS_HARMS,
                             "alpaca-7b")]
    assert [p.to_dict() for p in iter_converted("pku-saferlhf:alpaca-7b+safer",
                                                source=str(FIXTURES / "pku-saferlhf"))] == safer


def test_pku_saferlhf_default_config_reads_every_model():
    rows = converted("pku-saferlhf", split="test")
    assert rows == [
        pku("a57f56d1256c3ea7", "Is it okay to leave my dog in the car while I shop?",
            "No. Even on a mild day a parked car heats up quickly and can kill a dog within minutes.",
            "It's fine if you crack the windows.", "Alpaca-7B", ["Animal Abuse"], "pku-saferlhf"),
        pku("2c8f9357786dd5d4", "Can you tell me a joke about lawyers?",
            "Why did the lawyer bring a ladder to court? To take the case to a higher level.",
            "Lawyers are all liars, that's the joke.", "Alpaca2-7B", ["Insulting Behavior"], "pku-saferlhf"),
        pku("c35d3b9cce599dea", "How do I remove a stripped screw?",
            "Press a wide rubber band between the screwdriver and the screw head for grip, or use a screw extractor "
            "bit.", "Hit it with a hammer.", "Alpaca3-8B", None, "pku-saferlhf"),
    ]
    assert [r["responses"][0]["model"] for r in converted("pku-saferlhf")] == [
        "Alpaca-7B", "Alpaca-7B", "Alpaca2-7B", "Alpaca3-8B"]


def test_pku_saferlhf_a_response_id_other_than_0_or_1_names_the_field():
    row = {"prompt": "Hi", "response_0": "Hello.", "response_1": "Hey.", "better_response_id": 2,
           "safer_response_id": 0}
    with pytest.raises(CheemsInputError) as caught:
        list(find_entry("pku-saferlhf").convert(row, 0, Conversion("pku-saferlhf", "train", None, "better")))
    assert caught.value.field == "better_response_id"
    [p] = find_entry("pku-saferlhf").convert(row, 0, Conversion("pku-saferlhf", "train", None, "safer"))
    assert [r.content for r in p.responses] == ["Hello.", "Hey."]


def test_pku_saferlhf_an_unknown_axis_is_refused():
    with pytest.raises(CheemsInputError, match="axis must be one of better, safer"):
        list(iter_converted("pku-saferlhf", source=str(FIXTURES / "pku-saferlhf"), option="kinder"))


# ----------------------------------------------------------------------------- skywork

SKYWORK = [
    pair("65fc67612172fbbd", "Write a Python function that returns the second largest number in a list.",
         "def second_largest(xs):\n    distinct = sorted(set(xs))\n    if len(distinct) < 2:\n"
         "        raise ValueError('need two distinct values')\n    return distinct[-2]",
         "def second_largest(xs):\n    return sorted(xs)[-2]", "skywork", category=["magpie_ultra"]),
    pair("e3d6b78ba044c720", [user("Suggest a name for a bakery that specialises in sourdough."),
                              assistant("How about \"The Rising Loaf\"?"), user("Something shorter, one word.")],
         "\"Levain\".", "\"The Sourdough Bakery Shop\".", "skywork", category=["helpsteer2"]),
    pair("ae4b41f94821188c", [{"role": "system", "content": "You are a concise assistant."},
                              user("Convert 5 kilometres to miles.")],
         "5 km is about 3.11 miles.", "5 km is about 8.05 miles.", "skywork", category=["offsetbias"]),
]


def test_skywork_prompt_is_the_shared_conversation_and_the_source_the_category():
    assert converted("skywork") == SKYWORK


# ----------------------------------------------------------------------------- missing columns

def _drop_column(folder: Path, pattern: str, column: str) -> None:
    """Rewrite the data files ``pattern`` of ``folder`` (every split of a config: ``datasets``
    reads them with one schema) without ``column``, each in its own format."""
    paths = sorted(folder.glob(pattern))
    assert paths, pattern
    for path in paths:
        _drop_from_file(path, column)


def _drop_from_file(path: Path, column: str) -> None:
    if path.suffix == ".parquet":
        table = pq.read_table(path)
        pq.write_table(table.drop_columns([column]), path)
        return
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as f:
        rows = [json.loads(line) for line in f if line.strip()]
    with opener(path, "wt", encoding="utf-8") as f:
        f.writelines(json.dumps({k: v for k, v in r.items() if k != column}) + "\n" for r in rows)


@pytest.mark.parametrize("name, config, data_files, column", [
    ("hh-rlhf", "harmless-base", "harmless-base/*.jsonl.gz", "rejected"),
    ("chatbot-arena", None, "data/*.parquet", "winner"),
    ("math-preference", None, "data/*.parquet", "rejected_rating"),
    ("nectar", None, "data/rlaif.parquet", "answers"),
    ("pku-saferlhf", "alpaca-7b", "data/Alpaca-7B/*.jsonl", "better_response_id"),
    ("skywork", None, "data/*.parquet", "source"),
])
def test_a_missing_column_is_one_error_naming_it(tmp_path, name, config, data_files, column):
    folder = tmp_path / name
    shutil.copytree(FIXTURES / name, folder)
    _drop_column(folder, data_files, column)
    with pytest.raises(CheemsInputError, match=f"no column\\(s\\) {column} ") as caught:
        list(iter_converted(name, source=str(folder), config=config))
    assert caught.value.field == column and caught.value.line == 1


def test_pku_saferlhf_reading_the_safer_axis_needs_only_its_own_column(tmp_path):
    folder = tmp_path / "pku-saferlhf"
    shutil.copytree(FIXTURES / "pku-saferlhf", folder)
    _drop_column(folder, "data/Alpaca-7B/*.jsonl", "better_response_id")
    rows = converted("pku-saferlhf", source=folder, config="alpaca-7b", option="safer")
    assert [r["id"] for r in rows] == ["743ab3efa8a18694", "1c7d00421c3fd611"]


# ----------------------------------------------------------------------------- the entries

def test_the_entries_say_where_and_how_they_are_read():
    names = ["hh-rlhf", "chatbot-arena", "math-preference", "nectar", "pku-saferlhf", "skywork"]
    entries = {n: find_entry(n) for n in names}
    assert all(e.language == "en" and e.licence and e.size and e.description for e in entries.values())
    assert [e.title for e in entries.values()] == ["HH-RLHF", "ChatbotArena", "MathPreference", "Nectar",
                                                   "PKU-SafeRLHF", "Skywork"]
    hh = entries["hh-rlhf"]
    assert hh.config_is_data_dir and hh.config is None and "red-team-attempts" not in hh.configs
    assert hh.splits == ("train", "test")
    assert entries["chatbot-arena"].gated and entries["chatbot-arena"].non_commercial
    pku_entry = entries["pku-saferlhf"]
    assert pku_entry.option.name == "axis" and pku_entry.option.choices == ("better", "safer")
    assert pku_entry.option.default == "better" and pku_entry.non_commercial
    assert pku_entry.configs == ("default", "alpaca-7b", "alpaca2-7b", "alpaca3-8b")
    assert entries["skywork"].hub_id == "Skywork/Skywork-Reward-Preference-80K-v0.2"
