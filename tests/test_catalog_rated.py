"""The rated English catalogue entries (Stack Exchange, UltraFeedback, HelpSteer2), each read
from a fixture laid out like its hub repository through the real ``datasets.load_dataset``
path (:func:`cheems.catalog.get.iter_converted` with ``source=``) and compared with the rows
written out by hand below; and the HTML-to-text rules against a plain reference.

The fixtures are written by ``tests/fixtures/catalog/make_rated.py``. Derived ids are
:func:`cheems.records.prompt_id` of the prompt and the response texts, spelled out here so
that a change of the id rule shows as a failure.
"""

from __future__ import annotations

import gzip
import html
import json
import shutil
from pathlib import Path

import datasets
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cheems.catalog.entry import Conversion
from cheems.catalog.get import iter_converted
from cheems.catalog.html_text import html_text
from cheems.catalog.rated import ENTRIES, HelpSteer2Rankings, is_math_question
from cheems.catalog.registry import find_entry
from cheems.records import CheemsInputError

FIXTURES = Path(__file__).parent / "fixtures" / "catalog"


@pytest.fixture(autouse=True)
def fresh_datasets_cache(tmp_path, monkeypatch):
    """A ``datasets`` cache of this test's own (``datasets`` keys a local folder's cache by its
    name, not its contents, so an edited copy would otherwise be read from an older cache)."""
    import datasets.config

    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", str(tmp_path / "datasets-cache"))


def converted(name: str, *, split: str | None = None, option: str | None = None,
              source: Path | None = None) -> list[dict]:
    return [p.to_dict() for p in iter_converted(name, source=str(source or FIXTURES / name), split=split,
                                                option=option)]


def ranked(pid, prompt, responses, rank, subset, *, category=None) -> dict:
    """A row as ``Prompt.to_dict`` writes it; ``responses`` as (id, content) or (id, content, model)."""
    row = {"id": pid, "prompt": prompt,
           "responses": [dict(zip(("id", "content", "model"), r)) for r in responses], "rank": rank}
    if category:
        row["category"] = category
    row["subset"] = subset
    return row


# ----------------------------------------------------------------------------- math-stack-exchange

MATH = [
    ranked("1001", "How do I show that $\\sum_{n=1}^\\infty \\frac{1}{n^2}$ converges? I know the harmonic "
                   "series $\\sum \\frac{1}{n}$ diverges, so I am not sure what changes.",
           [("1010", "Compare with a telescoping sum: for $n \\ge 2$,\n\n"
                     "$$\\frac{1}{n^2} < \\frac{1}{n(n-1)} = \\frac{1}{n-1} - \\frac{1}{n}.$$\n\n"
                     "The partial sums of the right side are bounded by $1$, so the series converges."),
            ("1011", "Use the integral test: $\\int_1^\\infty x^{-2}\\,dx = 1$ is finite."),
            ("1012", "It is a $p$-series with $p = 2 > 1$.")],
           {"1010": 0, "1011": 1, "1012": 1}, "math-stack-exchange", category=["math.stackexchange.com"]),
    ranked("1003", "What is a quick way to compute $a^b \\bmod m$ for large $b$?",
           [("1030", "Square and multiply:\n\n1. write $b$ in binary;\n"
                     "2. square repeatedly, multiplying in the bits that are set."),
            ("1031", "In Python the built-in does it:\n\n```\npow(a, b, m)\n```\n\n"
                     "It runs in $O(\\log b)$ multiplications.")],
           {"1030": 1, "1031": 0}, "math-stack-exchange", category=["math.stackexchange.com"]),
    ranked("1005", "Sketch $y = x^3 - 3x$.",
           [("1051", "Roots at $0$ and $\\pm\\sqrt 3$; turning points at $x = \\pm 1$."),
            ("1052", "It is odd, so sketch $x \\ge 0$ and reflect.")],
           {"1051": 0, "1052": 0}, "math-stack-exchange", category=["math.stackexchange.com"]),
]
"""Question 1002 has one answer (nothing to rank); 1004 is a math.meta question the ``keep``
filter drops; 1005's image-only answer has no text and leaves two tied answers; the physics
folder is never read."""


def test_math_stack_exchange_ranks_answers_by_pm_score_with_ties():
    assert converted("math-stack-exchange") == MATH


