"""Training throughput of the three objectives of `cheems train` on the same data and the same
backbone shape, side by side: bt (Bradley-Terry on a scalar head), dual (the same plus the LM
loss of each prompt's best response, from the same forward pass) and generative (a judge
trained on the verdict token of pairwise judge prompts, both orders of every ranked pair).

Usage:
  python benchmarks/bench_objectives.py --quick                         # CPU, tiny model, a few steps
  python benchmarks/bench_objectives.py                                 # CPU, small model
  python benchmarks/bench_objectives.py --device cuda --shape qwen2.5-0.5b --prompts 400 --bf16 \
      --micro-batch-size 64 --token-budget 16384
  python benchmarks/bench_objectives.py --device cuda --shape qwen2.5-7b --bf16 --lora-r 16 \
      --gradient-checkpointing --micro-batch-size 64 --token-budget 16384

The data: --prompts prompts of the bundled sample (each made a prompt of its own by a number
added to its text), each with 4 responses of about --chars Chinese characters cut from the
sample's responses, ranked strictly (6 ranked pairs a prompt). bt and dual train on the 4
response sequences of a prompt; generative on 12 judge prompts (6 pairs x 2 orders), each
holding both responses. The backbone: a random-weight Qwen2 of --shape saved once as a causal
LM (dual, generative) and as a sequence-classification model with the same backbone weights
(bt), with a tokenizer trained on the texts.

Each objective runs in a fresh process (so its peak memory is its own: VmHWM on CPU, the
largest `torch.cuda.max_memory_allocated` on GPU, model loading included) through the
recipe's own pieces (`setup_run` / `train_epoch`, `setup_generative_run` /
`train_generative_epoch`): --warmup optimizer steps, then --steps timed ones (one forward
batch per step unless --gradient-accumulation says more; no evaluation, no checkpoint).
Per objective: tokens/s (real tokens through the forward passes), sequences/s (bt, dual: the
response sequences; generative: the judge prompts, "examples"), pairs/s (bt, dual: the ranked
pairs inside the forward batches, as the BT loss covers them; generative: examples / 2, a pair
trained in both orders), tokens per pair, and MFU with its FLOP count:

    training FLOPs = 3 x forward (2 x with LoRA: the frozen weights get no weight gradients)
    forward = sum over sequences of (2 x N x L + 4 x layers x hidden x L(L+1)/2)
              + 2 x hidden x vocab x (LM-head positions)

N, layers and hidden as in mfu.py. The LM-head positions: none for bt (its one-output head is
left out, as mfu.py leaves it), dual's L_gen positions (the tokens of each prompt's best
response, counted from `TrainingData.response_starts`), one per judge prompt for generative
(the verdict position). Ratios dual/bt and generative/bt close the table.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from mfu import SHAPES, device_peak, non_embedding_parameters, own_peak_kib  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
MODES = ("bt", "dual", "generative")
RESPONSES = 4
RESULT = "RESULT "  # the line a worker process prints its figures on


# ---------------------------------------------------------------------------- data and models

def sample_prompts():
    from cheems.formats import read_prompts

    folder = ROOT / "src/cheems/data/sample/annotations"
    return read_prompts(folder / "open.jsonl").prompts + read_prompts(folder / "human.jsonl").prompts


def ranked_rows(sample, n_prompts: int, chars: int, seed: int = 0) -> list[dict]:
    """``n_prompts`` data rows: a prompt of ``sample`` with its number added, 4 responses of
    about ``chars`` characters cut from the sample's responses, ranked r0 < r1 < r2 < r3."""
    rng = random.Random(seed)
    pool = "".join(r.content for p in sample for r in p.responses)
    rows = []
    for i in range(n_prompts):
        base = rng.choice(sample).to_dict(comparisons=False)
        tag = f"（第 {i} 题）"
        if isinstance(base["prompt"], str):
            base["prompt"] += tag
        else:
            base["prompt"][-1]["content"] += tag
        responses = []
        for k in range(RESPONSES):
            length = max(20, int(rng.gauss(chars, chars / 4)))
            start = rng.randrange(0, len(pool) - length)
            responses.append({"id": f"r{k}", "content": pool[start:start + length]})
        rows.append({"id": f"obj-{i}", "prompt": base["prompt"], "responses": responses,
                     "rank": {f"r{k}": k for k in range(RESPONSES)}})
    return rows


