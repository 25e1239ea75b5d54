"""Load on the annotation server: many annotators submitting at once over HTTP, on SQLite and PostgreSQL.

Usage: python benchmarks/bench_annotate.py [--annotators 50] [--annotations 2000] [--overlap 2]
                                           [--db sqlite|postgres|both] [--no-kill]

For each database: a fresh database (a SQLite file; a database in a throwaway PostgreSQL 15 cluster
with its crash-safe defaults, fsync on, like the SQLite file's synchronous=FULL) gets Chinese prompts
of five responses (varied lengths, some code, some chats) imported with ``--overlap``, enough triple
tasks for ``--annotations`` submissions. A real ``cheems annotate serve`` (uvicorn, one process) runs
on loopback and ``--annotators`` threads, each with its own HTTP client and session, log in, are
released together and loop next/submit with random valid answers until the server has nothing left.

Checked after the run, from ``cheems annotate export --raw``: every submission answered 201 stored
exactly once, no task handed twice to one person or to more than ``--overlap`` people, every task
annotated by exactly ``--overlap`` people (no lost update), no 5xx. Printed: submissions/s (accepted
submissions over the time from release to the last answer) and p50/p95 latency of submit and next.

Then (unless ``--no-kill``) the same load on a fresh database, with ``kill -9`` of the server once
half the submissions are in; the server restarts on the same database, the annotators log in again
and finish. Printed: how many 201s were lost (must be 0), and the same checks.
The process exits non-zero when any check fails.
"""

from __future__ import annotations

import argparse
import collections
import math
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the load driver and the cluster helper live with the tests

from tests.postgres_cluster import ClusterUnavailable, create_database, throwaway_cluster  # noqa: E402
from tests.test_annotate_kill import (LoadLog, ServeProcess, load_problems, prepare_database,  # noqa: E402
                                      run_annotators, stored_annotations, write_prompts)

RESPONSES_PER_PROMPT = 5  # five responses -> five circular triple tasks per prompt


