"""The annotation workflow on the database: import, hand-out, submission, agreement and
alignment, cascading review with gold items, reclaiming abandoned work, and export.

Paper §3.2 and Appendix D: each task goes to ``overlap`` annotators (default 2), never twice to
one person, double-blind (each sees the responses in an order of their own under the letters A,
B, C). When the last of them submits, the task's agreement is the share of its three pairs on
which they agree; a disagreement goes to alignment when the annotator pair's agreement over their
recent shared tasks is below the bar (default 90%), once they share enough tasks for that figure
to mean something (default 10; earlier disagreements settle as they are): both see each other's
answer and answer again; answers that still differ are escalated to an admin. Settled tasks are
sampled for review (default 30%), single-blind, in cascading stages: each stage samples again
from what the last accepted. A rejected answer is dropped and its task goes back to the queue
for one more annotator. Gold tasks (with a known ranking) are mixed into the hand-out and score
each annotator; planted gold answers (one right, one reversed) are mixed into the review stream
and score each reviewer.

Everything happens inside one study (`cheems.annotate.studies`): the user each step is given is a
``Member`` of it, and every query keeps to that study's tasks, answers and review items.

Every step is one short transaction. Counters change only through conditional ``UPDATE``s whose
row count says who won, and the unique constraints of `cheems.annotate.db` refuse doubles, so
concurrent requests never hand one task to one person twice, exceed the overlap or store a
submission twice.
"""

from __future__ import annotations

import hashlib
import itertools
import random
from datetime import timedelta
from typing import Any

from sqlalchemy import and_, case, exists, func, or_, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from cheems.annotate.db import Annotation, Assignment, PromptRow, ReviewItem, Task, User, now
from cheems.annotate.protocol import LETTERS, Submission, agreement, check_submission, relation
from cheems.annotate.settings import WorkflowSettings
from cheems.annotate.studies import DEFAULT_STUDY, Member, find_study
from cheems.graph import triple_tasks
from cheems.records import CheemsInputError, Prompt

__all__ = ["ROLES", "WorkflowError", "WorkflowSettings", "align", "annotation_pairs", "current_answers", "escalate",
           "escalations", "import_prompts", "next_alignment", "next_review", "next_task", "prompt_text",
           "reclaim_abandoned", "resolve_escalation", "review", "submit", "task_view"]

ROLES = ("annotator", "reviewer", "admin")


class WorkflowError(Exception):
    """A request the workflow refuses: ``status`` is the HTTP status (403, 404, 409, 422)."""

    def __init__(self, status: int, detail: str, field: str | None = None):
        self.status = status
        self.detail = detail
        self.field = field
        super().__init__(detail)


# ----------------------------------------------------------------------------------------- import