def write_rows(path: Path, rows: list[dict]) -> None:
    with open(path, "w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")


def build_models(folder: Path, shape: str, texts: list[str], device: str, *,
                 scalar_too: bool = True) -> tuple[Path, Path]:
    """``(causal LM folder, sequence-classification folder)``: a random-weight Qwen2 of
    ``shape`` (bf16 on CUDA, float32 on CPU) saved as a ``Qwen2ForCausalLM`` and (unless not
    ``scalar_too``) as a one-label ``Qwen2ForSequenceClassification`` with the same backbone
    weights, each with a tokenizer (and chat template) trained on ``texts``. Folders already
    there are used as they are."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM, Qwen2ForSequenceClassification

    from cheems.training.init_model import train_tokenizer

    causal, scalar = folder / "causal-lm", folder / "seq-cls"
    if (causal / "config.json").exists() and (not scalar_too or (scalar / "config.json").exists()):
        return causal, scalar
    tok = train_tokenizer(texts, vocab_size=3000)
    hidden, layers, heads, kv, inter, vocab = SHAPES[shape]
    config = Qwen2Config(vocab_size=vocab or len(tok), hidden_size=hidden, num_hidden_layers=layers,
                         num_attention_heads=heads, num_key_value_heads=kv, intermediate_size=inter,
                         max_position_embeddings=32768, num_labels=1, pad_token_id=tok.pad_token_id,
                         bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
                         tie_word_embeddings=False, architectures=["Qwen2ForCausalLM"])
    dtype = torch.bfloat16 if device.startswith("cuda") else torch.float32
    torch.manual_seed(0)
    with torch.device(device):
        lm = Qwen2ForCausalLM(config).to(dtype)
    lm.save_pretrained(causal)
    tok.save_pretrained(causal)
    if not scalar_too:
        del lm
        if device.startswith("cuda"):
            torch.cuda.empty_cache()
        return causal, scalar
    config.architectures = ["Qwen2ForSequenceClassification"]
    with torch.device(device):
        rm = Qwen2ForSequenceClassification(config).to(dtype)
    rm.model.load_state_dict(lm.model.state_dict())
    del lm
    rm.save_pretrained(scalar)
    tok.save_pretrained(scalar)
    del rm
    if device.startswith("cuda"):
        torch.cuda.empty_cache()  # the workers need the memory, not this process
    return causal, scalar


# ---------------------------------------------------------------------------- one objective (a worker process)

class Enough(Exception):
    """Raised from the progress callback once the steps asked for are done."""


class StepClock:
    """The progress callback of the worker: after each optimizer step, the time and what the
    step's forward batches held (`counts` of its group of batches; set ``groups`` and
    ``epoch_start`` before each epoch); `Enough` after ``steps`` steps. ``marks[0]`` is the
    start, set by the caller."""

    def __init__(self, steps: int, device: str, counts):
        self.steps, self.device, self.counts = steps, device, counts
        self.groups: list = []
        self.epoch_start = 0
        self.marks: list[tuple[float, dict]] = []

    def __call__(self, step: int, total: int, stats: dict) -> None:
        import torch

        if self.device.startswith("cuda"):
            torch.cuda.synchronize()
        now = time.perf_counter()
        counted = self.counts(self.groups[step - self.epoch_start - 1])
        counted["pairs"] = stats["pairs"] if "pairs" in stats else stats["examples"] / 2
        counted["loss"] = stats["loss"]
        self.marks.append((now, counted))
        if len(self.marks) > self.steps:  # the first mark is the start
            raise Enough


def batch_counts(lengths, head_positions):
    """A function of one optimizer step's forward batches: its sequences, tokens, the sum of
    L(L+1)/2 over its sequences (attended keys) and its LM-head positions."""
    def counts(group: list[list[int]]) -> dict:
        seqs = [i for batch in group for i in batch]
        return {"sequences": len(seqs), "tokens": sum(lengths[i] for i in seqs),
                "keys": sum(lengths[i] * (lengths[i] + 1) / 2 for i in seqs),
                "head_positions": sum(head_positions(i) for i in seqs)}
    return counts


def worker_config(args, mode: str, model: str, out: Path):
    from cheems.training.config import TrainConfig

    return TrainConfig(model=model, train=[args.data], output=str(out), epochs=10 ** 4, learning_rate=1e-5,
                       micro_batch_size=args.micro_batch_size, gradient_accumulation=args.gradient_accumulation,
                       bf16=args.bf16, token_budget=args.token_budget, max_length=args.max_length,
                       save_every=10 ** 9, gradient_checkpointing=args.gradient_checkpointing, lora_r=args.lora_r,
                       objective=mode, liger_kernels=args.liger_kernels)


def setup(config, mode: str):
    """``(run, epoch function, batches of epoch e, counts)`` of the recipe of ``mode``."""
    from cheems.training.recipe_setup import epoch_batches

    if mode == "generative":
        from cheems.training.generative import epoch_judge_batches, setup_generative_run, train_generative_epoch

        run = setup_generative_run(config)
        lengths = [len(x) for x in run.data.ids]
        counts = batch_counts(lengths, lambda i: 1)  # the verdict position of each judge prompt
        return run, train_generative_epoch, (lambda e: epoch_judge_batches(lengths, config, 1, e, run.token_budget)), \
            counts
    from cheems.training.trainer import setup_run, train_epoch

    run = setup_run(config)
    starts = run.data.response_starts

    def lm_positions(i: int) -> int:  # dual: the L_gen targets of sequence i (generation_targets' count)
        return run.lengths[i] - max(starts[i], 1) if starts is not None and starts[i] is not None else 0

    return run, train_epoch, (lambda e: epoch_batches(run.data, config, 1, e, run.token_budget)), \
        batch_counts(run.lengths, lm_positions)


def run_worker(args) -> dict:
    """Train ``args.worker`` for --warmup + --steps optimizer steps; its figures as a dict."""
    import torch

    from cheems.training.recipe_setup import step_groups

    mode = args.worker
    with tempfile.TemporaryDirectory() as d:
        config = worker_config(args, mode, args.scalar_model if mode == "bt" else args.causal_model, Path(d) / "out")
        run, epoch_fn, batches_of, counts = setup(config, mode)
        clock = StepClock(args.warmup + args.steps, args.device, counts)
        if args.device.startswith("cuda"):
            torch.cuda.synchronize()
        clock.marks.append((time.perf_counter(), {}))  # the start, for --warmup 0
        try:
            for epoch in range(config.epochs):
                clock.groups = step_groups(run.first_batches if epoch == 0 else batches_of(epoch),
                                           config.gradient_accumulation)
                clock.epoch_start = run.step
                epoch_fn(run, epoch, clock)
        except Enough:
            pass
        run.log.close()
    counted = sum(c["tokens"] for _, c in clock.marks[1:])
    if counted != run.trained_tokens:  # the batches rebuilt here are not the ones the loop ran
        raise SystemExit(f"{mode}: {counted} tokens counted, the recipe trained {run.trained_tokens}")
    timed = clock.marks[args.warmup + 1:]
    totals = {k: sum(c[k] for _, c in timed) for k in ("sequences", "tokens", "keys", "head_positions", "pairs")}
    if args.device.startswith("cuda"):
        peak = torch.cuda.max_memory_allocated()
    else:
        peak = (own_peak_kib() or 0) * 1024
    return {"mode": mode, "steps": len(timed), "wall": timed[-1][0] - clock.marks[args.warmup][0], **totals,
            "loss": timed[-1][1]["loss"], "peak_bytes": peak, "trainable": run.trainable,
            "threads": torch.get_num_threads()}


# ---------------------------------------------------------------------------- the comparison

def flops(r: dict, shape: str, factor: int, vocab: int) -> float:
    """Training FLOPs of a worker's timed steps (see the module docs)."""
    hidden, layers = SHAPES[shape][0], SHAPES[shape][1]
    forward = (2 * non_embedding_parameters(shape) * r["tokens"] + 4 * layers * hidden * r["keys"]
               + 2 * hidden * vocab * r["head_positions"])
    return factor * forward


