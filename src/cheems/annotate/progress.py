"""An annotator's own progress, shown on their page (`GET /api/progress`): answers submitted
today (the server's local day) and in total, tasks still in the queue for them, and their tasks
waiting in alignment."""

from __future__ import annotations

import datetime as dt

from sqlalchemy import exists, func, or_, select
from sqlalchemy.orm import Session

from cheems.annotate.db import Annotation, Assignment, Task
from cheems.annotate.studies import Member

__all__ = ["alignment_waiting", "progress_of", "start_of_today"]


def start_of_today() -> dt.datetime:
    """Midnight of the server's local day, in UTC without tzinfo (as times are stored)."""
    local = dt.datetime.now().astimezone()
    midnight = local.replace(hour=0, minute=0, second=0, microsecond=0)
    return midnight.astimezone(dt.timezone.utc).replace(tzinfo=None)


def alignment_waiting(session: Session, user: Member) -> int:
    """Tasks of the user's (in their study) in alignment that they have not answered again."""
    aligned = exists().where(Annotation.task_id == Task.id, Annotation.user_id == user.id,
                             Annotation.phase == "aligned")
    return session.scalar(select(func.count()).select_from(Task).join(Assignment, Assignment.task_id == Task.id)
                          .where(Task.study_id == user.study_id, Task.state == "aligning",
                                 Assignment.user_id == user.id, ~aligned)) or 0


def progress_of(session: Session, user: Member) -> dict:
    """In the user's study: ``done_today``, ``done_total`` (tasks submitted), ``queue_left`` (open tasks that could
    still be handed to the user, their open one included) and ``alignment_waiting``."""
    mine = select(func.count()).select_from(Assignment).join(Task, Task.id == Assignment.task_id).where(
        Assignment.user_id == user.id, Task.study_id == user.study_id)
    submitted = mine.where(Assignment.submitted_at.is_not(None))
    had = exists().where(Assignment.task_id == Task.id, Assignment.user_id == user.id)
    free = select(func.count()).select_from(Task).where(
        Task.study_id == user.study_id, Task.state == "open", or_(Task.overlap == 0, Task.claimed < Task.overlap), ~had)
    open_now = mine.where(Assignment.submitted_at.is_(None))
    return {"done_today": session.scalar(submitted.where(Assignment.submitted_at >= start_of_today())) or 0,
            "done_total": session.scalar(submitted) or 0,
            "queue_left": (session.scalar(free) or 0) + (session.scalar(open_now) or 0),
            "alignment_waiting": alignment_waiting(session, user)}
