"""Training throughput of `cheems train`: packed rows against right-padded batches, same data,
same model, one run each, side by side; tokens/s, padding share and MFU (see mfu.py for the
FLOP count, printed with the figures).

Usage:
  python benchmarks/bench_train.py                                     # CPU, small model
  python benchmarks/bench_train.py --device cuda --shape qwen2.5-0.5b --prompts 4000 --bf16 \
      --micro-batch-size 64 --token-budget 16384
  python benchmarks/bench_train.py --device cuda --shape qwen2.5-7b --prompts 1000 --bf16 \
      --micro-batch-size 64 --token-budget 16384 --gradient-checkpointing --lora-r 16
  add --liger-kernels / --compile to try the fused kernels (GPU).
  python benchmarks/bench_train.py --data pairs.jsonl --max-length 512 --token-budget 8192 \
      --micro-batch-size 64                                            # real pairs, CPU
With --data the run trains on those prompts as they are (cheems rows, or preference pairs in
the ShareGPT layout {conversations, chosen, rejected}) and prints whether packed reaches
GOAL x the padded tokens/s. Each mode's line gives its steps and real tokens per optimizer
step: a token budget caps a padded batch's padded tokens but a packed row's real ones, so
packed steps hold more real tokens; leave --token-budget out (micro batch size alone) for
the same batches, hence the same tokens per step, in both modes.
The data is the bundled sample's prompts, each drawn again and again as a prompt of its own
(a number added to its text) with its responses (each repeated 1..--repeat-text times, to
reach realistic lengths) so the run is long enough to time; one epoch, one forward
batch per optimizer step, no evaluation or checkpoints inside the timed loop. tokens/s counts
real tokens (padding excluded) over the training loop's wall time: the tokens of the training
sequences, whole. Packed rows lay the tokens a prompt's responses share (chat template and
prompt) down once (`share_prefix`, off with --no-share-prefix), so they compute fewer tokens
than they train on; the line says how many, and MFU counts the tokens computed.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from mfu import (SHAPES, build, device_peak, flops_formula, mean_context, mfu, mfu_goal_line,  # noqa: E402
                 profile_tables, profiler_activities)

GOAL = 1.3  # packed / padded tokens/s wanted on real pairs of very different lengths


def read_pairs(path: Path) -> list:
    """Prompts of ``path``: cheems rows (JSONL with ``responses``), or preference pairs in the
    ShareGPT layout ``{conversations, chosen, rejected}`` (a JSON list or JSONL), as
    DPO-En-Zh-20k's samples come."""
    from cheems.catalog.chinese import convert_dpo_en_zh
    from cheems.catalog.entry import Conversion
    from cheems.formats import read_prompts

    text = path.read_text(encoding="utf-8")
    if text.lstrip().startswith("["):
        rows = json.loads(text)
    else:
        rows = [json.loads(line) for line in text.splitlines() if line.strip()]
    if rows and "responses" in rows[0]:
        return read_prompts(path).prompts
    conv = Conversion(name=path.stem, split="train")
    return [p for i, row in enumerate(rows) for p in convert_dpo_en_zh(row, i, conv)]


def write_rows(path: Path, prompts) -> None:
    """``prompts`` as cheems rows, one prompt text once (a repeated text would train as one prompt)."""
    seen = set()
    with open(path, "w", encoding="utf-8") as f:
        for p in prompts:
            key = json.dumps(p.prompt, ensure_ascii=False)
            if key not in seen:
                seen.add(key)
                f.write(json.dumps(p.to_dict(comparisons=False), ensure_ascii=False) + "\n")


