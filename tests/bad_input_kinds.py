"""The kinds of bad input of the shared table (tests/bad_inputs.py), and the shapes of place
each fits: how to make each kind from a valid value (``make(case folder, slot) -> argument``)
and the text its one error line must hold."""

from __future__ import annotations
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

# ----------------------------------------------------------------------------- shapes of a place

ROWS = "rows"          # a JSONL file of prompt rows (any cheems row format)
SCORES = "scores"      # a JSONL file of SCORES rows {prompt_id, response_id, score}
JSON = "json"          # one JSON document (a report, downstream results)
YAML = "yaml"          # a YAML mapping (a config)
FOLDER = "folder"      # an input folder (a model, an experiment, a --source copy)
SQLITE = "sqlite"      # a database URL sqlite:///FILE
FILE_OUT = "file-out"  # an output file
FOLDER_OUT = "folder-out"  # an output folder
SEED = "seed"          # an integer >= 0
COUNT = "count"        # an integer >= 1
COUNT0 = "count0"      # an integer >= 0
PORT = "port"          # an integer in [0, 65535]
POSITIVE = "positive"  # a number > 0
NONNEG = "nonneg"      # a number >= 0
RATIO = "ratio"        # a number in [0, 1]
COUNTS = "counts"      # comma-separated integers >= 1 (bon -n)
EDGES = "edges"        # comma-separated numbers > 0 (analyze bias --bins)

LINES = (ROWS, SCORES)
DOCUMENTS = (JSON, YAML)
FILES = LINES + DOCUMENTS
INTEGERS = (SEED, COUNT, COUNT0, PORT, COUNTS)
NUMBERS = (POSITIVE, NONNEG, RATIO, EDGES)

FAMILY_OF_SHAPE = {**dict.fromkeys(FILES + (FOLDER, SQLITE), "input"), FILE_OUT: "output", FOLDER_OUT: "output",
                   **dict.fromkeys(INTEGERS + NUMBERS, "number")}
SUFFIX = {ROWS: ".jsonl", SCORES: ".jsonl", JSON: ".json", YAML: ".yaml"}

HUGE_LINE_BYTES = 5 * 2**20
LONGEST_ERROR_LINE = 600  # characters: an error quotes a bad value in part, never a whole line of megabytes


# ----------------------------------------------------------------------------- the registry's parts

@dataclass(frozen=True)
class Slot:
    """One place of a call: ``{name}`` in its words, the valid ``value`` it holds in the baseline,
    its ``shape``. ``field`` (JSON and YAML inputs): the key path a wrong-typed value goes to,
    e.g. ``("filter", "max_chars")``; ``same_as`` (outputs): the input slot an output equal to an
    input repeats (default: the call's first input file or folder)."""

    name: str
    value: str
    shape: str
    field: tuple[str, ...] = ()
    same_as: str | None = None

    @property
    def family(self) -> str:
        return FAMILY_OF_SHAPE[self.shape]


@dataclass(frozen=True)
class Call:
    """A valid run of a command: ``argv`` (words after ``cheems``, ``{slot}`` for each place),
    its slots, the work files it needs beyond those its words name (``needs``: files a config
    names), stdin, and whether the baseline runs here (True) or why not (a reason)."""

    argv: str
    slots: tuple[Slot, ...] = ()
    needs: tuple[str, ...] = ()
    input: str | None = None
    baseline: bool | str = True
    serves: bool = False  # a baseline that ends serving (the server's start is stopped by the test)

    def slot(self, name: str) -> Slot:
        return next(s for s in self.slots if s.name == name)

    def words(self, **values: str) -> list[str]:
        """The argument words with each slot's valid value, or the value given for it."""
        filled = {s.name: s.value for s in self.slots} | values
        return [w.format(**filled) for w in self.argv.split()]

    def flag_of(self, slot: Slot) -> str | None:
        """The flag a slot's value follows (None: a positional argument)."""
        words = self.argv.split()
        i = words.index("{" + slot.name + "}")
        return words[i - 1] if i and words[i - 1].startswith("-") else None


@dataclass(frozen=True)
class Exempt:
    """A kind (or a whole family: "input", "output", "number") a command cannot take, and why."""

    kind: str
    reason: str


@dataclass(frozen=True)
class Command:
    name: str
    calls: tuple[Call, ...]
    exempt: tuple[Exempt, ...] = ()

    def exemption(self, kind: "Kind") -> str | None:
        return next((e.reason for e in self.exempt if e.kind in (kind.name, kind.family)), None)