def import_prompts(session: Session, prompts: list[Prompt], *, overlap: int = 2, gold: list[Prompt] = (),
                   seed: int = 0, study: str = DEFAULT_STUDY) -> dict[str, int]:
    """Add prompts to ``study`` and their triple-wise tasks (`cheems.graph.triple_tasks`, circular design);
    gold prompts (with a ``rank``) become gold tasks mixed into the queue at seeded places, each
    with two planted review answers. A prompt already imported with the same content is skipped;
    one with the same id and other content is an error. Returns counts; commits."""
    if overlap < 1:
        raise CheemsInputError(f"overlap must be at least 1, got {overlap}", field="overlap")
    sid = find_study(session, study).id
    rng = random.Random(seed)
    position = session.scalar(select(func.count()).select_from(PromptRow).where(PromptRow.study_id == sid)) or 0
    key = (session.scalar(select(func.max(Task.queue_key)).where(Task.study_id == sid)) or 0) + 1000
    counts = {"prompts": 0, "tasks": 0, "gold_prompts": 0, "gold_tasks": 0, "skipped": 0}
    gold_tasks = []
    for p, is_gold in itertools.chain(((p, False) for p in prompts), ((g, True) for g in gold)):
        if is_gold and p.rank is None:
            raise CheemsInputError(f"gold prompt {p.id!r} has no rank", field="rank")
        if len(p.responses) < 2:
            raise CheemsInputError(f"prompt {p.id!r} has {len(p.responses)} response(s); a task needs 2 or 3",
                                   field="responses")
        if _already_there(session, sid, p, is_gold):
            counts["skipped"] += 1
            continue
        session.add(PromptRow(study_id=sid, id=p.id, position=position, prompt=p.prompt, category=list(p.category),
                              subset=p.subset, responses=[r.to_dict() for r in p.responses], is_gold=is_gold))
        position += 1
        counts["gold_prompts" if is_gold else "prompts"] += 1
        ids = p.response_ids()
        for k, triple in enumerate(triple_tasks(len(ids))):
            rids = [ids[i] for i in triple]
            task = Task(study_id=sid, prompt_id=p.id, round=k + 1, response_ids=rids, category=p.main_category,
                        overlap=overlap,
                        queue_key=key, claimed=0, submitted=0, state="open")
            key += 1000
            if is_gold:
                task.overlap = 0  # every annotator once
                task.gold_levels = _relevel({r: p.rank[r] for r in rids})
                gold_tasks.append(task)
            session.add(task)
            counts["gold_tasks" if is_gold else "tasks"] += 1
    session.flush()
    for task in gold_tasks:  # spread among the regular tasks, at seeded places
        task.queue_key = rng.randrange(0, key)
        _plant_gold_reviews(session, task, rng.randrange(0, key))
    session.commit()
    return counts


def _already_there(session: Session, study_id: int, p: Prompt, is_gold: bool) -> bool:
    row = session.get(PromptRow, (study_id, p.id))
    if row is None:
        return False
    if row.prompt != p.prompt or row.responses != [r.to_dict() for r in p.responses] or row.is_gold != is_gold:
        raise CheemsInputError(f"prompt id {p.id!r} is already in the study with other content", field="id")
    return True


def _relevel(levels: dict[str, int]) -> dict[str, int]:
    order = sorted(set(levels.values()))
    return {r: order.index(v) for r, v in levels.items()}


def _plant_gold_reviews(session: Session, task: Task, queue_key: int) -> None:
    """A right and a reversed answer to a gold task, each a stage-1 review item with the expected verdict."""
    rids = task.response_ids
    worst = max(task.gold_levels.values())
    for verdict, levels in (("accept", task.gold_levels),
                            ("reject", {r: worst - v for r, v in task.gold_levels.items()})):
        if verdict == "reject" and levels == task.gold_levels:
            continue  # an all-tied gold answer has no reversal
        ann = Annotation(task_id=task.id, user_id=None, phase=f"gold-{verdict}", shown_order=list(rids),
                         scores={}, pairs=annotation_pairs(rids, levels), levels=levels,
                         ranking=_ranking_text(rids, levels), spans=[], note="", status="active")
        session.add(ann)
        session.flush()
        session.add(ReviewItem(study_id=task.study_id, annotation_id=ann.id, stage=1, queue_key=queue_key,
                               gold_verdict=verdict, note=""))


def annotation_pairs(rids: list[str], levels: dict[str, int]) -> dict[str, str]:
    """``{"id1|id2": g|b|s}`` for every pair of the triple in task order."""
    return {f"{x}|{y}": relation(levels, x, y) for x, y in itertools.combinations(rids, 2)}


def _ranking_text(order: list[str], levels: dict[str, int]) -> str:
    letters = dict(zip(order, LETTERS))
    return ">".join("=".join(letters[r] for r in order if levels[r] == lv) for lv in sorted(set(levels.values())))


# ----------------------------------------------------------------------------------------- hand-out


