"""Every command-line option that stands for a setting takes its default, help and range from the
settings dataclass that declares it (cheems.cli.flags), and nothing is typed twice.

The commands are walked as click sees them; each generated option is checked against its field:
the help text is the field's (:func:`cheems.cli.flags.flag`), the option's own default is "not
given" (the field's default applies when the settings are built), the flag shape follows the field
type, and a value outside the field's range or choices, given on the real command line, is refused
with the field's own message under the flag's name and exit code 2.
"""

from __future__ import annotations

import dataclasses
import inspect
import typing

import pytest
import typer.main
from typer.testing import CliRunner

from cheems.cli import app, expand_multi_value_flags
from cheems.cli.flags import FLAGS_OF, NO_VALUE, FlagSpec, build_settings, flag
from cheems.records import CheemsInputError
from cheems.settings import setting_kind


def walk(command, path: tuple[str, ...] = ()):
    """(path, command) of every leaf command under ``command`` (Typer's click commands)."""
    if hasattr(command, "commands"):
        for name, sub in command.commands.items():
            yield from walk(sub, path + (name,))
    else:
        yield path, command


COMMANDS = dict(walk(typer.main.get_command(app)))


def specs_of(command) -> list[FlagSpec]:
    if command.callback is None:
        return []
    fn = inspect.unwrap(command.callback)
    return FLAGS_OF.get(f"{fn.__module__}.{fn.__qualname__}", [])


GENERATED = [(path, spec) for path, command in COMMANDS.items() for spec in specs_of(command)
             if spec.alias_value is NO_VALUE]
ALIASES = [(path, spec) for path, command in COMMANDS.items() for spec in specs_of(command)
           if spec.alias_value is not NO_VALUE]


def is_option(param) -> bool:
    return param.param_type_name == "option"


def option(command, name: str):
    found = [p for p in command.params if is_option(p) and name in p.opts]
    assert len(found) == 1, f"{name} is not one option of the command"
    return found[0]


def field_of(spec: FlagSpec) -> dataclasses.Field:
    return next(f for f in dataclasses.fields(spec.cls) if f.name == spec.field)


def test_the_settings_commands_have_generated_flags():
    """The commands that take settings get them generated: a regression to hand-written flags fails here."""
    with_flags = {" ".join(path) for path, _ in GENERATED}
    assert {"eval", "score", "train", "bon", "curate sample", "curate filter", "curate judge", "curate resolve",
            "annotate serve"} <= with_flags
    assert len(GENERATED) >= 65


@pytest.mark.parametrize("path,spec", GENERATED, ids=[f"{' '.join(p)} {s.flag}" for p, s in GENERATED])
def test_option_takes_help_default_and_shape_from_its_setting(path, spec):
    opt = option(COMMANDS[path], spec.flag)
    f = field_of(spec)
    assert opt.help == flag(spec.cls, spec.field, spec.when, spec.help, spec.default)
    if spec.when is None and spec.help is None:
        assert opt.help.startswith(f.metadata["help"].rstrip(".")), "the field's help text, word for word"
    default = f.default if f.default is not dataclasses.MISSING else None
    if spec.default is not NO_VALUE:
        default = spec.default
    kind = setting_kind(typing.get_type_hints(spec.cls)[spec.field])
    if kind == "bool" and default is True:
        assert opt.secondary_opts == ["--no-" + spec.flag[2:]] and opt.default is None
    elif kind == "bool":
        assert opt.is_flag and opt.default is False and not opt.secondary_opts
    else:
        assert opt.default is None, "a flag left out is not given: the setting's own default applies"
        if default not in (None, ()) and (spec.default is not NO_VALUE or not f.metadata.get("default_text")):
            shown = opt.help.rsplit("(default ", 1)[1].rstrip(").")
            if isinstance(default, tuple):
                assert tuple(shown.split(",")) == default
            elif isinstance(default, (int, float)):
                assert float(shown) == default
            else:
                assert shown == str(default)


def test_hidden_aliases_are_hidden_switches_of_a_generated_flag():
    """An old spelling (``--truncate``, now ``--truncation left``) stays accepted, hidden from --help."""
    assert {(" ".join(p), s.flag) for p, s in ALIASES} == {("train", "--truncate"), ("serve", "--truncate")}
    for path, spec in ALIASES:
        opt = option(COMMANDS[path], spec.flag)
        assert opt.hidden and opt.is_flag
        assert (path, spec.cls, spec.field) in {(p, s.cls, s.field) for p, s in GENERATED}


