"""The columnar path of `cheems curate resolve` and `cheems curate debias` (rows read straight
into arrays, written by patching the parsed rows) against the object path (Prompt objects, the
reference): on generated judged rows (cycles, ties, chat prompts, ranks, triples, unknown keys,
unicode, earlier dropped comparisons, rows wrong in one field) with generated scores, and on the
bundled sample, the same output bytes, the same report and, for bad input, the same one-line
error. SCORES files read by `columnar_scores` give what `read_scores` gives."""

from __future__ import annotations

import hashlib
import json
import tempfile
from pathlib import Path

import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

import cheems.curation.stages as stages
from cheems.formats import columnar_scores, read_prompts, read_scores
from cheems.records import CheemsInputError
from tests.conftest import run_cli_in, write_jsonl_rows
from tests.test_columnar import annotated_row, files_of, write_files

EARLIER = [{"a": "x", "b": "y", "label": "g", "dropped": "length_debias"}]


@st.composite
def judged_row(draw, i: int, bad: bool = False):
    """A row as the judge stage writes it (:func:`tests.test_columnar.annotated_row`), some with
    comparisons an earlier stage dropped; with ``bad``, wrong in one field (one of those
    lists not a list, or as ``annotated_row`` spoils it)."""
    spoil_list = bad and draw(st.booleans())
    row = draw(annotated_row(i, bad=bad and not spoil_list))
    for key in ("dropped_comparisons", "comparisons_before_rank"):
        value = draw(st.sampled_from(["absent", "absent", "absent", EARLIER, []]))
        if value != "absent":
            row[key] = value
    if spoil_list:
        row[draw(st.sampled_from(["dropped_comparisons", "comparisons_before_rank"]))] = "not a list"
    return row


def judged_files(bad: bool = False):
    """1-3 files of judged rows (:func:`tests.test_columnar.files_of`)."""
    return files_of(judged_row, bad)


def _score(key: tuple[str, str], levels: int) -> float:
    """A deterministic score; few ``levels`` give equal scores (ties the RM agrees with)."""
    h = int(hashlib.md5("|".join(key).encode("utf-8")).hexdigest()[:8], 16)
    return float(h % levels) - levels / 2


