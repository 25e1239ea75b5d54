"""The clients of a running `cheems serve`: `cheems bon --server URL` and `cheems curate resolve
--server URL` score through the server's /v1/score and give what --model / --rm give, and every
way of getting the server wrong is one line with exit code 2.

One real server for the module: `python -m cheems serve TINY_MODEL --port 0` in a subprocess on
the loopback, with a bearer token; the clients run as a user runs them (the CLI in this process)
or as a Python caller does (:class:`cheems.scoring.remote_scorer.RemoteScorer`).
"""

from __future__ import annotations

import json
import re
import socket
import subprocess
from pathlib import Path

import orjson
import pytest

from cheems.records import CheemsInputError, Prompt, Response
from cheems.scoring.remote_scorer import RemoteScorer, request_chunks
from cheems.serving.settings import ServeSettings
from tests.conftest import HANG_TIMEOUT_S, run_cli_in
from tests.serve_process import launch_serve

TOKEN = "s3cret-token-for-tests"


def start_server(model: Path, log: Path, *args: str) -> tuple[subprocess.Popen, str]:
    """`cheems serve MODEL --port 0 ARGS` in a subprocess, and its URL once the ready line says it."""
    proc, url, _ = launch_serve(model, log, *args)
    return proc, url


@pytest.fixture(scope="module")
def token_file(tmp_path_factory) -> Path:
    f = tmp_path_factory.mktemp("token") / "token.txt"
    f.write_text(TOKEN + "\n", encoding="utf-8")
    f.chmod(0o600)
    return f


@pytest.fixture(scope="module")
def server(seq_cls_model, token_file, tmp_path_factory, single_torch_thread):
    pytest.importorskip("fastapi", reason="the server needs the serve extra: pip install 'cheems[serve]'")
    pytest.importorskip("uvicorn", reason="the server needs the serve extra: pip install 'cheems[serve]'")
    proc, url = start_server(seq_cls_model, tmp_path_factory.mktemp("serve") / "serve.log",
                             "--api-key-file", str(token_file))
    yield url
    proc.terminate()
    proc.wait(timeout=HANG_TIMEOUT_S)


@pytest.fixture(scope="module")
def bench(tmp_path_factory, sample_annotations) -> tuple[Path, Path]:
    """The sample's open prompts ranked (bench.jsonl) and their ranks as gold scores (gold.jsonl)."""
    folder = tmp_path_factory.mktemp("bench")
    assert run_cli_in(folder, "rank", sample_annotations / "open.jsonl", "-o", "bench.jsonl").returncode == 0
    rows = [json.loads(x) for x in (folder / "bench.jsonl").read_text(encoding="utf-8").splitlines()]
    gold = [{"prompt_id": r["id"], "response_id": rid, "score": -level}
            for r in rows for rid, level in r["rank"].items()]
    (folder / "gold.jsonl").write_text("".join(json.dumps(g) + "\n" for g in gold), encoding="utf-8")
    return folder / "bench.jsonl", folder / "gold.jsonl"


def read_scores(path: Path) -> dict:
    return {(r["prompt_id"], r["response_id"]): r["score"]
            for r in map(json.loads, path.read_text(encoding="utf-8").splitlines())}


def one_error_line(run) -> str:
    """The run failed as bad input does: exit 2 and one line on stderr, no traceback."""
    lines = run.stderr.strip().splitlines()
    assert run.returncode == 2 and len(lines) == 1 and "Traceback" not in run.stderr, (run.returncode, run.stderr)
    return lines[0]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ----------------------------------------------------------------------------- the same numbers

def test_bon_through_the_server_equals_bon_with_the_model(tmp_path, server, token_file, bench, seq_cls_model):
    candidates, gold = bench
    common = ("-n", "1,2,4", "--gold", gold, "--bootstrap", "200")
    served = run_cli_in(tmp_path, "bon", candidates, "--server", server, "--api-key-file", token_file,
                        "--json", "served.json", *common)
    assert served.returncode == 0, served.stderr
    local = run_cli_in(tmp_path, "bon", candidates, "--model", seq_cls_model, "--json", "local.json", *common)
    assert local.returncode == 0, local.stderr
    a, b = (json.loads((tmp_path / f).read_text(encoding="utf-8")) for f in ("served.json", "local.json"))
    assert a["model"] == b["model"] == seq_cls_model.name  # the served model's name, from /health
    assert [p["n"] for p in a["curve"]] == [1, 2, 4] and a["prompts"] == b["prompts"] == 24
    # best-of-n picks the higher score: the same picks on both sides, since no two responses of one of
    # these prompts score within the 1e-5 the sides may differ by (checked in the resolve test below)
    for p, q in zip(a["curve"], b["curve"]):
        assert p["expected_gold"] == pytest.approx(q["expected_gold"], abs=1e-9)
        assert p["ci"] == pytest.approx(q["ci"], abs=1e-9)


