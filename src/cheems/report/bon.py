"""Best-of-n (paper §6.2): the expected true quality of the response a reward model picks among
n responses drawn from a prompt's N candidates.

For one prompt, sort the N candidates by reward ascending; the pick among a uniformly random
n-subset is its highest-reward member, which is the i-th smallest with probability
C(i-1, n-1) / C(N, n). So the expectation over all C(N, n) subsets is exact without sampling:

    E_n = sum_{i=n..N} C(i-1, n-1) / C(N, n) * gold_(i)

Candidates tied on reward are picked uniformly among themselves, which is the same as giving
each of them the mean gold value of its tie group (the formula is linear in gold). Prompts with
fewer than n candidates are left out of that n (and counted). Confidence intervals come from a
bootstrap over prompts, per category and overall.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Mapping, Sequence

import numpy as np

from cheems.metrics import quantile_interval
from cheems.records import CheemsInputError, Notice, Prompt, Setting, prompt_key

__all__ = ["best_of_n_curve", "best_of_n_files", "expected_best_of_n", "judged_win_rate", "locally_judged_win_rate",
           "pick_weights"]


def pick_weights(n_candidates: int, n: int) -> np.ndarray:
    """P(the i-th smallest of N is the maximum of a random n-subset), i = 1..N (zeros below n).

    Computed as a running product (w_N = n / N, w_{i-1} = w_i (i - n) / (i - 1)), which stays
    exact in floating point for any N where the binomials themselves would overflow."""
    if not 1 <= n <= n_candidates:
        raise ValueError(f"n must be in 1..{n_candidates}, got {n}")
    w = np.zeros(n_candidates)
    w[-1] = n / n_candidates
    for i in range(n_candidates, n, -1):  # i is 1-based: w[i - 1] is the i-th smallest
        w[i - 2] = w[i - 1] * (i - n) / (i - 1)
    return w


def expected_best_of_n(rewards: Sequence[float], gold: Sequence[float], n: int) -> float:
    """E[gold of the highest-reward response among n drawn without replacement], exactly; ties on
    reward share their group's mean gold. O(N log N)."""
    r = np.asarray(rewards, float)
    g = np.asarray(gold, float)
    order = np.argsort(r, kind="stable")
    r, g = r[order], g[order]
    _, start, counts = np.unique(r, return_index=True, return_counts=True)
    group_mean = np.add.reduceat(g, start) / counts
    g = np.repeat(group_mean, counts)
    return float(pick_weights(len(r), n) @ g)


def best_of_n_curve(prompts: Sequence[Prompt], rewards: Mapping[tuple[str, str], float],
                    gold: Mapping[tuple[str, str], float], ns: Sequence[int], *, n_bootstrap: int = 1000,
                    seed: int = 0, confidence: float = 0.95) -> dict:
    """The best-of-n curve of one reward model: for each n, the mean over prompts of
    :func:`expected_best_of_n` with a bootstrap CI over prompts, overall and per main category.

    Every response needs a reward and a gold value (a CheemsInputError names the first that
    lacks one). With gold values all in {-1, 1} (wins and losses against a baseline response,
    the paper's human win rate) each point also gives ``win_rate`` = (E + 1) / 2."""
    per_prompt: list[tuple[str, np.ndarray, np.ndarray]] = []
    for p in prompts:
        keys = [(p.id, r.id) for r in p.responses]
        for what, table in (("reward", rewards), ("gold value", gold)):
            missing = next((k for k in keys if k not in table), None)
            if missing is not None:
                raise CheemsInputError(f"no {what} for response {missing[1]!r} of prompt {missing[0]!r}",
                                       field="response_id")
        per_prompt.append((p.main_category, np.array([rewards[k] for k in keys], float),
                           np.array([gold[k] for k in keys], float)))
    values = {v for _, _, g in per_prompt for v in g.tolist()}
    wins = bool(values) and values <= {-1.0, 1.0}
    rng = np.random.default_rng(seed)
    curve, by_category = [], defaultdict(list)
    for n in sorted(set(ns)):
        cats, e = [], []
        for cat, r, g in per_prompt:
            if len(r) >= n:
                cats.append(cat)
                e.append(expected_best_of_n(r, g, n))
        point = _point(n, np.array(e), len(per_prompt) - len(e), rng, n_bootstrap, confidence, wins)
        curve.append(point)
        cats_arr = np.array(cats, dtype=object)
        for cat in sorted(set(cats)):
            by_category[cat].append(_point(n, np.array(e)[cats_arr == cat], 0, rng, n_bootstrap, confidence, wins))
    return {"curve": curve, "categories": dict(by_category), "prompts": len(per_prompt), "gold_is_win_loss": wins}


