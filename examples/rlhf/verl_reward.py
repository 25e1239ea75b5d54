"""A verl custom reward function that scores with a running `cheems serve`.

    cheems serve ./my-rm --port 8000
    CHEEMS_SERVE_URL=http://127.0.0.1:8000 python3 -m verl.trainer.main_ppo ... \
        custom_reward_function.path=examples/rlhf/verl_reward.py \
        custom_reward_function.name=compute_score

verl calls ``compute_score(data_source=..., solution_str=..., ground_truth=..., extra_info=...)``
once per response, with keywords (newer reward managers add others, such as
``reward_router_address``, which are ignored here), sometimes from several threads at once.
``solution_str`` is the response alone, decoded without special tokens.

What is scored:

- with the prompt in ``extra_info`` (``extra_info["prompt"]``, a text or chat messages, else
  ``extra_info["question"]``, which verl's example preprocessing scripts such as
  ``examples/data_preprocess/gsm8k.py`` store), the pair (prompt, response) goes to ``/v1/score``,
  where the reward model's own chat template is applied, as ``cheems score`` does;
- without it, the response text alone goes to ``/get_reward``, with no chat template and no
  special tokens added (docs/serving.md says where the server reads the reward of such a text).
  A reward model trained on conversations rarely means much on a bare response: store the
  prompt in ``extra_info`` when you prepare the data. An empty response then has no tokens to
  read a reward at, and the server refuses it (422).

``ground_truth`` and ``data_source`` are not used. The server is at ``$CHEEMS_SERVE_URL``
(default http://127.0.0.1:8000); if it was started with ``--api-key-file``, put the token in
``$CHEEMS_SERVE_TOKEN``. Needs ``pip install httpx``.
"""

from __future__ import annotations

import os

import httpx

SERVER = os.environ.get("CHEEMS_SERVE_URL", "http://127.0.0.1:8000").rstrip("/")
TOKEN = os.environ.get("CHEEMS_SERVE_TOKEN")

# One client for the whole run: it keeps its connections open and is safe to share between threads.
# transport retries: a connection refused or dropped is tried again up to 3 times.
client = httpx.Client(base_url=SERVER, timeout=300.0, transport=httpx.HTTPTransport(retries=3),
                      headers={"Authorization": f"Bearer {TOKEN}"} if TOKEN else {})


def prompt_of(extra_info: dict | None):
    """The prompt stored in verl's ``extra_info``, or None when there is none."""
    extra_info = extra_info or {}
    prompt = extra_info.get("prompt")
    if prompt is None:
        prompt = extra_info.get("question")
    if prompt is not None and not isinstance(prompt, str):
        prompt = [{"role": m["role"], "content": m["content"]} for m in prompt]  # chat messages (a numpy array, too)
    return prompt or None


def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs) -> float:
    """The reward model's score of ``solution_str``: as the answer to the prompt in ``extra_info``
    when there is one, else of the text alone (see the module's docstring)."""
    prompt = prompt_of(extra_info)
    if prompt is not None:
        row = {"id": "0", "prompt": prompt, "responses": [{"id": "0", "content": solution_str}]}
        reply = client.post("/v1/score", json={"rows": [row]})
        reply.raise_for_status()  # a refusal names its reason: the field at fault and why
        return float(reply.json()["scores"][0]["score"])
    reply = client.post("/get_reward", json={"query": [solution_str]})
    reply.raise_for_status()
    return float(reply.json()["rewards"][0])
