"""Reward-model scoring throughput: right-padded batches, packed rows, and packed rows with each
prompt's shared prefix laid down once, on the same model and conversations in one run; tokens/s,
padding share, MFU (see mfu.py for the FLOP count) and the largest score difference to the
padded run. Optionally one sequence at a time (the official evaluator's way) too.

Usage:
  python benchmarks/bench_scoring.py                                  # CPU, tiny model, 400 prompts
  python benchmarks/bench_scoring.py --cheemsbench                    # 2,492 prompts x 5 responses
  python benchmarks/bench_scoring.py --device cuda --shape qwen2.5-0.5b --cheemsbench
  python benchmarks/bench_scoring.py --device cuda --shape qwen2.5-7b --cheemsbench --modes shared
The conversations: prompts drawn from the bundled sample, each with --responses responses of
about --chars Chinese characters cut from the sample's responses. tokens/s counts every
conversation's tokens whole (what the scores cover), timed end to end through
`score_prompts` (encoding included); MFU is on those tokens, so sharing a prefix counts the
tokens it saves as done.
"""

from __future__ import annotations

import argparse
import itertools
import random
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from mfu import (SHAPES, build, device_peak, flops_formula, mean_context, mfu,  # noqa: E402
                 profile_tables, profiler_activities)

MODES = {"padded": dict(packing=False), "packed": dict(packing=True, share_prefix=False),
         "shared": dict(packing=True, share_prefix=True)}


def benchmark_prompts(sample, n_prompts: int, n_responses: int, chars: int, seed: int = 0):
    """``n_prompts`` prompts of the sample (repeated with new ids), each with ``n_responses``
    responses of about ``chars`` characters stitched from the sample's responses."""
    from cheems.records import Prompt, Response

    rng = random.Random(seed)
    pool = "".join(r.content for p in sample for r in p.responses)
    out = []
    for i in range(n_prompts):
        base = rng.choice(sample)
        responses = []
        for k in range(n_responses):
            length = max(20, int(rng.gauss(chars, chars / 4)))
            start = rng.randrange(0, len(pool) - length)
            responses.append(Response(id=f"r{k}", content=pool[start:start + length]))
        out.append(Prompt(id=f"{base.id}-{i}", prompt=base.prompt, responses=responses))
    return out


def timed(fn, device: str):
    import torch

    if device.startswith("cuda"):
        torch.cuda.synchronize()
    t = time.perf_counter()
    result = fn()
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    return result, time.perf_counter() - t


