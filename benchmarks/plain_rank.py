"""The plain approach to `cheems rank`: standard json module + networkx, one prompt at a time.

Usage: python plain_rank.py ANNOTATIONS.jsonl OUT.jsonl [--skip-invalid]

Same algorithm as cheems.graph.resolve_conflicts (graph from better to worse, ties both
ways, cycles condensed, layers from a topological sort); kept here as the baseline the
benchmarks measure against. With ``--skip-invalid`` it reads a live annotation export as such a
script would: lines that are not JSON, rows without comparisons (not compared yet, or of
another shape) and rows whose comparisons name a response they lack are skipped, and the rows
of one prompt id are joined (responses united, comparisons concatenated) in the place of the
first.
"""

from __future__ import annotations

import json
import sys

import networkx as nx


def resolve_prompt(response_ids: list[str], comparisons: list[dict]) -> dict[str, int]:
    g = nx.DiGraph()
    g.add_nodes_from(response_ids)
    for c in comparisons:
        if c["label"] in ("g", "s"):
            g.add_edge(c["a"], c["b"])
        if c["label"] in ("b", "s"):
            g.add_edge(c["b"], c["a"])
    cond = nx.condensation(g)
    rank = {}
    for layer, nodes in enumerate(nx.topological_generations(cond)):
        for node in nodes:
            for rid in cond.nodes[node]["members"]:
                rank[rid] = layer
    return rank


def main(src: str, dst: str) -> None:
    with open(src, encoding="utf-8") as f, open(dst, "w", encoding="utf-8") as out:
        for line in f:
            if not line.strip():
                continue
            row = json.loads(line)
            ids = [r["id"] for r in row["responses"]]
            row["rank"] = resolve_prompt(ids, row["comparisons"])
            del row["comparisons"]
            out.write(json.dumps(row, ensure_ascii=False) + "\n")


def main_skipping(src: str, dst: str) -> None:
    rows: dict[str, dict] = {}
    with open(src, encoding="utf-8") as f:
        for line in f:
            try:
                row = json.loads(line)
            except ValueError:  # blank, or cut off
                continue
            comps = row.get("comparisons")
            if not comps or not isinstance(row.get("responses"), list):
                continue
            ids = {r["id"] for r in row["responses"]}
            if any(c["a"] not in ids or c["b"] not in ids for c in comps):
                continue
            first = rows.setdefault(row["id"], row)
            if first is not row:
                known = {r["id"] for r in first["responses"]}
                first["responses"] += [r for r in row["responses"] if r["id"] not in known]
                first["comparisons"] = first["comparisons"] + comps
    with open(dst, "w", encoding="utf-8") as out:
        for row in rows.values():
            row["rank"] = resolve_prompt([r["id"] for r in row["responses"]], row.pop("comparisons"))
            out.write(json.dumps(row, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    if sys.argv[3:] == ["--skip-invalid"]:
        main_skipping(sys.argv[1], sys.argv[2])
    else:
        main(sys.argv[1], sys.argv[2])
