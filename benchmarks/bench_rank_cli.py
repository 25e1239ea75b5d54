"""`cheems rank` end to end (start-up, parse, resolve, write) vs a plain Python script that
parses with the standard json module and resolves each prompt with networkx.

Usage: python benchmarks/bench_rank_cli.py [--prompts 30000] [--repeat 3] [--shape annotated|plain|both]
                                          [--irregular]
Both run as subprocesses on the same synthetic file; the outputs' ranks are compared. The
``annotated`` shape gives every response its model and every comparison its annotator, as
annotators' files hold them; ``plain`` leaves them out. With ``--irregular`` 1% of the rows are
irregular as in a live annotation export (``synthetic.irregular_lines``: rows not compared yet,
a prompt annotated in two rows of one id, triple-wise task rows, cut-off lines, comparisons
naming a missing response); both commands then skip what they cannot rank (``cheems rank
--skip-invalid``, ``plain_rank.py --skip-invalid``), and the ranks are compared on the prompts
both wrote (cheems also ranks the task rows). Goal: cheems at least GOAL times faster on 30k
prompts. Each
command runs once untimed first, with bytecode caching on (in a temporary PYTHONPYCACHEPREFIX,
even where PYTHONDONTWRITEBYTECODE is set), so neither side pays for compiling its sources on
every run, as an installed package would not.
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

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from synthetic import irregular_lines, synthetic_rows  # noqa: E402


def timed(cmd: list[str], repeat: int, env: dict[str, str]) -> float:
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)  # warm-up
    best = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
        best = min(best, time.perf_counter() - t)
    return best


def ranks(path: Path) -> dict:
    with open(path, encoding="utf-8") as f:
        return {row["id"]: row["rank"] for row in map(json.loads, f)}


GOAL = 3.0


def annotated(row: dict) -> dict:
    """A synthetic row as annotators' files hold it: each response with its model, each
    comparison with its annotator."""
    for j, r in enumerate(row["responses"]):
        r["model"] = f"model-{j % 4}"
    for k, c in enumerate(row["comparisons"]):
        c["annotator"] = f"ann{k % 7:02d}"
    return row


def measure(shape: str, n_prompts: int, repeat: int, d: Path, irregular: bool) -> tuple[float, float, bool]:
    """(cheems rank seconds, plain script seconds, identical ranks) on one synthetic file."""
    cheems = Path(sys.executable).parent / "cheems"
    src = d / f"input-{shape}.jsonl"
    rows = [annotated(row) if shape == "annotated" else row for row in synthetic_rows(n_prompts)]
    lines, counts = irregular_lines(rows) if irregular else ([json.dumps(r, ensure_ascii=False) for r in rows], {})
    src.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    print(f"{shape} input: {n_prompts:,} prompts, {os.path.getsize(src) / 2**20:.1f} MiB")
    if irregular:
        print(f"  irregular rows: {sum(counts.values())} of {len(lines):,} "
              f"({', '.join(f'{n} {kind}' for kind, n in counts.items())})")
    skip = ["--skip-invalid"] if irregular else []
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPYCACHEPREFIX"] = str(d / "pycache")  # bytecode cached, for both commands alike
    ours = timed([str(cheems), "rank", str(src), "-o", str(d / "ours.jsonl"), *skip], repeat, env)
    base = timed([sys.executable, str(HERE / "plain_rank.py"), str(src), str(d / "plain.jsonl"), *skip], repeat, env)
    ours_ranks, plain_ranks = ranks(d / "ours.jsonl"), ranks(d / "plain.jsonl")
    if not irregular:
        return ours, base, ours_ranks == plain_ranks
    extra = len(ours_ranks) - len(plain_ranks)
    print(f"  prompts ranked: cheems {len(ours_ranks):,}, plain {len(plain_ranks):,} "
          f"(cheems also reads the {counts['task row']} task rows: {extra == counts['task row']})")
    return ours, base, extra == counts["task row"] and all(ours_ranks.get(k) == v for k, v in plain_ranks.items())


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--prompts", type=int, default=30_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--shape", choices=("annotated", "plain", "both"), default="both")
    ap.add_argument("--irregular", action="store_true", help="1%% of the rows irregular, skipped or joined")
    args = ap.parse_args()
    same = True
    with tempfile.TemporaryDirectory() as d:
        for shape in ("annotated", "plain") if args.shape == "both" else (args.shape,):
            ours, base, identical = measure(shape, args.prompts, args.repeat, Path(d), args.irregular)
            same = same and identical
            ratio = base / ours
            label = f"{shape}, irregular" if args.irregular else shape
            print(f"  cheems rank:           {ours:.2f} s (best of {args.repeat})")
            print(f"  plain json + networkx: {base:.2f} s (best of {args.repeat})   identical ranks: {identical}")
            print(f"cheems rank vs plain ({label}): {ratio:.1f}x (goal {GOAL:g}x: "
                  f"{'meets' if ratio >= GOAL else 'misses'})")
    if not same:
        sys.exit("ranks differ from the plain script")


if __name__ == "__main__":
    main()
