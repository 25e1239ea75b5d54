"""The RLHF examples of examples/rlhf/ against one real `cheems serve` (a tiny reward model, a
bearer token, its own process on a loopback port):

- trl_grpo.py runs TRL's GRPOTrainer for 2 steps on the CPU with a tiny causal LM policy, as a
  user runs it (a subprocess); every reward it got equals what `cheems score` writes for the same
  (prompt, completion), and each printed step mean is the mean of that step's rewards;
- verl_reward.compute_score, loaded from its file and called as verl's reward managers call it
  (keywords, extra_info with the prompt, a numpy array of messages, or none; from several
  threads), returns the score `cheems score` gives for the prompt and response, and without a
  prompt the server's score of the response text alone.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import signal
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.conftest import HANG_TIMEOUT_S, REPO_ROOT, run_cli_in
from tests.serve_process import launch_serve
from tests.tiny_models import ONE_THREAD_ENV, require_models_extra

require_models_extra()
httpx = pytest.importorskip("httpx")
pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")
# the TRL example runs in its own process: look trl up without importing it here (seconds)
needs_trl = pytest.mark.skipif(importlib.util.find_spec("trl") is None,
                               reason="the TRL example needs trl: pip install 'cheems[dev]' or pip install trl")

pytestmark = pytest.mark.usefixtures("single_torch_thread")

EXAMPLES = REPO_ROOT / "examples" / "rlhf"
ATOL = 1e-5  # the server vs `cheems score`, fp32 CPU
TOKEN = "rlhf-7c21e0"
PROMPTS = ["介绍一下长城。", "今天晚饭吃什么好？", "给我讲个笑话。"]
STEP = re.compile(r"^step (\d+): mean reward (-?\d+\.\d+)$")


@pytest.fixture(scope="module")
def server(tmp_path_factory, seq_cls_model):
    """``(url, folder)`` of one `cheems serve` on the tiny seq-cls model, with a bearer token."""
    folder = tmp_path_factory.mktemp("rlhf-serve")
    key = folder / "api-key"
    key.write_text(TOKEN + "\n")
    key.chmod(0o600)
    proc, url, _ = launch_serve(seq_cls_model, folder / "serve.log", "--api-key-file", str(key))
    yield url, folder
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=HANG_TIMEOUT_S) == 0, (folder / "serve.log").read_text()


def cheems_score(model: Path, pairs: list[tuple], folder: Path) -> list[float]:
    """What `cheems score --model` writes for each (prompt, response) of ``pairs``, in order."""
    rows = [{"id": f"p{i}", "prompt": prompt, "responses": [{"id": "r", "content": response}]}
            for i, (prompt, response) in enumerate(pairs)]
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "rows.jsonl").write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows),
                                       encoding="utf-8")
    done = run_cli_in(folder, "score", "rows.jsonl", "-o", "scores.jsonl", "--model", model)
    assert done.returncode == 0, done.stderr
    scores = {s["prompt_id"]: s["score"] for s in map(json.loads, (folder / "scores.jsonl").read_text().splitlines())}
    return [scores[f"p{i}"] for i in range(len(pairs))]


@needs_trl
def test_trl_grpo_runs_two_steps_on_the_servers_rewards(server, seq_cls_model, causal_lm_model, tmp_path):
    url, folder = server
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("\n".join(PROMPTS) + "\n", encoding="utf-8")
    out = tmp_path / "grpo"
    run = subprocess.run([sys.executable, str(EXAMPLES / "trl_grpo.py"), "--server", url, "--policy",
                          str(causal_lm_model), "--output", str(out), "--steps", "2", "--prompts", str(prompts),
                          "--max-completion-length", "8", "--api-key-file", str(folder / "api-key")],
                         cwd=tmp_path, env={**os.environ, **ONE_THREAD_ENV}, capture_output=True, text=True,
                         encoding="utf-8", timeout=HANG_TIMEOUT_S)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert "Traceback" not in run.stderr
    printed = {int(m.group(1)): float(m.group(2)) for m in map(STEP.match, run.stdout.splitlines()) if m}
    assert sorted(printed) == [1, 2], run.stdout
    assert (out / "config.json").exists() and (out / "model.safetensors").exists()  # the trained policy

    seen = [json.loads(line) for line in (out / "rewards.jsonl").read_text(encoding="utf-8").splitlines()]
    assert len(seen) == 2 * 2 * 2  # steps x prompts a step x generations a prompt
    assert {row["prompt"][0]["content"] for row in seen} <= set(PROMPTS)
    for step, mean in printed.items():
        rewards = [row["reward"] for row in seen if row["step"] == step]
        assert len(rewards) == 4 and abs(sum(rewards) / 4 - mean) <= ATOL
    expected = cheems_score(seq_cls_model, [(row["prompt"], row["completion"]) for row in seen], tmp_path / "score")
    assert [row["reward"] for row in seen] == pytest.approx(expected, abs=ATOL)


@pytest.fixture(scope="module")
def verl_reward(server):
    """examples/rlhf/verl_reward.py loaded from its file as verl loads a custom reward function,
    with the server's URL and token in its environment variables."""
    url, _ = server
    with pytest.MonkeyPatch.context() as env:
        env.setenv("CHEEMS_SERVE_URL", url)
        env.setenv("CHEEMS_SERVE_TOKEN", TOKEN)
        spec = importlib.util.spec_from_file_location("custom_module", EXAMPLES / "verl_reward.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    yield module
    module.client.close()


def test_verl_compute_score_is_the_servers_score_of_prompt_and_response(verl_reward, seq_cls_model, tmp_path):
    import numpy as np

    answers = ["长城是中国古代的军事防御工程，总长两万多公里。", "吃面条吧。", "从前有座山。"]
    pairs = list(zip(PROMPTS, answers))
    # as verl's naive reward manager calls it: keywords, extra_info from the data (here with verl's
    # gsm8k-style "question") plus the "num_turns" it adds
    got = [verl_reward.compute_score(data_source="cheems/zh", solution_str=answer, ground_truth="",
                                     extra_info={"question": prompt, "index": i, "num_turns": None})
           for i, (prompt, answer) in enumerate(pairs)]
    assert all(isinstance(g, float) for g in got)
    assert got == pytest.approx(cheems_score(seq_cls_model, pairs, tmp_path / "score"), abs=ATOL)

    # the prompt as chat messages, a numpy array as a parquet list column arrives; newer reward
    # managers add keywords of their own; several threads at once
    messages = np.array([{"role": "user", "content": PROMPTS[0]}], dtype=object)
    as_messages = verl_reward.compute_score(data_source="cheems/zh", solution_str=answers[0], ground_truth="",
                                            extra_info={"prompt": messages}, reward_router_address=None)
    assert as_messages == pytest.approx(got[0], abs=ATOL)
    def call(k: int) -> float:
        return verl_reward.compute_score(data_source="cheems/zh", solution_str=answers[k % 3], ground_truth="",
                                         extra_info={"question": PROMPTS[k % 3]})

    with ThreadPoolExecutor(4) as pool:
        threaded = list(pool.map(call, range(6)))
    assert threaded == pytest.approx([got[k % 3] for k in range(6)], abs=ATOL)


def test_verl_compute_score_without_a_prompt_scores_the_text_alone(server, verl_reward):
    url, _ = server
    text = "北京是中国的首都。"
    got = verl_reward.compute_score(data_source="cheems/zh", solution_str=text, ground_truth=None)
    # the server's score of the same text through another route: vLLM's /classify, special tokens
    # not added, the raw score
    body = {"input": [text], "add_special_tokens": False, "use_activation": False}
    reply = httpx.post(url + "/classify", json=body, headers={"Authorization": f"Bearer {TOKEN}"},
                       timeout=HANG_TIMEOUT_S)
    assert reply.status_code == 200, reply.text
    assert got == pytest.approx(reply.json()["data"][0]["probs"][0], abs=ATOL)
