"""Synthetic annotation data with the shape of CheemsBench annotations, for benchmarks.

Each prompt has 5-10 responses with a hidden quality order; about 60% of the response pairs
are compared and about 20% of the comparisons are noisy (reversed or marked as a tie), which
produces the cycles that conflict resolution has to merge. :func:`irregular_lines` writes such
rows with a share of them irregular, as a live annotation export holds them.
"""

from __future__ import annotations

import json
import random


def synthetic_rows(n_prompts: int, *, seed: int = 0, min_responses: int = 5, max_responses: int = 10,
                   compared: float = 0.6, noise: float = 0.2) -> list[dict]:
    rng = random.Random(seed)
    rows = []
    for i in range(n_prompts):
        n = rng.randint(min_responses, max_responses)
        ids = [f"r{j}" for j in range(n)]
        quality = list(range(n))
        rng.shuffle(quality)
        comps = []
        for x in range(n):
            for y in range(x + 1, n):
                if rng.random() >= compared:
                    continue
                label = "g" if quality[x] > quality[y] else "b"
                if rng.random() < noise:
                    label = rng.choice(("s", "b" if label == "g" else "g"))
                comps.append({"a": ids[x], "b": ids[y], "label": label})
        rows.append({
            "id": f"syn-{i}", "prompt": f"第{i}个问题：请解释一下这个概念。",
            "category": ["理解"], "subset": "open" if i % 2 else "human",
            "responses": [{"id": r, "content": f"回答{r}：" + "内容" * (5 + j)} for j, r in enumerate(ids)],
            "comparisons": comps,
        })
    return rows


IRREGULAR_KINDS = ("no comparisons", "repeated id", "task row", "cut-off line", "unknown response")
"""The irregular rows of :func:`irregular_lines`, one kind after another."""


def irregular_lines(rows: list[dict], *, share: float = 0.01) -> tuple[list[str], dict[str, int]]:
    """The rows as JSONL lines, about ``share`` of them irregular as a live annotation export
    holds them, the kinds of :data:`IRREGULAR_KINDS` in turn: a prompt not compared yet (no
    comparisons), a prompt annotated in two tasks (two rows of one id, its comparisons split
    between them), a triple-wise task row (another format: what ``cheems tasks`` writes, with
    its ranking filled in), a line cut off mid-row (broken JSON), a comparison naming a response
    the row lacks. Returns the lines and how many rows of each kind they hold."""
    step = max(round(1 / share), 1)
    lines, counts = [], dict.fromkeys(IRREGULAR_KINDS, 0)
    for i, row in enumerate(rows):
        if i % step != step // 2:
            lines.append(_line(row))
            continue
        kind = IRREGULAR_KINDS[(i // step) % len(IRREGULAR_KINDS)]
        counts[kind] += 1
        comps = row["comparisons"]
        if kind == "no comparisons":
            lines.append(_line({**row, "comparisons": []}))
        elif kind == "repeated id":
            half = len(comps) // 2
            lines += [_line({**row, "comparisons": comps[:half]}), _line({**row, "comparisons": comps[half:]})]
            counts[kind] += 1
        elif kind == "task row":
            x, y, z = (r["id"] for r in row["responses"][:3])
            lines.append(_line({"task_id": f"{row['id']}#1", "prompt_id": row["id"], "round": 1,
                                "prompt": row["prompt"], "ids": [x, y, z], "responses": row["responses"][:3],
                                "ranking": f"{y}>{x}={z}", "annotator": "ann03"}))
        elif kind == "cut-off line":
            whole = _line(row)
            lines.append(whole[:len(whole) // 2])
        else:
            lines.append(_line({**row, "comparisons": comps + [{"a": "r0", "b": "r99", "label": "g"}]}))
    return lines, counts


def _line(row: dict) -> str:
    return json.dumps(row, ensure_ascii=False)