def _point(n: int, e: np.ndarray, left_out: int, rng: np.random.Generator, n_bootstrap: int, confidence: float,
           wins: bool) -> dict:
    point = {"n": n, "prompts": int(len(e)), "left_out": int(left_out),
             "expected_gold": float(e.mean()) if len(e) else None, "ci": None}
    if len(e) and n_bootstrap > 0:
        means = e[rng.integers(0, len(e), size=(n_bootstrap, len(e)))].mean(axis=1)
        point["ci"] = quantile_interval(means, confidence)
    if wins and len(e):
        point["win_rate"] = (point["expected_gold"] + 1) / 2
    return point


def best_of_n_files(candidates: Sequence[str], gold: str | None, ns: Sequence[int], *, scores: str | None = None,
                    model: str | None = None, server=None, model_settings=None, judge=None, judge_model: str | None = None,
                    judge_settings=None, baseline: str | None = None, n_bootstrap: int = 1000, seed: int = 0,
                    fmt: str | None = None, skip_invalid: bool = False, progress=None, notify=None,
                    name: str | None = None) -> tuple[dict, list]:
    """The best-of-n report of one reward model (``scores`` file, ``model`` folder or ``server``, a
    :class:`~cheems.scoring.remote_scorer.RemoteScorer` of a running ``cheems serve``) on candidate
    files: the curve against a GOLD scores file, and/or (with ``judge``, a JudgeConfig, or
    ``judge_model``, a causal LM folder judging by its verdict probabilities as ``judge_settings``,
    a :class:`~cheems.scoring.local_judge.JudgeModelSettings`, say, run as ``model_settings`` say;
    and ``baseline``, a response id) the judged win rate of its best-of-N pick
    (:func:`judged_win_rate`, :func:`locally_judged_win_rate`). ``name``: the model's name in the
    report (default: the scores file's stem, the model folder's name or the served model's name).
    Returns ``(report, skipped row errors)``."""
    from pathlib import Path

    from cheems.benchmark import read_benchmark
    from cheems.formats import read_scores

    _check_request(scores, model, server, gold, judge, judge_model, baseline, name, ns)
    res, _ = read_benchmark(candidates, skip_invalid=skip_invalid, fmt=fmt, empty="no valid prompts with candidates")
    gold_map = _read(read_scores, gold) if gold is not None else None
    if scores is not None:
        rewards, default_name = _read(read_scores, scores), Path(scores).stem
    else:
        from cheems.scoring.model_settings import ModelSettings
        from cheems.scoring.run import model_scores

        settings = model_settings or ModelSettings()
        rewards, _ = model_scores(server or model, settings, res.prompts, progress, notify)
        default_name = server.name if server is not None else Path(model).name
    report = {"kind": "bon", "model": name or default_name, "prompts": len(res.prompts)}
    repeated = sum(getattr(m, "repeated", 0) for m in (rewards, gold_map) if m is not None)
    if repeated:  # rows that gave a response the score an earlier row gave it: counted once
        report["repeated_score_rows"] = repeated
    if gold_map is not None:
        report.update(best_of_n_curve(res.prompts, rewards, gold_map, ns, n_bootstrap=n_bootstrap, seed=seed))
        report["gold"] = Path(gold).name
    if judge is not None or judge_model is not None:
        missing = next(((p.id, r.id) for p in res.prompts for r in p.responses if (p.id, r.id) not in rewards), None)
        if missing is not None:
            raise CheemsInputError(f"no reward for response {missing[1]!r} of prompt {missing[0]!r}",
                                   field="response_id")
    if judge is not None:
        report["judged"] = judged_win_rate(res.prompts, rewards, baseline, judge, n_bootstrap=n_bootstrap, seed=seed,
                                           progress=progress)
    elif judge_model is not None:
        report["judged"] = _judge_with_model(res.prompts, rewards, baseline, judge_model, model_settings,
                                             judge_settings, n_bootstrap=n_bootstrap, seed=seed, progress=progress,
                                             notify=notify)
    return report, res.errors