def test_math_stack_exchange_is_read_as_a_stream_of_the_math_folder_only():
    entry = find_entry("math-stack-exchange")
    assert entry.streaming and entry.config_is_data_dir and entry.config == "data/math.stackexchange.com"
    stream = datasets.load_dataset(str(FIXTURES / "math-stack-exchange"), data_dir=entry.config, split="train",
                                   streaming=True)
    assert isinstance(stream, datasets.IterableDataset)
    conv = Conversion(entry.name, "train", entry.config)
    rows = [p.to_dict() for i, row in enumerate(stream) if entry.keep(row) for p in entry.convert(row, i, conv)]
    assert rows == MATH


def test_math_rows_are_kept_by_the_host_their_metadata_links_name():
    assert is_math_question({"metadata": ["https://math.stackexchange.com/questions/1",
                                          "https://math.stackexchange.com"]})
    assert not is_math_question({"metadata": ["https://math.meta.stackexchange.com/questions/1"]})
    assert not is_math_question({"metadata": ["https://mathoverflow.net/questions/9", "https://mathoverflow.net"]})
    assert is_math_question({"metadata": []})  # nothing to tell by: the site's folder is the math one
    assert is_math_question({"metadata": ["math"]})


def test_a_stack_exchange_answer_without_a_score_is_an_error_naming_it():
    entry = find_entry("math-stack-exchange")
    answers = [{"answer_id": 1, "pm_score": 2, "text": "<p>a</p>"},
               {"answer_id": 2, "pm_score": None, "text": "<p>b</p>"}]
    with pytest.raises(CheemsInputError) as e:
        list(entry.convert({"qid": 5, "question": "<p>q</p>", "answers": answers}, 0, Conversion(entry.name, "train")))
    assert e.value.field == "answers[1].pm_score"


# ----------------------------------------------------------------------------- ultrafeedback

def uf(pid, prompt, chosen, rejected, subset, *, tie=False) -> dict:
    ids = ("a", "b") if tie else ("chosen", "rejected")
    return ranked(pid, prompt, [(ids[0], chosen), (ids[1], rejected)], {ids[0]: 0, ids[1]: 0 if tie else 1}, subset)


UF_TRAIN = [
    uf("9e2d1e97fcd4530c0fe77395b0a62c46316c360b67ae14e0ff278db8816d36ca", "Name three renewable sources of energy.",
       "Solar, wind and hydroelectric power.", "Coal, solar and natural gas.", "train_prefs"),
    uf("54f71437c4ba860533638d960dd2c022e539514712cf8de17133296210a75bed", "Translate 'good morning' into French.",
       "Bonjour.", "Bonjour !", "train_prefs", tie=True),
    uf("7cd5a131e04c6ae3fbaaa08c47f1794bdc8d3525bc7cee8e52d666c482105977", "Write a haiku about autumn rain.",
       "Cold rain on the eaves\nred leaves sink in the gutter\nthe streetlights come on",
       "Autumn rain is wet. It falls down from the grey sky. I do not like it.", "train_prefs"),
]
UF_TEST = [
    uf("c71075a7a847261b55fa1dd4a6f2114d0a6f2e523546e416ca80f606d9ff8513",
       "What is the boiling point of water at sea level in Fahrenheit?", "212 degrees Fahrenheit.", "100 degrees.",
       "test_prefs"),
    uf("bd95463566d3afacdc62eba2db8b09aa384a16508a511b8fe8e08fa1a8182983", "Suggest a name for a bakery.",
       "Rise & Shine Bakery", "The Flour Pot", "test_prefs", tie=True),
]


def test_ultrafeedback_prefs_splits_keep_equal_scores_as_ties():
    assert converted("ultrafeedback") == UF_TRAIN
    assert converted("ultrafeedback", split="test_prefs") == UF_TEST
    assert find_entry("ultrafeedback").splits == ("train_prefs", "test_prefs")


def test_ultrafeedback_rejected_from_another_conversation_is_an_error():
    entry = find_entry("ultrafeedback")
    row = {"prompt_id": "x", "score_chosen": 8.0, "score_rejected": 3.0,
           "chosen": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello!"}],
           "rejected": [{"role": "user", "content": "Bye"}, {"role": "assistant", "content": "Goodbye."}]}
    with pytest.raises(CheemsInputError) as e:
        list(entry.convert(row, 0, Conversion(entry.name, "train_prefs")))
    assert e.value.field == "rejected"


