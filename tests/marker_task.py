"""The synthetic marker preference, and tiny models that can learn it: the task on which the
tests and ``benchmarks/bench_step_needs.py`` check that each objective learns.

Each prompt has 2 or 3 responses of random characters; the one holding the marker 【好】 ranks
first, the others tie below it (1 or 2 ranked pairs a prompt, about 300 for 200 prompts). A
reward model can only learn this from the text. The models are tiny Qwen2s (hidden 64, 2
layers, `init_model.tiny_config`) with a tokenizer of 500 tokens trained on the data and on
the judge prompts of `SHORT`, a short judge template, so a judge prompt is some 60 tokens and a
response sequence some 15.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

from cheems.llm.verdict_template import VerdictTemplate, save_verdict_template

__all__ = ["CHARS", "MARK", "SHORT", "build_marker_task", "synthetic_rows", "write_rows"]

MARK = "【好】"
CHARS = "天地人山水火木金土日月风云雨雪花草鸟鱼虫"
SHORT = VerdictTemplate(language="zh", system="评审", instruction="比较", closing="答ABC", closing_no_tie="答AB",
                        names={"history": "史", "question": "问题", "response_a": "回答A", "response_b": "回答B"},
                        roles={"user": "用户"}, version="test-short")


def synthetic_rows(n: int, seed: int, start: int = 0) -> list[dict]:
    """Prompts of 2-3 random responses; the one holding the marker ranks first, the others tie."""
    rng = random.Random(seed)
    out = []
    for k in range(n):
        m = rng.choice([2, 3])
        texts = ["".join(rng.choice(CHARS) for _ in range(rng.randint(4, 9))) for _ in range(m)]
        good = rng.randrange(m)
        at = rng.randint(0, len(texts[good]))
        texts[good] = texts[good][:at] + MARK + texts[good][at:]
        out.append({"id": f"p{start + k}", "prompt": "问" + "".join(rng.choice(CHARS) for _ in range(rng.randint(3, 6))),
                    "responses": [{"id": f"r{j}", "content": c} for j, c in enumerate(texts)],
                    "rank": {f"r{j}": 1 if j == good else 2 for j in range(m)}})
    return out


def write_rows(path: Path, rows) -> str:
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    return str(path)


def build_marker_task(root: Path, *, seed: int = 0, prompts: int = 200, held_out: int = 50,
                      reward_model: bool = False) -> dict:
    """Write the task into ``root``: ``train.jsonl`` (``prompts`` prompts), ``held_out.jsonl``
    (``held_out`` others), the `SHORT` template (``judge_template.json``), ``lm``, a tiny causal
    LM initialised with ``seed``, and with ``reward_model`` also ``rm``, a one-label
    sequence-classification model with the same backbone weights. Returns their paths
    (``root``, ``model``, ``reward_model``, ``train``, ``held_out``, ``template``)."""
    import torch
    from transformers import Qwen2ForCausalLM, Qwen2ForSequenceClassification

    from cheems.training.init_model import tiny_config, train_tokenizer

    train_rows, held = synthetic_rows(prompts, seed=0), synthetic_rows(held_out, seed=1, start=1000)
    texts = [r["prompt"] for r in train_rows] + [c["content"] for r in train_rows for c in r["responses"]]
    texts += [m["content"] for r in train_rows[:50]
              for m in SHORT.messages(r["prompt"], r["responses"][0]["content"], r["responses"][1]["content"],
                                      ties=False)]
    tokenizer = train_tokenizer(texts, vocab_size=500)
    torch.manual_seed(seed)
    lm = Qwen2ForCausalLM(tiny_config(tokenizer, architecture="Qwen2ForCausalLM"))
    lm.save_pretrained(root / "lm")
    tokenizer.save_pretrained(root / "lm")
    if reward_model:
        torch.manual_seed(seed)
        rm = Qwen2ForSequenceClassification(tiny_config(tokenizer))
        rm.model.load_state_dict(lm.model.state_dict())  # the same backbone as the causal LM
        rm.save_pretrained(root / "rm")
        tokenizer.save_pretrained(root / "rm")
    save_verdict_template(SHORT, root)
    return {"root": root, "model": root / "lm", "reward_model": root / "rm" if reward_model else None,
            "train": write_rows(root / "train.jsonl", train_rows),
            "held_out": write_rows(root / "held_out.jsonl", held), "template": str(root / "judge_template.json")}