def percentile(values: list[float], q: float) -> float:
    """The ``q``-quantile (0..1) of ``values``, nearest rank."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))] if ordered else float("nan")


def prepared(url: str, folder: Path, args: argparse.Namespace) -> tuple[list[str], int]:
    """Fill a fresh database: users and enough prompts for ``args.annotations``; returns names and task count."""
    names = [f"标注员{i:03d}" for i in range(args.annotators)]
    n_prompts = math.ceil(args.annotations / (RESPONSES_PER_PROMPT * args.overlap))
    folder.mkdir(parents=True, exist_ok=True)
    prepare_database(url, write_prompts(folder / "prompts.jsonl", n_prompts, seed=1), names, args.overlap)
    return names, n_prompts * RESPONSES_PER_PROMPT


def last_traceback(log: Path, lines: int = 25) -> list[str]:
    """The end of the last traceback the server wrote, to say what a 5xx was."""
    text = log.read_text(encoding="utf-8", errors="replace") if log.is_file() else ""
    start = text.rfind("Traceback")
    return text[start:].splitlines()[-lines:] if start >= 0 else []


def complete(n_tasks: int, args: argparse.Namespace) -> int | None:
    """The task count to check for full coverage: none when fewer annotators than --overlap can finish nothing."""
    return n_tasks if args.annotators >= args.overlap else None


def timed_load(url: str, folder: Path, args: argparse.Namespace) -> dict:
    """One load to the end: throughput, latencies and the problems found."""
    names, n_tasks = prepared(url, folder, args)
    log = LoadLog()
    with ServeProcess(url, folder / "serve.log") as server:
        threads = list(run_annotators(server.base_url, names, log, seed=1))
        for thread in threads:
            thread.join()
        seconds = time.perf_counter() - log.started
    problems = load_problems(log, stored_annotations(url, folder), args.overlap, n_tasks=complete(n_tasks, args))
    return {"accepted": len(log.accepted), "seconds": seconds, "per_s": len(log.accepted) / seconds,
            "submit": [percentile(log.latencies["submit"], q) * 1000 for q in (0.5, 0.95)],
            "next": [percentile(log.latencies["next"], q) * 1000 for q in (0.5, 0.95)],
            "statuses": dict(log.statuses), "problems": problems, "traceback": last_traceback(folder / "serve.log")}


def killed_load(url: str, folder: Path, args: argparse.Namespace) -> dict:
    """The load with ``kill -9`` of the server halfway, a restart on the same database, and the rest."""
    names, n_tasks = prepared(url, folder, args)
    log = LoadLog()
    server = ServeProcess(url, folder / "serve.log")
    with ExitStack() as stack:
        stack.callback(server.stop)
        server.start()
        threads = list(run_annotators(server.base_url, names, log, seed=2))
        while len(log.accepted) < n_tasks * args.overlap // 2 and any(t.is_alive() for t in threads):
            time.sleep(0.002)
        server.kill()
        for thread in threads:
            thread.join()
        before_kill, cut_off = len(log.accepted), len(log.in_flight)
        server.start()
        for thread in list(run_annotators(server.base_url, names, log, seed=3)):
            thread.join()
    stored = stored_annotations(url, folder)
    stored_ids = {r["annotation_id"] for r in stored}
    lost = [a for a, _, _ in log.accepted if a not in stored_ids]
    problems = load_problems(log, stored, args.overlap, n_tasks=complete(n_tasks, args))
    return {"before_kill": before_kill, "in_flight": cut_off, "accepted": len(log.accepted), "stored": len(stored),
            "lost": len(lost), "problems": problems, "traceback": last_traceback(folder / "serve.log")}


def report(name: str, load: dict, kill: dict | None) -> bool:
    """Print one database's figures; True when every check held."""
    print(f"\n== {name}")
    print(f"   {load['accepted']} submissions in {load['seconds']:.1f} s: {load['per_s']:.0f} submissions/s")
    print(f"   submit latency p50 {load['submit'][0]:.1f} ms, p95 {load['submit'][1]:.1f} ms; "
          f"next p50 {load['next'][0]:.1f} ms, p95 {load['next'][1]:.1f} ms")
    print(f"   answers: {', '.join(f'{k}: {v}' for k, v in sorted(load['statuses'].items()))}")
    problems = load["problems"] + (kill["problems"] if kill else [])
    if kill:
        print(f"   kill -9 after {kill['before_kill']} accepted ({kill['in_flight']} submissions in flight): "
              f"{kill['accepted']} accepted in all, {kill['stored']} stored, {kill['lost']} 201s lost")
    print("   checks: " + ("every 201 stored once, no task handed twice, every task annotated by exactly "
                         "--overlap people, no 5xx" if not problems else f"{len(problems)} FAILED"))
    for line, n in collections.Counter(problems).most_common(15):
        print(f"     {n} x {line}")
    shown = []
    for run in (load, kill or {}):
        if run.get("traceback") and problems and run["traceback"] not in shown:
            shown.append(run["traceback"])
            print("   the server's last traceback:\n     " + "\n     ".join(run["traceback"]))
    return not problems


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--annotators", type=int, default=50)
    parser.add_argument("--annotations", type=int, default=2000, help="submissions in all (rounded up to whole "
                        "prompts of five triple tasks times --overlap)")
    parser.add_argument("--overlap", type=int, default=2)
    parser.add_argument("--db", choices=["sqlite", "postgres", "both"], default="both")
    parser.add_argument("--no-kill", action="store_true", help="skip the kill -9 run")
    args = parser.parse_args()
    print(f"{args.annotators} annotators, {args.annotations} submissions, overlap {args.overlap}, "
          f"one `cheems annotate serve` process on loopback")
    ok = True
    with tempfile.TemporaryDirectory(prefix="bench-annotate-") as tmp:
        folder = Path(tmp)
        if args.db in ("sqlite", "both"):
            load = timed_load(f"sqlite:///{folder / 'load.db'}", folder / "sqlite-load", args)
            kill = None if args.no_kill else killed_load(f"sqlite:///{folder / 'kill.db'}", folder / "sq-kill", args)
            ok &= report("SQLite (WAL, synchronous=FULL)", load, kill)
        if args.db in ("postgres", "both"):
            try:
                with throwaway_cluster(durable=True) as url:
                    load = timed_load(create_database(url, "load"), folder / "postgres-load", args)
                    kill = None if args.no_kill else killed_load(create_database(url, "kill"), folder / "pg-kill", args)
                    ok &= report("PostgreSQL 15 (throwaway cluster, fsync on)", load, kill)
            except ClusterUnavailable as err:
                print(f"\n== PostgreSQL: skipped, no throwaway cluster: {err}")
                ok &= args.db == "both"
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
