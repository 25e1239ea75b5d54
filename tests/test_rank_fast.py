"""The fast path of cheems.benchmark.rank_annotations (plain rows straight into arrays, no Prompt
objects) against the general path: for generated plain input the same output bytes, report
and prompts; for every input that is not plain, the general path itself (same results, same
error messages)."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

import cheems.benchmark
from cheems.benchmark import LazyPrompts, rank_annotations
from cheems.formats import NotPlain
from tests.conftest import write_jsonl_rows

TEXT = st.text(st.characters(blacklist_categories=("Cs",)), max_size=12)  # unicode, no lone surrogates
WORDS = st.sampled_from(["问题", "回答", "x", " y ", "😀", "\\\"q\"", "\u00e9", "tab\there"])


def _general_only(*args, **kwargs):
    raise NotPlain("forced")


def rank_both(files, tmp: Path, report: bool = True, **kw):
    """rank_annotations as it runs, and with the fast path switched off: (result, output bytes,
    report text or None) for each, or the error message each raised."""
    results = []
    for name, force_general in (("fast", False), ("general", True)):
        out, rep = tmp / f"{name}.jsonl", tmp / f"{name}.report.json"
        with pytest.MonkeyPatch.context() as mp:
            if force_general:
                mp.setattr(cheems.benchmark, "_rank_plain", _general_only)
            try:
                res = rank_annotations(files, out, report=rep if report else None, **kw)
            except Exception as e:  # noqa: BLE001 - the message is compared
                results.append((type(e).__name__, str(e)))
                continue
        results.append((res, out.read_bytes() if out.exists() else None,
                        rep.read_text(encoding="utf-8") if rep.exists() else None))
    return results


@st.composite
def plain_row(draw, i: int):
    n = draw(st.integers(2, 7))
    ids = draw(st.lists(st.sampled_from([f"r{j}" for j in range(9)] + ["回答甲", "b", "a b"]),
                        min_size=n, max_size=n, unique=True))
    id_first = draw(st.booleans())
    responses = [{"id": r, "content": draw(TEXT)} if id_first else {"content": draw(TEXT), "id": r} for r in ids]
    comparisons = []
    for _ in range(draw(st.integers(1, 14))):  # repeats, cycles and ties all happen
        a, b = draw(st.lists(st.sampled_from(ids), min_size=2, max_size=2, unique=True))
        label = draw(st.sampled_from("gbs"))
        order = draw(st.sampled_from([("a", "b", "label"), ("label", "a", "b"), ("b", "label", "a")]))
        comparisons.append({k: {"a": a, "b": b, "label": label}[k] for k in order})
    row = {"prompt": draw(WORDS) + draw(TEXT), "responses": responses, "comparisons": comparisons}
    kind = draw(st.sampled_from(["str", "int", "none", "absent"]))
    if kind != "absent":
        row["id"] = {"str": f"p{i}", "int": i, "none": None}[kind]
    category = draw(st.sampled_from([None, "absent", "理解", [], ["理解", "推理"], [""]]))
    if category != "absent":
        row["category"] = category
    subset = draw(st.sampled_from([None, "absent", "human", "", "开放"]))
    if subset != "absent":
        row["subset"] = subset
    keys = draw(st.permutations(list(row)))
    return {k: row[k] for k in keys}


@st.composite
def plain_files(draw):
    files, i = [], 0
    for _ in range(draw(st.integers(1, 3))):
        rows = []
        for _ in range(draw(st.integers(0, 6))):
            rows.append(draw(plain_row(i)))
            i += 1
        files.append((rows, draw(st.booleans()), draw(st.sampled_from(["jsonl", "json"]))))
    return files


def write_files(files, tmp: Path, line_end: str = "\n\n") -> list[Path]:
    """Each (rows, ascii only, extension) of ``files`` as tmp/partK.EXT: a JSON list, or JSONL
    rows each ended by ``line_end`` (a blank line between rows by default)."""
    paths = []
    for k, (rows, ascii_only, ext) in enumerate(files):
        path = tmp / f"part{k}.{ext}"
        if ext == "json":
            path.write_text(json.dumps(rows, ensure_ascii=ascii_only, indent=1), encoding="utf-8")
        else:
            path.write_text("".join(json.dumps(r, ensure_ascii=ascii_only) + line_end for r in rows), encoding="utf-8")
        paths.append(path)
    return paths


@settings(max_examples=100, deadline=None)
@given(plain_files(), st.booleans(), st.booleans())
def test_fast_path_writes_what_the_general_path_writes(files, keep_comparisons, report):
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        paths = write_files(files, tmp)
        fast, general = rank_both(paths, tmp, keep_comparisons=keep_comparisons, report=report)
        assert fast[1:] == general[1:]  # output bytes and report text, or the same error
        if isinstance(fast[0], str):
            return
        assert len(fast[0].prompts) == len(general[0].prompts)
        assert fast[0].report == general[0].report
        assert fast[0].errors == general[0].errors == []
        event("fast path" if isinstance(fast[0].prompts, LazyPrompts) else "general path")
        if isinstance(fast[0].prompts, LazyPrompts):  # the prompts, built when asked for, are the general path's
            assert list(fast[0].prompts) == general[0].prompts


def plain_rows_for_cases():
    return [{"id": "p1", "prompt": "问题一", "category": ["理解"], "subset": "human",
             "responses": [{"id": "r1", "content": "甲"}, {"id": "r2", "content": "乙"}, {"id": "r3", "content": "丙"}],
             "comparisons": [{"a": "r1", "b": "r2", "label": "g"}, {"a": "r2", "b": "r3", "label": "s"},
                             {"a": "r3", "b": "r1", "label": "g"}]},
            {"id": "p2", "prompt": "问题二",
             "responses": [{"id": "x", "content": "1"}, {"id": "y", "content": "2"}],
             "comparisons": [{"a": "x", "b": "y", "label": "b"}]}]


def test_plain_input_takes_the_fast_path(tmp_path):
    path = write_jsonl_rows(tmp_path / "ann.jsonl", plain_rows_for_cases())
    fast, general = rank_both([path], tmp_path)
    assert isinstance(fast[0].prompts, LazyPrompts) and len(fast[0].prompts) == 2
    assert fast[1:] == general[1:]
    assert list(fast[0].prompts) == general[0].prompts
    assert fast[0].prompts[1].rank == {"x": 1, "y": 0}


def _mutate(case: str, rows: list) -> list:
    r = rows[1]
    if case == "extra key":
        r["note"] = {"k": 1}
    elif case == "model":
        r["responses"][0]["model"] = "m"
    elif case == "annotator":
        r["comparisons"][0]["annotator"] = "ann"
    elif case == "rank given":
        r["rank"] = {"x": 0, "y": 1}
    elif case == "input for prompt":
        r["input"] = r.pop("prompt")
    elif case == "messages":
        r["prompt"] = [{"role": "user", "content": "问题二"}]
    elif case == "repeated id":  # merge_prompts joins the rows
        rows.append({**r, "responses": [{"id": "z", "content": "3"}], "comparisons": []})
    elif case == "annotations":
        r["annotations"] = [["x", "y", "1"]]
    elif case == "triples":
        r["responses"].append({"id": "z", "content": "3"})
        r["triples"] = [{"ids": ["x", "y", "z"], "ranking": "x>y=z"}]
    elif case == "string response":
        r["responses"].append("丁")
    elif case == "integer response id":
        r["responses"][0]["id"] = 7
        r["comparisons"][0]["a"] = 7
    elif case == "bool id":
        r["id"] = True
    elif case == "label 1":
        r["comparisons"][0]["label"] = "1"
    elif case == "unknown response":
        r["comparisons"][0]["b"] = "nope"
    elif case == "itself":
        r["comparisons"][0]["b"] = "x"
    elif case == "no comparisons":
        r["comparisons"] = []
    elif case == "duplicate response id":
        r["responses"].append({"id": "x", "content": "again"})
    elif case == "blank prompt":
        r["prompt"] = "  "
    elif case == "category number":
        r["category"] = 3
    elif case == "subset list":
        r["subset"] = ["a"]
    elif case == "task row":
        r.update(task_id="p2#1", prompt_id="p2", ids=["x", "y"], ranking="y>x")
    elif case == "not an object":
        rows.append([1, 2])
    elif case == "list of lists":
        rows.append([[1], {"a": 2}])
    elif case == "responses not objects":
        r["responses"] = [1, 2]
    elif case == "comparison not an object":
        r["comparisons"].append(["x", "y", "g"])
    elif case == "unhashable id":
        r["comparisons"][0]["a"] = ["x"]
    elif case == "unhashable label":
        r["comparisons"][0]["label"] = {"g": 1}
    return rows


CASES = ["extra key", "model", "annotator", "rank given", "input for prompt", "messages", "repeated id",
         "annotations", "triples", "string response", "integer response id", "bool id", "label 1",
         "unknown response", "itself", "no comparisons", "duplicate response id", "blank prompt",
         "category number", "subset list", "task row", "not an object", "list of lists", "responses not objects",
         "comparison not an object", "unhashable id", "unhashable label"]


COLUMNAR_CASES = {"extra key", "model", "annotator", "rank given", "messages", "triples", "no comparisons"}
"""Rows beyond the plain ones that the columnar reader (cheems.formats.columnar) takes as they are
(a row without comparisons is skipped there); the others are read by the general readers, one
row at a time."""


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("skip_invalid", [False, True])
def test_other_input_takes_the_general_path(tmp_path, case, skip_invalid):
    """Every case: the output, report and skipped rows of the general path, or its error; each
    case the general path does not refuse takes the fast path, the rows of the case (and no
    other) read by the general readers where the columnar reader does not take them."""
    import cheems.formats.columnar_input as columnar_input

    read = []
    real = columnar_input.parse_row_as

    def counted(obj, fmt=None):
        read.append(obj)
        return real(obj, fmt)

    path = write_jsonl_rows(tmp_path / "ann.jsonl", _mutate(case, plain_rows_for_cases()))
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(columnar_input, "parse_row_as", counted)
        fast, general = rank_both([path], tmp_path, skip_invalid=skip_invalid)
    assert fast[1:] == general[1:]  # the same output, report and skipped rows, or the same error
    if not isinstance(fast[0], str):
        assert isinstance(fast[0].prompts, LazyPrompts)
        assert (not read) == (case in COLUMNAR_CASES)
        assert not any(isinstance(obj, dict) and obj.get("id") == "p1" for obj in read)  # p1 stays columnar
        assert list(fast[0].prompts) == general[0].prompts
        assert [str(e) for e in fast[0].errors] == [str(e) for e in general[0].errors]


@pytest.mark.parametrize("line", ['{"id": "p3", "prompt": ', '{"id": "p3", "prompt": NaN}', "\x00"])
def test_broken_lines_keep_their_messages(tmp_path, line):
    path = write_jsonl_rows(tmp_path / "ann.jsonl", plain_rows_for_cases() + [line])
    fast, general = rank_both([path], tmp_path)
    assert fast == general
    assert fast[0] == "CheemsInputError" and f"{path}:3" in fast[1]


def test_a_later_file_that_is_not_plain_writes_nothing_twice(tmp_path):
    first = write_jsonl_rows(tmp_path / "a.jsonl", plain_rows_for_cases())
    row = {**plain_rows_for_cases()[0], "id": "p9", "note": 1}
    row["input"] = row.pop("prompt")  # read (converted) by the general readers only
    second = write_jsonl_rows(tmp_path / "b.jsonl", [row])
    fast, general = rank_both([first, second], tmp_path)
    assert isinstance(fast[0].prompts, LazyPrompts)  # that one row read by the general readers
    assert fast[1:] == general[1:]
    assert b'"note":1' in fast[1]
    third = tmp_path / "c.tsv"
    third.write_text("prompt\tresponse\trank\nq\ta\t1\n", encoding="utf-8")
    fast, general = rank_both([first, third], tmp_path, skip_invalid=True)
    assert not isinstance(fast[0].prompts, LazyPrompts)  # a TSV file: all read by the general readers
    assert fast[1:] == general[1:]


def test_format_given_takes_the_general_path(tmp_path):
    path = write_jsonl_rows(tmp_path / "ann.jsonl", plain_rows_for_cases())
    fast, general = rank_both([path], tmp_path, fmt="cheems")
    assert not isinstance(fast[0].prompts, LazyPrompts)
    assert fast[1:] == general[1:]


def test_empty_and_missing_files(tmp_path):
    empty = write_jsonl_rows(tmp_path / "empty.jsonl", [])
    fast, general = rank_both([empty], tmp_path)
    assert fast[0].prompts == [] and fast[1:] == general[1:] == (None, None)
    fast, general = rank_both([tmp_path / "missing.jsonl"], tmp_path)
    assert fast == general and "no such file" in fast[1]
