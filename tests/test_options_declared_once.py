"""Every option of every command, with the settings class and field it comes from.

A setting is declared once (:mod:`cheems.common_settings` and the other settings classes) and
the commands that take it get its option generated (:func:`cheems.cli.flags.settings_flags`).
What is counted as hand-typed: each ``typer.Option(`` call written in the source of
``src/cheems/cli/`` outside :mod:`cheems.cli.flags` (the generator itself). Positional arguments
(``typer.Argument``) are not options and are not counted. Each hand-typed option that remains
is listed below with the reason it is not a setting.
"""

from __future__ import annotations

import inspect
import re
from pathlib import Path

from cheems.cli.flags import FLAGS_OF, NO_VALUE
from tests.test_cli_flags import COMMANDS

CLI = Path(__file__).resolve().parents[1] / "src" / "cheems" / "cli"
MOST_HAND_TYPED = 40

HAND_TYPED = {
    ("eval", "--one-order"): "the opposite switch of curate judge's --both-orders, the default of each differs",
    ("score", "--ray"): "a switch here, an address in experiment run: two meanings of one word, each in one command",
    ("score", "--replicas"): "Ray replicas of a scoring run (serve's --replicas are processes of a server)",
    ("bon", "--gold"): "gold scores of candidates (annotate import's --gold are gold prompts)",
    ("bon", "-n"): "a list of n, parsed by the command",
    ("bon", "--baseline"): "one command's argument: the id of the baseline response",
    ("correlate", "--downstream"): "one command's required input file",
    ("report", "--lang"): "one command's page language",
    ("report", "--title"): "one command's page title",
    ("curate judge", "--both-orders"): "see eval --one-order",
    ("curate debias", "--tolerance"): "one command's knob",
    ("curate merge", "--human"): "one command's required inputs",
    ("curate merge", "--judge"): "judge-annotated input files (JudgeConfig's --judge names a judge model)",
    ("curate merge", "--keep-human-annotations"): "one command's switch",
    ("analyze bias", "--bins"): "a list of edges, parsed by the command",
    ("tasks", "--design"): "one command's choice",
    ("rank", "--keep-comparisons"): "one command's switch",
    ("validate", "--all"): "one command's switch",
    ("data get", "--split"): "the dataset request of data get",
    ("data get", "--config"): "a hub config name (other commands' --config is a YAML file)",
    ("data get", "--option"): "the dataset request of data get",
    ("data get", "--revision"): "the dataset request of data get",
    ("data get", "--limit"): "the dataset request of data get",
    ("data get", "--source"): "the dataset request of data get",
    ("annotate add-user", "--role"): "the new account's role",
    ("annotate add-user", "--categories"): "the new account's categories",
    ("annotate add-user", "--password-stdin"): "how the password is read",
    ("annotate import", "--overlap"): "one command's knob",
    ("annotate import", "--gold"): "see bon --gold",
    ("annotate status", "--json"): "a switch printing JSON to stdout (other commands' --json is a file to write)",
    ("annotate study list", "--json"): "see annotate status --json",
    ("init-model", "--tokenizer-from"): "one command's required inputs",
    ("init-model", "--size"): "one command's choice",
    ("init-model", "--head"): "one command's choice",
    ("init-model", "--vocab-size"): "one command's knob",
    ("convert", "--dtype"): "the saved checkpoint's dtype, default the source's (ModelSettings' is how to run)",
    ("experiment run", "--ray"): "see score --ray",
}
"""Each hand-typed option, by command and flag, and why it is not a generated setting."""

SHARED_IN_LIBRARY = {
    "--seed": "each seeds its own choices, and the types differ: an int in TrainConfig (batching and "
              "initialisation), SampleConfig (sample k asks with seed + k), JudgeConfig (the random orders, the "
              "bootstrap) and WorkflowSettings (shown orders, review samples); int | None in StatisticsSettings "
              "(None: tasks keeps the file order, curate debias asks for one), which the others must not take",
    "--output": "TrainConfig's checkpoint folder (resumed with --resume) and OutputSettings' file (started again "
                "with --overwrite); TrainConfig is a mutable dataclass, OutputSettings a frozen one, and one "
                "cannot inherit from the other",
    "--skip-invalid": "one meaning, but TrainConfig is a mutable dataclass and ReadSettings a frozen one (which "
                      "also holds format and dedupe, which training does not take): one cannot inherit from the "
                      "other",
    "--token-budget": "left out (None), a different cap: 1024 tokens on a CPU when scoring (ModelSettings, "
                      "EngineSettings), the micro batch size alone when training (TrainConfig); and the server's "
                      "EngineSettings is a frozen dataclass, ModelSettings a mutable one: one cannot inherit "
                      "from the other",
    "--model": "TrainConfig's starting checkpoint and ScorerSettings' reward model to score with",
    "--judge-language": "the judge prompt's language, two settings: TrainConfig's judge_language (default zh) "
                        "picks the template a model is trained on and records; JudgeModelSettings' language "
                        "(default: what the model recorded) picks the one it judges with. Other field names, "
                        "other defaults",
    "--judge-ties": "TrainConfig's judge_ties trains tied pairs as a third verdict (and records it); "
                    "JudgeModelSettings' ties offers that verdict when judging (default: what the model "
                    "recorded). Other field names, other meanings of the default",
}
"""Flags that name two or more settings, each declared in a library config of its own, and why they
cannot be one declaration (:mod:`cheems.common_settings`)."""