def _check_request(scores, model, server, gold, judge, judge_model, baseline, name, ns) -> None:
    """The arguments of :func:`best_of_n_files` that do not go together, each one error; the judge
    model's folder checked before any work."""
    if sum(x is not None for x in (scores, model, server)) != 1:
        raise CheemsInputError(Notice("give exactly one of ", Setting("scores"), " (a file), ", Setting("model"),
                                      " (a folder) or ", Setting("server"), " (a URL)"))
    if judge is not None and judge_model is not None:
        raise CheemsInputError(Notice("give one judge: ", Setting("judge"), " (an API) or ", Setting("judge_model"),
                                      " (a local model's folder)"))
    judged = judge is not None or judge_model is not None
    if gold is None and not judged:
        raise CheemsInputError("give gold (a file), or judge (or judge_model) with baseline (a response id), or both")
    if judged and not baseline:
        which = "judge" if judge is not None else "judge_model"
        raise CheemsInputError(f"{which} needs a baseline: the id of the response to play against", field="baseline")
    if name is not None and not name.strip():
        raise CheemsInputError("must not be empty", field="name")
    if not ns or any(not isinstance(n, int) or n < 1 for n in ns):
        raise CheemsInputError(f"n must be positive integers, got {list(ns)}", field="ns")
    if judge_model is not None:
        from cheems.scoring.local_judge import check_causal_lm_folder

        check_causal_lm_folder(judge_model)


def _read(reader, path: str) -> dict:
    try:
        return reader(path)
    except CheemsInputError as e:
        raise e.located(file=str(path)) from None


def _best_of_n_picks(prompts: Sequence[Prompt], rewards: Mapping[tuple[str, str], float],
                     baseline: str) -> list[str]:
    """Per prompt, the reward model's best-of-N pick: the highest-reward response other than the
    baseline (the first in row order among equals)."""
    picks = []
    for p in prompts:
        others = [r.id for r in p.responses if r.id != baseline]
        if baseline not in p.response_ids() or not others:
            raise CheemsInputError(f"prompt {p.id!r} has no response {baseline!r} and another one to compare",
                                   field="baseline")
        picks.append(max(others, key=lambda rid: rewards[(p.id, rid)]))
    return picks


def _win_rate(wins: np.ndarray, n_bootstrap: int, seed: int) -> dict:
    """The mean of per-prompt outcomes and its bootstrap CI over prompts (None without prompts)."""
    out = {"scored_prompts": int(len(wins)), "win_rate": float(wins.mean()) if len(wins) else None, "ci": None}
    if len(wins) and n_bootstrap > 0:
        means = wins[np.random.default_rng(seed).integers(0, len(wins), size=(n_bootstrap, len(wins)))].mean(axis=1)
        out["ci"] = quantile_interval(means)
    return out


def judged_win_rate(prompts: Sequence[Prompt], rewards: Mapping[tuple[str, str], float], baseline: str, config, *,
                    n_bootstrap: int = 1000, seed: int = 0, progress=None, generate=None) -> dict:
    """The win rate of the reward model's best-of-N pick against a baseline response (the
    response with id ``baseline`` in every prompt), judged by an LLM in both presentation orders
    through the judge runner (`cheems.scoring.bench_judge.run_judgements`: reply cache, retries,
    bounded concurrency): per prompt a win counts 1, a tie (C) 1/2, a loss 0, averaged over the
    orders with a verdict; prompts without any verdict are counted, not scored. The pick is the
    highest-reward response other than the baseline (the first in row order among equals).
    With a bootstrap CI over prompts, the first-position rate and the position consistency."""
    import asyncio

    from cheems.scoring.bench_judge import ORDERS, Judgement, first_position_rate, run_judgements

    plan = [Judgement(i, pick, baseline, pick, order)
            for i, pick in enumerate(_best_of_n_picks(prompts, rewards, baseline)) for order in ORDERS]
    stats = asyncio.run(run_judgements(list(prompts), plan, config, progress))
    per_prompt: dict[int, list[float]] = defaultdict(list)
    for j in plan:
        if j.choice is not None:
            per_prompt[j.prompt_index].append(1.0 if j.choice == j.first else 0.5 if j.choice == "tie" else 0.0)
    wins = np.array([np.mean(v) for _, v in sorted(per_prompt.items())])
    both = [(a, b) for a, b in zip(plan[::2], plan[1::2]) if a.choice is not None and b.choice is not None]
    return {"judge": config.model, "baseline": baseline, "prompts": len(prompts), **_win_rate(wins, n_bootstrap, seed),
            "position_consistency": sum(a.choice == b.choice for a, b in both) / len(both) if both else None,
            "first_position_rate": first_position_rate(plan), "requests": stats["requests"],
            "cached": stats["cached"], "errors": sum(j.error is not None for j in plan),
            "unparseable": sum(j.verdict is None and j.error is None for j in plan)}


