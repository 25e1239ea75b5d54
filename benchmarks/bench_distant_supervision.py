"""Distant supervision of 27,861 prompts x 5-6 responses, every pair judged (paper §4.2):
cheems (all prompts at once, numpy + scipy) vs a per-prompt networkx implementation of the
same rule.

Usage: python benchmarks/bench_distant_supervision.py [--prompts 27861] [--repeat 3]
           [--one-order] [--scope cycles|all] [--margin 0.0] [--plain-prompts N] [--cli]

The data: each response has a hidden quality; the judge labels every pair (in both orders
unless --one-order) from the quality difference plus noise, calling close pairs a tie, which
gives 2-cycles, longer cycles and ties inside them; the RM score is the quality plus a
smaller noise. Prints the compute time of both (best of --repeat for cheems; the plain one
runs once, on --plain-prompts prompts, extrapolated when that is fewer than all; both with
the garbage collector paused, as the library does), the speed-up against the goal of 10x,
the comparison and conflict counts, and checks that both keep and drop the same comparisons.

It also times two parts of the work that do not depend on the filtering algorithm: turning
the `Prompt` objects into arrays (`cheems.graph.comparison_arrays`: every comparison's a, b
and label and every response id read once) and copying the prompts (one new `Prompt` per
prompt, its comparisons re-listed), the least that returning filtered copies costs. The
networkx time over their sum is the speed-up reachable were the algorithm itself free. And it
times the rule alone, each side on its own input in memory and deciding only which comparisons
stay: `supervise_arrays` on the arrays the columnar path of `curate resolve` reads the rows
into, against networkx given the Prompt objects and the score dict.

With --cli it measures the command end to end instead: the data are written to a judged JSONL
file and a SCORES file, then each of these runs as a new process, best of --repeat, output to
a JSONL file: `cheems curate resolve judged.jsonl --scores scores.jsonl` as a user runs it (rows
read straight into arrays, the columnar path), the same command with the columnar path switched
off (Prompt objects, the reference), and PLAIN_SCRIPT, a plain json + networkx script doing the
same. All three must write the same bytes. Each command runs once untimed first, with bytecode
caching on (in a temporary PYTHONPYCACHEPREFIX, even where PYTHONDONTWRITEBYTECODE is set), so
that none pays for compiling its sources on every run, as an installed package would not.
"""

from __future__ import annotations

import argparse
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import networkx as nx

from cheems.curation.distant_supervision import distant_supervision
from cheems.io import gc_paused
from cheems.graph import comparison_arrays, resolve_conflicts
from cheems.records import Comparison, Prompt, Response

CATEGORIES = ["理解", "知识", "推理", "数学", "代码", "写作", "角色扮演", "安全"]


def synthetic_judged(n_prompts: int, *, seed: int = 0, both_orders: bool = True, judge_noise: float = 0.4,
                     tie_width: float = 0.1, rm_noise: float = 0.3) -> tuple[list[Prompt], dict]:
    """Prompts with every response pair judged by a noisy judge, and RM scores for them."""
    rng = random.Random(seed)
    prompts: list[Prompt] = []
    scores: dict[tuple[str, str], float] = {}
    for i in range(n_prompts):
        pid = f"pref-{i}"
        n = rng.randint(5, 6)
        ids = [f"m{j}" for j in range(n)]
        quality = [rng.gauss(0.0, 1.0) for _ in ids]
        comps = []
        for x in range(n):
            for y in range(x + 1, n):
                orders = [(x, y), (y, x)] if both_orders else [rng.choice([(x, y), (y, x)])]
                for u, v in orders:
                    seen = quality[u] - quality[v] + rng.gauss(0.0, judge_noise)
                    label = "s" if abs(seen) < tie_width else "g" if seen > 0 else "b"
                    comps.append(Comparison(ids[u], ids[v], label, annotator="judge", source="pairwise"))
        for rid, q in zip(ids, quality):
            scores[(pid, rid)] = q + rng.gauss(0.0, rm_noise)
        prompts.append(Prompt(pid, f"第{i}个问题：请比较这些回答。",
                              [Response(r, f"回答{r}：" + "内容" * (3 + j)) for j, r in enumerate(ids)],
                              comparisons=comps, category=[CATEGORIES[i % len(CATEGORIES)], "子类"],
                              subset="open" if i % 2 else "human"))
    return prompts, scores