def test_resolve_through_the_server_equals_resolve_with_the_rm(tmp_path, server, token_file, sample_annotations,
                                                               seq_cls_model):
    judged = sample_annotations / "open.jsonl"
    served = run_cli_in(tmp_path, "curate", "resolve", judged, "--server", server, "--api-key-file", token_file,
                        "-o", "served.jsonl")
    assert served.returncode == 0, served.stderr
    local = run_cli_in(tmp_path, "curate", "resolve", judged, "--rm", seq_cls_model, "-o", "local.jsonl")
    assert local.returncode == 0, local.stderr
    a, b = read_scores(tmp_path / "served.scores.jsonl"), read_scores(tmp_path / "local.scores.jsonl")
    assert a.keys() == b.keys() and len(a) == 120
    assert max(abs(a[k] - b[k]) for k in a) <= 1e-5
    # the resolved rows rest on which of two responses scores higher: no two of one prompt lie within
    # the 1e-5 the two sides may differ by, so every such decision, and the file, is the same
    assert closest_within_a_prompt(b) > 2e-5
    assert (tmp_path / "served.jsonl").read_bytes() == (tmp_path / "local.jsonl").read_bytes()
    meta = json.loads((tmp_path / "served.scores.jsonl.meta.json").read_text(encoding="utf-8"))
    assert meta["server"] == server and meta["model"] == seq_cls_model.name
    before = (tmp_path / "served.scores.jsonl").read_bytes()
    again = run_cli_in(tmp_path, "curate", "resolve", judged, "--server", server, "--api-key-file", token_file,
                       "-o", "served.jsonl")  # resumes: everything is scored already
    assert again.returncode == 0, again.stderr
    assert (tmp_path / "served.scores.jsonl").read_bytes() == before


def closest_within_a_prompt(scores: dict) -> float:
    """The smallest gap between the scores of two responses of one prompt."""
    by_prompt: dict[str, list[float]] = {}
    for (pid, _), score in scores.items():
        by_prompt.setdefault(pid, []).append(score)
    return min(b - a for values in by_prompt.values() for a, b in zip(sorted(values), sorted(values)[1:]))


def test_the_python_client_splits_rows_and_keeps_every_score(server, tiny_prompts, seq_cls_model):
    """Chat-message prompts, rows split over requests (two responses at most per request) and
    repeated responses: the scores of the model loaded here, to 1e-5."""
    from cheems.scoring.model_settings import ModelSettings
    from cheems.scoring.run import model_scores

    messages = [{"role": "system", "content": "你是助手。"}, {"role": "user", "content": "你好"}]
    chat = Prompt(id="chat", prompt=messages,
                  responses=[Response("a", "你好！"), Response("b", "嗯"), Response("c", "你好！")])
    prompts = [chat, *tiny_prompts[:6]]
    client = RemoteScorer(server, api_key=TOKEN, batch_rows=3, max_responses=2)
    seen = []
    remote = client.scores(prompts, progress=lambda done, total: seen.append((done, total)))
    local, _ = model_scores(seq_cls_model, ModelSettings(), prompts, None, None)
    assert remote.keys() == local.keys()
    assert max(abs(remote[k] - local[k]) for k in local) <= 1e-5
    # the same text in two requests of other shapes: batch-invariant to 1e-6 in float32 (docs/serving.md)
    assert abs(remote[("chat", "a")] - remote[("chat", "c")]) <= 1e-6
    total = sum(len(p.responses) for p in prompts)
    assert seen[0] == (0, total) and seen[-1] == (total, total) and len(seen) > total // 2


def test_request_chunks_respect_every_limit_and_send_each_response_once(tiny_prompts):
    done = {(tiny_prompts[0].id, tiny_prompts[0].responses[0].id)}
    for rows_max, responses_max, bytes_max in ((1, 1000, 1 << 20), (4, 3, 1 << 20), (50, 50, 2000)):
        chunks = list(request_chunks(tiny_prompts, done=done, max_rows=rows_max, max_responses=responses_max,
                                     max_body_bytes=bytes_max))
        sent = [(row["id"], r["id"]) for chunk in chunks for row in chunk for r in row["responses"]]
        want = [(p.id, r.id) for p in tiny_prompts for r in p.responses if (p.id, r.id) not in done]
        assert sent == want
        for chunk in chunks:
            assert len(chunk) <= rows_max and sum(len(row["responses"]) for row in chunk) <= responses_max
            one_response_rows = all(len(row["responses"]) == 1 for row in chunk) and len(chunk) == 1
            assert one_response_rows or sum(len(orjson.dumps(row)) for row in chunk) <= bytes_max


