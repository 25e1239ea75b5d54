"""The columnar path of `cheems rank` and `cheems stats` (cheems.formats.columnar) against the
object path (Prompt objects, the reference): on generated rows (ties, cycles, chat prompts,
models, annotators, unknown keys, unicode, rows wrong in one field) and on the bundled sample,
the same output bytes, report, statistics and, for bad rows, the same one-line error."""

from __future__ import annotations

import inspect
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import typer
from hypothesis import event, given, settings
from hypothesis import strategies as st

import cheems.benchmark
import cheems.formats.columnar_sums
from cheems.benchmark import LazyPrompts, rank_annotations
from cheems.formats import NotPlain, read_prompts
from cheems.formats.columnar_sums import columnar_stats
from cheems.formats.columnar_rank import rank_columns
from cheems.metrics import dataset_stats
from tests.conftest import run_cli_in, write_jsonl_rows
from tests.test_rank_fast import write_files as write_part_files

TEXT = st.text(st.characters(blacklist_categories=("Cs",)), max_size=10)  # unicode, no lone surrogates
WORDS = st.sampled_from(["问题", "回答", "x", " y ", "😀", "\\\"q\"", "\u00e9", "tab\there"])
IDS = [f"r{j}" for j in range(8)] + ["回答甲", "b", "a b"]
BAD = ["triple", "unknown id", "label", "same response", "duplicate id", "blank prompt", "no content", "comparisons not a list",
       "float id", "int response id", "bad rank", "role", "category", "subset"]


def _ordered(draw, d: dict) -> dict:
    keys = draw(st.permutations(list(d)))
    return {k: d[k] for k in keys}


def _prompt(draw):
    if draw(st.booleans()):
        return draw(WORDS) + draw(TEXT)
    messages = [{"role": draw(st.sampled_from(["system", "user", "assistant"])), "content": draw(TEXT)}
                for _ in range(draw(st.integers(1, 3)))]
    if draw(st.booleans()):
        messages[0]["lang"] = "zh"
    return messages


def _response(draw, rid: str) -> dict:
    r = {"id": rid, "content": draw(TEXT)}
    model = draw(st.sampled_from(["absent", "absent", "m-1", None, 7]))
    if model != "absent":
        r["model"] = model
    if draw(st.integers(0, 4)) == 0:
        r["seed"] = draw(st.integers(0, 3))
    return _ordered(draw, r) if draw(st.integers(0, 3)) == 0 else r


def _comparison(draw, ids: list[str]) -> dict:
    a, b = draw(st.lists(st.sampled_from(ids), min_size=2, max_size=2, unique=True))
    c = {"a": a, "b": b, "label": draw(st.sampled_from("gbs"))}  # repeats, cycles and ties all happen
    for key, values in (("annotator", ["absent", "absent", "甲", None]), ("source", ["absent", "human", None]),
                        ("note", ["absent", "absent", {"why": "长"}])):
        value = draw(st.sampled_from(values))
        if value != "absent":
            c[key] = value
    return _ordered(draw, c) if draw(st.integers(0, 3)) == 0 else c


@st.composite
def annotated_row(draw, i: int, bad: bool = False):
    """A cheems row as annotators' files hold it; with ``bad``, wrong in one field."""
    ids = draw(st.lists(st.sampled_from(IDS), min_size=2, max_size=6, unique=True))
    responses = [_response(draw, r) for r in ids]
    row = {"prompt": _prompt(draw), "responses": responses}
    n_comparisons = draw(st.integers(0, 10))
    if n_comparisons or draw(st.booleans()):
        row["comparisons"] = [_comparison(draw, ids) for _ in range(n_comparisons)]
    if len(ids) >= 3 and draw(st.booleans()):
        row["triples"] = []
        for _ in range(draw(st.integers(1, 3))):
            x, y, z = draw(st.permutations(ids))[:3]
            triple = {"ids": [x, y, z], "ranking": draw(st.sampled_from([f"{x}>{y}>{z}", f"{z}={x}>{y}", f"{y}>{x}={z}"]))}
            if draw(st.booleans()):
                triple["annotator"] = draw(st.sampled_from(["乙", None]))
            row["triples"].append(triple)
    if draw(st.integers(0, 5)) == 0:
        row["rank"] = {r: draw(st.integers(0, 3)) for r in draw(st.permutations(ids))}
    kind = draw(st.sampled_from(["str", "str", "int", "none", "absent"]))
    if kind != "absent":
        row["id"] = {"str": f"p{i}", "int": i, "none": None}[kind]
    for key, values in (("category", [None, "absent", "理解", [], ["理解", "推理"]]),
                        ("subset", [None, "absent", "human", "", "开放"]),
                        ("meta", ["absent", "absent", {"batch": 3}, [1, "二"]])):
        value = draw(st.sampled_from(values))
        if value != "absent":
            row[key] = value
    row = _ordered(draw, row)
    if bad:
        _spoil(row, draw(st.sampled_from(BAD)))
    return row


