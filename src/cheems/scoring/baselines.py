"""Baseline scorers: response length (the length-bias baseline) and seeded random scores."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from cheems.metrics import check_seed
from cheems.records import CheemsInputError, Prompt
from cheems.scoring.scorer import Progress, ScoredRows, ScorerDefaults

__all__ = ["check_seed", "BASELINES", "BaselineScorer", "length_scores", "random_scores"]


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


@dataclass
class BaselineScorer(ScorerDefaults):
    """A baseline of :data:`BASELINES` (``name``: length or random, with ``seed``) as a
    :class:`~cheems.scoring.scorer.RewardScorer`: no model, no tokens, no forward batches."""

    name: str = "length"
    seed: int = 0

    def __post_init__(self) -> None:
        if self.name not in BASELINES:
            raise CheemsInputError(f"no baseline {self.name!r}; the baselines are {', '.join(BASELINES)}",
                                   field="scorer")
        check_seed(self.seed)

    def score_prompts(self, prompts: Sequence[Prompt], *, batch_size: int = 64, done: set | None = None,
                      progress: Progress | None = None) -> ScoredRows:
        """Every response's baseline score not in ``done``, as one batch (the random scores are
        drawn over all of ``prompts``, so a resumed run gives each response the same score)."""
        done = done or set()
        rows = [(pid, rid, s) for (pid, rid), s in BASELINES[self.name](list(prompts), self.seed).items()
                if (pid, rid) not in done]
        if progress:
            progress(0, len(rows))
        yield rows
        if progress:
            progress(len(rows), len(rows))