# ----------------------------------------------------------------------------- ultrafeedback-raw

FISH = ("How many legs does a fish have?",
        [("0", "Fish do not have legs; they swim with fins.", "llama-2-13b-chat"),
         ("1", "A fish has four legs.", "alpaca-7b"), ("2", "None: fish have fins, not legs.", "wizardlm-7b"),
         ("3", "Fish have no legs.", "starchat")])
BASH = ("Give me a one-line bash command to count the lines of all .py files.",
        [("0", "find . -name '*.py' | xargs wc -l", "gpt-3.5-turbo"), ("1", "wc -l *.py", "falcon-40b-instruct"),
         ("2", "Use the wc command.", "ultralm-65b"),
         ("3", "find . -name '*.py' -exec cat {} + | wc -l", "mpt-30b-chat")])


def test_ultrafeedback_raw_ranks_four_completions_by_overall_score():
    # evol_instruct's row has one completion: nothing to rank
    assert converted("ultrafeedback-raw") == [
        ranked("d421fbe33837d771", *FISH, {"0": 0, "1": 2, "2": 0, "3": 1}, "ultrafeedback-raw", category=["false_qa"]),
        ranked("7bd3a3847a9487e7", *BASH, {"0": 0, "1": 1, "2": 2, "3": 0}, "ultrafeedback-raw", category=["sharegpt"]),
    ]


def test_ultrafeedback_raw_ranks_by_fine_grained_score_when_asked():
    assert converted("ultrafeedback-raw", option="fine-grained") == [
        ranked("d421fbe33837d771", *FISH, {"0": 0, "1": 3, "2": 1, "3": 2}, "ultrafeedback-raw", category=["false_qa"]),
        ranked("7bd3a3847a9487e7", *BASH, {"0": 1, "1": 2, "2": 3, "3": 0}, "ultrafeedback-raw", category=["sharegpt"]),
    ]


# ----------------------------------------------------------------------------- helpsteer2

CHAT = ("What is a good stretch for lower back pain?\n<extra_id_1>Assistant\nA knee-to-chest stretch is a gentle "
        "one to start with.\n<extra_id_1>User\nHow long should I hold it?")
CSHARP = ("C# is a modern, object-oriented language from Microsoft that runs on .NET and is used for desktop, web "
          "and game development.")
STRETCH = ("Hold it for 20 to 30 seconds, breathe slowly, and repeat two or three times on each side.",
           "About half a minute per side is usual; stop if the pain gets sharper.")
HAMLET = ("Prince Hamlet feigns madness to avenge his father's murder by his uncle, and the revenge ends in the "
          "deaths of nearly everyone.", "A Danish prince is sad.")


def test_helpsteer2_pairs_consecutive_rows_of_one_prompt_by_helpfulness():
    # the last train row is a prompt with one response: nothing to rank
    assert converted("helpsteer2") == [
        ranked("9cf0e52f941438cf", "c#", [("0", CSHARP), ("1", "C# is a note.")], {"0": 0, "1": 1}, "train"),
        ranked("38c366a7a5482042", CHAT, [("0", STRETCH[0]), ("1", STRETCH[1])], {"0": 0, "1": 0}, "train"),
    ]


def test_helpsteer2_ranks_by_the_attribute_asked_for_and_flushes_the_last_pair():
    assert converted("helpsteer2", option="verbosity") == [
        ranked("9cf0e52f941438cf", "c#", [("0", CSHARP), ("1", "C# is a note.")], {"0": 0, "1": 1}, "train"),
        ranked("38c366a7a5482042", CHAT, [("0", STRETCH[0]), ("1", STRETCH[1])], {"0": 0, "1": 1}, "train"),
    ]
    # validation's only pair ends the split: it comes out of the converter's finish()
    assert converted("helpsteer2", split="validation", option="coherence") == [
        ranked("84d1c8fba19155b2", "Summarize the plot of Hamlet in one sentence.",
               [("0", HAMLET[0]), ("1", HAMLET[1])], {"0": 0, "1": 0}, "validation")]