def spawn(args, mode: str, causal: Path, scalar: Path, data: Path) -> dict:
    """One objective in a fresh process; its figures (the worker's RESULT line)."""
    cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", mode, "--causal-model", str(causal),
           "--scalar-model", str(scalar), "--data", str(data)] + args.passed
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "TOKENIZERS_PARALLELISM": "false"}
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT)
    for line in proc.stdout.splitlines():
        if line.startswith(RESULT):
            return json.loads(line[len(RESULT):])
    sys.stderr.write(proc.stdout[-3000:] + proc.stderr[-3000:])
    raise SystemExit(f"the {mode} run failed (exit {proc.returncode})")


def memory_text(n: float) -> str:
    return f"{n / 2 ** 30:.2f} GiB" if n >= 2 ** 30 else f"{n / 2 ** 20:.0f} MiB"


def report(results: dict, shape: str, factor: int, vocab: int, peak: float, device: str) -> None:
    """The table of the objectives' figures, then each objective against bt."""
    def rate(r: dict, key: str) -> float:
        return r[key] / r["wall"]

    def mfu_of(r: dict) -> float:
        return flops(r, shape, factor, vocab) / r["wall"] / peak

    print(f"{'objective':>10} {'steps':>5} {'wall s':>7} {'tokens/s':>10} {'seq/s':>7} {'pairs/s':>8} "
          f"{'tok/pair':>8} {'C keys':>6} {'head pos/step':>13} {'GFLOP/tok':>9} {'MFU':>7} {'peak mem':>10} "
          f"{'loss':>7}")
    for mode, r in results.items():
        print(f"{mode:>10} {r['steps']:>5} {r['wall']:>7.1f} {rate(r, 'tokens'):>10,.0f} "
              f"{rate(r, 'sequences'):>7.1f} {rate(r, 'pairs'):>8.1f} {r['tokens'] / r['pairs']:>8.0f} "
              f"{r['keys'] / r['tokens']:>6.0f} {r['head_positions'] / r['steps']:>13,.0f} "
              f"{flops(r, shape, factor, vocab) / r['tokens'] / 1e9:>9.4f} {mfu_of(r):>7.2%} "
              f"{memory_text(r['peak_bytes']):>10} {r['loss']:>7.4f}")
    kind = "torch.cuda.max_memory_allocated" if device.startswith("cuda") else "peak RSS (VmHWM)"
    print(f"(seq/s: response sequences for bt and dual, judge prompts for generative; pairs/s: ranked pairs, "
          f"generative's = judge prompts / 2; C keys: mean attended keys; peak mem: {kind}, a fresh process each)")
    base = results.get("bt")
    for mode in ("dual", "generative"):
        r = results.get(mode)
        if base and r:
            print(f"{mode} / bt: tokens/s {rate(r, 'tokens') / rate(base, 'tokens'):.2f}x, "
                  f"pairs/s {rate(r, 'pairs') / rate(base, 'pairs'):.2f}x, "
                  f"tokens per pair {r['tokens'] / r['pairs'] / (base['tokens'] / base['pairs']):.2f}x, "
                  f"MFU {mfu_of(r) / mfu_of(base):.2f}x, peak memory {r['peak_bytes'] / base['peak_bytes']:.2f}x")


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--shape", default=None, choices=list(SHAPES))
    ap.add_argument("--prompts", type=int, default=32)
    ap.add_argument("--chars", type=int, default=300, help="characters of a response, about")
    ap.add_argument("--steps", type=int, default=12, help="timed optimizer steps")
    ap.add_argument("--warmup", type=int, default=1, help="optimizer steps before the timed ones")
    ap.add_argument("--micro-batch-size", type=int, default=8)
    ap.add_argument("--gradient-accumulation", type=int, default=1)
    ap.add_argument("--token-budget", type=int, default=None)
    ap.add_argument("--max-length", type=int, default=4096)
    ap.add_argument("--bf16", action="store_true")
    ap.add_argument("--gradient-checkpointing", action="store_true")
    ap.add_argument("--lora-r", type=int, default=0)
    ap.add_argument("--liger-kernels", action="store_true")
    ap.add_argument("--modes", default=",".join(MODES))
    ap.add_argument("--model-dir", default=None, help="build the random-weight models here, or reuse those there")
    ap.add_argument("--quick", action="store_true",
                    help="tiny model, 8 prompts of ~80 characters, 3 steps (unless given)")
    ap.add_argument("--worker", choices=MODES, help=argparse.SUPPRESS)
    ap.add_argument("--causal-model", help=argparse.SUPPRESS)
    ap.add_argument("--scalar-model", help=argparse.SUPPRESS)
    ap.add_argument("--data", help=argparse.SUPPRESS)
    if "--quick" in sys.argv[1:]:  # other flags given still win
        ap.set_defaults(shape="tiny", prompts=8, chars=80, steps=3)
    args = ap.parse_args()
    args.shape = args.shape or ("qwen2.5-0.5b" if args.device.startswith("cuda") else "small")
    # what a worker is given again: every setting of the run
    args.passed = ["--device", args.device, "--shape", args.shape, "--steps", str(args.steps), "--warmup",
                   str(args.warmup), "--micro-batch-size", str(args.micro_batch_size), "--gradient-accumulation",
                   str(args.gradient_accumulation), "--max-length", str(args.max_length), "--lora-r", str(args.lora_r)]
    args.passed += ["--token-budget", str(args.token_budget)] if args.token_budget else []
    args.passed += [f for f, on in (("--bf16", args.bf16), ("--gradient-checkpointing", args.gradient_checkpointing),
                                    ("--liger-kernels", args.liger_kernels)) if on]
    return args