def write_scores(paths: list[Path], tmp: Path, draw_choice: str, levels: int) -> Path:
    """A scores file for the responses of the files (read by the object path, so that rows
    without ids get theirs), as ``draw_choice`` says: every score, one missing, integer scores,
    a row repeated, a score given twice differently, a numeric id."""
    keys = []
    for path in paths:
        try:
            for p in read_prompts(path).prompts:
                keys += [(p.id, r.id) for r in p.responses]
        except CheemsInputError:
            continue
    rows = [{"prompt_id": pid, "response_id": rid, "score": _score((pid, rid), levels)} for pid, rid in keys]
    if rows and draw_choice == "missing":
        rows.pop(len(rows) // 2)
    elif draw_choice == "integers":
        for r in rows:
            r["score"] = int(r["score"])
    elif rows and draw_choice == "repeated":
        rows.append(dict(rows[0]))
    elif rows and draw_choice == "two scores":
        rows.append({**rows[0], "score": rows[0]["score"] + 1})
    elif draw_choice == "numeric id":
        rows.append({"prompt_id": 7, "response_id": "r0", "score": 0.5})
    return write_jsonl_rows(tmp / "scores.jsonl", rows)


SCORE_CHOICES = ["all", "all", "all", "missing", "integers", "repeated", "two scores", "numeric id"]


def _outcome(run, output: Path):
    """(output bytes, report text) of a stage run, or the error it raised."""
    try:
        report = run()
    except CheemsInputError as e:
        assert not output.exists()
        return "error", str(e)
    return output.read_bytes(), stages.sidecar(output, "report", ".json").read_text(encoding="utf-8"), report


def both_paths(run, output: Path, columns: str) -> tuple:
    """A stage's outcome with the columnar path and with only the object path, and whether
    the columnar path wrote it."""
    taken = []
    real = getattr(stages, columns)

    def spy(*args, **kwargs):
        res = real(*args, **kwargs)
        taken.append(res is not None)
        return res

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(stages, columns, spy)
        fast = _outcome(run, output)
    output.unlink(missing_ok=True)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(stages, columns, lambda *a, **k: None)
        reference = _outcome(run, output)
    return fast, reference, any(taken)


@settings(max_examples=60, deadline=None)
@given(judged_files(), st.sampled_from(SCORE_CHOICES), st.sampled_from([3, 1000]),
       st.sampled_from(["cycles", "all"]), st.sampled_from([0.0, 0.5, 2]))
def test_resolve_writes_the_bytes_of_the_object_path(files, scores_choice, levels, scope, margin):
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        paths = write_files(files, tmp)
        scores = write_scores(paths, tmp, scores_choice, levels)
        out = tmp / "out" / "resolved.jsonl"
        fast, reference, columnar = both_paths(
            lambda: stages.run_resolve(paths, out, scores=scores, scope=scope, margin=margin), out, "_resolve_columns")
        assert fast == reference
        event("columnar" if columnar else "object path")


@settings(max_examples=25, deadline=None)
@given(judged_files(), st.sampled_from(SCORE_CHOICES), st.sampled_from(["cycles", "all"]))
def test_resolve_in_two_processes_writes_the_bytes_of_the_object_path(files, scores_choice, scope):
    """Each half of the lines resolved by its own process (however small the input): the same
    output, report and refusals as the object path."""
    import cheems.formats.halves as halves

    forks = []
    real = halves.in_two_processes

    def counted(*args):
        forks.append(1)
        return real(*args)

    with tempfile.TemporaryDirectory() as d, pytest.MonkeyPatch.context() as mp:
        mp.setattr(halves, "PARALLEL_BYTES", 0)
        mp.setattr(halves, "_may_fork", lambda: True)
        mp.setattr(halves, "in_two_processes", counted)
        tmp = Path(d)
        paths = write_files(files, tmp)
        scores = write_scores(paths, tmp, scores_choice, 1000)
        out = tmp / "out" / "resolved.jsonl"
        fast, reference, columnar = both_paths(
            lambda: stages.run_resolve(paths, out, scores=scores, scope=scope, margin=0.5), out, "_resolve_columns")
        assert fast == reference
        event(("two processes" if forks else "one") + (", columnar" if columnar else ", object path"))


@settings(max_examples=60, deadline=None)
@given(judged_files(), st.integers(0, 2 ** 32 - 1), st.sampled_from([0, 1, 3]))
def test_debias_writes_the_bytes_of_the_object_path(files, seed, tolerance):
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        paths = write_files(files, tmp)
        out = tmp / "out" / "debiased.jsonl"
        fast, reference, columnar = both_paths(
            lambda: stages.run_debias(paths, out, seed=seed, tolerance=tolerance), out, "_debias_columns")
        assert fast == reference
        event("columnar" if columnar else "object path")


def test_valid_rows_take_the_columnar_path(tmp_path):
    """Rows of every valid kind (a chat prompt, a rank, triples, ties in a cycle, unknown keys,
    earlier dropped comparisons, no id, an integer id) are written by the columnar path of both
    stages (so the tests above compare it, not the fallback), and something is dropped."""
    responses = [{"id": "r1", "content": "甲 长一些的回答"}, {"content": "乙", "id": "r2", "model": "m"},
                 {"id": "r3", "content": "丙丙丙", "model": 5, "seed": 1}]
    cycle = [{"a": "r1", "b": "r2", "label": "g", "annotator": "judge"}, {"a": "r2", "b": "r3", "label": "g"},
             {"b": "r1", "a": "r3", "label": "g", "note": {"why": "长"}}, {"a": "r1", "b": "r3", "label": "s"}]
    rows = [{"id": "p1", "prompt": [{"role": "user", "content": "问"}], "responses": responses, "comparisons": cycle,
             "meta": [1, "二"], "dropped_comparisons": EARLIER, "category": "理解"},
            {"id": 7, "prompt": "问题二", "responses": responses, "comparisons": cycle[:2], "subset": "open",
             "rank": {"r3": 1, "r1": 0, "r2": 0}, "comparisons_before_rank": []},
            {"prompt": "问题三", "responses": responses, "category": ["a", "b"],
             "triples": [{"ids": ["r1", "r2", "r3"], "ranking": "r2>r1=r3", "annotator": "乙"}]}]
    path = write_jsonl_rows(tmp_path / "judged.jsonl", rows)
    scores = write_scores([path], tmp_path, "all", 1000)
    out = tmp_path / "resolved.jsonl"
    fast, reference, columnar = both_paths(lambda: stages.run_resolve([path], out, scores=scores), out,
                                           "_resolve_columns")
    assert columnar and fast == reference and fast[2]["total"]["dropped"] > 0
    out = tmp_path / "debiased.jsonl"
    for seed in range(3):
        fast, reference, columnar = both_paths(lambda: stages.run_debias([path], out, seed=seed), out,
                                               "_debias_columns")
        assert columnar and fast == reference and fast[2]["ranked_prompts"] == 1


def test_sample_through_resolve_and_debias(sample_annotations, tmp_path):
    """The bundled sample, resolved with scores of a few levels (equal scores happen) then
    debiased, as the pipeline runs them: both stages take the columnar path and write the bytes
    of the object path."""
    paths = sorted(sample_annotations.glob("*.jsonl"))
    scores = write_scores(paths, tmp_path, "all", 4)
    resolved = tmp_path / "resolved.jsonl"
    fast, reference, columnar = both_paths(lambda: stages.run_resolve(paths, resolved, scores=scores, scope="all",
                                                                      margin=1), resolved, "_resolve_columns")
    assert columnar and fast == reference
    resolved.write_bytes(fast[0])
    debiased = tmp_path / "debiased.jsonl"
    for tolerance in (0, 5):
        fast, reference, columnar = both_paths(lambda: stages.run_debias([resolved], debiased, seed=1,
                                                                         tolerance=tolerance), debiased,
                                               "_debias_columns")
        assert columnar and fast == reference and fast[2]["balanced"]


@settings(max_examples=25, deadline=None)
@given(judged_files(bad=True), st.sampled_from(SCORE_CHOICES), st.sampled_from(["resolve", "debias"]))
def test_bad_input_gives_the_error_of_the_object_path(files, scores_choice, stage):
    """The CLI as a user runs it, with the columnar path and without: the same output, the same
    one-line error (file, line, field), the same exit status."""
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        paths = write_files(files, tmp)
        extra = ["--scores", write_scores(paths, tmp, scores_choice, 3)] if stage == "resolve" else ["--seed", "0"]
        args = ["curate", stage, *paths, *extra, "-o", tmp / "out.jsonl"]
        with_columns = run_cli_in(tmp, *args)
        (tmp / "out.jsonl").unlink(missing_ok=True)
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(stages, "_resolve_columns", lambda *a, **k: None)
            mp.setattr(stages, "_debias_columns", lambda *a, **k: None)
            reference = run_cli_in(tmp, *args)
        assert (with_columns.returncode, with_columns.stdout, with_columns.stderr) == \
            (reference.returncode, reference.stdout, reference.stderr)
        event("error" if reference.returncode else "no error")


SCORES = st.one_of(st.floats(allow_nan=False, allow_infinity=False), st.floats(-9, 9),
                   st.integers(-2 ** 63, 2 ** 64 - 1))  # orjson reads integers of 64 bits
ODD = ["none", "none", "none", "none", "int prompt id", "int response id", "score true", "score none", "score text",
       "score list", "no score", "a list", "NaN", "repeat", "blank line"]


@settings(max_examples=150, deadline=None)
@given(st.lists(st.fixed_dictionaries({"prompt_id": st.text(max_size=3), "response_id": st.text(max_size=2),
                                       "score": SCORES}, optional={"model": st.just("m")}), max_size=6),
       st.sampled_from(ODD))
def test_columnar_scores_are_those_of_read_scores(rows, odd):
    """`columnar_scores` gives `read_scores`'s dict (keys, values and their types), or None; it
    is None wherever `read_scores` refuses the file."""
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "scores.jsonl"
        row = {"prompt_id": "p", "response_id": "r", "score": 1}
        changed = {"int prompt id": {**row, "prompt_id": 7}, "int response id": {**row, "response_id": 1},
                   "score true": {**row, "score": True}, "score none": {**row, "score": None},
                   "score text": {**row, "score": "1.5"}, "score list": {**row, "score": [1]},
                   "no score": {"prompt_id": "p", "response_id": "r"}, "a list": [row],
                   "repeat": rows[0] if rows else row}
        lines = [json.dumps(r, ensure_ascii=False) for r in rows]
        if odd in changed:
            lines.insert(len(lines) // 2, json.dumps(changed[odd], ensure_ascii=False))
        elif odd == "NaN":
            lines.append('{"prompt_id": "p", "response_id": "r", "score": NaN}')
        elif odd == "blank line":
            lines.insert(1, "  ")
        path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
        fast = columnar_scores(path)
        try:
            reference = read_scores(path)
        except CheemsInputError:
            assert fast is None
            return
        event("columnar" if fast is not None else "read_scores")
        if fast is not None:
            assert fast == reference and list(map(type, fast.values())) == list(map(type, reference.values()))
            assert list(fast) == list(reference)
