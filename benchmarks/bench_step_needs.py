"""How many optimizer steps each objective of `cheems train` needs: held-out accuracy against
the number of steps, for bt, dual and generative, on the synthetic marker preference of the
tests (tests/marker_task.py: 200 training prompts, 302 ranked pairs, 50 held-out prompts;
the response holding 【好】 wins) with tiny Qwen2 models (hidden 64, 2 layers).

Usage (OMP_NUM_THREADS=1: one thread a run, which a busy machine runs far faster than two):
  OMP_NUM_THREADS=1 python benchmarks/bench_step_needs.py      # seeds 0 1 2, 10 epochs, micro batch 8
  OMP_NUM_THREADS=1 python benchmarks/bench_step_needs.py --seeds 0 --accumulation 32 1 --objectives generative
  OMP_NUM_THREADS=1 python benchmarks/bench_step_needs.py --vary epochs --epochs 1 2 3 --accumulation 1 \
      --objectives generative

The data and the number of epochs stay fixed while ``--gradient-accumulation`` goes from the
paper's 32 down to 1, as a user with a few hundred pairs would turn it: every run sees the same
examples the same number of times, in fewer, larger steps or more, smaller ones. With ``--vary
epochs`` the accumulation stays fixed and the epochs change instead. Each seed builds its own
models (the weights initialised with that seed; bt's sequence-classification model shares the
causal LM's backbone) and trains with that seed (batch order). Every run: ``--learning-rate``
1e-3 (a tiny model from random weights; real checkpoints want far less), warm-up 10%, packing,
the other settings at their defaults; dual with ``lm_coef`` 0.01, generative on the short judge
template of the tests.

Printed, per objective and setting: the optimizer steps; each seed's held-out accuracy and
their mean (CheemsBench accuracy: ranked pairs whose better response wins; for generative the
two orders' probabilities averaged); for generative also the one-order accuracy (each order's
verdict on its own, as a judge read in one order scores) and the position consistency (held-out
pairs whose two orders pick the same response): a judge that learnt the position of the answer
and only a trace of the marker has a high averaged accuracy, a one-order accuracy near 0.5 and
no consistency. Then the mean seconds of a run (training and its evaluation at each epoch's
end) and whether the runs said the few-steps note (`cheems.training.step_plan`). The
accuracies do not depend on the machine; the seconds do.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from cheems.training.config import TrainConfig  # noqa: E402
from cheems.training.trainer import train  # noqa: E402
from tests.marker_task import build_marker_task  # noqa: E402

OBJECTIVES = ("bt", "dual", "generative")


def one_run(task: dict, objective: str, out: Path, *, seed: int, epochs: int, accumulation: int,
            micro_batch_size: int, learning_rate: float) -> dict:
    """Train one run; its steps, held-out figures, seconds and whether it said the note."""
    model = task["reward_model"] if objective == "bt" else task["model"]
    extra = {"judge_template": task["template"]} if objective == "generative" else {}
    config = TrainConfig(model=str(model), train=[task["train"]], eval=[task["held_out"]], output=str(out),
                         objective=objective, epochs=epochs, gradient_accumulation=accumulation,
                         micro_batch_size=micro_batch_size, learning_rate=learning_rate, seed=seed, **extra)
    notes: list[str] = []
    start = time.perf_counter()
    summary = train(config, notify=notes.append)
    seconds = time.perf_counter() - start
    return {"steps": summary["steps"], "accuracy": summary["eval"]["accuracy"],
            "order_accuracy": summary["eval"].get("order_accuracy"),
            "consistency": summary["eval"].get("position_consistency"), "seconds": seconds,
            "noted": any("optimizer step(s) planned" in n for n in notes)}


def settings_of(args) -> list[tuple[int, int]]:
    """The (epochs, gradient accumulation) of each row."""
    if args.vary == "epochs":
        return [(e, args.accumulation[0]) for e in args.epochs]
    return [(args.epochs[0], ga) for ga in args.accumulation]


def measure(args) -> dict:
    """``{(objective, epochs, accumulation): [one_run of each seed]}``."""
    results: dict = {}
    with tempfile.TemporaryDirectory() as tmp:
        for seed in args.seeds:
            task = build_marker_task(Path(tmp) / f"task-{seed}", seed=seed, reward_model=True)
            for objective in args.objectives:
                for epochs, ga in settings_of(args):
                    out = Path(tmp) / f"{objective}-{seed}-{epochs}-{ga}"
                    run = one_run(task, objective, out, seed=seed, epochs=epochs, accumulation=ga,
                                  micro_batch_size=args.micro_batch_size, learning_rate=args.learning_rate)
                    results.setdefault((objective, epochs, ga), []).append(run)
                    print(f"# {objective} seed {seed} epochs {epochs} accumulation {ga}: {run}", file=sys.stderr,
                          flush=True)
    return results


def _figures(runs: list[dict], key: str) -> str:
    """Each seed's figure and their mean: ``0.99 1.00 0.97 (0.99)``; empty when not measured."""
    values = [r[key] for r in runs]
    if any(v is None for v in values):
        return ""
    return " ".join(f"{v:.2f}" for v in values) + (f" ({statistics.mean(values):.2f})" if len(values) > 1 else "")


def print_table(results: dict) -> None:
    print("| objective | epochs | --gradient-accumulation | steps | held-out accuracy | one-order accuracy "
          "| position consistency | s / run | note |")
    print("|---" * 9 + "|")
    for (objective, epochs, ga), runs in results.items():
        steps = "/".join(map(str, sorted({r["steps"] for r in runs})))
        seconds = statistics.mean(r["seconds"] for r in runs)
        noted = "yes" if all(r["noted"] for r in runs) else "no" if not any(r["noted"] for r in runs) else "some"
        print(f"| {objective} | {epochs} | {ga} | {steps} | {_figures(runs, 'accuracy')} "
              f"| {_figures(runs, 'order_accuracy')} | {_figures(runs, 'consistency')} | {seconds:.0f} | {noted} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--objectives", nargs="+", choices=OBJECTIVES, default=list(OBJECTIVES))
    ap.add_argument("--vary", choices=("accumulation", "epochs"), default="accumulation")
    ap.add_argument("--epochs", type=int, nargs="+", default=[10])
    ap.add_argument("--accumulation", type=int, nargs="+", default=[32, 16, 8, 6, 5, 4, 2, 1])
    ap.add_argument("--micro-batch-size", type=int, default=8)
    ap.add_argument("--learning-rate", type=float, default=1e-3)
    args = ap.parse_args()
    print_table(measure(args))


if __name__ == "__main__":
    main()