def hand_written_helps() -> list[tuple[str, str, str]]:
    generated = {(path, s.flag) for path, s in GENERATED}
    return [(" ".join(path), p.opts[0], p.help or "") for path, command in COMMANDS.items() for p in command.params
            if is_option(p) and (path, p.opts[0]) not in generated]


def test_no_hand_written_option_retypes_a_setting():
    """A hand-written option whose help text is a setting's help would be a second copy of that setting."""
    setting_helps = {f.metadata["help"].rstrip(".") for s in {s.cls for _, s in GENERATED}
                     for f in dataclasses.fields(s) if "help" in f.metadata}
    retyped = [(cmd, name) for cmd, name, text in hand_written_helps()
               if text.rstrip(".").split(" (default")[0] in setting_helps]
    assert retyped == []


# ----------------------------------------------------------------------------- ranges, through the CLI

def out_of_range(spec: FlagSpec) -> str | None:
    """A value the field refuses (None: the field declares no range, choice or pattern)."""
    meta = field_of(spec).metadata
    if meta["choices"] is not None:
        return "no-such-" + spec.field.replace("_", "-")
    if meta.get("pattern"):
        return "no-such-" + spec.field.replace("_", "-")
    for key, step in (("min", -1), ("gt", 0), ("max", 1), ("lt", 0)):
        if meta[key] is not None:
            return str(meta[key] + step)
    return None


RANGED = [(path, spec) for path, spec in GENERATED if out_of_range(spec) is not None]

SAMPLE_CONFIG = "sample:\n  models:\n    - name: m\n      api_base: http://127.0.0.1:9/v1\n"


def args_for(path: tuple[str, ...], spec: FlagSpec, tmp_path) -> list[str]:
    """A command line of ``path`` that gets as far as building its settings: every required parameter
    gets a harmless value, and settings that only apply with another flag get it."""
    command = COMMANDS[path]
    args = list(path)
    for p in command.params:
        if not p.required:
            continue
        if p.param_type_name == "argument":
            args.append(str(tmp_path / "in.jsonl"))
        elif "--config" in p.opts:
            (tmp_path / "pipeline.yaml").write_text(SAMPLE_CONFIG, encoding="utf-8")
            args += ["--config", str(tmp_path / "pipeline.yaml")]
        else:
            args += [p.opts[0], str(tmp_path / "out")]
    own = {(s.cls.__name__, s.field) for s in specs_of(command)}
    if ("OutputSettings", "output") in own and spec.field != "output":
        args += ["-o", str(tmp_path / "out")]
    if path == ("curate", "sample"):
        (tmp_path / "pipeline.yaml").write_text(SAMPLE_CONFIG, encoding="utf-8")
        args += ["--config", str(tmp_path / "pipeline.yaml")]
    if path == ("curate", "debias") and spec.field != "seed":
        args += ["--seed", "0"]
    generated = {s.field: s.flag for s in specs_of(command) if s.cls is spec.cls}
    if "model" in generated and spec.field != "model" and spec.cls.__name__ == "JudgeConfig":
        args += [generated["model"], "judge-model"]
    if "api_base" in generated and spec.field != "api_base":
        args += ["--api-base", "http://127.0.0.1:9/v1"]
    if "--scorer" in {o for p in command.params for o in p.opts}:
        args += ["--scorer", "length"]  # a scorer, so that the command gets as far as its settings
    if spec.cls.__name__ == "TrainConfig":  # the run's required settings, as flags
        for k in ("model", "train", "output"):
            args += [f"--{k}", str(tmp_path / k)]
    return args


def valid_settings(cls):
    """A valid instance of each settings class the commands take (its required fields filled in)."""
    from cheems.curation.sample import SampleModel

    required = {"JudgeConfig": {"model": "judge-model", "api_base": "http://127.0.0.1:9/v1"},
                "SampleConfig": {"models": [SampleModel(name="m", api_base="http://127.0.0.1:9/v1")]},
                "TrainConfig": {"model": "m", "train": ["t.jsonl"], "output": "o"},
                "OutputSettings": {"output": "o"}}
    return cls(**required.get(cls.__name__, {}))


def expected_message(spec: FlagSpec, value: str) -> str:
    """The message the field's own declaration gives for ``value`` (checked by the dataclass itself)."""
    from cheems.settings import check_settings

    kind = setting_kind(typing.get_type_hints(spec.cls)[spec.field])
    parsed = {"int": int, "float": float, "strings": lambda v: (v,),
              "int_or_word": lambda v: int(v) if v.lstrip("-").isdigit() else v}.get(kind, str)(value)
    with pytest.raises(CheemsInputError) as e:
        check_settings(dataclasses.replace(valid_settings(spec.cls), **{spec.field: parsed}))
    assert e.value.field == spec.field
    return e.value.message


