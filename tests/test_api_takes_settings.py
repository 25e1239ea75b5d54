"""The public calls take the settings objects whose fields are their commands' flags.

A command that builds :class:`~cheems.common_settings.ReadSettings`, ``StatisticsSettings``,
``ScorerSettings`` or ``OutputSettings`` (with ``overwrite``) from its flags hands that object to
its call unchanged: the call takes it as one parameter (``read``, ``statistics``, ``scorer``,
``output``), never the fields again as loose keyword arguments under other names. A mapping of
the fields stands for the object; a bad key or value of it is one CheemsInputError naming the
field; the object and the mapping give the same result.
"""

from __future__ import annotations

import inspect
import json
from pathlib import Path

import pytest

import cheems
from cheems.common_settings import OutputSettings, ReadSettings, ScorerSettings, StatisticsSettings
from cheems.records import CheemsInputError
from tests.test_cli_flags import COMMANDS as CLICK_COMMANDS, specs_of
from tests.test_public_api import COMMANDS

PARAMETER = {ReadSettings: "read", StatisticsSettings: "statistics", ScorerSettings: "scorer",
             OutputSettings: "output"}
"""Each settings class -> the one parameter of a call that takes it."""

LOOSE = {
    ReadSettings: {"fmt", "format", "skip_invalid", "dedupe"},
    StatisticsSettings: {"n_bootstrap", "bootstrap", "seed", "ties"},
    ScorerSettings: {"scores", "baseline", "model", "judge_model", "judge_backend", "name", "rm"},
    OutputSettings: {"overwrite"},
}
"""The loose keyword arguments that repeated the fields of each class (under their names or others;
ScorerSettings' field ``scorer`` is the name of the parameter itself)."""

KEPT = {
    ("best_of_n", "baseline"): "the id of the baseline response a judge plays the best-of-N pick against (`cheems "
                               "bon --baseline`, typed by hand), not ScorerSettings' baseline scorer",
}
"""(call, parameter) -> why a call keeps a loose name although its command builds that name's class."""

NEVER = {"fmt", "skip_invalid", "dedupe", "n_bootstrap", "ties", "overwrite", "seed"}
"""Names that mean one of these settings wherever they appear: no call takes them loose."""

NEVER_KEPT = {
    ("curate_judge", "seed"): "the local judge's seed comes from `curate judge --seed`, a JudgeConfig flag (the API "
                              "judge's seed is config.seed); the command builds no StatisticsSettings",
}
"""(call, parameter) -> why a call keeps a name of NEVER: its command builds no settings class of it."""


def built_classes(command: str) -> set[type]:
    """The settings classes of PARAMETER whose flags ``command`` declares; OutputSettings only with
    ``overwrite`` (a command whose one output is ``-o`` keeps it a plain path argument)."""
    specs = specs_of(CLICK_COMMANDS[tuple(command.split())])
    found = {s.cls for s in specs if s.cls in PARAMETER and s.cls is not OutputSettings}
    if any(s.cls is OutputSettings and s.field == "overwrite" for s in specs):
        found.add(OutputSettings)
    return found


@pytest.mark.parametrize("command", list(COMMANDS))
def test_a_call_takes_the_settings_its_command_builds(command):
    call = COMMANDS[command]
    params = inspect.signature(getattr(cheems, call)).parameters
    for cls in built_classes(command):
        name = PARAMETER[cls]
        assert name in params, f"cheems.{call} takes no {name}= although `cheems {command}` builds {cls.__name__}"
        assert cls.__name__ in str(params[name].annotation), f"cheems.{call}'s {name} is no {cls.__name__}"
        loose = sorted(p for p in (LOOSE[cls] - {name}) & params.keys() if (call, p) not in KEPT)
        assert not loose, f"cheems.{call} takes {loose} loose beside {name}: {cls.__name__}"


@pytest.mark.parametrize("call", sorted(cheems.PUBLIC_CALLS))
def test_no_call_takes_a_setting_loose(call):
    params = inspect.signature(getattr(cheems, call)).parameters
    loose = sorted(p for p in NEVER & params.keys() if (call, p) not in NEVER_KEPT)
    assert not loose, f"cheems.{call} takes {loose}: give them in read=, statistics= or output="


def test_the_exceptions_are_still_needed():
    for call, name in {**KEPT, **NEVER_KEPT}:
        assert name in inspect.signature(getattr(cheems, call)).parameters, (call, name)
    assert "read" in inspect.signature(cheems.read).parameters  # cheems.read has no command, and reads as the others


# ----------------------------------------------------------------------------- the settings as values


@pytest.fixture(scope="module")
def work(tmp_path_factory, sample_annotations) -> Path:
    """A folder with the sample ranked (bench.jsonl) and the length and random baselines'
    evaluation reports with their items (length.json, random.json)."""
    folder = tmp_path_factory.mktemp("api_settings")
    cheems.rank([sample_annotations / "open.jsonl", sample_annotations / "human.jsonl"], folder / "bench.jsonl")
    for scorer in ("length", "random"):
        result = cheems.evaluate(folder / "bench.jsonl", scorer={"scorer": scorer}, statistics={"bootstrap": 0})
        (folder / f"{scorer}.json").write_text(json.dumps(result.report, ensure_ascii=False), encoding="utf-8")
        (folder / f"{scorer}.items.jsonl").write_text("".join(json.dumps(i, ensure_ascii=False) + "\n"
                                                              for i in result.items), encoding="utf-8")
    return folder