def _spoil(row: dict, how: str) -> None:
    """Make ``row`` wrong in one field."""
    comps = row.setdefault("comparisons", [])
    r0, r1 = row["responses"][0], row["responses"][1]
    if how == "triple":
        row["triples"] = [{"ids": [r0["id"], r1["id"], r0["id"]], "ranking": f"{r0['id']}>{r1['id']}"}]
    elif how == "unknown id":
        comps.append({"a": r0["id"], "b": "zz", "label": "g"})
    elif how == "label":
        comps.append({"a": r0["id"], "b": r1["id"], "label": "x"})
    elif how == "same response":
        comps.append({"a": r0["id"], "b": r0["id"], "label": "s"})
    elif how == "duplicate id":
        r1["id"] = r0["id"]
    elif how == "blank prompt":
        row["prompt"] = " "
    elif how == "no content":
        del r1["content"]
    elif how == "comparisons not a list":
        row["comparisons"] = {"a": r0["id"]}
    elif how == "float id":
        row["id"] = 1.5
    elif how == "int response id":
        r0["id"] = 3
    elif how == "bad rank":
        row["rank"] = {r0["id"]: 0}
    elif how == "role":
        row["prompt"] = [{"role": "robot", "content": "x"}]
    elif how == "category":
        row["category"] = 5
    elif how == "subset":
        row["subset"] = ["a"]


@st.composite
def files_of(draw, row, bad: bool = False):
    """1-3 files of the rows ``row(i, bad=...)`` draws (each with a blank line or not, as JSONL
    or a JSON list); with ``bad``, one row of one file is wrong in one field."""
    files, i = [], 0
    spoiled = draw(st.integers(0, 20)) if bad else -1
    for _ in range(draw(st.integers(1, 3))):
        rows = []
        for _ in range(draw(st.integers(0, 6))):
            rows.append(draw(row(i, bad=i == spoiled)))
            i += 1
        files.append((rows, draw(st.booleans()), draw(st.sampled_from(["jsonl", "jsonl", "json"]))))
    return files


def annotation_files(bad: bool = False):
    """1-3 files of annotated rows (:func:`files_of`)."""
    return files_of(annotated_row, bad)


def write_files(files, tmp: Path) -> list[Path]:
    return write_part_files(files, tmp, line_end="\n")


def _object_path_only(*args, **kwargs):
    raise NotPlain("the object path, as the reference")


def cli_both_paths(tmp: Path, args: list) -> None:
    """``cheems ARGS`` in ``tmp`` with the columnar paths and with every one of them off: the same
    exit status, stdout, stderr and output file (``tmp/out.jsonl``, when written)."""
    out = tmp / "out.jsonl"
    with_columns = run_cli_in(tmp, *args)
    written = out.read_bytes() if out.exists() else None
    out.unlink(missing_ok=True)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(cheems.formats.columnar_sums, "columnar_stats", lambda *a, **k: None)
        mp.setattr(cheems.benchmark, "_rank_plain", _object_path_only)
        reference = run_cli_in(tmp, *args)
    assert (with_columns.returncode, with_columns.stdout, with_columns.stderr) == \
        (reference.returncode, reference.stdout, reference.stderr)
    assert written == (out.read_bytes() if out.exists() else None)
    event("error" if reference.returncode else "no error")


