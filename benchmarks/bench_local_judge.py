"""Throughput of the local generative judge (`cheems eval --judge-model`) against the plain way,
on the same model and the same judge prompts in one run; pairs/s (each pair judged in both
orders), tokens/s, MFU (see mfu.py for the FLOP count) and the largest difference between the
two ways' verdict probabilities.

Usage:
  python benchmarks/bench_local_judge.py --quick                        # CPU, tiny model
  python benchmarks/bench_local_judge.py                                # CPU, small model
  python benchmarks/bench_local_judge.py --device cuda --shape qwen2.5-0.5b --pairs 2000 \
      --batch-size 256 --token-budget 32768 --plain-pairs 200

- local judge: `LocalJudge.verdict_probabilities` over every judge prompt at once (encoding
  included): batches planned under --token-budget and --batch-size, packed into one row with
  each prompt's common prefix laid down once, the LM head applied to the verdict tokens' rows
  at each sequence's last position only.
- plain: one judge prompt at a time, rendered with the tokenizer's chat template (generation
  prompt added) and run through transformers' `model.generate(max_new_tokens=1,
  do_sample=False, output_scores=True, return_dict_in_generate=True)`; the verdict
  probabilities are the softmax over the verdict tokens of `scores[0]`, as the judge defines
  them (the first --plain-pairs pairs; all of them by default).

The data: prompts of the bundled sample, each with 4 responses of about --chars Chinese
characters cut from the sample's responses, ranked (6 pairs a prompt); the first --pairs pairs,
each shown as (better, worse) and as (worse, better). The model: a random-weight Qwen2 causal
LM of --shape with a tokenizer trained on the sample, the built-in Chinese judge template.
Both ways run in --dtype (float32 on CPU, bfloat16 on CUDA by default): in float32 the
probabilities must agree within 1e-4, in bfloat16 within 2e-2 (the rounding of a bf16 forward,
whose attention kernels differ between the two ways). tokens/s counts every judge prompt's
tokens whole, so sharing a prefix counts the tokens it saves as done (as bench_scoring does);
both ways are credited the same FLOPs per pair.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_objectives import build_models, ranked_rows, sample_prompts  # noqa: E402
from mfu import SHAPES, device_peak, flops_formula, mean_context, mfu  # noqa: E402

import numpy as np  # noqa: E402

TOLERANCE = {"float32": 1e-4, "bfloat16": 2e-2}


def judge_items(rows: list[dict], n_pairs: int) -> list[tuple]:
    """Both orders of the first ``n_pairs`` ranked pairs of ``rows``: [(prompt, a, b), ...],
    (better, worse) then (worse, better) for each pair."""
    items = []
    for row in rows:
        by_rank = sorted(row["responses"], key=lambda r: row["rank"][r["id"]])
        for i in range(len(by_rank)):
            for j in range(i + 1, len(by_rank)):
                if len(items) == 2 * n_pairs:
                    return items
                better, worse = by_rank[i]["content"], by_rank[j]["content"]
                items += [(row["prompt"], better, worse), (row["prompt"], worse, better)]
    return items


def timed(fn, device: str):
    import torch

    if device.startswith("cuda"):
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    t = time.perf_counter()
    result = fn()
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    return result, time.perf_counter() - t


def plain_probabilities(model, tokenizer, template, verdict_ids: list[int], items, device: str):
    """(n, 2) verdict probabilities (A, B), one judge prompt at a time through ``model.generate``."""
    import torch

    verdict_ids = verdict_ids[:len(template.letters(False))]
    rows = []
    for prompt, a, b in items:
        text = tokenizer.apply_chat_template(template.messages(prompt, a, b, ties=False), tokenize=False,
                                             add_generation_prompt=True)
        enc = tokenizer(text, return_tensors="pt").to(device)
        out = model.generate(**enc, max_new_tokens=1, do_sample=False, output_scores=True,
                             return_dict_in_generate=True, pad_token_id=tokenizer.pad_token_id)
        z = out.scores[0][0, verdict_ids].double()
        rows.append(torch.softmax(z, dim=0).cpu().numpy())
    return rows


def plain_ids(tokenizer, template, items) -> list[list[int]]:
    """The token ids the plain way runs (its chat-template rendering), to compare with the judge's."""
    texts = [tokenizer.apply_chat_template(template.messages(p, a, b, ties=False), tokenize=False,
                                           add_generation_prompt=True) for p, a, b in items]
    return tokenizer(texts)["input_ids"]


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--shape", default=None, choices=list(SHAPES))
    ap.add_argument("--pairs", type=int, default=200, help="pairs judged (each in both orders)")
    ap.add_argument("--plain-pairs", type=int, default=None, help="pairs the plain way judges (default: all)")
    ap.add_argument("--chars", type=int, default=300, help="characters of a response, about")
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--token-budget", type=int, default=None)
    ap.add_argument("--dtype", default=None, choices=list(TOLERANCE), help="float32 on CPU, bfloat16 on CUDA")
    ap.add_argument("--max-length", type=int, default=8192)
    ap.add_argument("--model-dir", default=None, help="build the random-weight model here, or reuse the one there")
    ap.add_argument("--quick", action="store_true",
                    help="tiny model, 12 pairs of ~80-character responses (unless given)")
    if "--quick" in sys.argv[1:]:  # other flags given still win
        ap.set_defaults(shape="tiny", pairs=12, chars=80)
    args = ap.parse_args()
    cuda = args.device.startswith("cuda")
    args.shape = args.shape or ("qwen2.5-0.5b" if cuda else "small")
    args.dtype = args.dtype or ("bfloat16" if cuda else "float32")
    return args