def plain_prompt(p: Prompt, scores: dict, scope: str, margin: float) -> list[bool]:
    """Which of one prompt's comparisons to keep: networkx SCCs, one comparison at a time."""
    s = {r.id: scores[(p.id, r.id)] for r in p.responses}

    def edges(c: Comparison) -> list[tuple[str, str]]:
        return [(c.a, c.b)] if c.label == "g" else [(c.b, c.a)] if c.label == "b" else [(c.a, c.b), (c.b, c.a)]

    def rm_gap(c: Comparison) -> float:  # chosen minus rejected; for a tie, a minus b
        return s[c.b] - s[c.a] if c.label == "b" else s[c.a] - s[c.b]

    keep = [True] * len(p.comparisons)
    if scope == "all":
        for k, c in enumerate(p.comparisons):
            gap = rm_gap(c)
            if (c.label == "s" and abs(gap) > margin) or (c.label != "s" and -gap > margin):
                keep[k] = False
    g = nx.DiGraph()
    g.add_nodes_from(s)
    for c, alive in zip(p.comparisons, keep):
        if alive:
            g.add_edges_from(edges(c))
    component = {}
    for k, members in enumerate(nx.strongly_connected_components(g)):
        for rid in members:
            component[rid] = k
    conflicting = {component[c.a] for c, alive in zip(p.comparisons, keep)
                   if alive and c.label != "s" and component[c.a] == component[c.b]}
    for k, c in enumerate(p.comparisons):
        if keep[k] and component[c.a] == component[c.b] and component[c.a] in conflicting:
            keep[k] = rm_gap(c) > 0 if c.label != "s" else rm_gap(c) == 0
    return keep


def plain_supervise(p: Prompt, scores: dict, scope: str, margin: float) -> Prompt:
    """One prompt filtered the plain way, with the same output as the library: the kept
    comparisons, and the dropped ones appended to extra with their reason."""
    keep = plain_prompt(p, scores, scope, margin)
    s = {r.id: scores[(p.id, r.id)] for r in p.responses}
    dropped = []
    for c, k in zip(p.comparisons, keep):
        if k:
            continue
        gap = s[c.b] - s[c.a] if c.label == "b" else s[c.a] - s[c.b]
        if scope == "all" and (abs(gap) if c.label == "s" else -gap) > margin:
            why = "rm_contradicts_margin"
        else:
            why = "tie_in_cycle" if c.label == "s" else "rm_disagrees_in_cycle"
        dropped.append({**c.to_dict(), "dropped": why})
    extra = dict(p.extra)
    if dropped:
        extra["dropped_comparisons"] = list(extra.get("dropped_comparisons", [])) + dropped
    return Prompt(p.id, p.prompt, list(p.responses), rank=p.rank,
                  comparisons=[c for c, k in zip(p.comparisons, keep) if k],
                  category=list(p.category), subset=p.subset, extra=extra)


def time_stage(prompts: list[Prompt], scores: dict, scope: str, margin: float) -> float:
    """Seconds of the whole resolve stage through files: the judged rows and the scores are
    written first (not timed), then read, resolved and written by `run_resolve`."""
    import tempfile

    from cheems.curation.stages import run_resolve
    from cheems.formats import score_rows
    from cheems.io import write_jsonl

    with tempfile.TemporaryDirectory() as d:
        judged, scored = Path(d) / "judged.jsonl", Path(d) / "scores.jsonl"
        write_jsonl(judged, (p.to_dict() for p in prompts))
        write_jsonl(scored, score_rows(scores))
        t = time.perf_counter()
        run_resolve([judged], Path(d) / "resolved.jsonl", scores=scored, scope=scope, margin=margin)
        return time.perf_counter() - t


GOAL = 10.0  # the speed-up over networkx that the distant-supervision goal asks for