def test_helpsteer2_groups_any_number_of_adjacent_responses_and_starts_afresh_on_a_new_read():
    rate = dict(helpfulness=0, correctness=0, coherence=0, complexity=0, verbosity=0)
    rows = [{"prompt": "p", "response": "one", **rate, "helpfulness": 2},
            {"prompt": "p", "response": "two", **rate, "helpfulness": 4},
            {"prompt": "p", "response": "three", **rate, "helpfulness": 2}]
    conv = Conversion("helpsteer2", "train", None, "helpfulness")
    convert = find_entry("helpsteer2").convert.fresh()
    assert isinstance(convert, HelpSteer2Rankings)
    out = [p for i, row in enumerate(rows) for p in convert(row, i, conv)]
    assert out == []
    (ranking,) = convert.finish(conv)
    assert [r.content for r in ranking.responses] == ["one", "two", "three"]
    assert ranking.rank == {"0": 1, "1": 0, "2": 1}
    convert(rows[0], 0, conv)  # an unfinished read ...
    assert convert(rows[1], 0, conv) == [] and convert.finish(conv) == []  # ... a new one from row 0 drops it


# ----------------------------------------------------------------------------- helpsteer2-preference

def test_helpsteer2_preference_reads_the_sign_of_the_strength_and_zero_as_a_tie():
    assert converted("helpsteer2-preference") == [
        ranked("9cf0e52f941438cf", "c#", [("response_1", CSHARP), ("response_2", "C# is a note.")],
               {"response_1": 0, "response_2": 1}, "train"),
        ranked("38c366a7a5482042", CHAT, [("response_1", STRETCH[0]), ("response_2", STRETCH[1])],
               {"response_1": 0, "response_2": 0}, "train"),
        ranked("979f7a2bfa364520", "Name a mammal that can fly.",
               [("response_1", "The ostrich."), ("response_2", "The bat.")], {"response_1": 1, "response_2": 0},
               "train"),
    ]


def test_helpsteer2_preference_keeps_the_validation_rows_apart():
    assert converted("helpsteer2-preference", split="validation") == [
        ranked("84d1c8fba19155b2", "Summarize the plot of Hamlet in one sentence.",
               [("response_1", HAMLET[1]), ("response_2", HAMLET[0])], {"response_1": 1, "response_2": 0},
               "validation"),
    ]


def test_a_preference_strength_outside_minus_three_to_three_is_an_error():
    entry = find_entry("helpsteer2-preference")
    row = {"split": "train", "prompt": "p", "response_1": "a", "response_2": "b", "preference_strength": 5}
    with pytest.raises(CheemsInputError) as e:
        list(entry.convert(row, 0, Conversion(entry.name, "train")))
    assert e.value.field == "preference_strength"


# ----------------------------------------------------------------------------- every entry

def _drop_parquet_column(path: Path, column: str) -> None:
    table = pq.read_table(path)
    pq.write_table(table.drop_columns([column]), path)


def _drop_jsonl_column(path: Path, column: str) -> None:
    gz = path.suffix == ".gz"
    text = (gzip.decompress(path.read_bytes()) if gz else path.read_bytes()).decode("utf-8")
    rows = [json.loads(line) for line in text.splitlines() if line.strip()]
    data = "".join(json.dumps({k: v for k, v in r.items() if k != column}) + "\n" for r in rows).encode("utf-8")
    path.write_bytes(gzip.compress(data) if gz else data)


@pytest.mark.parametrize("name, files, column", [
    ("math-stack-exchange", ["data/math.stackexchange.com/train-00000-of-00001.parquet"], "answers"),
    ("ultrafeedback", [f"data/{s}-00000-of-00001.parquet" for s in ("train_prefs", "train_sft", "test_prefs",
                                                                    "test_sft", "train_gen", "test_gen")],
     "score_rejected"),
    ("ultrafeedback-raw", ["evol_instruct.jsonl", "false_qa.jsonl", "sharegpt.jsonl"], "completions"),
    ("helpsteer2", ["train.jsonl.gz", "validation.jsonl.gz"], "helpfulness"),
    ("helpsteer2-preference", ["preference/preference.jsonl.gz"], "preference_strength"),
])
def test_a_missing_column_is_one_error_naming_it(tmp_path, name, files, column):
    """The column is dropped from every split's file (``datasets`` builds all splits of a
    folder at once, and they must share a schema)."""
    folder = tmp_path / name
    shutil.copytree(FIXTURES / name, folder)
    for file in files:
        (_drop_parquet_column if file.endswith(".parquet") else _drop_jsonl_column)(folder / file, column)
    with pytest.raises(CheemsInputError) as e:
        converted(name, source=folder)
    assert e.value.field == column
    assert f"no column(s) {column}" in str(e.value) and name in str(e.value)