def declared_in(cls: type, field: str) -> type:
    """The class that declares ``field`` of the settings dataclass ``cls``: ``cls`` itself, or the
    shared settings class it takes the field from by inheritance (``ModelSettings.max_length`` is
    ``ModelRunSettings``'). A subclass that declares the field again is its declaring class."""
    return next(k for k in cls.__mro__ if field in inspect.get_annotations(k))


def specs_of(command):
    fn = inspect.unwrap(command.callback)
    return FLAGS_OF.get(f"{fn.__module__}.{fn.__qualname__}", [])


def every_option() -> dict[tuple[str, str], str]:
    """(command, flag) -> "Class.field" for a generated option, "hand-typed" for the others."""
    found = {}
    for path, command in COMMANDS.items():
        generated = {s.flag: s for s in specs_of(command)}
        for p in command.params:
            if p.param_type_name != "option":
                continue
            name = max(p.opts, key=len)
            spec = generated.get(name)
            found[(" ".join(path), name)] = (f"{declared_in(spec.cls, spec.field).__name__}.{spec.field}" if spec
                                             else "hand-typed")
    return found


def test_every_option_is_listed_with_its_settings_class_or_its_reason():
    options = every_option()
    hand = {key for key, source in options.items() if source == "hand-typed"}
    assert hand - set(HAND_TYPED) == set(), "a hand-typed option: declare it in a settings class, or give a reason"
    assert set(HAND_TYPED) - hand == set(), "an option listed as hand-typed is generated now (or gone)"
    assert len(options) > 300 and sum(s != "hand-typed" for s in options.values()) > 250


def test_at_most_40_hand_typed_options_in_the_cli_source():
    calls = sum(len(re.findall(r"\btyper\.Option\(", f.read_text(encoding="utf-8")))
                for f in CLI.glob("*.py") if f.name != "flags.py")
    assert calls <= MOST_HAND_TYPED
    assert len(HAND_TYPED) <= MOST_HAND_TYPED


def test_a_flag_name_means_one_setting_everywhere():
    """One flag name, one (declaring class, field), across every command: a setting several configs
    take is declared once, in a shared class they inherit it from; the flags that still name two
    settings are listed with the reason."""
    meanings: dict[str, set[tuple[str, str]]] = {}
    for command in COMMANDS.values():
        for s in specs_of(command):
            meanings.setdefault(s.flag, set()).add((declared_in(s.cls, s.field).__name__, s.field))
    shared = {flag for flag, m in meanings.items() if len(m) > 1}
    assert shared - set(SHARED_IN_LIBRARY) == set(), {f: meanings[f] for f in shared - set(SHARED_IN_LIBRARY)}
    assert set(SHARED_IN_LIBRARY) - shared == set(), "listed as shared, but one setting now: take it off the list"
    clash = {flag for _, flag in HAND_TYPED} & set(meanings)  # a hand-typed flag that is also a setting's name
    assert clash == {"--config", "--dtype", "--json", "--judge", "--replicas"}, "each has its reason in HAND_TYPED"


def test_truncate_and_truncation_are_one_setting():
    options = every_option()
    assert {source for (cmd, flag), source in options.items() if flag == "--truncation"} == {
        "TruncationSettings.truncation"}
    assert {cmd for (cmd, flag) in options if flag == "--truncate"} == {"train", "serve"}  # hidden old spelling
    for cmd in ("train", "serve"):
        alias = [s for s in specs_of(COMMANDS[tuple(cmd.split())]) if s.flag == "--truncate"]
        assert alias and alias[0].alias_value == "left" and alias[0].alias_value is not NO_VALUE