# ----------------------------------------------------------------------------- one line for each mistake

def test_server_with_a_model_or_scores_is_refused_in_one_line(tmp_path, bench, seq_cls_model, sample_annotations):
    candidates, gold = bench
    url = "http://127.0.0.1:9"
    line = one_error_line(run_cli_in(tmp_path, "bon", candidates, "--gold", gold, "--server", url,
                                     "--model", seq_cls_model))
    assert "give exactly one of --scores (a file), --model (a folder) or --server (a URL)" in line
    line = one_error_line(run_cli_in(tmp_path, "bon", candidates, "--gold", gold, "--server", url, "--scores", gold))
    assert "--server (a URL)" in line
    line = one_error_line(run_cli_in(tmp_path, "curate", "resolve", sample_annotations / "open.jsonl",
                                     "--server", url, "--rm", seq_cls_model, "-o", "o.jsonl"))
    assert "model (--rm) or a server of it (--server)" in line
    line = one_error_line(run_cli_in(tmp_path, "bon", candidates, "--gold", gold, "--scores", gold,
                                     "--api-key-file", gold))
    assert "--api-key-file goes with --server URL" in line


@pytest.mark.parametrize("url, says", [("localhost:8000", "--server: must be http://HOST:PORT"),
                                       ("ftp://127.0.0.1:8000", "--server: must be http://HOST:PORT")])
def test_a_bad_server_url_is_one_line(tmp_path, bench, url, says):
    candidates, gold = bench
    assert says in one_error_line(run_cli_in(tmp_path, "bon", candidates, "--gold", gold, "--server", url))


def test_a_server_that_is_down_is_one_line_after_the_retries(tmp_path, bench, monkeypatch):
    import types

    from cheems.scoring import remote_scorer

    waits: list[float] = []  # the backoff the client waits between tries, recorded instead of slept
    monkeypatch.setattr(remote_scorer, "time", types.SimpleNamespace(sleep=waits.append))
    candidates, gold = bench
    url = f"http://127.0.0.1:{free_port()}"
    line = one_error_line(run_cli_in(tmp_path, "bon", candidates, "--gold", gold, "--server", url))
    assert line == f"error: --server: cannot reach the reward server at {url}: connection refused (tried 4 times)"
    assert waits == [0.5, 1.0, 2.0]  # exponential backoff from the default 0.5 s
    with pytest.raises(CheemsInputError, match=re.escape(f"reward server at {url}: connection refused (tried 1 time)")):
        RemoteScorer(url + "/v1/score/", retries=0).health()  # a route named in the URL is dropped


def test_the_server_refusing_is_one_line_with_its_message(tmp_path, server, bench, token_file):
    candidates, gold = bench
    line = one_error_line(run_cli_in(tmp_path, "bon", candidates, "--gold", gold, "--server", server))
    assert "refused /v1/score with HTTP 401: missing or wrong bearer token" in line
    assert line.endswith("(give its token with --api-key-file)")
    wrong = tmp_path / "wrong.txt"
    wrong.write_text("not-the-token", encoding="utf-8")
    wrong.chmod(0o600)
    line = one_error_line(run_cli_in(tmp_path, "bon", candidates, "--gold", gold, "--server", server,
                                     "--api-key-file", wrong))
    assert "HTTP 401" in line and line.endswith("is the token right?")
    line = one_error_line(run_cli_in(tmp_path, "bon", candidates, "--gold", gold, "--server", server + "/nothing/here",
                                     "--api-key-file", token_file))
    assert "HTTP 404" in line and line.endswith("is it `cheems serve`?")
    most = ServeSettings().max_queries  # the server's default --max-queries
    many = Prompt(id="many", prompt="问", responses=[Response(f"r{i}", "答") for i in range(most + 1)])
    with pytest.raises(CheemsInputError, match=rf"HTTP 413: more than {most} responses .* \(field rows\)"):
        RemoteScorer(server, api_key=TOKEN, max_responses=most + 1).scores([many])