def write_data(path: Path, prompts, n: int, repeat_text: int) -> None:
    rng = random.Random(0)
    with open(path, "w", encoding="utf-8") as f:
        for i in range(n):
            p = rng.choice(prompts)
            row = p.to_dict(comparisons=False)
            row["id"] = f"{p.id}-{i}"
            tag = f"（第 {i} 题）"  # a prompt text of its own: rows of one text would train as one prompt
            if isinstance(row["prompt"], str):
                row["prompt"] += tag
            else:
                row["prompt"][-1]["content"] += tag
            for r in row["responses"]:
                r["content"] = "\n".join([r["content"]] * rng.randint(1, repeat_text))
            f.write(json.dumps(row, ensure_ascii=False) + "\n")


class Profiled:
    """A `train` progress callback that records optimizer steps 10-19 with torch.profiler and
    writes the operators sorted by device time and by host time to ``path``."""

    def __init__(self, path: str, device: str):
        import torch

        self.device = device
        self.path = path
        self.profiler = torch.profiler.profile(activities=profiler_activities(device),
                                               schedule=torch.profiler.schedule(wait=9, warmup=1, active=10,
                                                                                repeat=1),
                                               on_trace_ready=self.write)
        self.profiler.start()

    def __call__(self, step, total, stats) -> None:
        if self.profiler is not None:
            self.profiler.step()
        if step == 20 and self.profiler is not None:
            self.profiler.stop()
            self.profiler = None

    def write(self, prof) -> None:
        Path(self.path).write_text(profile_tables(prof, self.device), encoding="utf-8")
        print(f"profile of steps 10-19 written to {self.path}")


