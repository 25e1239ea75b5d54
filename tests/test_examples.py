"""The scripts under examples/ run as written, end to end, in an empty folder: on the bundled sample, with a tiny
reward model trained one epoch, and (for curation) the loopback chat server of examples/loopback_judge.py that the
script starts and stops itself. Each must leave its outputs and its HTML report, and no server behind."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import HANG_TIMEOUT_S, REPO_ROOT, run_cli_in
from tests.warm_cheems import WarmParent

EXAMPLES = REPO_ROOT / "examples"


SCRIPTS = {"curation": EXAMPLES / "curation" / "run.sh", "report": EXAMPLES / "report" / "make_report.sh",
           "experiments": EXAMPLES / "experiments" / "run.sh"}


@pytest.fixture(scope="module")
def ran(tmp_path_factory) -> dict[str, Path]:
    """Every example script run as ``bash SCRIPT OUT`` from an empty folder of its own, with
    ``cheems`` (the warm one of tests/warm_cheems.py: each command a process of its own, forked
    after the slow imports) and this interpreter's ``python3`` first on PATH; the scripts run side
    by side (one torch thread each), as two users' runs would. Returns each script's folder."""
    env = {**os.environ, "EPOCHS": "1", "OMP_NUM_THREADS": "1"}
    env.pop("OPENAI_API_KEY", None)
    folders = {name: tmp_path_factory.mktemp(f"example-{name}") for name in SCRIPTS}
    parent = WarmParent.start(tmp_path_factory.mktemp("warm-cheems"), env)
    try:
        env["PATH"] = os.pathsep.join([str(parent.client_script().parent), str(Path(sys.executable).parent),
                                       env.get("PATH", "")])
        procs = {name: subprocess.Popen(["bash", str(script), "out"], cwd=folders[name], env=env, text=True,
                                        encoding="utf-8", stdout=subprocess.PIPE, stderr=subprocess.PIPE)
                 for name, script in SCRIPTS.items()}
        for name, proc in procs.items():
            try:
                stdout, stderr = proc.communicate(timeout=2 * HANG_TIMEOUT_S)
            finally:
                proc.kill()
            assert proc.returncode == 0, f"{SCRIPTS[name].name} failed:\n{stdout[-3000:]}\n{stderr[-3000:]}"
            assert "Traceback" not in stderr
    finally:
        parent.stop()
    return folders


def test_every_example_script_is_tested():
    scripts = sorted(p.relative_to(EXAMPLES).as_posix() for p in EXAMPLES.rglob("*.sh"))
    assert scripts == sorted(p.relative_to(EXAMPLES).as_posix() for p in SCRIPTS.values())


def test_the_curation_example_runs_against_its_loopback_server(ran):
    tmp_path = ran["curation"]
    work = tmp_path / "out" / "work"
    preference = [json.loads(line) for line in (work / "preference.jsonl").read_text(encoding="utf-8").splitlines()]
    assert {row["source"] for row in preference} == {"human", "judge"}
    judged = json.loads((work / "judged.report.json").read_text(encoding="utf-8"))
    sampled = json.loads((work / "sampled.report.json").read_text(encoding="utf-8"))
    assert sampled["failed_rows"] == 0 and sampled["output_rows"] == 24
    assert judged["stage"] == "judge" and "http://127.0.0.1:" in (work / "pipeline.yaml").read_text(encoding="utf-8")
    assert (tmp_path / "out" / "report.html").stat().st_size > 10_000
    port = int((work / "server.port").read_text(encoding="utf-8"))
    import socket

    with socket.socket() as s:  # the script stopped its server
        assert s.connect_ex(("127.0.0.1", port)) != 0


def test_the_report_example_runs_on_the_sample(ran):
    tmp_path = ran["report"]
    out = tmp_path / "out"
    html = (out / "report.html").read_text(encoding="utf-8")
    assert '<html lang="zh-CN">' in html and "B − A" in html and (out / "report.md").exists()
    assert json.loads((out / "bon-tiny-rm.json").read_text(encoding="utf-8"))["model"] == "tiny-rm"
    comparison = json.loads((out / "length-vs-tiny-rm.json").read_text(encoding="utf-8"))
    assert comparison["a"] == "length" and comparison["b"] == "tiny-rm" and comparison["difference"] == "b - a"


def test_the_study_example_fills_its_grid_and_a_rerun_trains_nothing(ran):
    out = ran["experiments"] / "out"
    rows = [json.loads(line) for line in (out / "study" / "results.jsonl").read_text(encoding="utf-8").splitlines()]
    assert len(rows) == 8 and {r["base_model_name"] for r in rows} == {"tiny", "small"}
    assert {r["data_size"] for r in rows} == {60, "all"}
    html = (out / "report.html").read_text(encoding="utf-8")
    assert "human-subset-debiased" in html and len(list((out / "report_files").glob("fig[67]_*.png"))) == 8
    again = run_cli_in(out, "experiment", "run", "study.yaml", "-o", "study")
    assert again.returncode == 0 and "ran 0 of 8 cells (8 finished before)" in again.stdout, again.stderr


@pytest.mark.parametrize("request_for", ["judge", "qwen2.5-7b-instruct"])
def test_the_loopback_server_answers_deterministically(request_for):
    sys.path.insert(0, str(EXAMPLES))
    try:
        import loopback_judge
    finally:
        sys.path.remove(str(EXAMPLES))
    from cheems.scoring.judge_prompt import build_messages, parse_verdict

    messages = build_messages("介绍一种水果。", "苹果。", "苹果是一种常见的水果，口感脆甜，富含维生素。", ["知识"])
    body = {"model": request_for, "seed": 3, "messages": messages}
    first, again = loopback_judge.answer(body), loopback_judge.answer(body)
    assert first == again
    if request_for == "judge":
        assert parse_verdict(first) == "B"  # the answer with more distinct characters
    else:
        assert "qwen2.5-7b-instruct" in first and loopback_judge.answer({**body, "seed": 4}) != first