WIN_TIE_LOSS = np.array([1.0, 0.0, 0.5])
"""The outcome of the pick by the verdict's index in (pick better, baseline better, tie)."""


def locally_judged_win_rate(prompts: Sequence[Prompt], rewards: Mapping[tuple[str, str], float], baseline: str,
                            judge, *, ties: bool = False, name: str = "judge", token_budget: int | None = None,
                            batch_size: int = 64, n_bootstrap: int = 1000, seed: int = 0, progress=None) -> dict:
    """:func:`judged_win_rate` with a local judge (a :class:`~cheems.scoring.local_judge.VerdictScorer`):
    each prompt's pick x and baseline y are shown in both orders and the verdict probabilities
    averaged (:func:`cheems.scoring.local_judge.averaged_verdicts`),

        p(x wins) = (P_xy(A) + P_yx(B)) / 2,  p(y wins) = (P_xy(B) + P_yx(A)) / 2,
        p(tie) = (P_xy(C) + P_yx(C)) / 2  (with ``ties``);

    the comparison's outcome is the argmax, counted 1 for a win, 1/2 for a tie, 0 for a loss
    (no sampling, every prompt scored). The report has the API judge's fields (the position
    consistency and first-position rate from each order's own argmax; ``requests`` is the number
    of distinct judge sequences run, none cached, none failed) and ``win_probability``, the mean
    of p(x wins) + p(tie) / 2. O(prompts) forward sequences (two per prompt)."""
    from cheems.scoring.local_judge import VllmJudge, averaged_verdicts

    items = []
    for p, pick in zip(prompts, _best_of_n_picks(prompts, rewards, baseline)):
        content = {r.id: r.content for r in p.responses}
        items += [(p.prompt, content[pick], content[baseline]), (p.prompt, content[baseline], content[pick])]
    probs = judge.verdict_probabilities(items, ties, token_budget=token_budget, batch_size=batch_size,
                                        progress=progress)
    averaged = averaged_verdicts(probs[0::2], probs[1::2])  # rows: p(pick wins), p(baseline wins)[, p(tie)]
    wins = WIN_TIE_LOSS[averaged.argmax(axis=1)]
    pick_first = probs[0::2].argmax(axis=1)  # 0: the pick (shown as A), 1: the baseline, 2: tie
    pick_second = np.array([1, 0, 2])[probs[1::2].argmax(axis=1)]  # the same codes, from the swapped order
    sided = np.concatenate([pick_first, probs[1::2].argmax(axis=1)])
    sided = sided[sided < 2]  # A or B verdicts: 0 is the first position
    expected = averaged[:, 0] + (averaged[:, 2] / 2 if ties else 0.0)
    return {"judge": name, "baseline": baseline, "prompts": len(prompts), **_win_rate(wins, n_bootstrap, seed),
            "position_consistency": float(np.mean(pick_first == pick_second)) if len(wins) else None,
            "first_position_rate": float(np.mean(sided == 0)) if len(sided) else None,
            "requests": len({(prompt_key(p), a, b) for p, a, b in items}), "cached": 0, "errors": 0,
            "unparseable": 0, "win_probability": float(expected.mean()) if len(wins) else None,
            "judge_ties": ties, "verdict": "averaged over both orders",
            "judge_backend": "vllm" if isinstance(judge, VllmJudge) else "transformers"}


def _judge_with_model(prompts, rewards, baseline: str, path, model_settings, judge_settings, *, n_bootstrap: int,
                      seed: int, progress, notify) -> dict:
    """:func:`locally_judged_win_rate` with the causal LM folder ``path`` loaded as a judge."""
    from pathlib import Path

    from cheems.scoring.local_judge import JudgeModelSettings, load_judge_model
    from cheems.scoring.model_settings import ModelSettings

    settings, js = model_settings or ModelSettings(), judge_settings or JudgeModelSettings()
    if notify is not None:
        notify(f"loading the judge {path} ...")
    judge = load_judge_model(path, settings, language=js.language)
    return locally_judged_win_rate(prompts, rewards, baseline, judge, ties=js.ties, name=Path(path).name,
                                   batch_size=settings.batch_size,
                                   n_bootstrap=n_bootstrap, seed=seed, progress=progress)
