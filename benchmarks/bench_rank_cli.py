"""`cheems rank` end to end (start-up, parse, resolve, write) vs a plain Python script that
parses with the standard json module and resolves each prompt with networkx.

Usage: python benchmarks/bench_rank_cli.py [--prompts 30000] [--repeat 3]
Both run as subprocesses on the same synthetic file; the outputs' ranks are compared. Each
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

from synthetic import synthetic_rows  # noqa: E402


def timed(cmd: list[str], repeat: int, env: dict[str, str]) -> float:
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)  # warm-up
    best = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, env=env)
        best = min(best, time.perf_counter() - t)
    return best


def ranks(path: Path) -> dict:
    with open(path, encoding="utf-8") as f:
        return {row["id"]: row["rank"] for row in map(json.loads, f)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--prompts", type=int, default=30_000)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    cheems = Path(sys.executable).parent / "cheems"
    with tempfile.TemporaryDirectory() as d:
        d = Path(d)
        src = d / "annotations.jsonl"
        with open(src, "w", encoding="utf-8") as f:
            for row in synthetic_rows(args.prompts):
                f.write(json.dumps(row, ensure_ascii=False) + "\n")
        print(f"input: {args.prompts:,} prompts, {os.path.getsize(src) / 2**20:.1f} MiB")
        env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        env["PYTHONPYCACHEPREFIX"] = str(d / "pycache")  # bytecode cached, for both commands alike
        ours = timed([str(cheems), "rank", str(src), "-o", str(d / "ours.jsonl")], args.repeat, env)
        base = timed([sys.executable, str(HERE / "plain_rank.py"), str(src), str(d / "plain.jsonl")], args.repeat,
                     env)
        same = ranks(d / "ours.jsonl") == ranks(d / "plain.jsonl")
    print(f"cheems rank:               {ours:.2f} s (best of {args.repeat})")
    print(f"plain json + networkx:     {base:.2f} s (best of {args.repeat})")
    print(f"speed-up: {base / ours:.1f}x   identical ranks: {same}")
    if not same:
        sys.exit("ranks differ from the plain script")


if __name__ == "__main__":
    main()
