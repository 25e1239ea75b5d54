"""Studies: several annotation projects side by side in one database, each with its own prompts,
tasks, roles, workflow settings and export. Accounts are shared; a user's role and categories of
expertise belong to a study (`cheems.annotate.db.Membership`), and whoever has no role in a study
sees nothing of it. A :class:`Member` is a user acting in one study: what the workflow is given."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from sqlalchemy import func, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from cheems.annotate.db import DEFAULT_STUDY, Membership, PromptRow, Study, Task, User
from cheems.annotate.settings import WorkflowSettings
from cheems.records import CheemsInputError

__all__ = ["DEFAULT_STUDY", "Member", "add_study", "find_study", "list_studies", "member_of", "settings_of",
           "studies_of"]


@dataclass(frozen=True)
class Member:
    """A user in one study: ``id`` and ``name`` of the account, ``role`` and ``categories`` there,
    the study's id and name, and the workflow settings that hold in it."""

    id: int
    name: str
    role: str
    categories: list
    study_id: int
    study: str
    settings: WorkflowSettings


def find_study(session: Session, name: str) -> Study:
    """The study called ``name``; an unknown name is a CheemsInputError naming the field ``study``."""
    study = session.scalar(select(Study).where(Study.name == name)) if isinstance(name, str) else None
    if study is None:
        known = ", ".join(session.scalars(select(Study.name).order_by(Study.name))) or "none"
        raise CheemsInputError(f"no study {name!r} in the database; add one with `cheems annotate study add`",
                               field="study", remedy=("study", f"{{}} is one of: {known}"))
    return study


def add_study(session: Session, name: str, settings: WorkflowSettings = WorkflowSettings()) -> Study:
    """A new, empty study with its workflow settings; a taken or empty name is a CheemsInputError. Commits."""
    name = name.strip() if isinstance(name, str) else ""
    if not name or len(name) > 100:
        raise CheemsInputError("a study name of 1 to 100 characters is needed", field="NAME")
    study = Study(name=name, settings=dataclasses.asdict(settings))
    session.add(study)
    try:
        session.commit()
    except IntegrityError:
        session.rollback()
        raise CheemsInputError(f"study {name!r} already exists", field="NAME") from None
    return study


def settings_of(study: Study) -> WorkflowSettings:
    """The workflow settings stored with a study (fields it lacks take their defaults)."""
    names = {f.name for f in dataclasses.fields(WorkflowSettings)}
    return WorkflowSettings(**{k: v for k, v in (study.settings or {}).items() if k in names})


def list_studies(session: Session) -> list[dict]:
    """Every study: name, creation time, settings, and how many prompts, tasks and members it has."""
    def count(model, column) -> dict:
        return dict(session.execute(select(column, func.count()).select_from(model).group_by(column)).all())

    prompts, tasks = count(PromptRow, PromptRow.study_id), count(Task, Task.study_id)
    members = count(Membership, Membership.study_id)
    return [{"name": s.name, "created_at": s.created_at.isoformat(), "settings": dict(s.settings or {}),
             "prompts": prompts.get(s.id, 0), "tasks": tasks.get(s.id, 0), "members": members.get(s.id, 0)}
            for s in session.scalars(select(Study).order_by(Study.id))]


def member_of(session: Session, user: User, study: Study, settings: WorkflowSettings | None = None
              ) -> Member | None:
    """The user in ``study`` (None without a role there); ``settings`` override the study's own."""
    m = session.get(Membership, (study.id, user.id))
    if m is None:
        return None
    return Member(id=user.id, name=user.name, role=m.role, categories=list(m.categories or []),
                  study_id=study.id, study=study.name, settings=settings or settings_of(study))


def studies_of(session: Session, user: User) -> list[dict]:
    """The studies the user has a role in: ``[{name, role}]`` in the order they were made."""
    rows = session.execute(select(Study.name, Membership.role).join(Membership, Membership.study_id == Study.id)
                           .where(Membership.user_id == user.id).order_by(Study.id)).all()
    return [{"name": name, "role": role} for name, role in rows]