def rank_object_path(paths, tmp: Path, keep_comparisons: bool):
    """The reference: rank_annotations with every fast path off. (output bytes, report text), or
    the error message."""
    out, rep = tmp / "object.jsonl", tmp / "object.report.json"
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(cheems.benchmark, "_rank_plain", _object_path_only)
        try:
            rank_annotations(paths, out, report=rep, keep_comparisons=keep_comparisons)
        except Exception as e:  # noqa: BLE001 - the message is compared
            return type(e).__name__, str(e)
    if not out.exists():
        return None  # no prompt to rank: nothing written
    return out.read_bytes(), rep.read_text(encoding="utf-8")


def check_rank(paths, tmp: Path, keep_comparisons: bool) -> bool:
    """rank_columns writes what the object path writes; whether it took the rows."""
    out, rep = tmp / "columns.jsonl", tmp / "columns.report.json"
    ranked = rank_columns(paths, out, report=rep, keep_comparisons=keep_comparisons)
    expected = rank_object_path(paths, tmp, keep_comparisons)
    if ranked is None:
        assert not out.exists() and not rep.exists()  # nothing written: the general path reads them
        return False
    assert (out.read_bytes(), rep.read_text(encoding="utf-8")) == expected
    assert ranked.report == json.loads(expected[1])
    return True


@settings(max_examples=60, deadline=None)
@given(annotation_files(), st.booleans())
def test_rank_writes_the_bytes_of_the_object_path(files, keep_comparisons):
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        event("columnar" if check_rank(write_files(files, tmp), tmp, keep_comparisons) else "general")


@settings(max_examples=60, deadline=None)
@given(annotation_files())
def test_stats_are_those_of_the_object_path(files):
    with tempfile.TemporaryDirectory() as d:
        for path in write_files(files, Path(d)):
            sums = columnar_stats(path)
            event("columnar" if sums is not None else "general")
            if sums is not None:
                assert sums.stats() == dataset_stats(read_prompts(path).prompts)


def test_valid_rows_take_the_columnar_path(tmp_path):
    """Every kind of valid row the generator makes, ids distinct and each with a comparison, is
    read by the columnar path (so the tests above compare it, not the fallback)."""
    rows = [{"id": "p1", "prompt": [{"role": "user", "content": "问", "x": 1}], "meta": {"k": [1]},
             "responses": [{"content": "甲", "id": "r1", "model": None}, {"id": "r2", "content": "乙", "model": "m"},
                           {"id": "r3", "content": "丙", "model": 5, "seed": 1}],
             "comparisons": [{"b": "r2", "a": "r1", "label": "g", "source": None},
                             {"a": "r2", "b": "r3", "label": "s", "annotator": "甲", "note": 1},
                             {"a": "r3", "b": "r1", "label": "g", "source": "h", "annotator": "乙"}],
             "category": "理解", "rank": {"r3": 1, "r1": 0, "r2": 0}},
            {"id": 7, "prompt": "问题二", "subset": "open", "responses": [{"id": "x", "content": "1"},
                                                                        {"id": "y", "content": "2"}],
             "comparisons": [{"a": "x", "b": "y", "label": "b"}]},
            {"prompt": "问题三", "responses": [{"id": "x", "content": "1"}, {"id": "y", "content": "2"}],
             "comparisons": [{"a": "x", "b": "y", "label": "s"}], "category": ["a", "b"], "subset": None}]
    path = write_jsonl_rows(tmp_path / "ann.jsonl", rows)
    for keep in (False, True):
        assert check_rank([path], tmp_path, keep)
    ranked = rank_annotations([path], tmp_path / "library.jsonl", keep_comparisons=True)  # `cheems rank`'s call
    assert isinstance(ranked.prompts, LazyPrompts) and len(ranked.prompts) == 3
    assert (tmp_path / "library.jsonl").read_bytes() == (tmp_path / "columns.jsonl").read_bytes()
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(cheems.benchmark, "_rank_plain", _object_path_only)
        reference = rank_annotations([path], tmp_path / "object.jsonl", keep_comparisons=True)
    assert list(ranked.prompts) == reference.prompts  # the prompts, read when used, are the object path's
    sums = columnar_stats(path)
    assert sums is not None and sums.stats() == dataset_stats(read_prompts(path).prompts)
    assert sums.comparisons == 2 + 1  # r1 and r2 over r3 (ranked); y over x; the tie gives none


