"""GRPO with TRL, the rewards coming from a running `cheems serve`.

    cheems serve ./my-rm --port 8000                  # in another shell: the reward model
    python examples/rlhf/trl_grpo.py --server http://127.0.0.1:8000 --policy ./my-policy \
        --output grpo-out --steps 10

Each step the policy writes ``--num-generations`` answers to each of a few Chinese prompts; the
reward function posts every (prompt, answer) pair to the server's ``/v1/score``, which applies
the reward model's own chat template (whatever the policy's is) and answers one score per
answer; GRPO then updates the policy towards the better answers of each group. The script
prints the mean reward of every step, writes each (prompt, completion, reward) it saw to
``OUTPUT/rewards.jsonl`` and saves the trained policy in OUTPUT as a Hugging Face checkpoint.

Needs ``pip install trl httpx``; runs on the CPU (pass ``--device cuda`` for a GPU).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import httpx
from datasets import Dataset
from transformers import TrainerCallback
from trl import GRPOConfig, GRPOTrainer

# A few prompts written for this example; pass --prompts FILE (one prompt a line) for your own.
PROMPTS = ["用一句话介绍北京。", "推荐一种适合冬天吃的水果。", "怎样才能睡得更好？", "写一句鼓励朋友的话。"]


def cheems_reward_function(server: str, rewards_file: Path, api_key: str | None = None):
    """A TRL reward function scoring with the `cheems serve` at ``server``.

    TRL calls it as ``reward(prompts=[...], completions=[...], completion_ids=[...], **columns)``
    with one entry per completion (each prompt repeated once per generation). For a
    conversational dataset, as here, a prompt is a list of messages and a completion is
    ``[{"role": "assistant", "content": text}]``; for a plain-text dataset both are texts.
    ``/v1/score`` takes a prompt either way."""
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    client = httpx.Client(base_url=server.rstrip("/"), headers=headers, timeout=300.0)

    def cheems_reward(prompts, completions, **kwargs) -> list[float]:
        answers = [c if isinstance(c, str) else c[-1]["content"] for c in completions]
        rows = [{"id": str(i), "prompt": prompt, "responses": [{"id": "0", "content": answer}]}
                for i, (prompt, answer) in enumerate(zip(prompts, answers))]
        reply = client.post("/v1/score", json={"rows": rows})
        reply.raise_for_status()  # a refusal names its reason: the field at fault and why
        rewards = [item["score"] for item in reply.json()["scores"]]  # in row order
        state = kwargs.get("trainer_state")  # this step is the one after those already done
        step = state.global_step + 1 if state is not None else None
        with open(rewards_file, "a", encoding="utf-8") as f:
            for prompt, answer, reward in zip(prompts, answers, rewards):
                f.write(json.dumps({"step": step, "prompt": prompt, "completion": answer, "reward": reward},
                                   ensure_ascii=False) + "\n")
        return rewards

    return cheems_reward


class PrintMeanReward(TrainerCallback):
    """Prints ``step N: mean reward R`` each time the trainer logs (every step here)."""

    def on_log(self, args, state, control, logs=None, **kwargs):
        if logs and "reward" in logs:
            print(f"step {state.global_step}: mean reward {logs['reward']:.6f}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--server", default="http://127.0.0.1:8000", help="URL of the running `cheems serve`")
    parser.add_argument("--policy", required=True, help="the policy: a causal LM folder or hub id")
    parser.add_argument("--output", required=True, help="folder for the trained policy and rewards.jsonl")
    parser.add_argument("--steps", type=int, default=10, help="optimizer steps")
    parser.add_argument("--prompts", help="text file, one prompt a line (default: four built-in Chinese prompts)")
    parser.add_argument("--num-generations", type=int, default=2, help="answers per prompt (the GRPO group)")
    parser.add_argument("--prompts-per-step", type=int, default=2)
    parser.add_argument("--max-completion-length", type=int, default=16, help="tokens per answer")
    parser.add_argument("--learning-rate", type=float, default=1e-5)
    parser.add_argument("--device", default="cpu", help="cpu, or cuda for a GPU")
    parser.add_argument("--api-key-file", help="the server's bearer token, if it was started with one")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    prompts = PROMPTS if args.prompts is None else \
        [line.strip() for line in Path(args.prompts).read_text(encoding="utf-8").splitlines() if line.strip()]
    # Conversational rows: TRL applies the policy's chat template to the prompt.
    dataset = Dataset.from_list([{"prompt": [{"role": "user", "content": p}]} for p in prompts])

    output = Path(args.output)
    output.mkdir(parents=True, exist_ok=True)
    rewards_file = output / "rewards.jsonl"
    rewards_file.write_text("", encoding="utf-8")
    api_key = Path(args.api_key_file).read_text().strip() if args.api_key_file else None

    config = GRPOConfig(
        output_dir=str(output),
        max_steps=args.steps,
        per_device_train_batch_size=args.prompts_per_step * args.num_generations,  # completions per step
        num_generations=args.num_generations,
        max_completion_length=args.max_completion_length,
        learning_rate=args.learning_rate,
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        seed=args.seed,
        use_cpu=args.device == "cpu",
        bf16=args.device != "cpu",  # float32 on the CPU
        gradient_checkpointing=False,
    )
    trainer = GRPOTrainer(model=args.policy, args=config, train_dataset=dataset,
                          reward_funcs=cheems_reward_function(args.server, rewards_file, api_key),
                          callbacks=[PrintMeanReward()])
    trainer.train()
    trainer.save_model(str(output))
    print(f"saved the policy to {output}; every reward seen is in {rewards_file}")


if __name__ == "__main__":
    main()