def test_the_entries_say_where_and_how_they_are_read():
    by_name = {e.name: e for e in ENTRIES}
    assert list(by_name) == ["math-stack-exchange", "ultrafeedback", "ultrafeedback-raw", "helpsteer2",
                             "helpsteer2-preference"]
    assert [e.title for e in ENTRIES] == ["MathStackExchange", "UltraFeedback", "UltraFeedback (raw)", "HelpSteer2",
                                          "HelpSteer2 (preference)"]
    assert all(e.language == "en" and find_entry(e.name) is e for e in ENTRIES)
    assert by_name["ultrafeedback-raw"].option.default == "overall"
    assert by_name["helpsteer2"].option.choices == ("helpfulness", "correctness", "coherence", "complexity",
                                                    "verbosity")
    assert by_name["helpsteer2-preference"].data_files == {"train": "preference/preference.jsonl.gz",
                                                           "validation": "preference/preference.jsonl.gz"}


# ----------------------------------------------------------------------------- HTML as text

def test_html_text_keeps_paragraphs_lists_code_quotes_and_latex_readable():
    page = ("<p>Let $x &lt; y$ and\n  <em>consider</em>:</p>\n<ul><li>one &amp; two</li><li>three<ul><li>deep</li>"
            "</ul></li></ul>\n<ol><li>first</li><li>second</li></ol>"
            "<pre><code>if a &lt; b:\n    return a\n</code></pre>"
            "<blockquote><p>said<br>twice</p></blockquote><p>Call <code>f()</code>, see <a href='#'>this</a>"
            " <img src='g.png' alt='a graph'>.</p><table><tr><th>n</th><th>n!</th></tr><tr><td>3</td><td>6</td>"
            "</tr></table><script>var x = 1;</script><p>$$\\int_0^1 x\\,dx$$</p>")
    assert html_text(page) == (
        "Let $x < y$ and consider:\n\n- one & two\n- three\n  - deep\n\n1. first\n2. second\n\n"
        "```\nif a < b:\n    return a\n```\n\n> said\n> twice\n\nCall `f()`, see this a graph.\n\n"
        "n | n!\n3 | 6\n\n$$\\int_0^1 x\\,dx$$")
    assert html_text("") == "" and html_text("plain &amp; simple") == "plain & simple"


TEXT = st.text(alphabet="abcXYZ019 $^_{}\\()+-=.,;:!?'\"<>&*/", min_size=0, max_size=25)
CODE = st.text(alphabet="abc019 $<>&(){}=:\n", min_size=0, max_size=30)
BLOCK = st.one_of(st.tuples(st.just("p"), TEXT), st.tuples(st.just("ul"), st.lists(TEXT, min_size=1, max_size=4)),
                  st.tuples(st.just("pre"), CODE))


def _reference(blocks: list) -> str:
    """The plain rules for this markup: a paragraph's words joined by one space, a list's
    non-empty items as ``- item`` lines, a code block fenced as it is; empty ones left out;
    blocks separated by a blank line."""
    out = []
    for kind, value in blocks:
        if kind == "p" and value.split():
            out.append(" ".join(value.split()))
        elif kind == "ul" and any(v.split() for v in value):
            out.append("\n".join("- " + " ".join(v.split()) for v in value if v.split()))
        elif kind == "pre" and value.strip():
            out.append("```\n" + value.strip("\n") + "\n```")
    return "\n\n".join(out)


def _markup(blocks: list) -> str:
    parts = []
    for kind, value in blocks:
        if kind == "p":
            parts.append(f"<p>{html.escape(value)}</p>")
        elif kind == "ul":
            parts.append("<ul>\n" + "\n".join(f"  <li>{html.escape(v)}</li>" for v in value) + "\n</ul>")
        else:
            parts.append(f"<pre><code>{html.escape(value)}</code></pre>")
    return "\n\n".join(parts)


@settings(max_examples=200, deadline=None)
@given(st.lists(BLOCK, max_size=6))
def test_html_text_matches_the_plain_reference_on_generated_markup(blocks):
    assert html_text(_markup(blocks)) == _reference(blocks)