def reclaim_abandoned(session: Session, settings: WorkflowSettings, limit: int = 100,
                      study_id: int | None = None) -> int:
    """Take back assignments (of one study, or of all) not submitted within the claim timeout, so
    the task goes to someone else; returns how many. The delete and the counter change are one
    transaction per row."""
    cutoff = now() - timedelta(seconds=settings.claim_timeout_s)
    query = select(Assignment.id, Assignment.task_id).where(Assignment.submitted_at.is_(None),
                                                            Assignment.claimed_at < cutoff)
    if study_id is not None:
        query = query.join(Task, Task.id == Assignment.task_id).where(Task.study_id == study_id)
    stale = session.execute(query.limit(limit)).all()
    taken = 0
    for aid, tid in stale:
        gone = session.query(Assignment).filter(Assignment.id == aid, Assignment.submitted_at.is_(None)).delete()
        if gone:
            session.execute(update(Task).where(Task.id == tid).values(claimed=Task.claimed - 1))
            taken += 1
        session.commit()
    return taken


def next_task(session: Session, user: Member, settings: WorkflowSettings) -> tuple[Task, Assignment] | None:
    """The user's open assignment in their study, or a newly claimed task: open, not theirs before, under its
    overlap, tasks of the user's categories first, then in queue order (gold mixed in).

    The user's row is locked first (``FOR UPDATE``; SQLite's write lock does the same), so two
    requests of one person see each other's claim and get the same task. Candidates are taken
    ``FOR UPDATE SKIP LOCKED`` on PostgreSQL, so concurrent claimers spread over different tasks
    instead of queueing on the first one."""
    reclaim_abandoned(session, settings, study_id=user.study_id)
    had = exists().where(Assignment.task_id == Task.id, Assignment.user_id == user.id)
    order = [_expertise_first(user.categories), Task.queue_key] if user.categories else [Task.queue_key]
    for _ in range(5):  # a lost race starts over: lock, look for the user's claim, claim
        session.execute(select(User.id).where(User.id == user.id).with_for_update())
        mine = session.execute(select(Assignment, Task).join(Task, Task.id == Assignment.task_id).where(
            Assignment.user_id == user.id, Assignment.submitted_at.is_(None), Task.study_id == user.study_id,
        ).order_by(Assignment.id)).first()
        if mine is not None:
            session.commit()
            return mine[1], mine[0]
        wanted = select(Task.id).where(Task.study_id == user.study_id, Task.state == "open",
                                       or_(Task.overlap == 0, Task.claimed < Task.overlap),
                                       ~had).order_by(*order).limit(10)
        candidates = session.scalars(wanted.with_for_update(skip_locked=True, of=Task)).all()
        if not candidates:  # none free, or all taken by claims in flight: wait for those to tell
            candidates = session.scalars(wanted.with_for_update(of=Task)).all()
        if not candidates:
            session.rollback()
            return None
        claimed = _claim_first(session, user, candidates, settings)
        if claimed is not None:
            return claimed
    return None


def _claim_first(session: Session, user: Member, candidates: list[int],
                 settings: WorkflowSettings) -> tuple[Task, Assignment] | None:
    """Claim the first candidate still under its overlap (an update that matches no row changes
    nothing, so the transaction and the user's lock go on); None after a lost race."""
    for tid in candidates:
        won = session.execute(update(Task).where(
            Task.id == tid, Task.state == "open", or_(Task.overlap == 0, Task.claimed < Task.overlap),
        ).values(claimed=Task.claimed + 1)).rowcount
        if not won:
            continue
        task = session.get(Task, tid)
        order_shown = list(task.response_ids)
        random.Random(f"{settings.seed}:{tid}:{user.id}").shuffle(order_shown)
        assignment = Assignment(task_id=tid, user_id=user.id, shown_order=order_shown, claimed_at=now())
        session.add(assignment)
        try:
            session.commit()
        except IntegrityError:  # claimed by this user in a parallel request after all
            session.rollback()
            return None
        return task, assignment
    session.rollback()
    return None


def _expertise_first(categories: list[str]):
    """An ORDER BY key: 0 for tasks of the user's categories, 1 for the rest."""
    return case((Task.category.in_(categories), 0), else_=1)


