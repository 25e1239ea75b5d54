"""From the annotation database to a benchmark: every standing answer of a settled task becomes
its three pairwise comparisons, each prompt's comparisons go through `cheems rank`'s conflict
resolution (`cheems.graph.resolve_conflicts`), and the ranked prompts are written as a benchmark
file `cheems eval` reads; ``raw`` keeps every answer ever given, with its review verdicts."""

from __future__ import annotations

import itertools
import os
from collections import defaultdict

from sqlalchemy import select
from sqlalchemy.orm import Session

from cheems.annotate.db import DEFAULT_STUDY, Annotation, PromptRow, ReviewItem, Task, User
from cheems.annotate.studies import find_study
from cheems.annotate.workflow import current_answers
from cheems.graph import resolve_conflicts
from cheems.io import check_outputs, outputs_together, write_json, write_jsonl
from cheems.records import Comparison, Prompt, Response

__all__ = ["annotated_prompts", "export_benchmark", "raw_rows"]


def annotated_prompts(session: Session, study_id: int) -> tuple[list[Prompt], int]:
    """A study's prompts (not gold) with the comparisons of every standing answer of their settled tasks,
    in import order, and how many prompts have no settled task yet (left out)."""
    names = dict(session.execute(select(User.id, User.name)).all())
    by_prompt: dict[str, list[Comparison]] = defaultdict(list)
    for task in session.scalars(select(Task).where(Task.study_id == study_id, Task.state == "done",
                                                                Task.gold_levels.is_(None))
                                .order_by(Task.id)):
        for ann in current_answers(session, task.id):
            for x, y in itertools.combinations(task.response_ids, 2):
                label = ann.pairs[f"{x}|{y}"]
                by_prompt[task.prompt_id].append(Comparison(x, y, label, annotator=names.get(ann.user_id),
                                                            source="annotate"))
    prompts, waiting = [], 0
    for row in session.scalars(select(PromptRow).where(PromptRow.study_id == study_id, PromptRow.is_gold.is_(False))
                              .order_by(PromptRow.position)):
        if row.id not in by_prompt:
            waiting += 1
            continue
        responses = [Response(r["id"], r["content"], r.get("model"),
                              {k: v for k, v in r.items() if k not in ("id", "content", "model")})
                     for r in row.responses]
        prompts.append(Prompt(row.id, row.prompt, responses, comparisons=by_prompt[row.id],
                              category=list(row.category), subset=row.subset))
    return prompts, waiting


def raw_rows(session: Session, study_id: int) -> list[dict]:
    """Every answer of a study (planted gold ones aside) with annotator, time, shown order, scores, pairs,
    ranking, spans, phase, status and the review verdicts it got."""
    names = dict(session.execute(select(User.id, User.name)).all())
    verdicts = defaultdict(list)
    for item in session.scalars(select(ReviewItem).where(ReviewItem.study_id == study_id,
                                                         ReviewItem.verdict.is_not(None))
                              .order_by(ReviewItem.id)):
        verdicts[item.annotation_id].append({"stage": item.stage, "verdict": item.verdict, "note": item.note,
                                             "reviewer": names.get(item.reviewer_id),
                                             "at": item.decided_at.isoformat() if item.decided_at else None})
    tasks = {t.id: t for t in session.scalars(select(Task).where(Task.study_id == study_id))}
    out = []
    for ann in session.scalars(select(Annotation).join(Task, Task.id == Annotation.task_id).where(
            Task.study_id == study_id, Annotation.user_id.is_not(None)).order_by(Annotation.id)):
        task = tasks[ann.task_id]
        out.append({"annotation_id": ann.id, "prompt_id": task.prompt_id, "task_id": task.id, "round": task.round,
                    "ids": task.response_ids, "gold": task.gold_levels is not None,
                    "annotator": names.get(ann.user_id), "phase": ann.phase, "status": ann.status,
                    "created_at": ann.created_at.isoformat(), "shown_order": ann.shown_order,
                    "scores": ann.scores, "pairs": ann.pairs, "levels": ann.levels, "ranking": ann.ranking,
                    "spans": ann.spans, "note": ann.note, "reviews": verdicts.get(ann.id, [])})
    return out


def export_benchmark(session: Session, output: str | os.PathLike, *, raw: str | os.PathLike | None = None,
                     report: str | os.PathLike | None = None, study: str = DEFAULT_STUDY) -> dict:
    """Write ``study``'s benchmark (and the raw answers, and the conflict report) together; returns the
    counts and the conflict report. Prompts without a settled task are counted, not written."""
    check_outputs([output, raw, report])
    sid = find_study(session, study).id
    prompts, waiting = annotated_prompts(session, sid)
    rows = raw_rows(session, sid) if raw is not None else []
    conflicts = {}
    if prompts:
        resolution = resolve_conflicts(prompts)
        for p, r in zip(prompts, resolution.ranks):
            p.rank = r
        conflicts = resolution.report(prompts)
    with outputs_together(output, raw, report) as (out_tmp, raw_tmp, report_tmp):
        write_jsonl(out_tmp, (p.to_dict() for p in prompts))
        if raw_tmp is not None:
            write_jsonl(raw_tmp, rows)
        if report_tmp is not None:
            write_json(report_tmp, conflicts)
    return {"prompts": len(prompts), "prompts_waiting": waiting, "raw_rows": len(rows), "conflicts": conflicts}
