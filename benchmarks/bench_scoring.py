"""Reward-model scoring throughput: right-padded batches, packed rows, and packed rows with each
prompt's shared prefix laid down once, on the same model and conversations in one run; tokens/s,
padding share, MFU (see mfu.py for the FLOP count) and the largest score difference to the
padded run. Beside them, as a peer, the loop a user writes by hand with plain `transformers`
("transformers": AutoModelForSequenceClassification, the tokenizer's chat template and
padding, a fixed --plain-batch-size in the input order, the logit at each sequence's last
real token, which the model's own pooling picks), and each mode's speed over it. Optionally
one sequence at a time (the official evaluator's way) too.

Usage:
  python benchmarks/bench_scoring.py                                  # CPU, tiny model, 400 prompts
  python benchmarks/bench_scoring.py --cheemsbench                    # 2,492 prompts x 5 responses
  python benchmarks/bench_scoring.py --device cuda --shape qwen2.5-0.5b --cheemsbench
  python benchmarks/bench_scoring.py --device cuda --shape qwen2.5-7b --cheemsbench --modes shared
  python benchmarks/bench_scoring.py --device cuda --modes shared --compile --fixed-shapes
The conversations: prompts drawn from the bundled sample, each with --responses responses of
about --chars Chinese characters cut from the sample's responses. tokens/s counts every
conversation's tokens whole (what the scores cover), timed end to end (encoding included:
`score_prompts` for cheems' modes, tokenizing each batch for the transformers loop). The
shared mode computes fewer tokens than that: each prompt's common prefix once (the
"computed" tokens, if a prompt's responses share a batch); the prefix tokens it does not
recompute are reported apart ("prefill-shared"), its row gives tokens/s of the computed
tokens beside that of all tokens, and its MFU is on the computed tokens, with their own
mean context (`mfu.shared_prefix_context`). Every other mode's MFU is on all tokens.
With --fixed-shapes the packed modes pad each row to one of a few lengths (what --compile
then compiles once each); the padding tokens they add are reported as a share of the tokens the
rows computed (padding included), in the padding column and apart.
"""

from __future__ import annotations

import argparse
import itertools
import random
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from mfu import (SHAPES, build, device_peak, flops_formula, mean_context, mfu, mfu_goal_line,  # noqa: E402
                 profile_tables, profiler_activities, shared_prefix_context)

MODES = {"padded": dict(packing=False), "packed": dict(packing=True, share_prefix=False),
         "shared": dict(packing=True, share_prefix=True)}
PLAIN = "transformers"  # the peer: a hand-written padded loop over plain transformers


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


def parse_args():
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--shape", default=None, choices=list(SHAPES))
    ap.add_argument("--prompts", type=int, default=400)
    ap.add_argument("--cheemsbench", action="store_true", help="2,492 prompts x 5 responses of ~450 characters")
    ap.add_argument("--responses", type=int, default=5)
    ap.add_argument("--chars", type=int, default=450)
    ap.add_argument("--token-budget", type=int, default=None)
    ap.add_argument("--batch-size", type=int, default=256)
    ap.add_argument("--plain-batch-size", type=int, default=32, help="the transformers loop's fixed batch size")
    ap.add_argument("--model-dir", default=None, help="build the random-weight model here, or reuse the one there")
    ap.add_argument("--modes", default=f"padded,packed,shared,{PLAIN}",
                    help=f"any of {', '.join(MODES)} (cheems) and {PLAIN} (the plain loop)")
    ap.add_argument("--liger-kernels", action="store_true", help="Liger's fused kernels in every cheems mode (CUDA)")
    ap.add_argument("--compile", action="store_true", help="torch.compile each decoder layer in every cheems mode "
                    "(the first batches compile; the timing includes them, as a run would)")
    ap.add_argument("--fixed-shapes", action="store_true", help="pad every packed row to one of a few lengths "
                    "in every cheems packed mode (static shapes for --compile)")
    ap.add_argument("--alone", type=int, default=0, help="also score the first N one at a time")
    ap.add_argument("--profile", default=None, metavar="FILE",
                    help="also profile scoring the first 300 prompts with torch.profiler; tables to FILE.<mode>.txt")
    args = ap.parse_args()
    if args.cheemsbench:
        args.prompts, args.responses, args.chars = 2492, 5, 450
    args.shape = args.shape or ("qwen2.5-0.5b" if args.device.startswith("cuda") else "tiny")
    return args