def prompt_text(prompt: Any) -> str:
    """A prompt as the page shows it: the text, or chat turns as ``用户：…`` / ``助手：…`` paragraphs."""
    if isinstance(prompt, str):
        return prompt
    names = {"user": "用户", "assistant": "助手", "system": "系统"}
    return "\n\n".join(f"{names.get(m.get('role'), m.get('role'))}：{m.get('content', '')}" for m in prompt)


def task_view(session: Session, task: Task, shown_order: list[str]) -> dict:
    """The prompt, category and responses of a task under letters in ``shown_order`` (no ids, no models)."""
    row = session.get(PromptRow, (task.study_id, task.prompt_id))
    by_id = {r["id"]: r["content"] for r in row.responses}
    return {"task_id": task.id, "prompt": prompt_text(row.prompt), "category": list(row.category),
            "responses": [{"key": k, "content": by_id[rid]} for k, rid in zip(LETTERS, shown_order)]}


def _contents(session: Session, task: Task, shown_order: list[str]) -> dict[str, str]:
    return {r["key"]: r["content"] for r in task_view(session, task, shown_order)["responses"]}


def _check(session: Session, task: Task, shown_order: list[str], body: Any) -> Submission:
    from cheems.annotate.protocol import SubmissionError

    try:
        return check_submission(body, _contents(session, task, shown_order))
    except SubmissionError as e:
        raise WorkflowError(422, str(e), field=e.field) from None


def _annotation(task: Task, user_id: int | None, phase: str, shown_order: list[str], sub: Submission) -> Annotation:
    """A checked submission in response ids."""
    by_letter = dict(zip(LETTERS, shown_order))
    levels = {by_letter[k]: v for k, v in sub.levels.items()}
    spans = [dict(s, response_id=by_letter[s["key"]]) for s in sub.spans]
    return Annotation(task_id=task.id, user_id=user_id, phase=phase, shown_order=list(shown_order),
                      scores={by_letter[k]: v for k, v in sub.scores.items()},
                      pairs=annotation_pairs(task.response_ids, levels), levels=levels, ranking=sub.ranking,
                      spans=spans, note=sub.note, status="active", created_at=now())


def _store(session: Session, ann: Annotation, taken: str) -> Annotation:
    """Add an answer; one that the unique (task, user, phase) constraint refuses is a 409 saying ``taken``."""
    session.add(ann)
    try:
        session.flush()
    except IntegrityError:
        session.rollback()
        raise WorkflowError(409, taken) from None
    return ann


# ----------------------------------------------------------------------------------------- submission


def _task_of(session: Session, user: Member, task_id: int) -> Task:
    """A task of the user's study (404 for one of another study, as for none)."""
    task = session.get(Task, task_id)
    if task is None or task.study_id != user.study_id:
        raise WorkflowError(404, f"no task {task_id}")
    return task


def submit(session: Session, user: Member, task_id: int, body: Any, settings: WorkflowSettings) -> Annotation:
    """Store the user's answer to a task handed to them (403 otherwise; 409 the second time;
    422 naming the field when it breaks the protocol); the last answer settles the task."""
    task = _task_of(session, user, task_id)
    assignment = session.scalar(select(Assignment).where(Assignment.task_id == task_id,
                                                         Assignment.user_id == user.id))
    if assignment is None:
        raise WorkflowError(403, f"task {task_id} is not handed to you (or it was reclaimed after the timeout)")
    if assignment.submitted_at is not None:
        raise WorkflowError(409, f"you already submitted task {task_id}")
    sub = _check(session, task, assignment.shown_order, body)
    won = session.execute(update(Assignment).where(Assignment.id == assignment.id, Assignment.submitted_at.is_(None))
                          .values(submitted_at=now())).rowcount
    if not won:
        session.rollback()
        raise WorkflowError(409, f"you already submitted task {task_id}")
    ann = _store(session, _annotation(task, user.id, "first", assignment.shown_order, sub),
                 f"you already submitted task {task_id}")
    session.execute(update(Task).where(Task.id == task_id).values(submitted=Task.submitted + 1))
    session.refresh(task)
    if task.gold_levels is None and task.state == "open" and task.submitted >= task.overlap:
        _settle_first_round(session, task, settings)
    session.commit()
    return ann