def test_sample_annotations(sample_annotations, tmp_path):
    paths = sorted(sample_annotations.glob("*.jsonl"))
    assert check_rank(paths, tmp_path, False)
    assert check_rank(paths, tmp_path, True)
    for path in paths:
        assert columnar_stats(path).stats() == dataset_stats(read_prompts(path).prompts)


def test_rows_the_columnar_path_leaves_to_the_general_readers(tmp_path):
    """Rows of one prompt to join, annotations, another format: ranked as the object path ranks
    them, those rows read by the general readers; a row without comparisons and a pair (a rank,
    no comparison), both errors, and a CSV name: None, nothing written."""
    row = {"id": "p", "prompt": "q", "responses": [{"id": "a", "content": "1"}, {"id": "b", "content": "2"}],
           "comparisons": [{"a": "a", "b": "b", "label": "g"}]}
    cases = {"repeat.jsonl": [row, row], "annotations.jsonl": [{**row, "annotations": []}],
             "pairwise.jsonl": [{"input": "q", "answer1": "a", "answer2": "b", "preference": 2}]}
    for name, rows in cases.items():
        (tmp_path / name).mkdir()
        path = write_jsonl_rows(tmp_path / name / name, rows)
        assert check_rank([path], tmp_path / name, keep_comparisons=True), name
    for name, rows in {"none.jsonl": [{**row, "comparisons": []}],
                       "pair.jsonl": [{"prompt": "q", "chosen": "a", "rejected": "b"}]}.items():
        path = write_jsonl_rows(tmp_path / name, rows)
        assert rank_columns([path], tmp_path / "out.jsonl") is None
        assert not (tmp_path / "out.jsonl").exists()
    assert columnar_stats(write_jsonl_rows(tmp_path / "rows.csv", [row])) is None


@settings(max_examples=20, deadline=None)
@given(annotation_files(bad=True), st.sampled_from(["rank", "stats"]))
def test_bad_rows_give_the_error_of_the_object_path(files, command):
    """The CLI as a user runs it, with the columnar path and without: the same output, the same
    one-line error (file, line, field), the same exit status."""
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        paths = write_files(files, tmp)
        cli_both_paths(tmp, [command, *paths, *(["-o", tmp / "out.jsonl"] if command == "rank" else [])])


def test_bad_line_is_named(tmp_path):
    row = {"id": "p", "prompt": "q", "responses": [{"id": "a", "content": "1"}, {"id": "b", "content": "2"}],
           "comparisons": [{"a": "a", "b": "b", "label": "g"}]}
    path = write_jsonl_rows(tmp_path / "ann.jsonl", [row, {**row, "id": "p2", "comparisons": [{"a": "a", "b": "c",
                                                                                               "label": "g"}]}])
    run = run_cli_in(tmp_path, "rank", path, "-o", tmp_path / "out.jsonl")
    assert run.returncode != 0
    assert f"{path}:2: comparisons[0].b: names unknown response 'c'" in run.stderr


def test_rank_and_stats_import_no_other_command():
    """`cheems rank` and `cheems stats` start without the other commands' modules: looking them up
    imports the data commands and nothing of scoring, curation, training, serving or asyncio."""
    code = ("import sys, typer\n"
            "from cheems.cli.app import app\n"
            "group = typer.main.get_command(app)\n"
            "assert group.get_command(None, 'rank') and group.get_command(None, 'stats')\n"
            "print(sorted(m for m in sys.modules if m.startswith(('cheems.cli.', 'cheems.scoring', 'cheems.curation',"
            " 'cheems.training', 'cheems.serving', 'asyncio'))))")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert run.stdout.split() == ["['cheems.cli.app',", "'cheems.cli.coercion',", "'cheems.cli.console',",
                                  "'cheems.cli.data',", "'cheems.cli.flags']"]