# ----------------------------------------------------------------------------- kinds of bad input

@dataclass(frozen=True)
class Kind:
    """A kind of bad input: its ``family`` (input, output, number), the slot shapes it fits,
    ``make(folder, slot) -> argument`` (writes what it needs into the case folder), what must
    hold, and ``names(argument, flag, slot)``: the texts the one error line must hold (a tuple
    among them: any one of its texts).
    ``succeeds``: the command must run and write its output (a missing output folder is made)."""

    name: str
    family: str
    shapes: tuple[str, ...]
    make: Callable[[Path, Slot], str]
    holds: str
    names: Callable[[str, str | None, Slot], tuple[str, ...]]
    succeeds: bool = False


def _bad_name(kind: str, slot: Slot) -> str:
    """The name of the bad file a kind writes: non-ASCII on purpose (messages keep it readable)."""
    return f"坏-{kind}{SUFFIX.get(slot.shape, '')}"


def _write(folder: Path, name: str, data: bytes) -> str:
    (folder / name).write_bytes(data)
    return name


def _valid_lines(folder: Path, slot: Slot) -> list[str]:
    """The valid input's non-blank lines (JSONL: rows; JSON/YAML: the document, pretty-printed)."""
    text = (folder / slot.value).read_text(encoding="utf-8")
    if slot.shape in LINES:
        return [line for line in text.splitlines() if line.strip()]
    return json.dumps(_document(folder, slot), ensure_ascii=False, indent=1).splitlines()


def _document(folder: Path, slot: Slot):
    text = (folder / slot.value).read_text(encoding="utf-8")
    if slot.shape == YAML:
        import yaml

        return yaml.safe_load(text)
    return json.loads(text)


def _with_line3(kind: str, make_line: Callable[[dict], str]) -> Callable[[Path, Slot], str]:
    """A line-oriented input whose third row is replaced by ``make_line(valid third row)``."""
    def make(folder: Path, slot: Slot) -> str:
        lines = _valid_lines(folder, slot)
        lines[2] = make_line(json.loads(lines[2]))
        return _write(folder, _bad_name(kind, slot), "".join(x + "\n" for x in lines).encode("utf-8"))
    return make


def _set_field(doc, path: tuple[str, ...], value):
    target = doc
    for key in path[:-1]:
        target = target[int(key)] if isinstance(target, list) else target[key]
    if isinstance(target, list):
        target[int(path[-1])] = value
    else:
        target[path[-1]] = value
    return doc


SURROGATE = "@@LONE-SURROGATE@@"  # replaced by the JSON escape \ud800 once the row is dumped
WRONG_TYPE = object()  # 7 where a text or a list is expected, "七" where a number is


def _row_field(slot: Slot) -> str:
    return {ROWS: "prompt", SCORES: "score"}.get(slot.shape, ".".join(slot.field))


def _get_field(doc, path: tuple[str, ...]):
    for key in path:
        doc = doc[int(key)] if isinstance(doc, list) else doc[key]
    return doc


def _spoiled(kind: str, value) -> Callable[[Path, Slot], str]:
    """The valid input with one field set to ``value``: the third row's prompt (rows), score
    (scores), or the slot's ``field`` (a JSON or YAML document, written as JSON, which YAML reads).
    ``WRONG_TYPE`` is 7 where the valid value is not a number, else the text "七"."""
    def make(folder: Path, slot: Slot) -> str:
        def spoil(valid):
            return ("七" if isinstance(valid, (int, float)) else 7) if value is WRONG_TYPE else value

        if slot.shape in LINES:
            lines = _valid_lines(folder, slot)
            row, key = json.loads(lines[2]), _row_field(slot)
            lines[2] = json.dumps(row | {key: spoil(row.get(key))}, ensure_ascii=False)
            text = "".join(x + "\n" for x in lines)
        else:
            doc = _document(folder, slot)
            text = json.dumps(_set_field(doc, slot.field, spoil(_get_field(doc, slot.field))), ensure_ascii=False,
                              indent=1)
        return _write(folder, _bad_name(kind, slot), text.replace(json.dumps(SURROGATE), '"\\ud800"').encode("utf-8"))
    return make