def load_both(args, sample):
    """``(judge, plain model)``: the random-weight causal LM of ``args.shape`` loaded as a
    `LocalJudge` and as a plain ``AutoModelForCausalLM``, both in ``args.dtype``."""
    import torch
    from transformers import AutoModelForCausalLM

    from cheems.scoring.local_judge import load_local_judge
    from cheems.scoring.model_settings import ModelSettings

    with tempfile.TemporaryDirectory() as d:
        texts = [p.prompt_text for p in sample] + [r.content for p in sample for r in p.responses]
        folder, _ = build_models(Path(args.model_dir) if args.model_dir else Path(d), args.shape, texts, args.device,
                                 scalar_too=False)
        settings = ModelSettings(device=args.device, dtype=args.dtype, max_length=args.max_length,
                                 batch_size=args.batch_size, token_budget=args.token_budget)
        judge = load_local_judge(folder, settings, language="zh")
        plain = AutoModelForCausalLM.from_pretrained(folder, dtype=getattr(torch, args.dtype)).to(args.device).eval()
    return judge, plain


def measure(judge, plain, items, n_plain: int, args) -> dict:
    """Both ways timed (each after a warm-up): their probabilities, walls and GPU peaks."""
    import torch

    cuda = args.device.startswith("cuda")
    shown = (judge.tokenizer, judge.template, judge.verdict_ids)
    with torch.inference_mode():
        judge.verdict_probabilities(items[:4], False, token_budget=args.token_budget, batch_size=args.batch_size)
        fast, fast_wall = timed(lambda: judge.verdict_probabilities(items, False, token_budget=args.token_budget,
                                                                    batch_size=args.batch_size), args.device)
        fast_memory = torch.cuda.max_memory_allocated() if cuda else None
        plain_probabilities(plain, *shown, items[:2], args.device)
        slow, slow_wall = timed(lambda: plain_probabilities(plain, *shown, items[:2 * n_plain], args.device),
                                args.device)
        slow_memory = torch.cuda.max_memory_allocated() if cuda else None
    return {"judge": (np.asarray(fast), fast_wall, fast_memory), "plain": (np.vstack(slow), slow_wall, slow_memory)}


def main() -> None:
    from cheems.models.packing import packed_cost
    from cheems.models.threads import use_available_cores

    args = parse_args()
    if not args.device.startswith("cuda"):
        use_available_cores()  # as the judge's loader does
    peak, peak_text = device_peak(args.device)
    sample = sample_prompts()
    items = judge_items(ranked_rows(sample, -(-args.pairs // 6), args.chars), args.pairs)
    n_pairs = len(items) // 2
    n_plain = min(args.plain_pairs or n_pairs, n_pairs)
    judge, plain = load_both(args, sample)
    encoded = judge.encode_judgements(items, ties=False)
    lengths = [len(s) for s in encoded]
    tokens = sum(lengths)
    by_prompt: dict[str, list] = {}
    for (prompt, _, _), seq in zip(items, encoded):
        by_prompt.setdefault(str(prompt), []).append(seq)
    shared = sum(packed_cost(seqs, True) for seqs in by_prompt.values())
    mismatched = sum(a != b for a, b in zip(plain_ids(judge.tokenizer, judge.template, items[:2 * n_plain]), encoded))
    print(f"{args.shape} on {args.device} ({args.dtype}): {n_pairs} pairs x 2 orders = {len(items)} judge prompts, "
          f"{tokens:,} tokens (mean {tokens / len(items):,.0f}; each prompt's common prefix laid down once leaves "
          f"{shared:,}, {1 - shared / tokens:.1%} fewer, where its judge prompts share a batch); packing "
          f"{judge.packing}, token budget {judge.token_budget}, batch size {args.batch_size}; "
          f"verdict tokens {judge.verdict_ids[:2]}; truncated {judge.stats.truncated}")
    print(f"FLOPs: {flops_formula(args.shape, mean_context(lengths), 1)}; peak: {peak_text}")
    results = measure(judge, plain, items, n_plain, args)
    for name, pairs in (("judge", n_pairs), ("plain", n_plain)):
        _, wall, memory = results[name]
        some = lengths[:2 * pairs]
        rate = sum(some) / wall
        mem = f"  peak {memory / 2 ** 30:.2f} GiB" if memory is not None else ""
        print(f"{name:>6}: {wall:8.2f} s  {pairs / wall:9.2f} pairs/s  {rate:12,.0f} tokens/s  "
              f"MFU {mfu(args.shape, mean_context(some), 1, rate, peak):6.2%}  ({pairs} pairs){mem}")
    (fast, fast_wall, _), (slow, slow_wall, _) = results["judge"], results["plain"]
    print(f"judge / plain: {(n_pairs / fast_wall) / (n_plain / slow_wall):.2f}x pairs/s")
    diff = float(np.abs(fast[:2 * n_plain] - slow).max())
    same = int((fast[:2 * n_plain].argmax(1) == slow.argmax(1)).sum())
    tolerance = TOLERANCE[args.dtype]
    print(f"verdict probabilities, judge against plain over {2 * n_plain} judge prompts: max |diff| {diff:.1e} "
          f"({'within' if diff <= tolerance else 'NOT within'} {tolerance:g}, {args.dtype}); same verdict on "
          f"{same} of {2 * n_plain}; token ids differ on {mismatched} prompt(s)")


if __name__ == "__main__":
    main()