def main() -> None:
    args = parse_args()
    if args.worker:
        print(RESULT + json.dumps(run_worker(args)))
        return
    from cheems.models.threads import use_available_cores

    modes = [m for m in args.modes.split(",") if m]
    unknown = sorted(set(modes) - set(MODES))
    if unknown:
        raise SystemExit(f"unknown modes {unknown}; choose from {', '.join(MODES)}")
    if not args.device.startswith("cuda"):
        use_available_cores()  # as the workers' training does
    peak, peak_text = device_peak(args.device)
    sample = sample_prompts()
    rows = ranked_rows(sample, args.prompts, args.chars)
    factor = 2 if args.lora_r else 3
    with tempfile.TemporaryDirectory() as d:
        d = Path(d)
        texts = [p.prompt_text for p in sample] + [r.content for p in sample for r in p.responses]
        causal, scalar = build_models(Path(args.model_dir) if args.model_dir else d, args.shape, texts, args.device)
        write_rows(d / "train.jsonl", rows)
        print(f"{args.shape} on {args.device}: {args.prompts} prompts x {RESPONSES} ranked responses of ~{args.chars} "
              f"characters ({args.prompts * 6} ranked pairs); micro batch {args.micro_batch_size}, gradient "
              f"accumulation {args.gradient_accumulation}, token budget {args.token_budget or 'default'}, "
              f"bf16 {args.bf16}, LoRA r {args.lora_r}, checkpointing {args.gradient_checkpointing}; "
              f"{args.warmup} warm-up + {args.steps} timed optimizer steps each")
        vocab = json.loads((causal / "config.json").read_text())["vocab_size"]
        n = non_embedding_parameters(args.shape)
        hidden, layers = SHAPES[args.shape][:2]
        print(f"FLOPs: {factor} x [sum over sequences (2 x {n / 1e6:,.1f} M x L + 4 x {layers} layers x {hidden} x "
              f"L(L+1)/2) + 2 x {hidden} x {vocab:,} (vocab) x LM-head positions]; peak: {peak_text}")
        results = {}
        for mode in modes:
            results[mode] = spawn(args, mode, causal, scalar, d / "train.jsonl")
            print(f"  {mode}: done ({results[mode]['threads']} torch threads)", flush=True)
    report(results, args.shape, factor, vocab, peak, args.device)


if __name__ == "__main__":
    main()