def _broken_line3(folder: Path, slot: Slot) -> str:
    lines = _valid_lines(folder, slot)
    lines[2] = '{"id": "断了", "prompt": ' if slot.shape in LINES else ("  - [没有闭合" if slot.shape == YAML
                                                                       else ' "断了": ,')
    return _write(folder, _bad_name("broken", slot), "".join(x + "\n" for x in lines).encode("utf-8"))


def _not_utf8(folder: Path, slot: Slot) -> str:
    lines = [x.encode("utf-8") for x in _valid_lines(folder, slot)]
    lines[2] = lines[2][:-2] + "的".encode("gbk") + lines[2][-2:]  # a GBK character inside the third line
    return _write(folder, _bad_name("gbk", slot), b"".join(x + b"\n" for x in lines))


def _whole(kind: str, wrap: Callable[[object], object]) -> Callable[[Path, Slot], str]:
    """A JSON or YAML input whose document is ``wrap(the valid document)``."""
    def make(folder: Path, slot: Slot) -> str:
        text = json.dumps(wrap(_document(folder, slot)), ensure_ascii=False)
        return _write(folder, _bad_name(kind, slot), text.encode("utf-8"))
    return make


def _list_or_number(kind: str, line: str, document) -> Callable[[Path, Slot], str]:
    rows, whole = _with_line3(kind, lambda row: line), _whole(kind, document)
    return lambda folder, slot: (rows if slot.shape in LINES else whole)(folder, slot)


def _missing(folder: Path, slot: Slot) -> str:
    name = "缺失.db" if slot.shape == SQLITE else _bad_name("缺失", slot)
    return f"sqlite:///{name}" if slot.shape == SQLITE else name


def _a_folder(folder: Path, slot: Slot) -> str:
    name = "目录.db" if slot.shape == SQLITE else _bad_name("目录", slot)
    (folder / name).mkdir()
    return f"sqlite:///{name}" if slot.shape == SQLITE else name


def _empty(folder: Path, slot: Slot) -> str:
    if slot.shape == FOLDER:
        (folder / "空目录").mkdir()
        return "空目录"
    name = _write(folder, "空.db" if slot.shape == SQLITE else _bad_name("空", slot), b"")
    return f"sqlite:///{name}" if slot.shape == SQLITE else name


def _blank_lines(folder: Path, slot: Slot) -> str:
    return _write(folder, _bad_name("空行", slot), b"\n\n   \n\t\n\n")


def _garbage_db(folder: Path, slot: Slot) -> str:
    return "sqlite:///" + _write(folder, "乱码.db", "这不是数据库\n".encode("gbk") * 200)


def _file_not_folder(folder: Path, slot: Slot) -> str:
    return _write(folder, "是文件.txt", "一个文件，不是目录\n".encode("utf-8"))