def current_answers(session: Session, task_id: int) -> list[Annotation]:
    """The answers that stand for a task: active, not planted gold, an admin's decision alone when there is one."""
    answers = session.scalars(select(Annotation).where(
        Annotation.task_id == task_id, Annotation.status == "active", Annotation.user_id.is_not(None),
    ).order_by(Annotation.id)).all()
    admin = [a for a in answers if a.phase == "admin"]
    return admin or answers


def _mean_agreement(answers: list[Annotation]) -> float:
    pairs = list(itertools.combinations(answers, 2))
    return sum(agreement(a.pairs, b.pairs) for a, b in pairs) / len(pairs) if pairs else 1.0


def _settle_first_round(session: Session, task: Task, settings: WorkflowSettings) -> None:
    answers = current_answers(session, task.id)
    task.agreement = _mean_agreement(answers)
    needs_alignment = task.agreement < 1 and any(
        _pair_below_bar(session, task.study_id, a.user_id, b.user_id, settings)
        for a, b in itertools.combinations(answers, 2))
    if needs_alignment:
        task.state = "aligning"
    else:
        _done(session, task, answers, settings)


def _pair_below_bar(session: Session, study_id: int, u1: int, u2: int, settings: WorkflowSettings) -> bool:
    """Whether two annotators who share at least ``alignment_min_shared`` tasks (this one included)
    agree less than the bar over their most recent ones; too few shared tasks say nothing yet."""
    shared, mean = _recent_agreement(session, study_id, u1, u2, settings.agreement_window)
    return shared >= settings.alignment_min_shared and mean < settings.agreement_bar


def _recent_agreement(session: Session, study_id: int, u1: int, u2: int, window: int) -> tuple[int, float]:
    """How many tasks of a study two annotators share (with an agreement), and their mean agreement over the
    most recent ``window`` of them."""
    a1, a2 = Annotation.__table__.alias("a1"), Annotation.__table__.alias("a2")
    shared = select(Task.agreement).select_from(Task).join(a1, and_(
        a1.c.task_id == Task.id, a1.c.user_id == u1, a1.c.phase == "first")).join(a2, and_(
            a2.c.task_id == Task.id, a2.c.user_id == u2, a2.c.phase == "first")).where(Task.agreement.is_not(None),
                                                                                      Task.study_id == study_id)
    total = session.scalar(select(func.count()).select_from(shared.subquery())) or 0
    rows = session.execute(shared.order_by((a1.c.id + a2.c.id).desc()).limit(window)).scalars().all()
    return total, (sum(rows) / len(rows) if rows else 1.0)


def _done(session: Session, task: Task, answers: list[Annotation], settings: WorkflowSettings) -> None:
    task.state = "done"
    for a in answers:
        _maybe_review(session, task.study_id, a.id, 1, settings)