def copy_prompts(prompts: list[Prompt]) -> list[Prompt]:
    """New prompts with the same fields and re-listed comparisons: the least work of any
    function that returns filtered copies of its input prompts."""
    return [Prompt(p.id, p.prompt, list(p.responses), p.rank, list(p.comparisons), list(p.category), p.subset,
                   dict(p.extra)) for p in prompts]


def time_rule(prompts: list[Prompt], scores: dict, scope: str, margin: float, repeat: int) -> tuple[float, float]:
    """Seconds of the filtering rule alone, without reading the input or making the output:
    cheems' :func:`supervise_arrays` (best of ``repeat``) on the comparison and score arrays, as
    the columnar path of `curate resolve` builds them from the rows; networkx (once) deciding
    which of each prompt's comparisons to keep (:func:`plain_prompt`), given the objects and
    the score dict. Checks that both keep the same comparisons."""
    import numpy as np

    from cheems.curation.distant_supervision import _node_scores, supervise_arrays

    offsets, a, b, lab, owner, ids = comparison_arrays(prompts)
    score = _node_scores(prompts, scores, offsets, ids, a, b)
    ours = best_time(lambda: supervise_arrays(offsets, a, b, lab, owner, score, scope=scope, margin=margin), repeat)
    with gc_paused():
        t = time.perf_counter()
        keep = [plain_prompt(p, scores, scope, margin) for p in prompts]
        plain_s = time.perf_counter() - t
    reason = supervise_arrays(offsets, a, b, lab, owner, score, scope=scope, margin=margin)[0]
    if not np.array_equal(reason == 0, np.fromiter((k for row in keep for k in row), bool, len(reason))):
        sys.exit("the rule on arrays keeps other comparisons than networkx")
    return ours, plain_s


def best_time(fn, repeat: int) -> float:
    """Best wall time of ``repeat`` calls of ``fn()``, the garbage collector paused."""
    times = []
    with gc_paused():
        for _ in range(repeat):
            t = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t)
    return min(times)


PLAIN_SCRIPT = r"""
# Distant supervision of a judged JSONL file with a scores file, plain: json and networkx, one
# prompt at a time. Usage: python plain.py JUDGED SCORES OUT SCOPE MARGIN
import json, sys
import networkx as nx

judged, scores_path, out, scope, margin = sys.argv[1:4] + [sys.argv[4], float(sys.argv[5])]
scores = {}
with open(scores_path, encoding="utf-8") as f:
    for line in f:
        row = json.loads(line)
        scores[(row["prompt_id"], row["response_id"])] = float(row["score"])

def gap(c, s):  # the RM's score of the chosen response minus the rejected one; for a tie, a minus b
    return s[c["b"]] - s[c["a"]] if c["label"] == "b" else s[c["a"]] - s[c["b"]]

def reasons(row):  # why each comparison is dropped, None: kept
    s = {r["id"]: scores[(row["id"], r["id"])] for r in row["responses"]}
    comps = row.get("comparisons", [])
    why = [None] * len(comps)
    if scope == "all":
        for k, c in enumerate(comps):
            if (abs(gap(c, s)) if c["label"] == "s" else -gap(c, s)) > margin:
                why[k] = "rm_contradicts_margin"
    g = nx.DiGraph()
    g.add_nodes_from(s)
    for c, w in zip(comps, why):
        if w is None:
            better, worse = (c["b"], c["a"]) if c["label"] == "b" else (c["a"], c["b"])
            g.add_edge(better, worse)
            if c["label"] == "s":
                g.add_edge(worse, better)
    component = {rid: k for k, members in enumerate(nx.strongly_connected_components(g)) for rid in members}
    conflicting = {component[c["a"]] for c, w in zip(comps, why)
                   if w is None and c["label"] != "s" and component[c["a"]] == component[c["b"]]}
    for k, c in enumerate(comps):
        if why[k] is None and component[c["a"]] == component[c["b"]] and component[c["a"]] in conflicting:
            if c["label"] != "s" and not gap(c, s) > 0:
                why[k] = "rm_disagrees_in_cycle"
            elif c["label"] == "s" and gap(c, s) != 0:
                why[k] = "tie_in_cycle"
    return why

with open(judged, encoding="utf-8") as f, open(out, "w", encoding="utf-8") as w:
    for line in f:
        row = json.loads(line)
        comps = row.get("comparisons", [])
        why = reasons(row)
        dropped = [{**c, "dropped": r} for c, r in zip(comps, why) if r is not None]
        if dropped:
            row["comparisons"] = [c for c, r in zip(comps, why) if r is None]
            if not row["comparisons"]:
                del row["comparisons"]
            row["dropped_comparisons"] = row.get("dropped_comparisons", []) + dropped
        w.write(json.dumps(row, ensure_ascii=False, separators=(",", ":")) + "\n")
"""