def parse_args() -> argparse.Namespace:
    """The command line (see the module docs)."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--shape", default=None, choices=list(SHAPES))
    ap.add_argument("--prompts", type=int, default=120)
    ap.add_argument("--repeat-text", type=int, default=2, help="responses repeated 1..N times")
    ap.add_argument("--micro-batch-size", type=int, default=8)
    ap.add_argument("--token-budget", type=int, default=None)
    ap.add_argument("--max-length", type=int, default=2048)
    ap.add_argument("--bf16", action="store_true")
    ap.add_argument("--gradient-checkpointing", action="store_true")
    ap.add_argument("--lora-r", type=int, default=0)
    ap.add_argument("--liger-kernels", action="store_true")
    ap.add_argument("--compile", action="store_true")
    ap.add_argument("--model-dir", default=None, help="build the random-weight model here, or reuse the one there")
    ap.add_argument("--modes", default="padded,packed")
    ap.add_argument("--profile", default=None, metavar="FILE",
                    help="profile optimizer steps 10-19 of each mode with torch.profiler; tables to FILE.<mode>.txt")
    ap.add_argument("--data", action="append", default=None, metavar="FILE",
                    help="train on these prompts as they are (cheems rows, or {conversations, chosen, rejected} "
                         "pairs, JSON or JSONL; repeat for several files) instead of the drawn sample")
    ap.add_argument("--no-share-prefix", action="store_true",
                    help="packed rows hold every sequence whole (by default a prompt's shared tokens are laid "
                         "down once per row)")
    ap.add_argument("--threads", type=int, default=None,
                    help="torch's CPU threads (sets OMP_NUM_THREADS, which training heeds; default: the cores)")
    return ap.parse_args()


def main() -> None:
    from cheems.formats import read_prompts
    from cheems.graph import resolve_conflicts
    from cheems.training.config import TrainConfig
    from cheems.training.trainer import encode_training_data, read_training_prompts, train
    from cheems.models.checkpoints import load_tokenizer

    args = parse_args()
    if args.threads:
        os.environ["OMP_NUM_THREADS"] = str(args.threads)
    shape = args.shape or ("qwen2.5-0.5b" if args.device.startswith("cuda") else "small")
    if args.data:
        prompts = [p for f in args.data for p in read_pairs(Path(f))]
    else:
        sample = Path(__file__).resolve().parents[1] / "src/cheems/data/sample/annotations"
        prompts = read_prompts(sample / "open.jsonl").prompts + read_prompts(sample / "human.jsonl").prompts
        for p, rank in zip(prompts, resolve_conflicts(prompts).ranks):
            p.rank = rank
    peak, peak_text = device_peak(args.device)
    results, utilisation = {}, {}
    with tempfile.TemporaryDirectory() as d:
        d = Path(d)
        texts = [p.prompt_text for p in prompts] + [r.content for p in prompts for r in p.responses]
        model = build(Path(args.model_dir) if args.model_dir else d / "model", shape, texts, args.device)
        if args.data:
            write_rows(d / "train.jsonl", prompts)
        else:
            write_data(d / "train.jsonl", prompts, args.prompts, args.repeat_text)
        data = encode_training_data(read_training_prompts([str(d / "train.jsonl")]), load_tokenizer(str(model)),
                                    max_length=args.max_length, truncate=False)
        context = mean_context([n for _, _, n in data.items])
        real_tokens = sum(n for *_, n in data.items)
        factor = 2 if args.lora_r else 3
        source = ", ".join(args.data) if args.data else f"{args.prompts} drawn prompts"
        print(f"{shape} on {args.device}: {source}, {len(data.items)} sequences, "
              f"{sum(n for *_, n in data.items):,} tokens "
              f"(mean attended keys {context:,.0f}); micro batch {args.micro_batch_size}, "
              f"token budget {args.token_budget or 'default'}, bf16 {args.bf16}, LoRA r {args.lora_r}, "
              f"checkpointing {args.gradient_checkpointing}, liger {args.liger_kernels}, compile {args.compile}")
        print(f"FLOPs: {flops_formula(shape, context, factor)}; peak: {peak_text}")
        for mode in args.modes.split(","):
            config = TrainConfig(model=str(model), train=[str(d / "train.jsonl")], output=str(d / f"out-{mode}"),
                                 epochs=1, learning_rate=1e-5, micro_batch_size=args.micro_batch_size,
                                 gradient_accumulation=1, bf16=args.bf16, token_budget=args.token_budget,
                                 max_length=args.max_length, save_every=10 ** 9,
                                 gradient_checkpointing=args.gradient_checkpointing, lora_r=args.lora_r,
                                 packing=mode == "packed", liger_kernels=args.liger_kernels, compile=args.compile,
                                 share_prefix=not args.no_share_prefix)
            progress = Profiled(f"{args.profile}.{mode}.txt", args.device) if args.profile else None
            t, cpu = time.perf_counter(), time.process_time()
            s = train(config, progress=progress)
            wall, cpu = time.perf_counter() - t, time.process_time() - cpu
            results[mode] = s["tokens_per_s"]
            computed = s.get("computed_tokens_per_s") or s["tokens_per_s"]
            utilisation[mode] = mfu(shape, context, factor, computed, peak)
            shared = f" ({computed:,.0f} computed: shared prefixes once)" if computed < 0.999 * s["tokens_per_s"] else ""
            print(f"{mode:>6}: {s['tokens_per_s']:12,.0f} tokens/s{shared}  padding {s['padding_share']:6.1%}  "
                  f"MFU {utilisation[mode]:6.2%}  "
                  f"{s['steps']} steps ({real_tokens / s['steps']:,.0f} real tokens each), "
                  f"pair coverage {s['pair_coverage']:.1%}, loss {s['train_loss']:.4f}, "
                  f"wall {wall:.1f} s, CPU {cpu:.1f} s")
    goal = mfu_goal_line("train-lora" if args.lora_r else "train", shape, args.device,
                         max(utilisation.values(), default=0.0))
    if goal:
        print(goal)
    if "packed" in results and "padded" in results:
        ratio = results["packed"] / results["padded"]
        print(f"packed / padded: {ratio:.2f}x tokens/s")
        if args.data:
            print(f"goal: packed >= {GOAL:.1f}x padded on real pairs of very different lengths: "
                  f"{'meets' if ratio >= GOAL else 'misses'} ({ratio:.2f}x)")


if __name__ == "__main__":
    main()
