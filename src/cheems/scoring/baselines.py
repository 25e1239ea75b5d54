"""Baseline scorers: response length (the length-bias baseline) and seeded random scores."""

from __future__ import annotations

import numpy as np

from cheems.metrics import check_seed
from cheems.records import Prompt

__all__ = ["check_seed", "BASELINES", "length_scores", "random_scores"]


def length_scores(prompts: list[Prompt], seed: int = 0) -> dict[tuple[str, str], float]:
    """Score each response by its number of characters: longer is "better"."""
    return {(p.id, r.id): float(len(r.content)) for p in prompts for r in p.responses}


def random_scores(prompts: list[Prompt], seed: int = 0) -> dict[tuple[str, str], float]:
    """Uniform random scores, reproducible for a given seed (an integer >= 0) and prompt order."""
    check_seed(seed)
    keys = [(p.id, r.id) for p in prompts for r in p.responses]
    values = np.random.default_rng(seed).random(len(keys)).tolist()
    return dict(zip(keys, values))


BASELINES = {"length": length_scores, "random": random_scores}
