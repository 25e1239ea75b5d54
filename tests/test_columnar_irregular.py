"""The columnar commands (`cheems rank`, `stats`, `curate resolve --scores`, `curate debias`) on
irregular, real-shaped files: regular rows mixed with rows not compared yet, rows of other formats,
rows of a repeated prompt id (joined, or refused) and bad rows (wrong in one field, cut-off or NaN
lines), with and without --skip-invalid. Against the object path (Prompt objects, the reference):
the same output bytes, reports, skipped rows and error messages, in one process and in two; and
on a file with 1% such rows, only those rows reach the general readers."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

import cheems.benchmark
import cheems.curation.stages as stages
import cheems.formats.columnar_input as columnar_input
import cheems.formats.columnar_sums
from cheems.benchmark import LazyPrompts, rank_annotations
from cheems.formats import NotPlain, read_prompts
from cheems.formats.columnar_sums import columnar_stats
from cheems.metrics import dataset_stats
from cheems.records import CheemsInputError
from tests.conftest import write_jsonl_rows
from tests.test_columnar import TEXT, annotated_row, cli_both_paths
from tests.test_columnar_curate import SCORE_CHOICES, both_paths, write_scores

KINDS = ["regular"] * 6 + ["no comparisons", "other format", "repeated id", "bad"]
READABLE = ["regular"] * 4 + ["no comparisons", "other format"]
"""Kinds of rows every command reads (curation refuses a repeated id and a bad row)."""
OTHER = ["pairwise", "autoj", "task", "pair", "scored", "critiquellm"]


def _other_format(draw, i: int, earlier: list[str]) -> dict:
    """A row of another format than cheems rows, as its own docs show one (docs/formats.md);
    a task row may belong to an earlier row's prompt id, scored rows share a question id."""
    a, b = draw(TEXT) + "甲", draw(TEXT) + "乙"
    kind = draw(st.sampled_from(OTHER))
    if kind == "pairwise":
        return {"input": f"问题{i}", "answer1": a, "answer2": b, "preference": draw(st.sampled_from([1, 2]))}
    if kind == "autoj":
        return {"scenario": "写作", "label": draw(st.sampled_from([0, 1, 2])), "prompt": f"问题{i}",
                "response 1": a, "response 2": b}
    if kind == "critiquellm":
        return {"id": f"c{i}", "question": f"问题{i}", "response_1": a, "response_2": b, "label": 1}
    if kind == "pair":
        return {"prompt": f"问题{i}", "chosen": a, "rejected": b}  # a rank, no comparison: not rankable
    if kind == "scored":
        return {"question_id": draw(st.sampled_from(["q1", "q2"])), "question": "共同的问题", "answer": a,
                "answer_id": f"a{i}", "score": draw(st.integers(1, 9))}
    pid = draw(st.sampled_from(earlier)) if earlier and draw(st.booleans()) else f"t{i}"
    return {"task_id": f"{pid}#{i}", "prompt_id": pid, "round": 1, "prompt": f"问题{pid}", "ids": ["x", "y", "z"],
            "responses": [{"id": "x", "content": a}, {"id": "y", "content": b}, {"id": "z", "content": "丙"}],
            "ranking": draw(st.sampled_from(["x>y>z", "y>x=z", "z=x>y"])), "annotator": "乙"}


def _repeat(draw, rows: list) -> dict | None:
    """A row under the prompt id of an earlier row: its prompt and responses with other
    comparisons (joined by `cheems rank`), another prompt, or a response of other content."""
    earlier = [r for r in rows if isinstance(r, dict) and isinstance(r.get("id"), (str, type(None))) and "responses" in r
               and isinstance(r["responses"], list) and len(r["responses"]) >= 2
               and all(isinstance(x, dict) and "id" in x for x in r["responses"])]
    if not earlier:
        return None
    row = json.loads(json.dumps(draw(st.sampled_from(earlier))))
    how = draw(st.sampled_from(["more comparisons", "more comparisons", "no comparisons", "other prompt",
                                "other content"]))
    r0, r1 = row["responses"][0]["id"], row["responses"][1]["id"]
    row["comparisons"] = [] if how == "no comparisons" else [{"a": r1, "b": r0, "label": "g", "annotator": "丙"}]
    row.pop("triples", None)
    if how == "other prompt":
        row["prompt"] = "另一个问题"
    elif how == "other content":
        row["responses"][0]["content"] += "改"
    return row