def main() -> None:
    from cheems.formats import read_prompts
    from cheems.models.packing import packed_cost
    from cheems.scoring.transformers_rm import load_reward_model, score_prompts

    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--shape", default=None, choices=list(SHAPES))
    ap.add_argument("--prompts", type=int, default=400)
    ap.add_argument("--cheemsbench", action="store_true", help="2,492 prompts x 5 responses of ~450 characters")
    ap.add_argument("--responses", type=int, default=5)
    ap.add_argument("--chars", type=int, default=450)
    ap.add_argument("--token-budget", type=int, default=None)
    ap.add_argument("--batch-size", type=int, default=256)
    ap.add_argument("--model-dir", default=None, help="build the random-weight model here, or reuse the one there")
    ap.add_argument("--modes", default="padded,packed,shared")
    ap.add_argument("--liger-kernels", action="store_true", help="Liger's fused kernels in every mode (CUDA)")
    ap.add_argument("--alone", type=int, default=0, help="also score the first N one at a time")
    ap.add_argument("--profile", default=None, metavar="FILE",
                    help="also profile scoring the first 300 prompts with torch.profiler; tables to FILE.<mode>.txt")
    args = ap.parse_args()
    if args.cheemsbench:
        args.prompts, args.responses, args.chars = 2492, 5, 450
    shape = args.shape or ("qwen2.5-0.5b" if args.device.startswith("cuda") else "tiny")
    annotations = Path(__file__).resolve().parents[1] / "src/cheems/data/sample/annotations"
    sample = read_prompts(annotations / "open.jsonl").prompts + read_prompts(annotations / "human.jsonl").prompts
    prompts = benchmark_prompts(sample, args.prompts, args.responses, args.chars)
    peak, peak_text = device_peak(args.device)
    with tempfile.TemporaryDirectory() as d:
        texts = [p.prompt_text for p in sample] + [r.content for p in sample for r in p.responses]
        folder = build(Path(args.model_dir) if args.model_dir else Path(d) / "model", shape, texts, args.device)
        models = {mode: load_reward_model(folder, device=args.device, max_length=4096,
                                          liger_kernels=args.liger_kernels, **MODES[mode])
                  for mode in args.modes.split(",")}
    any_rm = next(iter(models.values()))
    _, one_by_one = timed(lambda: [any_rm.encode(p.prompt, r.content) for p in prompts for r in p.responses], "cpu")
    flat, encode_wall = timed(lambda: any_rm.encode_many([(p.prompt, r.content) for p in prompts
                                                           for r in p.responses]), "cpu")
    ends = list(itertools.accumulate(len(p.responses) for p in prompts))
    encoded = [flat[lo:hi] for lo, hi in zip([0] + ends, ends)]
    lengths = [len(s) for seqs in encoded for s in seqs]
    tokens = sum(lengths)
    shared_tokens = sum(packed_cost(seqs, True) for seqs in encoded)
    context = mean_context(lengths)
    budget = any_rm.token_budget(args.token_budget)
    print(f"{shape} on {args.device} ({any_rm.model.dtype}, liger {args.liger_kernels}): {len(prompts):,} prompts, "
          f"{len(lengths):,} conversations, {tokens:,} tokens (mean {tokens / len(lengths):,.0f}); a shared prefix "
          f"leaves "
          f"{shared_tokens:,} ({1 - shared_tokens / tokens:.1%} fewer); token budget {budget}, batch size "
          f"{args.batch_size}; encoding them takes {encode_wall:.2f} s in chunks ({one_by_one:.2f} s one by one)")
    print(f"FLOPs: {flops_formula(shape, context, 1)}; peak: {peak_text}")
    reference, results = None, {}
    for mode, rm in models.items():
        score_prompts(rm, prompts[:4], token_budget=args.token_budget, batch_size=args.batch_size)  # warm-up
        rows, wall = timed(lambda: [x for b in score_prompts(rm, prompts, token_budget=args.token_budget,
                                                             batch_size=args.batch_size) for x in b], args.device)
        scores = {(pid, rid): s for pid, rid, s in rows}
        reference = reference or scores
        diff = max(abs(scores[k] - reference[k]) for k in reference)
        padding = _padding_share(lengths, budget, args.batch_size) if mode == "padded" else 0.0
        results[mode] = tokens / wall
        print(f"{mode:>7}: {wall:8.2f} s  {tokens / wall:12,.0f} tokens/s  padding {padding:6.1%}  "
              f"MFU {mfu(shape, context, 1, tokens / wall, peak):6.2%}  max |score diff| {diff:.1e}")
    if args.profile:
        for mode, rm in models.items():
            _profile(lambda: [x for b in score_prompts(rm, prompts[:300], token_budget=args.token_budget,
                                                       batch_size=args.batch_size) for x in b],
                     f"{args.profile}.{mode}.txt", args.device)
    if args.alone:
        rm = next(iter(models.values()))
        seqs = [s for ss in encoded for s in ss][:args.alone]
        _, wall = timed(lambda: [rm.score_ids([s]) for s in seqs], args.device)
        n = sum(map(len, seqs))
        results["alone"] = n / wall
        print(f"  alone: {wall:8.2f} s  {n / wall:12,.0f} tokens/s  (first {len(seqs)} conversations)")
    base = results.get("padded")
    if base:
        print("vs padded: " + ", ".join(f"{m} {v / base:.2f}x" for m, v in results.items() if m != "padded"))


def _profile(fn, path: str, device: str) -> None:
    """Run ``fn`` under torch.profiler, then under cProfile; write the operators by device
    time and by host time, and the Python functions by their own time."""
    import cProfile
    import io
    import pstats

    import torch

    with torch.profiler.profile(activities=profiler_activities(device)) as prof:
        timed(fn, device)
    python = cProfile.Profile()
    python.runcall(timed, fn, device)
    text = io.StringIO()
    pstats.Stats(python, stream=text).sort_stats("tottime").print_stats(30)
    Path(path).write_text(profile_tables(prof, device) + "\n" + text.getvalue(), encoding="utf-8")
    print(f"profile written to {path}")


def _padding_share(lengths, budget: int, batch_size: int) -> float:
    from cheems.models.sequences import plan_batches

    plan = plan_batches(lengths, token_budget=budget, max_batch_size=batch_size)
    return 1 - sum(lengths) / sum(max(lengths[i] for i in b) * len(b) for b in plan)


if __name__ == "__main__":
    main()