def _huge_line(folder: Path, slot: Slot) -> str:
    lines = [x.encode("utf-8") for x in _valid_lines(folder, slot)]
    lines[2] = b'"' + "长".encode("utf-8") * (HUGE_LINE_BYTES // 3) + b'"'  # one JSON string of 5 MB, no row
    return _write(folder, _bad_name("长行", slot), b"".join(x + b"\n" for x in lines))


def _output_is_input(folder: Path, slot: Slot) -> str:
    return slot.same_as  # filled in by cases(): the value of the input slot it repeats


def _output_in_new_folders(folder: Path, slot: Slot) -> str:
    return f"新目录/子目录/输出{'.out' if slot.shape == FILE_OUT else ''}"


def _output_is_folder(folder: Path, slot: Slot) -> str:
    (folder / "已有目录").mkdir()
    (folder / "已有目录" / "别动.txt").write_text("用户的文件\n", encoding="utf-8")
    return "已有目录"


def _output_is_file(folder: Path, slot: Slot) -> str:
    return _write(folder, "已有文件.txt", "用户的文件，不是目录\n".encode("utf-8"))


def _number(text: str) -> Callable[[Path, Slot], str]:
    return lambda folder, slot: text


def _file_names(line: int | None = None, field_: bool = False):
    """The error line names the bad file (and its line 3, and the field, where asked)."""
    def names(arg: str, flag: str | None, slot: Slot) -> tuple[str, ...]:
        if slot.shape == SQLITE:
            return (flag,)  # the database is the one --db: its URL names it
        name = arg
        where = f"{name}:{line}" if line is not None and slot.shape in LINES else name
        return (where, _row_field(slot).split(".")[-1]) if field_ else (where,)
    return names


def _flag_names(arg: str, flag: str | None, slot: Slot) -> tuple[tuple[str, ...], ...]:
    """The flag, as typed or by the name of the setting or argument it sets (``--vocab-size`` or
    ``vocab_size``): one part, any of these."""
    bare = flag.lstrip("-")
    return ((flag, bare, bare.replace("-", "_")) if flag.startswith("--") else (flag,),)


KINDS: tuple[Kind, ...] = (
    # --- input files (and folders, and databases)
    Kind("missing", "input", FILES + (FOLDER, SQLITE), _missing,
         "a path that does not exist: refused, named; a database is not created", _file_names()),
    Kind("directory", "input", FILES + (SQLITE,), _a_folder,
         "a folder where a file is expected: refused, named", _file_names()),
    Kind("file-not-folder", "input", (FOLDER,), _file_not_folder,
         "a file where a folder is expected: refused, named", _file_names()),
    Kind("empty", "input", FILES + (FOLDER, SQLITE), _empty,
         "a file of 0 bytes (an empty folder, an empty database): refused, named; nothing written from no rows",
         _file_names()),
    Kind("blank-lines", "input", FILES, _blank_lines,
         "a file of blank lines only: refused as empty, named", _file_names()),
    Kind("not-utf8", "input", FILES + (SQLITE,),
         lambda folder, slot: (_garbage_db if slot.shape == SQLITE else _not_utf8)(folder, slot),
         "GBK bytes in line 3 (a database: bytes that are no database): refused, named with its line",
         _file_names(3)),
    Kind("broken-line-3", "input", FILES, _broken_line3,
         "line 3 is not valid JSON (YAML): refused, named with its line", _file_names(3)),
    Kind("list-not-object", "input", FILES, _list_or_number("list", "[1, 2]", lambda doc: [doc]),
         "a JSON list where an object (a row, a report, a mapping) is expected: refused, named", _file_names(3)),
    Kind("number-not-object", "input", FILES, _list_or_number("number", "7", lambda doc: 7),
         "a JSON number where an object is expected: refused, named", _file_names(3)),
    Kind("wrong-type", "input", FILES, _spoiled("wrong-type", WRONG_TYPE),
         'a field of the wrong type ("prompt": 7; a score, a setting that is text): refused, named with line and '
         "field", _file_names(3, field_=True)),
    Kind("lone-surrogate", "input", FILES, _spoiled("surrogate", SURROGATE),
         'a text holding the escape of a lone surrogate "\\ud800": refused, named with line and field',
         _file_names(3, field_=True)),
    Kind("huge-line", "input", LINES, _huge_line,
         "line 3 is 5 MB (one JSON string, no row): refused in one short line, named with its line", _file_names(3)),
    # --- outputs
    Kind("output-is-input", "output", (FILE_OUT, FOLDER_OUT), _output_is_input,
         "an output path equal to an input: refused, the input unchanged", _file_names()),
    Kind("output-in-new-folders", "output", (FILE_OUT, FOLDER_OUT), _output_in_new_folders,
         "an output under folders that do not exist yet: made (docs: every command makes its output's folders)",
         _file_names(), succeeds=True),
    Kind("output-is-folder", "output", (FILE_OUT,), _output_is_folder,
         "an output file that is an existing folder: refused, the folder unchanged", _file_names()),
    Kind("output-is-file", "output", (FOLDER_OUT,), _output_is_file,
         "an output folder that is an existing file: refused, the file unchanged", _file_names()),
    # --- numbers
    Kind("negative", "number", INTEGERS + NUMBERS, _number("-1"), "a negative number: refused, the flag named",
         _flag_names),
    Kind("zero", "number", (COUNT, POSITIVE, COUNTS, EDGES), _number("0"),
         "zero where more than 0 is needed: refused, the flag named", _flag_names),
    Kind("nan", "number", NUMBERS, _number("nan"), "nan: refused, the flag named", _flag_names),
    Kind("inf", "number", NUMBERS, _number("inf"), "inf: refused, the flag named", _flag_names),
    Kind("huge-integer", "number", INTEGERS, _number(str(2**70)),
         "2**70 for a seed or count (past any seed a generator takes, past any count that could finish): refused, "
         "the flag named", _flag_names),
    Kind("not-a-number", "number", INTEGERS + NUMBERS, _number("七"),
         "a word where a number is expected: refused in one line (not a usage box), the flag named", _flag_names),
)
KIND_BY_NAME = {k.name: k for k in KINDS}
FAMILIES = ("input", "output", "number")