def _draw(seed: int, stage: int, annotation_id: int) -> float:
    digest = hashlib.sha256(f"{seed}:{stage}:{annotation_id}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2 ** 64


def _maybe_review(session: Session, study_id: int, annotation_id: int, stage: int, settings: WorkflowSettings
                  ) -> None:
    if stage <= settings.review_stages and _draw(settings.seed, stage, annotation_id) < settings.review_rate:
        key = int(_draw(settings.seed, -stage, annotation_id) * 2 ** 31)
        session.add(ReviewItem(study_id=study_id, annotation_id=annotation_id, stage=stage, queue_key=key, note=""))


# ----------------------------------------------------------------------------------------- alignment


def next_alignment(session: Session, user: Member) -> dict | None:
    """A task of the user's in alignment they have not answered again: their answer and the
    others', in the letters the user was shown."""
    aligned = exists().where(Annotation.task_id == Task.id, Annotation.user_id == user.id,
                             Annotation.phase == "aligned")
    task = session.scalar(select(Task).join(Assignment, Assignment.task_id == Task.id).where(
        Task.study_id == user.study_id, Task.state == "aligning", Assignment.user_id == user.id, ~aligned,
    ).order_by(Task.id).limit(1))
    if task is None:
        return None
    shown = session.scalar(select(Assignment.shown_order).where(Assignment.task_id == task.id,
                                                                Assignment.user_id == user.id))
    latest = {a.user_id: a for a in current_answers(session, task.id)}  # by id: an aligned answer is later
    mine = latest.pop(user.id)
    theirs = list(latest.values())
    view = task_view(session, task, shown)
    view.update(mine=_in_letters(mine, shown), theirs=_in_letters(theirs[0], shown) if theirs else None,
                agreement=task.agreement)
    return view


def _in_letters(ann: Annotation, shown: list[str]) -> dict:
    """An answer (stored in response ids) in the letters of another person's shown order."""
    letter = dict(zip(shown, LETTERS))
    levels = {letter[r]: v for r, v in ann.levels.items()}
    pairs = {"".join(sorted((letter[x], letter[y]))): relation(levels, *sorted((letter[x], letter[y])))
             for x, y in itertools.combinations(ann.levels, 2)}
    spans = [{"key": letter[s["response_id"]], "start": s["start"], "end": s["end"], "note": s.get("note", "")}
             for s in ann.spans]
    return {"scores": {letter[r]: v for r, v in ann.scores.items()}, "pairs": dict(sorted(pairs.items())),
            "ranking": _ranking_text(shown, ann.levels), "spans": spans, "note": ann.note}


def _participant(session: Session, user: Member, task_id: int) -> tuple[Task, Assignment]:
    task = _task_of(session, user, task_id)
    assignment = session.scalar(select(Assignment).where(Assignment.task_id == task_id,
                                                         Assignment.user_id == user.id))
    if assignment is None or assignment.submitted_at is None:
        raise WorkflowError(403, f"task {task_id} is not one of your answered tasks")
    if task.state != "aligning":
        raise WorkflowError(409, f"task {task_id} is not in alignment (it is {task.state})")
    return task, assignment


def align(session: Session, user: Member, task_id: int, body: Any, settings: WorkflowSettings) -> str:
    """The user's answer after seeing the others'. When every participant has answered again,
    answers that agree settle the task (``settled``); otherwise it is escalated to an admin."""
    task, assignment = _participant(session, user, task_id)
    sub = _check(session, task, assignment.shown_order, body)
    _store(session, _annotation(task, user.id, "aligned", assignment.shown_order, sub),
           f"you already answered task {task_id} in alignment")
    session.refresh(task)
    answers = current_answers(session, task_id)
    people = {a.user_id for a in answers}
    realigned = [a for a in answers if a.phase == "aligned"]
    state = "waiting"
    if {a.user_id for a in realigned} == people:
        for a in answers:
            if a.phase == "first":
                a.status = "superseded"
        if _mean_agreement(realigned) == 1:  # task.agreement keeps the double-blind (first-round) figure
            _done(session, task, realigned, settings)
            state = "settled"
        else:
            task.state = state = "escalated"
    session.commit()
    return state


def escalate(session: Session, user: Member, task_id: int) -> str:
    task, _ = _participant(session, user, task_id)
    task.state = "escalated"
    session.commit()
    return "escalated"


def escalations(session: Session, study_id: int) -> list[dict]:
    """Escalated tasks of a study with every standing answer, responses in task order (A, B, C)."""
    out = []
    for task in session.scalars(select(Task).where(Task.state == "escalated", Task.study_id == study_id)
                                .order_by(Task.id)):
        view = task_view(session, task, task.response_ids)
        names = dict(session.execute(select(User.id, User.name)).all())
        view["answers"] = [dict(_in_letters(a, task.response_ids), annotator=names.get(a.user_id), phase=a.phase)
                           for a in current_answers(session, task.id)]
        out.append(view)
    return out


def resolve_escalation(session: Session, admin: Member, task_id: int, body: Any) -> Annotation:
    """An admin's decision on an escalated task (letters in task order) stands for the task."""
    task = _task_of(session, admin, task_id)
    if task.state != "escalated":
        raise WorkflowError(409, f"task {task_id} is not escalated (it is {task.state})")
    sub = _check(session, task, task.response_ids, body)
    ann = _store(session, _annotation(task, admin.id, "admin", task.response_ids, sub),
                 f"task {task_id} already has your decision")
    task.state = "done"
    session.commit()
    return ann


# ----------------------------------------------------------------------------------------- review


def next_review(session: Session, user: Member, settings: WorkflowSettings) -> dict | None:
    """The reviewer's open item, or a newly claimed one (never an answer of their own, never one
    they reviewed at another stage), single-blind: the answer without its annotator."""
    expiry = now() - timedelta(seconds=settings.claim_timeout_s)
    item = session.scalar(select(ReviewItem).where(ReviewItem.reviewer_id == user.id,
                                                   ReviewItem.study_id == user.study_id,
                                                   ReviewItem.verdict.is_(None)).limit(1))
    if item is None:
        other = ReviewItem.__table__.alias("other")
        seen = exists().where(other.c.annotation_id == ReviewItem.annotation_id, other.c.reviewer_id == user.id)
        free = or_(ReviewItem.reviewer_id.is_(None), ReviewItem.claimed_at < expiry)
        candidates = session.scalars(select(ReviewItem.id).join(Annotation, Annotation.id == ReviewItem.annotation_id)
                                     .where(ReviewItem.study_id == user.study_id, ReviewItem.verdict.is_(None),
                                            free, ~seen,
                                            or_(Annotation.user_id.is_(None), Annotation.user_id != user.id),
                                            Annotation.status == "active")
                                     .order_by(ReviewItem.stage, ReviewItem.queue_key).limit(10)).all()
        for iid in candidates:
            won = session.execute(update(ReviewItem).where(ReviewItem.id == iid, ReviewItem.verdict.is_(None), free)
                                  .values(reviewer_id=user.id, claimed_at=now())).rowcount
            session.commit()
            if won:
                item = session.get(ReviewItem, iid)
                break
        if item is None:
            return None
    ann = session.get(Annotation, item.annotation_id)
    task = session.get(Task, ann.task_id)
    view = task_view(session, task, ann.shown_order)
    view.pop("task_id")
    view.update(item_id=item.id, stage=item.stage, annotation=_in_letters(ann, ann.shown_order))
    return view


def review(session: Session, user: Member, item_id: int, verdict: Any, note: Any,
           settings: WorkflowSettings) -> ReviewItem:
    """Record a verdict. Accepted answers are sampled for the next stage; a rejected one is
    dropped and its task goes back to the queue for one more annotator."""
    if verdict not in ("accept", "reject"):
        raise WorkflowError(422, f"verdict: must be 'accept' or 'reject', got {verdict!r}", field="verdict")
    if note is None:
        note = ""
    if not isinstance(note, str) or len(note) > 5000:
        raise WorkflowError(422, "note: must be text of at most 5000 characters", field="note")
    item = session.get(ReviewItem, item_id)
    if item is None or item.study_id != user.study_id:
        raise WorkflowError(404, f"no review item {item_id}")
    if item.reviewer_id != user.id:
        raise WorkflowError(403, f"review item {item_id} is not handed to you")
    won = session.execute(update(ReviewItem).where(ReviewItem.id == item_id, ReviewItem.verdict.is_(None))
                          .values(verdict=verdict, note=note, decided_at=now())).rowcount
    if not won:
        session.rollback()
        raise WorkflowError(409, f"review item {item_id} already has a verdict")
    ann = session.get(Annotation, item.annotation_id)
    if item.gold_verdict is None:
        if verdict == "accept":
            _maybe_review(session, item.study_id, ann.id, item.stage + 1, settings)
        elif ann.status == "active":
            ann.status = "rejected"
            task = session.get(Task, ann.task_id)
            task.overlap += 1
            task.state = "open"
    session.commit()
    session.refresh(item)
    return item