@st.composite
def irregular_row(draw, i: int, rows: list, kinds: list[str]):
    kind = draw(st.sampled_from(kinds))
    event(f"row: {kind}")
    if kind == "other format":
        return _other_format(draw, i, [r["id"] for r in rows if isinstance(r, dict) and isinstance(r.get("id"), str)])
    if kind == "repeated id":
        row = _repeat(draw, rows)
        if row is not None:
            return row
    if kind == "bad" and draw(st.booleans()):
        return draw(st.sampled_from([f'{{"id": "cut{i}", "prompt": ', f'{{"id": "nan{i}", "prompt": NaN}}', "[1, 2]",
                                     f'{{"id": "deep{i}", "x": {"[" * 101}{"]" * 101}}}']))
    row = draw(annotated_row(i, bad=kind == "bad"))
    if draw(st.integers(0, 3)):  # else as drawn: an integer id, or none (the id of its prompt and responses)
        row["id"] = f"p{i}"
    if kind == "no comparisons":
        row.pop("triples", None)
        row["comparisons"] = []
    return row


@st.composite
def irregular_files(draw, kinds: list[str] = KINDS):
    """1-3 files of irregular rows of the ``kinds``, JSONL or (without raw lines) a JSON list."""
    files, rows, i = [], [], 0
    for _ in range(draw(st.integers(1, 3))):
        part = []
        for _ in range(draw(st.integers(0, 7))):
            part.append(draw(irregular_row(i, rows + part, kinds)))
            i += 1
        raw = any(isinstance(r, str) for r in part)
        files.append((part, "jsonl" if raw or draw(st.booleans()) else "json"))
        rows += part
    return files


def write_files(files, tmp: Path) -> list[Path]:
    paths = []
    for k, (rows, ext) in enumerate(files):
        path = tmp / f"part{k}.{ext}"
        if ext == "json":
            path.write_text(json.dumps(rows, ensure_ascii=False, indent=1), encoding="utf-8")
        else:
            write_jsonl_rows(path, rows)
        paths.append(path)
    return paths


def _object_path_only(*args, **kwargs):
    raise NotPlain("the object path, as the reference")


def _rank(paths, tmp: Path, name: str, **kw):
    """(output bytes, report text, skipped rows, whether the columnar path ranked them), or the error."""
    out, rep = tmp / f"{name}.jsonl", tmp / f"{name}.report.json"
    try:
        res = rank_annotations(paths, out, report=rep, **kw)
    except CheemsInputError as e:
        assert not out.exists() and not rep.exists()
        return "error", str(e)
    written = (out.read_bytes(), rep.read_text(encoding="utf-8")) if out.exists() else None
    return written, json.dumps(res.report), [str(e) for e in res.errors], len(res.prompts), \
        isinstance(res.prompts, LazyPrompts)


def check_rank(paths, tmp: Path, keep_comparisons: bool, skip_invalid: bool) -> bool:
    """rank_annotations writes, reports and skips what the object path does; whether the
    columnar path ranked the rows."""
    kw = {"keep_comparisons": keep_comparisons, "skip_invalid": skip_invalid}
    fast = _rank(paths, tmp, "fast", **kw)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(cheems.benchmark, "_rank_plain", _object_path_only)
        reference = _rank(paths, tmp, "object", **kw)
    assert fast[:-1] == reference[:-1]
    return fast[0] != "error" and fast[-1]


