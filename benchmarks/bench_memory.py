"""GPU memory and the token budget: what `cheems train` does with a budget too large, and what
`--token-budget auto` finds, through the real command line (a subprocess each, as a user runs it).

The data: the bundled sample's prompts, each drawn again and again as a prompt of its own with
its responses repeated up to --repeat-text times (long sequences), as bench_train.py makes it.
For each budget given (--budgets, default "65536 auto") one `cheems train` run of one epoch:
it either trains (tokens/s from its summary, the peak GPU memory from the run's own report) or
ends in the one-line out-of-memory error; a traceback in its output is reported as a failure.
For `auto` the budget it found is printed (its note line).

Usage:
  python benchmarks/bench_memory.py --device cuda --shape qwen2.5-0.5b --bf16
  python benchmarks/bench_memory.py                      # CPU, tiny: auto is the default budget there
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_train import write_data  # noqa: E402
from mfu import SHAPES, build, device_peak, mean_context, mfu  # noqa: E402


def train_once(folder: Path, data: Path, out: Path, budget: str, args) -> dict:
    cmd = [sys.executable, "-m", "cheems.cli", "train", "--model", str(folder), "--train", str(data),
           "--output", str(out), "--epochs", "1", "--gradient-accumulation", "1",
           "--micro-batch-size", str(args.micro_batch_size), "--max-length", str(args.max_length),
           "--token-budget", budget, "--learning-rate", "1e-5", "--save-every", "100000"]
    if args.bf16:
        cmd.append("--bf16")
    if args.liger_kernels:
        cmd.append("--liger-kernels")
    start = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    wall = time.perf_counter() - start
    said = done.stdout + done.stderr
    summary_file = out / "train_summary.json"
    summary = json.loads(summary_file.read_text(encoding="utf-8")) if done.returncode == 0 and \
        summary_file.exists() else {}
    return {"budget": budget, "rc": done.returncode, "wall": wall, "summary": summary,
            "traceback": "Traceback" in said,
            "oom_line": next((x for x in said.splitlines() if "out of GPU memory" in x), None),
            "auto_line": next((x for x in said.splitlines() if x.startswith("token budget auto")), None),
            "tail": said.strip().splitlines()[-3:]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--shape", default=None, choices=list(SHAPES))
    ap.add_argument("--prompts", type=int, default=60)
    ap.add_argument("--repeat-text", type=int, default=12, help="responses repeated 1..N times (long sequences)")
    ap.add_argument("--micro-batch-size", type=int, default=256)
    ap.add_argument("--max-length", type=int, default=4096)
    ap.add_argument("--budgets", default="65536 auto", help="budgets to run, space-separated")
    ap.add_argument("--bf16", action="store_true")
    ap.add_argument("--liger-kernels", action="store_true")
    ap.add_argument("--model-dir", default=None)
    args = ap.parse_args()
    cuda = args.device.startswith("cuda")
    shape = args.shape or ("qwen2.5-0.5b" if cuda else "tiny")
    from cheems.formats import read_prompts

    sample = Path(__file__).resolve().parents[1] / "src/cheems/data/sample/annotations/open.jsonl"
    from cheems.graph import resolve_conflicts

    prompts = read_prompts(sample).prompts
    for p, rank in zip(prompts, resolve_conflicts(prompts).ranks):
        p.rank = rank
    with tempfile.TemporaryDirectory() as d:
        data = Path(d) / "train.jsonl"
        write_data(data, prompts, args.prompts, args.repeat_text)
        texts = [r.content for p in prompts for r in p.responses]
        folder = build(Path(args.model_dir) if args.model_dir else Path(d) / "model", shape, texts, args.device)
        peak, source = device_peak(args.device) if cuda else (None, "")
        print(f"{shape} on {args.device}: {args.prompts} prompts, micro batch {args.micro_batch_size}, "
              f"max length {args.max_length}{', bf16' if args.bf16 else ''}")
        clean = []  # per budget: it trained, or ended in the one-line message, no traceback
        for budget in args.budgets.split():
            r = train_once(folder, data, Path(d) / f"run-{budget}", budget, args)
            s = r["summary"]
            clean.append((r["rc"] == 0 or bool(r["oom_line"])) and not r["traceback"])
            if r["rc"] == 0:
                tps = s.get("tokens_per_s") or 0.0
                util = f", MFU {mfu(shape, mean_context([args.max_length // 4]), 3, tps, peak):.1%} (rough: " \
                       f"context taken as a quarter of max length)" if cuda and tps else ""
                print(f"--token-budget {budget}: trained {s.get('steps')} steps in {r['wall']:.1f} s, "
                      f"{tps:,.0f} tokens/s{util}")
            elif r["oom_line"]:
                print(f"--token-budget {budget}: ended in the one-line message (exit {r['rc']}): {r['oom_line']}")
            else:
                print(f"--token-budget {budget}: FAILED (exit {r['rc']}): {' | '.join(r['tail'])}")
            if r["auto_line"]:
                print(f"   {r['auto_line']}")
            if r["traceback"]:
                print("   FAILED: a traceback in the output")
        if cuda:
            print(f"peak: {source}")
            print(f"goal: every budget (64k at 0.5B among them) trains or ends in the one-line message, never a "
                  f"traceback: {'meets' if all(clean) else 'misses'}")


if __name__ == "__main__":
    main()