def test_every_command_is_listed_under_its_module():
    """COMMAND_MODULES names every command of `cheems`, in help order, each under the module that
    registers it (a command missing there would still be found, after importing every module)."""
    from cheems.cli.app import COMMAND_MODULES, app

    group = typer.main.get_command(app)
    assert list(group.commands) == list(COMMAND_MODULES)
    for name, command in group.commands.items():
        if isinstance(command, typer.core.TyperGroup):
            fn = next(iter(command.commands.values())).callback
        else:
            fn = command.callback
        assert inspect.unwrap(fn).__module__ == COMMAND_MODULES[name], name


@pytest.mark.parametrize("depth", [99, 100, 101, 102])
@pytest.mark.parametrize("shape", ["lists", "objects"])
def test_the_shortest_rows_at_the_nesting_limit(tmp_path, depth, shape):
    """The shortest row nesting ``depth`` levels (the length check before counting brackets is
    exact at the limit): refused past 100 levels by both readers, read at 100."""
    from cheems.formats.rows import iter_rows, row_chunks
    from cheems.records import CheemsInputError

    row = "[" * depth + "]" * depth if shape == "lists" else '{"a":' * (depth - 1) + "{}" + "}" * (depth - 1)
    path = tmp_path / "deep.jsonl"
    path.write_text('{"id": "q"}\n' + row + "\n", encoding="utf-8")
    if depth <= 100:
        assert len(list(iter_rows(path))) == 2 and sum(map(len, row_chunks(path, 64))) == 2
        return
    with pytest.raises(CheemsInputError, match="nests deeper than 100 levels"):
        list(iter_rows(path))
    with pytest.raises(NotPlain):
        list(row_chunks(path, 64))


def _two_processes_forced(mp, calls: list) -> None:
    """Every columnar input is ranked in two processes, however small; ``calls`` counts the forks."""
    import cheems.formats.halves as halves

    real = halves.in_two_processes

    def counted(*args):
        calls.append(1)
        return real(*args)

    mp.setattr(halves, "PARALLEL_BYTES", 0)
    mp.setattr(halves, "_may_fork", lambda: True)
    mp.setattr(halves, "in_two_processes", counted)


@settings(max_examples=30, deadline=None)
@given(annotation_files(), st.booleans())
def test_rank_in_two_processes_writes_the_bytes_of_the_object_path(files, keep_comparisons):
    """Each half of the lines ranked by its own process: the same output, report and refusals."""
    calls: list = []
    with tempfile.TemporaryDirectory() as d, pytest.MonkeyPatch.context() as mp:
        tmp = Path(d)
        paths = write_files(files, tmp)
        _two_processes_forced(mp, calls)
        took = check_rank(paths, tmp, keep_comparisons)
        event(("two processes" if calls else "one (not all JSONL lines)") + (", columnar" if took else ", general"))


def _fail_by_raising():
    raise MemoryError("the child's share")


def _fail_by_being_killed():
    import os
    import signal

    os.kill(os.getpid(), signal.SIGKILL)


@pytest.mark.parametrize("fail", [_fail_by_raising, _fail_by_being_killed])
def test_a_child_that_fails_leaves_its_half_to_the_parent(tmp_path, sample_annotations, fail):
    """A child that raises, or is killed before it answers: the parent ranks its half too."""
    import os

    import cheems.formats.columnar_rank as columnar_rank

    parent, calls = os.getpid(), []
    real = columnar_rank._rank_batches

    def fails_in_the_child(batches):
        if os.getpid() != parent:
            fail()
        return real(batches)

    paths = [sample_annotations / "open.jsonl", sample_annotations / "human.jsonl"]
    with pytest.MonkeyPatch.context() as mp:
        _two_processes_forced(mp, calls)
        mp.setattr(columnar_rank, "_rank_batches", fails_in_the_child)
        assert check_rank(paths, tmp_path, keep_comparisons=True)
    assert calls == [1]


def test_no_child_to_be_had_ranks_in_one_process(tmp_path, sample_annotations):
    import os

    def no_fork():
        raise BlockingIOError(11, "Resource temporarily unavailable")

    calls: list = []
    with pytest.MonkeyPatch.context() as mp:
        _two_processes_forced(mp, calls)
        mp.setattr(os, "fork", no_fork)
        assert check_rank([sample_annotations / "open.jsonl", sample_annotations / "human.jsonl"], tmp_path,
                          keep_comparisons=False)
    assert calls == [1]