def test_files_of_rows_no_batch_takes(tmp_path):
    """Files whose every row is left to the general readers (cut off, nested too deep, NaN), or
    empty: what the object path does, in every command."""
    deep = '{"id": "deep", "x": ' + "[" * 101 + "]" * 101 + "}"
    row = {"id": "p", "prompt": "q", "responses": [{"id": "a", "content": "1"}, {"id": "b", "content": "2"}],
           "comparisons": [{"a": "a", "b": "b", "label": "g"}]}
    for k, rows in enumerate([['{"id": "cut", "prompt": '], [deep], ['{"id": "n", "prompt": NaN}'], [],
                              [row, deep, '{"id": "cut", "prompt": ', {**row, "id": "p2"}]]):
        (tmp_path / str(k)).mkdir()
        path = write_jsonl_rows(tmp_path / str(k) / "rows.jsonl", rows)
        for skip_invalid in (False, True):
            check_rank([path], tmp_path / str(k), False, skip_invalid)
            fast, reference = _stats(path, skip_invalid)
            assert fast is None or fast == reference
        out = tmp_path / str(k) / "debiased.jsonl"
        fast, reference, _ = both_paths(lambda: stages.run_debias([path], out, seed=3), out, "_debias_columns")
        assert fast == reference
    items = tmp_path / "items.json"  # a JSON list with an item nested too deep
    items.write_text(json.dumps([row, json.loads(deep), {**row, "id": "p2"}]), encoding="utf-8")
    for skip_invalid in (False, True):
        check_rank([items], tmp_path, True, skip_invalid)
        check_rank([path, path], tmp_path, False, skip_invalid)  # one file given twice: its rows repeat


def _force_two_processes(mp) -> None:
    import cheems.formats.halves as halves

    mp.setattr(halves, "PARALLEL_BYTES", 0)
    mp.setattr(halves, "_may_fork", lambda: True)


@settings(max_examples=80, deadline=None)
@given(irregular_files(), st.booleans(), st.booleans(), st.booleans())
def test_rank_on_irregular_files_is_the_object_path(files, keep_comparisons, skip_invalid, two_processes):
    with tempfile.TemporaryDirectory() as d, pytest.MonkeyPatch.context() as mp:
        if two_processes:
            _force_two_processes(mp)
        tmp = Path(d)
        took = check_rank(write_files(files, tmp), tmp, keep_comparisons, skip_invalid)
        event(("columnar" if took else "object path") + (", skipping" if skip_invalid else ""))


def _stats(path: Path, skip_invalid: bool):
    """(stats, skipped rows) of the columnar path (None: left to the object path), and of the
    object path (or its error)."""
    errors: list = []
    sums = columnar_stats(path, errors if skip_invalid else None)
    fast = None if sums is None else (sums.stats(), [str(e) for e in errors])
    try:
        res = read_prompts(path, skip_invalid=skip_invalid)
    except CheemsInputError as e:
        return fast, ("error", str(e))
    return fast, (dataset_stats(res.prompts), [str(e) for e in res.errors])


@settings(max_examples=80, deadline=None)
@given(irregular_files(), st.booleans())
def test_stats_on_irregular_files_are_the_object_path(files, skip_invalid):
    with tempfile.TemporaryDirectory() as d:
        for path in write_files(files, Path(d)):
            fast, reference = _stats(path, skip_invalid)
            assert fast is None or fast == reference  # None: the object path reads it (or refuses it)
            event("object path" if fast is None else "columnar")


@settings(max_examples=25, deadline=None)
@given(irregular_files(), st.sampled_from(["rank", "stats"]), st.booleans())
def test_the_cli_on_irregular_files_prints_what_the_object_path_prints(files, command, skip_invalid):
    """`cheems rank` and `cheems stats` as a user runs them, with the columnar path and without:
    the same output, the same notes of skipped rows, the same error and exit status."""
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        paths = write_files(files, tmp)
        cli_both_paths(tmp, [command, *paths, *(["-o", tmp / "out.jsonl"] if command == "rank" else []),
                             *(["--skip-invalid"] if skip_invalid else [])])