OBJECT_PATH = ("import sys\n"
               "import cheems.curation.stages as stages\n"
               "stages._resolve_columns = lambda *a, **k: None  # the columnar path off: Prompt objects\n"
               "from cheems.cli import main\n"
               "sys.argv[0] = 'cheems'\n"
               "main()\n")


def time_cli(prompts: list[Prompt], scores: dict, scope: str, margin: float, repeat: int) -> None:
    """Time `cheems curate resolve --scores` end to end, each run a new process, against the
    same command on the object path and against PLAIN_SCRIPT; print the times and ratios and
    check that the three outputs hold the same bytes."""
    from cheems.formats import score_rows
    from cheems.io import write_jsonl

    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        judged, scored, plain = tmp / "judged.jsonl", tmp / "scores.jsonl", tmp / "plain.py"
        write_jsonl(judged, (p.to_dict() for p in prompts))
        write_jsonl(scored, score_rows(scores))
        plain.write_text(PLAIN_SCRIPT, encoding="utf-8")
        flags = ["--scope", scope, "--margin", str(margin)]
        runs = {
            "cheems curate resolve (columnar)": [str(Path(sys.executable).with_name("cheems")), "curate", "resolve",
                                                 str(judged), "--scores", str(scored), *flags, "-o"],
            "cheems curate resolve, object path": [sys.executable, "-c", OBJECT_PATH, "curate", "resolve", str(judged),
                                                   "--scores", str(scored), *flags, "-o"],
            "plain json + networkx script": [sys.executable, str(plain), str(judged), str(scored)],
        }
        best, outputs = {}, {}
        env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        env["PYTHONPYCACHEPREFIX"] = str(tmp / "pycache")  # bytecode cached, for all three alike
        for name, command in runs.items():
            out = tmp / f"out{len(best)}.jsonl"
            command = command + ([str(out)] if command[-1] == "-o" else [str(out), scope, str(margin)])
            subprocess.run(command, check=True, capture_output=True, env=env)  # untimed: compiles the sources
            times = []
            for _ in range(repeat):
                t = time.perf_counter()
                subprocess.run(command, check=True, capture_output=True, env=env)
                times.append(time.perf_counter() - t)
            best[name], outputs[name] = min(times), out.read_bytes()
        print(f"end to end, a new process each run, best of {repeat} ({len(prompts):,} rows, "
              f"{judged.stat().st_size / 1e6:.1f} MB judged, {scored.stat().st_size / 1e6:.1f} MB scores):")
        ours = best["cheems curate resolve (columnar)"]
        for name, seconds in best.items():
            print(f"  {name}: {seconds:.2f} s ({seconds / ours:.2f}x the columnar command)")
        same = len(set(outputs.values())) == 1
        print(f"the three outputs hold the same bytes: {same}")
        if not same:
            sys.exit("the outputs differ")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--prompts", type=int, default=27_861)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--one-order", action="store_true", help="judge each pair once, in a random order")
    ap.add_argument("--scope", choices=("cycles", "all"), default="cycles")
    ap.add_argument("--margin", type=float, default=0.0)
    ap.add_argument("--plain-prompts", type=int, default=None,
                    help="run the networkx version on this many prompts and extrapolate (default: all)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--no-stage", action="store_true",
                    help="skip timing `cheems curate resolve --scores` end to end (files in and out)")
    ap.add_argument("--cli", action="store_true",
                    help="only time the command end to end (new processes) against its object path and a plain "
                         "json + networkx script")
    args = ap.parse_args()

    prompts, scores = synthetic_judged(args.prompts, seed=args.seed, both_orders=not args.one_order)
    if args.cli:
        time_cli(prompts, scores, args.scope, args.margin, args.repeat)
        return
    n_resp = sum(len(p.responses) for p in prompts)
    n_comp = sum(len(p.comparisons) for p in prompts)
    print(f"data: {len(prompts):,} prompts, {n_resp:,} responses, {n_comp:,} comparisons "
          f"({'one order' if args.one_order else 'both orders'}), scope={args.scope}, margin={args.margin}")

    times = []
    for _ in range(args.repeat):
        t = time.perf_counter()
        res = distant_supervision(prompts, scores, scope=args.scope, margin=args.margin)
        times.append(time.perf_counter() - t)
    ours = min(times)

    reading = best_time(lambda: comparison_arrays(prompts), args.repeat)
    copying = best_time(lambda: copy_prompts(prompts), args.repeat)
    rule, plain_rule = time_rule(prompts, scores, args.scope, args.margin, args.repeat)

    n_plain = len(prompts) if args.plain_prompts is None else min(args.plain_prompts, len(prompts))
    subset = prompts[:n_plain]
    with gc_paused():  # as the library does, so that the ratio measures the algorithm alone
        t = time.perf_counter()
        plain = [plain_supervise(p, scores, args.scope, args.margin) for p in subset]
        plain_s = time.perf_counter() - t
    plain_full = plain_s * len(prompts) / max(n_plain, 1)

    same = all(p.comparisons == q.comparisons and p.extra == q.extra for p, q in zip(plain, res.prompts))
    after = resolve_conflicts(res.prompts)
    rep = res.report()["total"]

    print(f"cheems distant_supervision: {ours:.3f} s (best of {args.repeat})")
    print(f"  of which turning the Python objects into arrays (cheems.graph.comparison_arrays): "
          f"{reading:.3f} s; the rest is RM lookups, SCCs, filtering and the output prompts")
    if n_plain == len(prompts):
        print(f"networkx, one prompt at a time: {plain_s:.3f} s")
    else:
        print(f"networkx, one prompt at a time: {plain_s:.3f} s on {n_plain:,} prompts, "
              f"extrapolated to {plain_full:.3f} s for all {len(prompts):,}")
    ratio = plain_full / ours
    print(f"same kept and dropped comparisons on {n_plain:,} prompts: {same}")
    print(f"cheems vs networkx: {ratio:.1f}x (goal {GOAL:g}x: {'meets' if ratio >= GOAL else 'misses'})")
    floor = reading + copying
    print(f"  work outside the algorithm: reading the objects into arrays {reading:.3f} s + copying the "
          f"prompts {copying:.3f} s = {floor:.3f} s; were the algorithm free: {plain_full / floor:.1f}x")
    print(f"the rule alone (each comparison kept or dropped): cheems on the arrays that `curate resolve` reads "
          f"the rows into (supervise_arrays) {rule:.3f} s, networkx on the Prompt objects {plain_rule:.3f} s: "
          f"{plain_rule / rule:.1f}x")
    reasons = ", ".join(f"{k} {v:,}" for k, v in rep["dropped_by_reason"].items())
    print(f"comparisons: in {rep['comparisons']:,}, kept {rep['kept']:,}, dropped {rep['dropped']:,} ({reasons})")
    print(f"prompts with conflicts: before {rep['prompts_with_conflicts_before']:,}, "
          f"after {rep['prompts_with_conflicts_after']:,} "
          f"(resolve_conflicts on the result: {int(after.n_conflicts.sum())} conflicting comparisons)")
    print(f"judge-RM agreement on strict comparisons: {rep['judge_rm_agreement']:.3f} "
          f"({rep['strict_comparisons']:,} strict)")
    if not args.no_stage:
        stage_s = time_stage(prompts, scores, args.scope, args.margin)
        print(f"`cheems curate resolve --scores` stage, JSONL in and out ({len(prompts):,} rows): "
              f"{stage_s:.2f} s (reading, resolving, writing output and report)")
    if not same:
        sys.exit("kept comparisons differ from the networkx reference")
    if rep["prompts_with_conflicts_after"] or after.n_conflicts.any():
        sys.exit("conflicts remain after filtering")


if __name__ == "__main__":
    main()
