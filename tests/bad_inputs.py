"""The shared table of bad inputs, and the registry of where each `cheems` command takes them.

The project's rule: bad input is ONE line on stderr (``error: ...``, naming file, line and field
where there is one), exit code 2, no traceback, and nothing written: no output file made or
changed, no input overwritten. tests/test_bad_input_matrix.py plugs every kind of bad input
below into every place of every command that takes it, and checks the rule on each pair.

Three parts:

- ``KINDS`` (tests/bad_input_kinds.py): the kinds of bad input. Each has a name, the family of places it goes (an input,
  an output, a number), the shapes of place it fits (a JSONL file of rows, a JSON report, a YAML
  config, a folder, a SQLite database; an output file or folder; an integer count, a seed, a
  ratio...), how to make it (``make(case folder, slot) -> the argument``) and what must hold,
  in words and as the text the error line must hold.
- ``COMMANDS``: the registry, one :class:`Command` per command of the typer app: one or more
  :class:`Call` s with a valid baseline (the bundled sample, the length scorer, the tiny model),
  its places as ``{slot}`` in the argument words with their valid value and shape, and the
  kinds it cannot take with the reason (:class:`Exempt`), never a silent omission.
- ``cases()``: every (command, kind) pair the registry admits, one slot each (the first of the
  command that fits; a kind goes into each slot of another shape too: ``eval``'s benchmark rows
  and its scores file are read by different readers).

A command added to the app without an entry here fails ``test_every_command_is_registered``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

from tests.bad_input_kinds import (COUNT, COUNT0, COUNTS, EDGES, FAMILIES, FAMILY_OF_SHAPE, FILE_OUT, FILES, FOLDER,
                                   FOLDER_OUT, JSON, KIND_BY_NAME, KINDS, LONGEST_ERROR_LINE, NONNEG, PORT, POSITIVE,
                                   RATIO, ROWS, SCORES, SEED, SQLITE, YAML, Call, Command, Exempt, Kind, Slot)

__all__ = ["COMMANDS", "DB", "FAMILIES", "FAMILY_OF_SHAPE", "KINDS", "LONGEST_ERROR_LINE", "WORK_FILES", "Call",
           "Case", "cases", "unplaced"]


# ----------------------------------------------------------------------------- the work folder

WORK_FILES = {
    "open.jsonl": "the sample's open annotations (rows with comparisons)",
    "human.jsonl": "the sample's human annotations",
    "few.jsonl": "the first 4 rows of open.jsonl (for the stages that call a model per row)",
    "bench.jsonl": "open.jsonl and human.jsonl ranked by `cheems rank`",
    "open-bench.jsonl": "open.jsonl alone ranked (gold prompts for `annotate import`)",
    "scores.jsonl": "`cheems score bench.jsonl --scorer length`",
    "gold.jsonl": "each response's gold score: minus its level in bench.jsonl's rank",
    "length.json": "`cheems eval bench.jsonl --scorer length --json` (with length.items.jsonl)",
    "random.json": "the same with --scorer random",
    "oracle.json": "the same with --scores gold.jsonl",
    "down.json": "downstream results of length, random and oracle",
    "train.yaml": "a train config: model tiny, train bench.jsonl",
    "grid.yaml": "an experiment grid on bench.jsonl and tiny",
    "pipeline.yaml": "a curation config whose models and judge are the loopback chat server",
    "annotations.db": "an annotation database: initialised, open.jsonl imported",
    "tiny": "the tiny reward model (`cheems init-model`)",
    "v-head": "a tiny causal LM with a v_head file (the official Cheems checkpoint layout)",
    "zhihu-src": "a local copy of the zhihu dataset's hub files (tests/fixtures/catalog/zhihu)",
}
"""What the work folder holds (tests/test_bad_input_matrix.py builds it); each case runs in a
copy of the entries its call names."""

DB = "sqlite:///annotations.db"


def db_slot(value: str = DB) -> Slot:
    return Slot("db", value, SQLITE)


def _s(name: str, value: str, shape: str, *fields: str, same_as: str | None = None) -> Slot:
    return Slot(name, value, shape, tuple(fields), same_as)


NO_NUMBER = "takes no number"
NO_OUTPUT = "writes no file"
NO_INPUT = "reads no file"

COMMANDS: dict[str, Command] = {c.name: c for c in (
    Command("tasks", (Call("tasks {file} -o {out} --seed {seed}",
                           (_s("file", "open.jsonl", ROWS), _s("out", "tasks.jsonl", FILE_OUT),
                            _s("seed", "0", SEED))),)),
    Command("rank", (Call("rank {annotations} -o {out} --report {report}",
                          (_s("annotations", "open.jsonl", ROWS), _s("out", "ranked.jsonl", FILE_OUT),
                           _s("report", "report.json", FILE_OUT))),),
            (Exempt("number", NO_NUMBER),)),
    Command("validate", (Call("validate {files}", (_s("files", "bench.jsonl", ROWS),)),),
            (Exempt("output", NO_OUTPUT), Exempt("number", NO_NUMBER),
             *(Exempt(k, "validate reports bad rows, each on its own line, and exits 1: that is its job "
                         "(tests/test_cli.py::test_validate_bad_file_prints_every_error)")
               for k in ("not-utf8", "broken-line-3", "list-not-object", "number-not-object", "wrong-type",
                         "lone-surrogate", "huge-line")))),
    Command("stats", (Call("stats {files}", (_s("files", "bench.jsonl", ROWS),)),),
            (Exempt("output", NO_OUTPUT), Exempt("number", NO_NUMBER))),
    Command("example-data", (Call("example-data -o {out}", (_s("out", "样例", FOLDER_OUT),)),),
            (Exempt("input", NO_INPUT + ": it copies the bundled sample"), Exempt("number", NO_NUMBER),
             Exempt("output-is-input", NO_INPUT))),
    Command("sample", (Call("sample -o {out}", (_s("out", "样例", FOLDER_OUT),)),),
            (Exempt("input", NO_INPUT + ": the hidden old name of example-data"), Exempt("number", NO_NUMBER),
             Exempt("output-is-input", NO_INPUT),
             Exempt("output-is-file", "the hidden old name prints its rename note before the error line; "
                                      "example-data has the case"))),
    Command("eval", (
        Call("eval {bench} --scorer random --json {json} --bootstrap {bootstrap} --seed {seed}",
             (_s("bench", "bench.jsonl", ROWS), _s("json", "report.json", FILE_OUT),
              _s("bootstrap", "50", COUNT0), _s("seed", "0", SEED))),
        Call("eval bench.jsonl --scores {scores} --bootstrap 0", (_s("scores", "scores.jsonl", SCORES),)),
        Call("eval bench.jsonl --model {model} --batch-size {batch}",
             (_s("model", "tiny", FOLDER), _s("batch", "8", COUNT)),
             baseline="scores the sample with a model (tests/test_cli_usability.py runs it)"),
    )),
    Command("score", (
        Call("score {bench} --scorer random -o {out} --seed {seed}",
             (_s("bench", "bench.jsonl", ROWS), _s("out", "scores-out.jsonl", FILE_OUT), _s("seed", "0", SEED))),
        Call("score bench.jsonl --model {model} -o s.jsonl --max-length {max_length}",
             (_s("model", "tiny", FOLDER), _s("max_length", "256", COUNT)),
             baseline="scores the sample with a model (tests/test_cli.py runs it)"),
    )),
    Command("train", (
        Call("train --model tiny --train {train} --eval {eval} -o {out} --epochs {epochs} --learning-rate {lr} "
             "--warmup-ratio {warmup} --seed {seed}",
             (_s("train", "bench.jsonl", ROWS), _s("eval", "open-bench.jsonl", ROWS), _s("out", "run", FOLDER_OUT),
              _s("epochs", "1", COUNT), _s("lr", "0.001", POSITIVE), _s("warmup", "0.1", RATIO),
              _s("seed", "0", SEED)),
             baseline="trains a model (tests/test_train_cli.py runs it)"),
        Call("train --config {config}", (_s("config", "train.yaml", YAML, "epochs"),), needs=("bench.jsonl", "tiny"),
             baseline="trains a model (tests/test_train_cli.py runs it)"),
    )),
    Command("init-model", (Call("init-model -o {out} --tokenizer-from {texts} --vocab-size {vocab} --seed {seed}",
                                (_s("out", "新模型", FOLDER_OUT), _s("texts", "open.jsonl", ROWS),
                                 _s("vocab", "400", COUNT), _s("seed", "0", SEED))),)),
    Command("convert", (Call("convert {source} -o {out}",
                             (_s("source", "v-head", FOLDER), _s("out", "转换", FOLDER_OUT))),),
            (Exempt("number", NO_NUMBER),)),
    Command("serve", (Call("serve {model} --port {port} --max-batch {max_batch} --max-wait-ms {wait}",
                           (_s("model", "tiny", FOLDER), _s("port", "0", PORT), _s("max_batch", "8", COUNT),
                            _s("wait", "5", NONNEG)), serves=True),),
            (Exempt("output", NO_OUTPUT + ": it serves until stopped"),)),
    Command("bon", (Call("bon {candidates} --scores {scores} --gold {gold} -n {n} --json {json} "
                         "--bootstrap {bootstrap} --seed {seed}",
                         (_s("candidates", "bench.jsonl", ROWS), _s("scores", "scores.jsonl", SCORES),
                          _s("gold", "gold.jsonl", SCORES), _s("n", "1,2,4", COUNTS), _s("json", "bon.json", FILE_OUT),
                          _s("bootstrap", "50", COUNT0), _s("seed", "0", SEED))),)),
    Command("compare", (Call("compare {a} {b} --json {json} --bootstrap {bootstrap} --seed {seed}",
                             (_s("a", "length.json", JSON, "ties"), _s("b", "random.json", JSON, "model"),
                              _s("json", "compare.json", FILE_OUT), _s("bootstrap", "50", COUNT),
                              _s("seed", "0", SEED)),
                             needs=("length.items.jsonl", "random.items.jsonl")),)),
    Command("correlate", (Call("correlate {results} random.json oracle.json --downstream {down} --json {json} "
                               "--bootstrap {bootstrap} --seed {seed}",
                               (_s("results", "length.json", JSON, "overall"),
                                _s("down", "down.json", JSON, "length", "win"),
                                _s("json", "correlate.json", FILE_OUT), _s("bootstrap", "50", COUNT0),
                                _s("seed", "0", SEED))),)),
    Command("report", (Call("report {results} -o {out} --markdown {markdown}",
                            (_s("results", "length.json", JSON, "overall"), _s("out", "report.html", FILE_OUT),
                             _s("markdown", "report.md", FILE_OUT))),),
            (Exempt("number", NO_NUMBER),)),
    Command("data list", (Call("data list"),),
            (Exempt("input", NO_INPUT + ": it lists the catalogue"), Exempt("output", NO_OUTPUT),
             Exempt("number", NO_NUMBER))),
    Command("data info", (Call("data info zhihu"),),
            (Exempt("input", "takes a catalogue name, not a file (unknown names: tests/test_catalog_get.py)"),
             Exempt("output", NO_OUTPUT), Exempt("number", NO_NUMBER))),
    Command("data get", (Call("data get zhihu --source {source} -o {out} --limit {limit} --skip-invalid",
                              (_s("source", "zhihu-src", FOLDER), _s("out", "zhihu.jsonl", FILE_OUT),
                               _s("limit", "20", COUNT))),),
            (Exempt("output-is-input", "its input is a catalogue name or a --source folder, no file an output "
                                       "could repeat (a --source folder as -o is output-is-folder)"),)),
    Command("experiment run", (Call("experiment run {exp} -o {out}", (_s("exp", "grid.yaml", YAML, "train", "epochs"),
                                                                     _s("out", "study", FOLDER_OUT)),
                                    needs=("bench.jsonl", "tiny"),
                                    baseline="trains every cell of a grid (tests/test_experiments.py runs it)"),),
            (Exempt("number", NO_NUMBER + ": the grid's numbers are in the YAML (wrong-type)"),)),
    Command("experiment status", (Call("experiment status {folder}", (_s("folder", "study", FOLDER),),
                                       baseline="needs a run experiment (tests/test_experiments.py)"),),
            (Exempt("output", NO_OUTPUT), Exempt("number", NO_NUMBER))),
    Command("experiment table", (Call("experiment table {folder}", (_s("folder", "study", FOLDER),),
                                      baseline="needs a run experiment (tests/test_experiment_table.py)"),),
            (Exempt("output", "writes into the experiment folder it reads, whose bad forms are the input kinds"),
             Exempt("number", NO_NUMBER))),
    Command("curate sample", (Call("curate sample {prompts} -o {out} --config {config} --concurrency {concurrency} "
                                   "--seed {seed}",
                                   (_s("prompts", "few.jsonl", ROWS), _s("out", "sampled.jsonl", FILE_OUT),
                                    _s("config", "pipeline.yaml", YAML, "sample", "models", "0", "n"),
                                    _s("concurrency", "4", COUNT), _s("seed", "0", SEED))),)),
    Command("curate filter", (Call("curate filter {inputs} -o {out} --config {config} --max-chars {max_chars} "
                                   "--max-non-chinese-ratio {ratio}",
                                   (_s("inputs", "open.jsonl", ROWS), _s("out", "filtered.jsonl", FILE_OUT),
                                    _s("config", "pipeline.yaml", YAML, "filter", "min_responses"),
                                    _s("max_chars", "8000", COUNT), _s("ratio", "0.7", RATIO))),)),
    Command("curate judge", (Call("curate judge {inputs} -o {out} --config {config} --concurrency {concurrency} "
                                  "--timeout {timeout} --seed {seed}",
                                  (_s("inputs", "few.jsonl", ROWS), _s("out", "judged.jsonl", FILE_OUT),
                                   _s("config", "pipeline.yaml", YAML, "judge", "max_retries"),
                                   _s("concurrency", "4", COUNT), _s("timeout", "30", POSITIVE),
                                   _s("seed", "0", SEED))),)),
    Command("curate resolve", (Call("curate resolve {inputs} --scores {scores} -o {out} --margin {margin}",
                                    (_s("inputs", "open.jsonl", ROWS), _s("scores", "scores.jsonl", SCORES),
                                     _s("out", "resolved.jsonl", FILE_OUT), _s("margin", "0", NONNEG))),)),
    Command("curate debias", (Call("curate debias {inputs} -o {out} --seed {seed} --tolerance {tolerance}",
                                   (_s("inputs", "open.jsonl", ROWS), _s("out", "debiased.jsonl", FILE_OUT),
                                    _s("seed", "0", SEED), _s("tolerance", "0", COUNT0))),)),
    Command("curate merge", (Call("curate merge --human {human} --judge {judged} -o {out}",
                                  (_s("human", "human.jsonl", ROWS), _s("judged", "open.jsonl", ROWS),
                                   _s("out", "merged.jsonl", FILE_OUT))),),
            (Exempt("number", NO_NUMBER),)),
    Command("analyze bias", (
        Call("analyze bias {files} --json {json} --bins {bins}",
             (_s("files", "open.jsonl", ROWS), _s("json", "bias.json", FILE_OUT), _s("bins", "50,200", EDGES))),
        Call("analyze bias open.jsonl --plots {plots}", (_s("plots", "图", FOLDER_OUT),),
             baseline="draws plots (tests/test_bias.py runs it)"),
    )),
    Command("annotate init", (Call("annotate init --db {db}", (db_slot("sqlite:///新.db"),)),),
            (Exempt("output", "its output is the --db database, whose bad forms are the input kinds"),
             Exempt("number", NO_NUMBER),
             Exempt("missing", "init makes the database that is missing: that is its job"),
             Exempt("empty", "init makes a schema in an empty database file: that is its job"))),
    Command("annotate add-user", (Call("annotate add-user 李雷 --password-stdin --db {db}", (db_slot(),),
                                       input="口令很长很长\n"),),
            (Exempt("output", NO_OUTPUT), Exempt("number", NO_NUMBER))),
    Command("annotate import", (
        Call("annotate import {file} --overlap {overlap} --seed {seed} --db {db}",
             (_s("file", "human.jsonl", ROWS), _s("overlap", "2", COUNT), _s("seed", "0", SEED), db_slot())),
        Call("annotate import human.jsonl --gold {gold} --db sqlite:///annotations-gold.db",
             (_s("gold", "open-bench.jsonl", ROWS),)),
    ), (Exempt("output", "its output is the --db database, whose bad forms are the input kinds"),)),
    Command("annotate serve", (Call("annotate serve --db {db} --port {port} --review-rate {rate} --claim-timeout "
                                    "{timeout} --seed {seed}",
                                    (db_slot(), _s("port", "0", PORT), _s("rate", "0.1", RATIO),
                                     _s("timeout", "600", POSITIVE), _s("seed", "0", SEED)), serves=True),),
            (Exempt("output", NO_OUTPUT + ": it serves until stopped"),)),
    Command("annotate status", (Call("annotate status --db {db}", (db_slot(),)),),
            (Exempt("output", NO_OUTPUT), Exempt("number", NO_NUMBER))),
    Command("annotate export", (Call("annotate export -o {out} --raw {raw} --report {report} --db {db}",
                                     (_s("out", "exported.jsonl", FILE_OUT), _s("raw", "raw.jsonl", FILE_OUT),
                                      _s("report", "export-report.json", FILE_OUT), db_slot())),),
            (Exempt("number", NO_NUMBER),
             Exempt("output-is-input", "its input is a database URL, which no output path can name"))),
    Command("annotate study add", (Call("annotate study add 诗歌 --db {db} --review-rate {rate} --seed {seed}",
                                        (db_slot(), _s("rate", "0.2", RATIO), _s("seed", "0", SEED))),),
            (Exempt("output", NO_OUTPUT),)),
    Command("annotate study list", (Call("annotate study list --db {db}", (db_slot(),)),),
            (Exempt("output", NO_OUTPUT), Exempt("number", NO_NUMBER))),
)}
"""Every command of `cheems` (sub-commands of groups by their full name), keyed by that name."""


# ----------------------------------------------------------------------------- the cases

@dataclass(frozen=True)
class Case:
    command: str
    kind: Kind
    call: Call
    slot: Slot

    @property
    def id(self) -> str:
        return f"{self.command}|{self.kind.name}|{self.slot.name}"


def _input_for(call: Call, output: Slot) -> Slot | None:
    """The input an output equal to an input repeats: ``same_as``, else the first input file or
    folder of the call (an output folder repeats an input folder, an output file an input file)."""
    if output.same_as:
        return call.slot(output.same_as)
    want = (FOLDER,) if output.shape == FOLDER_OUT else FILES
    return next((s for s in call.slots if s.shape in want), None)


def cases() -> Iterator[Case]:
    """For every command and kind it is not exempt from: the kind in the first slot of each shape
    it fits (one numeric slot per shape of number: a seed, a count, a ratio...)."""
    for command in COMMANDS.values():
        for kind in KINDS:
            if command.exemption(kind):
                continue
            seen: set[str] = set()
            for call in command.calls:
                for slot in call.slots:
                    if slot.shape not in kind.shapes or slot.shape in seen:
                        continue
                    if kind.succeeds and call.baseline is not True:
                        continue  # a kind whose run must succeed goes where the baseline runs
                    if kind.name == "output-is-input":
                        source = _input_for(call, slot)
                        if source is None:
                            continue
                        slot = Slot(slot.name, slot.value, slot.shape, slot.field, source.value)
                    seen.add(slot.shape)
                    yield Case(command.name, kind, call, slot)


def unplaced() -> dict[tuple[str, str], str]:
    """(command, kind) -> why no case: the command has no slot of a shape the kind fits (its
    family is covered by other kinds), or its exemption."""
    placed = {(c.command, c.kind.name) for c in cases()}
    out = {}
    for command in COMMANDS.values():
        shapes = {s.shape for call in command.calls for s in call.slots}
        for kind in KINDS:
            if (command.name, kind.name) in placed:
                continue
            reason = command.exemption(kind)
            if reason is None and kind.succeeds and shapes & set(kind.shapes):
                reason = "the run would succeed, and its baseline does not run here: " + next(
                    c.baseline for c in command.calls if c.baseline is not True)
            out[command.name, kind.name] = reason or (f"no place of shape {', '.join(kind.shapes)} "
                                                      f"(its places: {', '.join(sorted(shapes)) or 'none'})")
    return out


__all__ = ["COMMANDS", "Call", "Case", "Command", "DB", "Exempt", "FAMILIES", "KINDS", "KIND_BY_NAME", "Kind",
           "LONGEST_ERROR_LINE", "Slot", "WORK_FILES", "cases", "unplaced"]