@pytest.mark.parametrize("path,spec", RANGED, ids=[f"{' '.join(p)} {s.flag}" for p, s in RANGED])
def test_a_value_out_of_the_settings_range_is_refused_under_the_flag(path, spec, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    value = out_of_range(spec)
    message = expected_message(spec, value)
    argv = args_for(path, spec, tmp_path) + [spec.flag, value]
    r = CliRunner().invoke(app, expand_multi_value_flags(argv))
    assert r.exit_code == 2, (argv, r.output)
    assert f"error: {spec.flag}: {message}" in r.output.replace("\n", " "), (argv, r.output)
    assert "Traceback" not in r.output


def test_build_settings_names_the_file_for_a_bad_yaml_value_and_the_flag_for_a_bad_flag(tmp_path):
    from cheems.scoring.model_settings import ModelSettings
    from cheems.training.config import TrainConfig

    with pytest.raises(CheemsInputError) as e:
        build_settings(TrainConfig, {"epochs": 0}, config=tmp_path / "c.yaml",
                       section={"model": "m", "train": ["t"], "output": "o"})
    assert (e.value.file, e.value.field) == (None, "--epochs")
    with pytest.raises(CheemsInputError) as e:
        build_settings(TrainConfig, {"epochs": 3}, config=tmp_path / "c.yaml",
                       section={"model": "m", "train": ["t"], "output": "o", "reg_coef": -1})
    assert (e.value.file, e.value.field) == (str(tmp_path / "c.yaml"), "reg_coef")
    with pytest.raises(CheemsInputError, match=r"missing --model, --train, --output \(or give them in --config\)"):
        build_settings(TrainConfig, {}, config_flag=True)
    # the flag wins over the file, and the file over the field's default
    cfg = build_settings(TrainConfig, {"epochs": 3}, config="c.yaml",
                         section={"model": "m", "train": ["t"], "output": "o", "epochs": 5, "seed": 7})
    assert (cfg.epochs, cfg.seed, cfg.reg_coef) == (3, 7, 0.1)
    assert build_settings(ModelSettings, {"device": "cuda:1"}).device == "cuda:1"
    with pytest.raises(CheemsInputError, match="--device: must be cpu, cuda or cuda:N, got 'gpu'"):
        build_settings(ModelSettings, {"device": "gpu"})


def test_switches_and_on_off_flags_are_given_only_when_typed(tmp_path):
    """``--check`` left off is not given (the YAML or the field's default stands); ``--no-packing`` is given
    and wins over a file that says ``packing: true``; a comma-separated value becomes a tuple."""
    from dataclasses import dataclass

    import typer

    from cheems.cli.flags import settings_flags
    from cheems.settings import setting

    @dataclass
    class Knobs:
        check: bool = setting(False, help="An on-switch")
        packing: bool = setting(True, help="On unless turned off")
        rules: tuple[str, ...] = setting(("a", "b"), help="Rules to apply")
        rate: float = setting(0.5, min=0, max=1, help="A share")

    seen = []
    demo = typer.Typer()

    @demo.command()
    @settings_flags(Knobs, into="knobs")
    def run(name: str = typer.Option("x", "--name"), knobs: dict = None):
        seen.append((name, knobs, build_settings(Knobs, knobs, section={"packing": True, "rate": 0.25})))

    runner = CliRunner()
    assert runner.invoke(demo, []).exit_code == 0
    assert runner.invoke(demo, ["--no-packing", "--check", "--rules", "c, d", "--rate", "1"]).exit_code == 0
    assert runner.invoke(demo, ["--packing", "--name", "y"]).exit_code == 0
    assert [given for _, given, _ in seen] == [{}, {"packing": False, "check": True, "rules": ("c", "d"), "rate": 1.0},
                                               {"packing": True}]
    assert [(s.check, s.packing, s.rules, s.rate) for _, _, s in seen] == [
        (False, True, ("a", "b"), 0.25), (True, False, ("c", "d"), 1.0), (False, True, ("a", "b"), 0.25)]
    assert seen[2][0] == "y"
    with pytest.raises(CheemsInputError, match=r"--rate: must be in \[0, 1\], got 2"):
        build_settings(Knobs, {"rate": 2.0})