@settings(max_examples=50, deadline=None)
@given(st.one_of(irregular_files(), irregular_files(READABLE)), st.sampled_from(SCORE_CHOICES),
       st.sampled_from(["resolve", "debias"]), st.booleans())
def test_curation_on_irregular_files_is_the_object_path(files, scores_choice, stage, two_processes):
    """`curate resolve --scores` and `curate debias`: the same bytes and report, or the same
    error (they refuse bad rows and repeated ids; rows of other formats are read)."""
    with tempfile.TemporaryDirectory() as d, pytest.MonkeyPatch.context() as mp:
        if two_processes:
            _force_two_processes(mp)
        tmp = Path(d)
        paths = write_files(files, tmp)
        out = tmp / "out" / f"{stage}.jsonl"
        if stage == "resolve":
            scores = write_scores(paths, tmp, scores_choice, 3)
            fast, reference, columnar = both_paths(lambda: stages.run_resolve(paths, out, scores=scores), out,
                                                   "_resolve_columns")
        else:
            fast, reference, columnar = both_paths(lambda: stages.run_debias(paths, out, seed=3), out,
                                                   "_debias_columns")
        assert fast == reference
        event(f"{stage}: " + ("columnar" if columnar else "object path"))


# ----------------------------------------------------------------------------- 1% irregular rows

def _regular(i: int) -> dict:
    ids = [f"r{j}" for j in range(4)]
    return {"id": f"reg-{i}", "prompt": f"第{i}个问题", "subset": "open" if i % 2 else "human",
            "responses": [{"id": r, "content": f"回答{r}" * (j + 1), "model": f"m{j}"} for j, r in enumerate(ids)],
            "comparisons": [{"a": "r0", "b": "r1", "label": "g", "annotator": "甲"},
                            {"a": "r1", "b": "r2", "label": "sbg"[i % 3]}, {"a": "r2", "b": "r3", "label": "b"},
                            {"a": "r3", "b": "r0", "label": "g"}]}


