"""cheems against TRL's `RewardTrainer`: the same random-weight model trained for one epoch on
the same preference pairs at the same learning rate, side by side; tokens/s, pairs/s, padding
share, peak memory and time per epoch, and how many times longer TRL takes per epoch.

Usage:
  python benchmarks/bench_vs_trl.py                                    # CPU, tiny model, CI-sized
  python benchmarks/bench_vs_trl.py --device cuda --shape qwen2.5-0.5b --bf16
  python benchmarks/bench_vs_trl.py --device cuda --shape qwen2.5-0.5b --bf16 --prompts 300 --runs cheems,trl-tuned
TRL is not a cheems dependency: `pip install trl` first (the figures name its version).

The data: the bundled sample's ranked prompts, each drawn again as a prompt of its own (as in
bench_train.py), written as cheems rows (a prompt, its responses, a rank). Such a row of n
responses holds up to n(n-1)/2 (better, worse) pairs (`cheems.records.preference_pairs`; ties
and pairs of identical text give none). TRL wants one example per pair, so every pair becomes
one example {chosen, rejected}, each the whole conversation (the prompt, then the response)
encoded exactly as cheems encodes it through the tokenizer's chat template: TRL is handed
those token ids (its documented pre-tokenized columns ``chosen_ids`` / ``rejected_ids``), so
both trainers are given the same sequences and the same pairs. cheems scores each response
of a prompt once per forward batch and trains on every pair whose two responses are in that
batch; its batching keeps a prompt's responses together but may split one over two batches
to fill them, and the pairs across the cut wait for another epoch (the share it trains is
printed, and its pairs/s counts only those). TRL runs both sequences of every pair through
the model, so a response in k pairs is computed k times. tokens/s counts the real tokens
(padding excluded) each trainer ran through its model, which is why the two differ for the
same pairs; pairs/s and time per epoch compare the same work.

TRL runs twice. "defaults": what RewardConfig gives (8 pairs per device, gradient
checkpointing on, its logging every 10 steps), with bf16 as --bf16 says (TRL's own default is on). "tuned": its best
settings that fit here: --trl-batch-size pairs per device, gradient checkpointing off, bf16
when --bf16, and length-grouped batches (``train_sampling_strategy="group_by_length"``) to
cut padding; TRL's RewardTrainer has no padding-free mode (its SFT and DPO trainers do), so
its batches stay right-padded. cheems runs packed rows (no padding) with
--micro-batch-size / --token-budget. Each run is a process of its own (so peak RSS is its
own), and the timed span is the training loop alone: from TRL's ``on_train_begin`` to
``on_train_end`` (data prepared, optimizer built before), and cheems' `train_epoch` after
`setup_run`; no evaluation, no checkpoint inside. Peak memory: CUDA max allocated on a GPU,
peak RSS of the process on a CPU. Learning rate (1e-5) and one epoch for all; each trainer
keeps its own loss (cheems adds its 0.1 x mean r^2 term, TRL none) and schedule.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_train import write_data  # noqa: E402
from mfu import SHAPES, build, own_peak_kib  # noqa: E402

GOAL = 10.0  # the goal on an H100-class GPU: TRL takes at least this many times cheems' time per epoch
RUNS = ("cheems", "trl-defaults", "trl-tuned")


def pair_examples(data) -> list[dict]:
    """TRL's pre-tokenized examples, one per training pair of ``data`` (a cheems `TrainingData`):
    ``chosen_ids`` / ``rejected_ids`` the token ids of the better / worse conversation, and
    ``length`` the longer of the two (for TRL's length-grouped sampler)."""
    where = {(pi, ri): i for i, (pi, ri, _) in enumerate(data.items)}
    out = []
    for pi, pairs in data.pairs_by_prompt.items():
        for a, b in pairs:
            chosen, rejected = data.ids[where[(pi, a)]], data.ids[where[(pi, b)]]
            out.append({"chosen_ids": chosen, "rejected_ids": rejected, "length": max(len(chosen), len(rejected))})
    return out


def encoded(args):
    """The training file encoded as cheems encodes it (the same call `setup_run` makes)."""
    from cheems.models.checkpoints import load_tokenizer
    from cheems.training.trainer import encode_training_data, read_training_prompts

    return encode_training_data(read_training_prompts([str(Path(args.work) / "train.jsonl")]),
                                load_tokenizer(str(Path(args.work) / "model")), max_length=args.max_length,
                                truncate=False)


def synchronize(device: str) -> None:
    import torch

    if device.startswith("cuda"):
        torch.cuda.synchronize()


def run_cheems(args) -> dict:
    """One epoch of cheems' recipe (`setup_run`, then `train_epoch` timed)."""
    from cheems.training.config import TrainConfig
    from cheems.training.trainer import setup_run, train_epoch

    work = Path(args.work)
    config = TrainConfig(model=str(work / "model"), train=[str(work / "train.jsonl")], output=str(work / "out-cheems"),
                         epochs=1, learning_rate=args.learning_rate, micro_batch_size=args.micro_batch_size,
                         gradient_accumulation=1, bf16=args.bf16, token_budget=args.token_budget,
                         max_length=args.max_length, save_every=10 ** 9, packing=True,
                         liger_kernels=args.liger_kernels)
    run = setup_run(config)
    synchronize(args.device)
    t = time.perf_counter()
    train_epoch(run, 0)
    synchronize(args.device)
    wall = time.perf_counter() - t
    run.log.close()
    shape = run.first_shape
    return {"seconds": wall, "tokens": run.trained_tokens, "padding_share": shape["padding_share"],
            "pairs": shape["covered_pairs"], "all_pairs": shape["pairs"], "steps": run.step,
            "loss": sum(run.epoch_loss) / len(run.epoch_loss)}


class CountingCollator:
    """TRL's own collator, counting the real and the padded tokens of every batch it makes."""

    def __init__(self, collator):
        self.collator = collator
        self.real = self.padded = 0

    def __call__(self, examples):
        batch = self.collator(examples)
        self.real += int(batch["attention_mask"].sum())
        self.padded += batch["attention_mask"].numel()
        return batch


def run_trl(args, tuned: bool) -> dict:
    """One epoch of TRL's RewardTrainer on the pairs of `pair_examples` (see module docs for
    the two settings)."""
    from datasets import Dataset
    from transformers import AutoTokenizer, TrainerCallback
    from trl import RewardConfig, RewardTrainer
    from trl.trainer.reward_trainer import DataCollatorForPreference

    from cheems.models.threads import use_available_cores

    use_available_cores()  # the thread count cheems' run uses on a CPU
    work = Path(args.work)
    examples = pair_examples(encoded(args))
    settings = {}
    if tuned:  # the "length" column feeds the sampler, so TRL must keep it (its collator ignores it)
        settings = dict(per_device_train_batch_size=args.trl_batch_size, gradient_checkpointing=False,
                        remove_unused_columns=False, **length_grouping(RewardConfig))
    config = RewardConfig(output_dir=str(work / "out-trl"), num_train_epochs=1, learning_rate=args.learning_rate,
                          bf16=args.bf16, max_length=args.max_length, save_strategy="no", eval_strategy="no",
                          report_to="none", disable_tqdm=True, seed=0, use_cpu=args.device == "cpu",
                          use_liger_kernel=args.liger_kernels, **settings)
    span = {}

    class Timer(TrainerCallback):
        def on_train_begin(self, *a, **k):
            synchronize(args.device)
            span["start"] = time.perf_counter()

        def on_train_end(self, *a, **k):
            synchronize(args.device)
            span["end"] = time.perf_counter()

    tokenizer = AutoTokenizer.from_pretrained(work / "model")
    collator = CountingCollator(DataCollatorForPreference(pad_token_id=tokenizer.pad_token_id))
    trainer = RewardTrainer(model=str(work / "model"), args=config, train_dataset=Dataset.from_list(examples),
                            processing_class=tokenizer, data_collator=collator, callbacks=[Timer()])
    out = trainer.train()
    return {"seconds": span["end"] - span["start"], "tokens": collator.real,
            "padding_share": 1 - collator.real / collator.padded, "pairs": len(examples), "all_pairs": len(examples),
            "steps": out.global_step, "loss": out.training_loss,
            "settings": f"{config.per_device_train_batch_size} pairs/device, gradient checkpointing "
                        f"{config.gradient_checkpointing}, bf16 {config.bf16}, "
                        f"{'length-grouped' if tuned else 'random'} batches"}


def length_grouping(config_class) -> dict:
    """The TrainingArguments setting of length-grouped batches: ``train_sampling_strategy``
    in recent transformers, ``group_by_length`` in older ones."""
    import dataclasses

    names = {f.name for f in dataclasses.fields(config_class)}
    if "train_sampling_strategy" in names:
        return {"train_sampling_strategy": "group_by_length"}
    return {"group_by_length": True}


def worker(args) -> None:
    """Run one trainer (``args.worker``) in this process; write its figures as JSON."""
    import resource

    import torch

    if args.device.startswith("cuda"):
        torch.cuda.reset_peak_memory_stats()
    result = run_cheems(args) if args.worker == "cheems" else run_trl(args, tuned=args.worker == "trl-tuned")
    if args.device.startswith("cuda"):
        result["peak_bytes"] = torch.cuda.max_memory_allocated()
    else:
        kib = own_peak_kib() or resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
        result["peak_bytes"] = kib * 1024
    Path(args.work, f"{args.worker}.json").write_text(json.dumps(result), encoding="utf-8")


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--shape", default=None, choices=list(SHAPES))
    ap.add_argument("--prompts", type=int, default=None, help="default: 8 on CPU, 1000 on CUDA")
    ap.add_argument("--repeat-text", type=int, default=None, help="responses repeated 1..N times; default 1 on "
                    "CPU, 2 on CUDA")
    ap.add_argument("--learning-rate", type=float, default=1e-5)
    ap.add_argument("--micro-batch-size", type=int, default=None, help="cheems; default 16 on CPU, 256 on CUDA")
    ap.add_argument("--token-budget", type=int, default=None, help="cheems; default 16384 on CUDA")
    ap.add_argument("--trl-batch-size", type=int, default=None, help="TRL tuned, pairs per device; default 16 "
                    "on CPU, 32 on CUDA")
    ap.add_argument("--max-length", type=int, default=2048)
    ap.add_argument("--bf16", action="store_true")
    ap.add_argument("--liger-kernels", action="store_true", help="Liger's kernels in both trainers (CUDA)")
    ap.add_argument("--runs", default=",".join(RUNS))
    ap.add_argument("--model-dir", default=None, help="build the random-weight model here, or reuse the one there")
    ap.add_argument("--worker", default=None, choices=RUNS, help=argparse.SUPPRESS)
    ap.add_argument("--work", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    cuda = args.device.startswith("cuda")
    args.shape = args.shape or ("qwen2.5-0.5b" if cuda else "tiny")
    args.prompts = args.prompts or (1000 if cuda else 8)
    args.repeat_text = args.repeat_text or (2 if cuda else 1)
    args.micro_batch_size = args.micro_batch_size or (256 if cuda else 16)
    args.token_budget = args.token_budget or (16384 if cuda else None)
    args.trl_batch_size = args.trl_batch_size or (32 if cuda else 16)
    return args


def worker_command(args, name: str) -> list[str]:
    flags = ["--device", args.device, "--shape", args.shape, "--learning-rate", str(args.learning_rate),
             "--micro-batch-size", str(args.micro_batch_size), "--trl-batch-size", str(args.trl_batch_size),
             "--max-length", str(args.max_length), "--prompts", str(args.prompts)]
    flags += ["--token-budget", str(args.token_budget)] if args.token_budget else []
    flags += ["--bf16"] if args.bf16 else []
    flags += ["--liger-kernels"] if args.liger_kernels else []
    return [sys.executable, __file__, *flags, "--worker", name, "--work", args.work]


def print_table(results: dict, device: str, device_name: str) -> None:
    print(f"{'':>13} {'epoch s':>9} {'tokens/s':>11} {'pairs/s':>9} {'padding':>8} {'peak MiB':>9} "
          f"{'steps':>6} {'pairs':>7} {'loss':>7} {'process s':>9}")
    for name, r in results.items():
        print(f"{name:>13} {r['seconds']:9.2f} {r['tokens'] / r['seconds']:11,.0f} {r['pairs'] / r['seconds']:9,.1f} "
              f"{r['padding_share']:8.1%} {r['peak_bytes'] / 2 ** 20:9,.0f} {r['steps']:6} {r['pairs']:7,} "
              f"{r['loss']:7.4f} {r['process']:9.1f}")
    for name, r in results.items():
        if "settings" in r:
            print(f"  {name}: {r['settings']}")
        elif r["pairs"] != r["all_pairs"]:
            share = r["pairs"] / r["all_pairs"]
            print(f"  {name}: trains {r['pairs']:,} of the {r['all_pairs']:,} pairs ({share:.1%}; "
                  f"a pair trains when its two responses share a forward batch)")
    if "cheems" not in results:
        return
    base = results["cheems"]["seconds"]
    ratios = {n: r["seconds"] / base for n, r in results.items() if n != "cheems"}
    if ratios:
        print("TRL time per epoch / cheems': " + ", ".join(f"{n} {v:.1f}x" for n, v in ratios.items()))
        best = min(ratios, key=ratios.get)
        verdict = "meets" if ratios[best] >= GOAL else "misses"
        gpu = "H100" in device_name or "H200" in device_name
        where = "" if gpu else f" (this run: {device_name}, not an H100-class GPU)"
        print(f"goal: TRL takes >= {GOAL:.0f}x cheems' time per epoch on an H100-class GPU; against TRL's best "
              f"({best}) {ratios[best]:.1f}x: {verdict}{where}")


def main() -> None:
    args = parse_args()
    if args.worker:
        worker(args)
        return
    try:
        import trl
    except ImportError:
        sys.exit("TRL is not installed: pip install trl")
    import torch
    import transformers

    from cheems.formats import read_prompts
    from cheems.graph import resolve_conflicts

    sample = Path(__file__).resolve().parents[1] / "src/cheems/data/sample/annotations"
    prompts = read_prompts(sample / "open.jsonl").prompts + read_prompts(sample / "human.jsonl").prompts
    for p, rank in zip(prompts, resolve_conflicts(prompts).ranks):
        p.rank = rank
    device_name = torch.cuda.get_device_name() if args.device.startswith("cuda") else "CPU"
    with tempfile.TemporaryDirectory() as d:
        args.work = d
        texts = [p.prompt_text for p in prompts] + [r.content for p in prompts for r in p.responses]
        folder = build(Path(args.model_dir) if args.model_dir else Path(d) / "model", args.shape, texts, args.device)
        if args.model_dir:
            Path(d, "model").symlink_to(Path(folder).resolve())
        write_data(Path(d) / "train.jsonl", prompts, args.prompts, args.repeat_text)
        data = encoded(args)
        pair_tokens = sum(len(e["chosen_ids"]) + len(e["rejected_ids"]) for e in pair_examples(data))
        print(f"{args.shape} on {device_name}: {args.prompts} prompts, {len(data.items):,} responses "
              f"({sum(n for *_, n in data.items):,} tokens), {data.n_pairs:,} pairs ({pair_tokens:,} tokens as TRL's "
              f"chosen + rejected); lr {args.learning_rate}, bf16 {args.bf16}, liger {args.liger_kernels}; "
              f"cheems packed, micro batch {args.micro_batch_size}, token budget {args.token_budget or 'default'}; "
              f"TRL {trl.__version__}, transformers {transformers.__version__}, torch {torch.__version__}")
        results = {}
        for name in args.runs.split(","):
            started = time.perf_counter()
            done = subprocess.run(worker_command(args, name), capture_output=True, text=True)
            if done.returncode:
                print(f"{name} failed (exit {done.returncode}):\n{done.stderr[-3000:]}")
                continue
            results[name] = json.loads(Path(d, f"{name}.json").read_text(encoding="utf-8"))
            results[name]["process"] = time.perf_counter() - started
            r = results[name]
            print(f"{name}: one epoch in {r['seconds']:.2f} s ({r['process']:.1f} s with its process's start)",
                  flush=True)
    print_table(results, args.device, device_name)


if __name__ == "__main__":
    main()
