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
The data is the bundled sample's prompts, each drawn again and again as a prompt of its own
(a number added to its text) with its responses (each repeated 1..--repeat-text times, to
reach realistic lengths) so the run is long enough to time; one epoch, one forward
batch per optimizer step, no evaluation or checkpoints inside the timed loop. tokens/s counts
real tokens (padding excluded) over the training loop's wall time.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from mfu import (SHAPES, build, device_peak, flops_formula, mean_context, mfu,  # noqa: E402
                 profile_tables, profiler_activities)


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


def main() -> None:
    from cheems.formats import read_prompts
    from cheems.graph import resolve_conflicts
    from cheems.training.config import TrainConfig
    from cheems.training.trainer import encode_training_data, read_training_prompts, train
    from cheems.models.checkpoints import load_tokenizer

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
    args = ap.parse_args()
    shape = args.shape or ("qwen2.5-0.5b" if args.device.startswith("cuda") else "small")
    sample = Path(__file__).resolve().parents[1] / "src/cheems/data/sample/annotations"
    prompts = read_prompts(sample / "open.jsonl").prompts + read_prompts(sample / "human.jsonl").prompts
    for p, rank in zip(prompts, resolve_conflicts(prompts).ranks):
        p.rank = rank
    peak, peak_text = device_peak(args.device)
    results = {}
    with tempfile.TemporaryDirectory() as d:
        d = Path(d)
        texts = [p.prompt_text for p in prompts] + [r.content for p in prompts for r in p.responses]
        model = build(Path(args.model_dir) if args.model_dir else d / "model", shape, texts, args.device)
        write_data(d / "train.jsonl", prompts, args.prompts, args.repeat_text)
        data = encode_training_data(read_training_prompts([str(d / "train.jsonl")]), load_tokenizer(str(model)),
                                    max_length=args.max_length, truncate=False)
        context = mean_context([n for _, _, n in data.items])
        factor = 2 if args.lora_r else 3
        print(f"{shape} on {args.device}: {args.prompts} prompts, {len(data.items)} sequences, "
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
                                 packing=mode == "packed", liger_kernels=args.liger_kernels, compile=args.compile)
            progress = Profiled(f"{args.profile}.{mode}.txt", args.device) if args.profile else None
            t = time.perf_counter()
            s = train(config, progress=progress)
            wall = time.perf_counter() - t
            results[mode] = s["tokens_per_s"]
            print(f"{mode:>6}: {s['tokens_per_s']:12,.0f} tokens/s  padding {s['padding_share']:6.1%}  "
                  f"MFU {mfu(shape, context, factor, s['tokens_per_s'], peak):6.2%}  "
                  f"{s['steps']} steps, pair coverage {s['pair_coverage']:.1%}, loss {s['train_loss']:.4f}, "
                  f"wall {wall:.1f} s")
    if "packed" in results and "padded" in results:
        print(f"packed / padded: {results['packed'] / results['padded']:.2f}x tokens/s")


if __name__ == "__main__":
    main()