def main() -> None:
    from cheems.formats import read_prompts
    from cheems.models.packing import common_prefix, packed_cost
    from cheems.scoring.transformers_rm import load_reward_model, score_prompts

    args = parse_args()
    shape, modes = args.shape, args.modes.split(",")
    annotations = Path(__file__).resolve().parents[1] / "src/cheems/data/sample/annotations"
    sample = read_prompts(annotations / "open.jsonl").prompts + read_prompts(annotations / "human.jsonl").prompts
    prompts = benchmark_prompts(sample, args.prompts, args.responses, args.chars)
    peak, peak_text = device_peak(args.device)
    with tempfile.TemporaryDirectory() as d:
        texts = [p.prompt_text for p in sample] + [r.content for p in sample for r in p.responses]
        folder = build(Path(args.model_dir) if args.model_dir else Path(d) / "model", shape, texts, args.device)
        models = {mode: load_reward_model(folder, device=args.device, max_length=4096,
                                          liger_kernels=args.liger_kernels, compile=args.compile,
                                          fixed_shapes=args.fixed_shapes, **MODES[mode])
                  for mode in modes if mode != PLAIN}
        any_rm = next(iter(models.values()), None) or load_reward_model(folder, device="cpu", max_length=4096)
        plain = PlainLoop(folder, args.device, args.plain_batch_size) if PLAIN in modes else None
    _, one_by_one = timed(lambda: [any_rm.encode(p.prompt, r.content) for p in prompts for r in p.responses], "cpu")
    flat, encode_wall = timed(lambda: any_rm.encode_many([(p.prompt, r.content) for p in prompts
                                                           for r in p.responses]), "cpu")
    ends = list(itertools.accumulate(len(p.responses) for p in prompts))
    encoded = [flat[lo:hi] for lo, hi in zip([0] + ends, ends)]
    lengths = [len(s) for seqs in encoded for s in seqs]
    tokens = sum(lengths)
    computed = sum(packed_cost(seqs, True) for seqs in encoded)
    context = mean_context(lengths)
    figures = Figures(shape, peak, tokens, context, computed,
                      shared_prefix_context([(common_prefix(seqs), [len(s) for s in seqs]) for seqs in encoded]))
    budget = args.token_budget or any_rm.token_budget
    print(f"{shape} on {args.device} ({any_rm.model.dtype}, liger {args.liger_kernels}, compile {args.compile}, "
          f"fixed shapes {args.fixed_shapes}): {len(prompts):,} prompts, "
          f"{len(lengths):,} conversations, {tokens:,} tokens (mean {tokens / len(lengths):,.0f}); a shared prefix "
          f"computes {computed:,} of them and leaves {tokens - computed:,} prefill-shared "
          f"({1 - computed / tokens:.1%}); token budget {budget}, batch size {args.batch_size} "
          f"(transformers loop: {args.plain_batch_size}); encoding them takes {encode_wall:.2f} s in chunks "
          f"({one_by_one:.2f} s one by one)")
    print(f"FLOPs: {flops_formula(shape, context, 1)}; shared mode, on computed tokens: "
          f"{flops_formula(shape, figures.shared_context, 1)}; peak: {peak_text}")
    results = score_modes(args, models, plain, prompts, lengths, budget, figures)
    if args.profile:
        for mode, rm in models.items():
            _profile(lambda: [x for b in score_prompts(rm, prompts[:300], token_budget=args.token_budget,
                                                       batch_size=args.batch_size) for x in b],
                     f"{args.profile}.{mode}.txt", args.device)
    if args.alone:
        seqs = [s for ss in encoded for s in ss][:args.alone]
        _, wall = timed(lambda: [any_rm.score_ids([s]) for s in seqs], args.device)
        n = sum(map(len, seqs))
        results["alone"] = n / wall
        print(f"{'alone':>12}: {wall:8.2f} s  {n / wall:12,.0f} tokens/s  (first {len(seqs)} conversations)")
    for base in ("padded", PLAIN):
        if base in results:
            print(f"vs {base}: " + ", ".join(f"{m} {v / results[base]:.2f}x" for m, v in results.items() if m != base))


@dataclass
class Figures:
    """What the rows are measured against: the model shape and device peak, all tokens and
    their mean context, and the shared mode's computed tokens and their mean context."""

    shape: str
    peak: float
    tokens: int
    context: float
    computed: int
    shared_context: float


