"""The numbers an annotation lead watches (`GET /api/stats`, `cheems annotate status --json`):
progress per category and annotator, throughput per day, agreement (percent and Krippendorff's
alpha: ordinal for the 0-5 scores, nominal for the pair relations), gold accuracy of annotators
and reviewers, each annotator's position bias (share of strict pairs won by the response shown
first), and the conflict ratio left after conflict resolution."""

from __future__ import annotations

import itertools
from collections import Counter, defaultdict

import numpy as np
from sqlalchemy import select
from sqlalchemy.orm import Session

from cheems.annotate.db import DEFAULT_STUDY, Annotation, Assignment, Membership, ReviewItem, Task, User
from cheems.annotate.export import annotated_prompts
from cheems.annotate.protocol import relation
from cheems.annotate.studies import find_study
from cheems.graph import resolve_conflicts

__all__ = ["krippendorff_alpha", "stats"]

RELATION_CODE = {"g": 0, "s": 1, "b": 2}


def krippendorff_alpha(units: dict, level: str) -> dict:
    """Krippendorff's alpha of ``units`` ({unit: {coder: value}}) with the `krippendorff`
    package. Where it is undefined (no unit with two values, or every value the same, where the
    package raises) the value is None and ``note`` says why."""
    coders = sorted({c for values in units.values() for c in values})
    usable = {u: v for u, v in units.items() if len(v) >= 2}
    out = {"units": len(usable), "coders": len(coders), "level": level, "value": None, "note": None}
    if not usable:
        out["note"] = "no item has two answers yet"
        return out
    data = np.full((len(coders), len(usable)), np.nan)
    index = {c: i for i, c in enumerate(coders)}
    for j, values in enumerate(usable.values()):
        for c, v in values.items():
            data[index[c], j] = v
    import krippendorff

    try:
        out["value"] = float(krippendorff.alpha(reliability_data=data, level_of_measurement=level))
    except ValueError:  # one value in the whole domain: no disagreement is possible to measure
        out["note"] = "every answer has the same value: alpha is undefined (perfect agreement)"
    return out


def stats(session: Session, study: str = DEFAULT_STUDY) -> dict:
    """The numbers of one study, for its members."""
    sid = find_study(session, study).id
    names = dict(session.execute(select(User.id, User.name).join(Membership, Membership.user_id == User.id)
                                 .where(Membership.study_id == sid)).all())
    tasks = {t.id: t for t in session.scalars(select(Task).where(Task.study_id == sid))}
    answers = session.scalars(select(Annotation).join(Task, Task.id == Annotation.task_id).where(
        Task.study_id == sid, Annotation.user_id.is_not(None))).all()
    regular = [t for t in tasks.values() if t.gold_levels is None]
    by_category: dict[str, Counter] = defaultdict(Counter)
    for t in regular:
        by_category[t.category]["tasks"] += 1
        by_category[t.category][t.state] += 1
        by_category[t.category]["answers"] += t.submitted
    per_day = Counter(a.created_at.date().isoformat() for a in answers)
    first = [a for a in answers if a.phase == "first" and tasks[a.task_id].gold_levels is None]
    agreed = [t.agreement for t in regular if t.agreement is not None]
    scores, relations = defaultdict(dict), defaultdict(dict)
    for a in first:
        for rid, s in a.scores.items():
            scores[(a.task_id, rid)][a.user_id] = s
        for pair, label in a.pairs.items():
            relations[(a.task_id, pair)][a.user_id] = RELATION_CODE[label]
    return {
        "tasks": {"total": len(regular), "gold": len(tasks) - len(regular),
                  **Counter(t.state for t in regular)},
        "by_category": {c: dict(n) for c, n in sorted(by_category.items())},
        "by_annotator": _by_annotator(session, sid, names, answers),
        "per_day": dict(sorted(per_day.items())),
        "agreement": {"tasks": len(agreed), "percent": float(np.mean(agreed)) if agreed else None,
                      "fully_agreed": sum(a == 1 for a in agreed)},
        "krippendorff": {"scores_ordinal": krippendorff_alpha(scores, "ordinal"),
                         "pairs_nominal": krippendorff_alpha(relations, "nominal")},
        "gold": {"annotators": _gold_annotators(names, answers, tasks),
                 "reviewers": _gold_reviewers(session, sid, names)},
        "position_bias": _position_bias(names, first),
        "conflict_ratio": _conflict_ratio(session, sid),
    }


def _by_annotator(session: Session, sid: int, names: dict, answers: list[Annotation]) -> dict:
    roles = dict(session.execute(select(Membership.user_id, Membership.role).where(Membership.study_id == sid)).all())
    open_now = Counter(session.scalars(select(Assignment.user_id).join(Task, Task.id == Assignment.task_id)
                                       .where(Task.study_id == sid, Assignment.submitted_at.is_(None))))
    reviewed = Counter(session.scalars(select(ReviewItem.reviewer_id).where(ReviewItem.study_id == sid,
                                                                            ReviewItem.verdict.is_not(None))))
    out = {}
    for uid, name in sorted(names.items(), key=lambda kv: kv[1]):
        mine = [a for a in answers if a.user_id == uid]
        out[name] = {"role": roles[uid], "answers": sum(a.phase == "first" for a in mine),
                     "realigned": sum(a.phase == "aligned" for a in mine),
                     "rejected": sum(a.status == "rejected" for a in mine),
                     "open": open_now[uid], "reviews": reviewed[uid]}
    return out


def _gold_annotators(names: dict, answers: list[Annotation], tasks: dict) -> dict:
    hits: dict[str, list[float]] = defaultdict(list)
    for a in answers:
        gold = tasks[a.task_id].gold_levels
        if gold is None or a.phase != "first":
            continue
        pairs = list(itertools.combinations(tasks[a.task_id].response_ids, 2))
        right = sum(relation(gold, x, y) == relation(a.levels, x, y) for x, y in pairs)
        hits[names[a.user_id]].append(right / len(pairs))
    return {n: {"gold_tasks": len(v), "accuracy": float(np.mean(v))} for n, v in sorted(hits.items())}


def _gold_reviewers(session: Session, sid: int, names: dict) -> dict:
    hits: dict[str, list[bool]] = defaultdict(list)
    for item in session.scalars(select(ReviewItem).where(ReviewItem.study_id == sid,
                                                         ReviewItem.gold_verdict.is_not(None),
                                                         ReviewItem.verdict.is_not(None))):
        hits[names[item.reviewer_id]].append(item.verdict == item.gold_verdict)
    return {n: {"gold_items": len(v), "accuracy": float(np.mean(v))} for n, v in sorted(hits.items())}


def _position_bias(names: dict, first: list[Annotation]) -> dict:
    """Per annotator: of the strict pairs, the share won by the response shown earlier (0.5: no bias)."""
    wins: dict[str, list[bool]] = defaultdict(list)
    for a in first:
        for x, y in itertools.combinations(a.shown_order, 2):  # x was shown before y
            if a.levels[x] != a.levels[y]:
                wins[names[a.user_id]].append(a.levels[x] < a.levels[y])
    return {n: {"strict_pairs": len(v), "first_shown_wins": float(np.mean(v))} for n, v in sorted(wins.items())}


def _conflict_ratio(session: Session, sid: int) -> float | None:
    prompts, _ = annotated_prompts(session, sid)
    if not prompts:
        return None
    return resolve_conflicts(prompts).report(prompts)["total"]["conflict_ratio"]