BAD = [
    ("evaluate", {"scorer": {"scorer": "len"}}, "scorer.scorer", "unknown baseline scorer"),
    ("evaluate", {"statistics": {"bootsrap": 10}}, "statistics.bootsrap", "unknown setting"),
    ("evaluate", {"read": {"dedupe": "yes"}}, "read.dedupe", "true or false"),
    ("evaluate", {"read": 3}, "read", "ReadSettings or a mapping"),
    ("stats", {"read": {"dedupe": True}}, "read.dedupe", "not used by this call"),
    ("compare", {"statistics": {"seed": -1}}, "statistics.seed", ">= 0"),
    ("compare", {"statistics": {"ties": "strict"}}, "statistics.ties", "not used by this call"),
    ("best_of_n", {"scorer": {"scorer": "length"}}, "scorer.scorer", "not used by this call"),
    ("score", {"output": {"output": "s.jsonl", "overwrite": "no"}}, "output.overwrite", "true or false"),
    ("make_tasks", {"statistics": {"seed": 1.5}}, "statistics.seed", "an integer"),
]


def _call(name: str, work: Path, given: dict):
    bench = work / "bench.jsonl"
    args = {"evaluate": (bench,), "stats": (bench,), "compare": (work / "length.json", work / "random.json"),
            "best_of_n": (bench,), "score": (bench,), "make_tasks": (bench, work / "tasks.jsonl")}[name]
    if name == "score" and "output" not in given:
        args += (work / "scores.jsonl",)
    return getattr(cheems, name)(*args, **given)


@pytest.mark.parametrize("name, given, field, words", BAD, ids=[f"{b[0]}-{b[2]}" for b in BAD])
def test_a_bad_mapping_is_one_error_naming_the_field(name, given, field, words, work):
    with pytest.raises(CheemsInputError) as caught:
        _call(name, work, given)
    assert caught.value.field == field and words in caught.value.message, str(caught.value)
    assert "--" not in str(caught.value)
    assert not (work / "scores.jsonl").exists() and not (work / "tasks.jsonl").exists()


def test_evaluate_takes_the_object_or_its_mapping(work):
    bench = work / "bench.jsonl"
    by_mapping = cheems.evaluate(bench, scorer={"scorer": "random"}, statistics={"bootstrap": 50, "seed": 3},
                                 read={"dedupe": True})
    by_object = cheems.evaluate(bench, scorer=ScorerSettings(scorer="random"),
                                statistics=StatisticsSettings(bootstrap=50, seed=3), read=ReadSettings(dedupe=True))
    assert by_mapping.report == by_object.report and by_mapping.items == by_object.items
    defaults = cheems.evaluate(bench, scorer={"scorer": "random"})
    assert defaults.report == cheems.evaluate(bench, scorer={"scorer": "random"}, statistics=StatisticsSettings(),
                                              read=ReadSettings()).report
    assert defaults.report["overall_ci"] is not None  # bootstrap 1000 by default


def test_a_mapping_keeps_the_calls_own_defaults(work):
    """compare resamples 2000 times: a mapping of the seed alone keeps that, as the object does."""
    a, b = work / "length.json", work / "random.json"
    plain = cheems.compare(a, b)
    assert plain["n_bootstrap"] == 2000
    assert cheems.compare(a, b, statistics={"seed": 0}) == plain
    assert cheems.compare(a, b, statistics=StatisticsSettings(bootstrap=2000)) == plain
    with pytest.raises(CheemsInputError, match="at least|\\[1, "):
        cheems.compare(a, b, statistics={"bootstrap": 0})  # compare's own minimum stays


def test_score_takes_a_path_or_output_settings(work, tmp_path):
    bench = work / "bench.jsonl"
    one = cheems.score(bench, tmp_path / "one.jsonl", scorer={"scorer": "random"}, statistics={"seed": 5})
    two = cheems.score(bench, OutputSettings(tmp_path / "two.jsonl"), scorer=ScorerSettings(scorer="random"),
                       statistics=StatisticsSettings(seed=5))
    assert one.scored == two.scored > 0
    assert (tmp_path / "one.jsonl").read_bytes() == (tmp_path / "two.jsonl").read_bytes()


def test_data_calls_take_read_settings(work, tmp_path):
    bench = work / "bench.jsonl"
    assert cheems.stats(bench) == cheems.stats(bench, read=ReadSettings()) == cheems.stats(bench, read={})
    assert cheems.read(bench, read={"format": "cheems"}).prompts == cheems.read(bench).prompts
    plain = cheems.make_tasks(bench, tmp_path / "a.jsonl")
    again = cheems.make_tasks(bench, tmp_path / "b.jsonl", statistics={}, read=ReadSettings())
    assert (plain.tasks, plain.coverage) == (again.tasks, again.coverage)
    assert (tmp_path / "a.jsonl").read_bytes() == (tmp_path / "b.jsonl").read_bytes()  # seed None: the file's order