def one_percent_irregular(n: int, *, bad: bool) -> tuple[list, dict[str, list[int]]]:
    """``n`` rows, every 100th irregular, in turn: not compared yet, of another format (a task
    row), a prompt annotated in two rows of one id and, with ``bad``, a cut-off line and a
    comparison naming a missing response. Returns the rows and the row numbers of each kind."""
    kinds = ["no comparisons", "task", "repeated"] + (["cut off", "unknown response"] if bad else [])
    rows: list = []
    where: dict[str, list[int]] = {k: [] for k in kinds}
    for i in range(n):
        row = _regular(i)
        if i % 100 != 50:
            rows.append(row)
            continue
        kind = kinds[(i // 100) % len(kinds)]
        where[kind].append(i)
        if kind == "no comparisons":
            rows.append({**row, "comparisons": []})
        elif kind == "task":
            rows.append({"task_id": f"t-{i}#1", "prompt_id": f"t-{i}", "prompt": row["prompt"], "ids": ["r0", "r1", "r2"],
                         "responses": row["responses"][:3], "ranking": "r1>r0=r2", "annotator": "乙"})
        elif kind == "repeated":
            rows += [{**row, "comparisons": row["comparisons"][:2]}, {**row, "comparisons": row["comparisons"][2:]}]
        elif kind == "cut off":
            rows.append(json.dumps(row, ensure_ascii=False)[:40])
        else:
            rows.append({**row, "comparisons": row["comparisons"] + [{"a": "r0", "b": "r9", "label": "g"}]})
    return rows, where


def _general_readers_count(mp) -> list:
    """The rows the general readers read from here on (each prompt id, one entry per row they
    parse), and the object path of `rank` switched off: it must not be needed."""
    read: list = []
    real = columnar_input.parse_row_as

    def counted(obj, fmt=None):
        read.append(obj.get("id", obj.get("prompt_id")) if isinstance(obj, dict) else obj)
        return real(obj, fmt)

    def no_object_path(*args, **kwargs):
        raise AssertionError("the object path read the whole input")

    mp.setattr(columnar_input, "parse_row_as", counted)
    mp.setattr(cheems.benchmark, "read_many", no_object_path)
    return read


@pytest.mark.parametrize("two_processes", [False, True])
def test_one_percent_irregular_rows_leave_the_others_columnar(tmp_path, two_processes):
    """2,000 rows, 1% irregular: `cheems rank --skip-invalid` and `cheems stats --skip-invalid`
    read the other 99% on the columnar path (the general readers parse no regular row, and the
    object path is never taken), and write and skip what the object path writes and skips."""
    rows, where = one_percent_irregular(2000, bad=True)
    n_irregular = sum(map(len, where.values())) + len(where["repeated"])
    path = write_jsonl_rows(tmp_path / "export.jsonl", rows)
    with pytest.MonkeyPatch.context() as mp:
        if two_processes:
            _force_two_processes(mp)
        read = _general_readers_count(mp)
        fast = rank_annotations([path], tmp_path / "fast.jsonl", report=tmp_path / "fast.json", skip_invalid=True)
        assert isinstance(fast.prompts, LazyPrompts)
        assert len(fast.errors) == len(where["no comparisons"] + where["cut off"] + where["unknown response"])
        regular_read = {r for r in read if isinstance(r, str) and r.startswith("reg-")}
        assert regular_read == {f"reg-{i}" for i in where["unknown response"] + where["repeated"]}
        assert 0 < len(read) <= 2 * n_irregular < len(rows) // 40  # a task row: parsed, then its cheems form
        errors: list = []
        read.clear()
        sums = columnar_stats(path, errors)
        assert sums is not None and len(errors) == len(where["cut off"] + where["unknown response"])
        assert 0 < len(read) <= 2 * n_irregular
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(cheems.benchmark, "_rank_plain", _object_path_only)
        reference = rank_annotations([path], tmp_path / "object.jsonl", report=tmp_path / "object.json",
                                     skip_invalid=True)
    assert (tmp_path / "fast.jsonl").read_bytes() == (tmp_path / "object.jsonl").read_bytes()
    assert (tmp_path / "fast.json").read_bytes() == (tmp_path / "object.json").read_bytes()
    assert [str(e) for e in fast.errors] == [str(e) for e in reference.errors]
    res = read_prompts(path, skip_invalid=True)
    assert sums.stats() == dataset_stats(res.prompts) and list(map(str, errors)) == list(map(str, res.errors))


def test_one_percent_irregular_rows_leave_the_others_columnar_in_curation(tmp_path):
    """`curate resolve --scores` and `curate debias` on 2,000 rows with 1% rows not compared yet
    or of another format (a prompt id repeated is an error there): the columnar path, the
    general readers parse those rows only."""
    rows, where = one_percent_irregular(2000, bad=False)
    seen: set = set()
    rows = [r for r in rows if "id" not in r or r["id"] not in seen and not seen.add(r["id"])]
    path = write_jsonl_rows(tmp_path / "judged.jsonl", rows)
    scores = write_scores([path], tmp_path, "all", 1000)
    for stage in ("resolve", "debias"):
        out = tmp_path / f"{stage}.jsonl"
        with pytest.MonkeyPatch.context() as mp:
            read = _general_readers_count(mp)
            if stage == "resolve":
                fast, reference, columnar = both_paths(lambda: stages.run_resolve([path], out, scores=scores), out,
                                                       "_resolve_columns")
            else:
                fast, reference, columnar = both_paths(lambda: stages.run_debias([path], out, seed=1), out,
                                                       "_debias_columns")
        assert columnar and fast == reference
        assert not [r for r in read if isinstance(r, str) and r.startswith("reg-")]
        assert len(read) >= 2 * len(where["task"])  # each task row and its cheems form; then the object path