def score_modes(args, models: dict, plain, prompts, lengths, budget: int, figures: Figures) -> dict:
    """Score ``prompts`` in each mode of ``args.modes`` (after a small warm-up), print its row,
    and return its tokens/s (all tokens) by mode. The largest score difference is to the first
    mode's scores."""
    from cheems.scoring.transformers_rm import RowStats, score_prompts

    reference, results, utilisation, f = None, {}, {}, figures
    for mode in args.modes.split(","):
        if mode == PLAIN:
            def run(some):
                return plain.score(some)
        else:
            def run(some, rm=models[mode]):
                return [x for b in score_prompts(rm, some, token_budget=args.token_budget,
                                                 batch_size=args.batch_size) for x in b]
        run(prompts[:4])  # warm-up
        if plain is not None:
            plain.real = plain.padded = 0
        if mode in models:
            models[mode].row_stats = RowStats()  # the timed run's rows only
        rows, wall = timed(lambda: run(prompts), args.device)  # noqa: B023  (called at once)
        scores = {(pid, rid): s for pid, rid, s in rows}
        reference = reference or scores
        diff = max(abs(scores[k] - reference[k]) for k in reference)
        padding = (_padding_share(lengths, budget, args.batch_size) if mode == "padded"
                   else 1 - plain.real / plain.padded if mode == PLAIN else _fixed_padding(models[mode])[1])
        results[mode] = f.tokens / wall
        if mode == "shared":  # computed tokens apart from the prefix tokens it did not recompute
            utilisation[mode] = mfu(f.shape, f.shared_context, 1, f.computed / wall, f.peak)
            efficiency = (f"computed {f.computed / wall:,.0f} tokens/s (+{(f.tokens - f.computed) / wall:,.0f} "
                          f"prefill-shared)  MFU on computed {utilisation[mode]:6.2%}")
        else:
            utilisation[mode] = mfu(f.shape, f.context, 1, f.tokens / wall, f.peak)
            efficiency = f"MFU {utilisation[mode]:6.2%}"
        line = (f"{mode:>12}: {wall:8.2f} s  {f.tokens / wall:12,.0f} tokens/s  padding {padding:6.1%}  "
                f"{efficiency}  max |score diff| {diff:.1e}")
        if args.fixed_shapes and mode in models and models[mode].packing:
            added, share = _fixed_padding(models[mode])
            line += f"  fixed shapes: +{added:,} padding tokens ({share:.1%} of computed)"
        print(line)
    goal = mfu_goal_line("score", f.shape, args.device,
                         max((u for m, u in utilisation.items() if m != PLAIN), default=0.0))
    if goal:
        print(goal + " (the best cheems mode)")
    return results


class PlainLoop:
    """The scoring loop a user writes with plain transformers: the checkpoint loaded with
    AutoModelForSequenceClassification (its saved dtype: bfloat16 on CUDA here, float32 on a
    CPU), each (prompt, response) rendered with the tokenizer's chat template, batches of a
    fixed size in the input order padded on the right, and the logit at each sequence's last
    real token (the model's pooling finds it from the pad token). Counts the real and padded
    tokens it runs."""

    def __init__(self, folder, device: str, batch_size: int, max_length: int = 4096):
        import torch
        from transformers import AutoModelForSequenceClassification, AutoTokenizer

        self.torch, self.device, self.batch_size, self.max_length = torch, device, batch_size, max_length
        self.tokenizer = AutoTokenizer.from_pretrained(folder, padding_side="right")
        self.model = AutoModelForSequenceClassification.from_pretrained(folder, dtype="auto").to(device).eval()
        self.real = self.padded = 0

    def score(self, prompts) -> list[tuple[str, str, float]]:
        """``(prompt id, response id, score)`` of every response of ``prompts``, in order."""
        keys, texts = [], []
        for p in prompts:
            messages = [{"role": "user", "content": p.prompt}] if isinstance(p.prompt, str) else list(p.prompt)
            for r in p.responses:
                keys.append((p.id, r.id))
                texts.append(self.tokenizer.apply_chat_template(
                    messages + [{"role": "assistant", "content": r.content}], tokenize=False))
        scores = []
        for start in range(0, len(texts), self.batch_size):
            batch = self.tokenizer(texts[start:start + self.batch_size], padding=True, truncation=True,
                                   max_length=self.max_length, return_tensors="pt").to(self.device)
            self.real += int(batch["attention_mask"].sum())
            self.padded += batch["attention_mask"].numel()
            with self.torch.inference_mode():
                scores.extend(self.model(**batch).logits[:, 0].float().tolist())
        return [(pid, rid, s) for (pid, rid), s in zip(keys, scores)]


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


def _fixed_padding(rm) -> tuple[int, float]:
    """The padding tokens fixed shapes added to ``rm``'s packed rows, and their share of the
    tokens the rows computed (padding included)."""
    stats = rm.row_stats
    return stats.padding_tokens, stats.padding_tokens / max(1, stats.row_tokens)


def _padding_share(lengths, budget: int, batch_size: int) -> float:
    from cheems.models.sequences import plan_batches

    plan = plan_batches(lengths, token_budget=budget, max_batch_size=batch_size)
    return 1 - sum(lengths) / sum(max(lengths[i] for i in b) * len(b) for b in plan)


if __name__ == "__main__":
    main()
