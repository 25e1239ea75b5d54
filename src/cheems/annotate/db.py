"""The annotation database: SQLAlchemy 2 models, engines and schema migrations.

One schema serves SQLite (the default: one file, WAL journal, a busy timeout, every write
transaction taken with ``BEGIN IMMEDIATE`` so concurrent writers queue instead of failing with
"database is locked") and PostgreSQL (psycopg 3). Alembic owns the schema: `migrate` upgrades a
database to the newest revision; the first revision created one project's tables, the second
(``0002_studies``) holds several studies side by side: prompts are keyed ``(study_id, id)``,
tasks and review items carry their study, and roles live in ``memberships``.

Invariants the workflow relies on, enforced by the database itself:

- ``assignments (task_id, user_id)`` is unique: a task is never handed to one person twice;
- ``annotations (task_id, user_id, phase)`` is unique: one answer per person and phase;
- ``review_items (annotation_id, stage)`` is unique: one review per annotation and stage;
- ``tasks.claimed`` only changes through ``UPDATE ... WHERE claimed < overlap`` (see workflow).
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

from sqlalchemy import (JSON, Boolean, DateTime, Float, ForeignKey, ForeignKeyConstraint, Index, Integer, String,
                        Text, UniqueConstraint, create_engine, event, inspect)
from sqlalchemy.engine import Engine, make_url
from sqlalchemy.exc import ArgumentError, NoSuchModuleError
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, sessionmaker

from cheems.records import CheemsInputError

__all__ = ["DEFAULT_DB", "DEFAULT_STUDY", "Annotation", "Assignment", "Base", "Membership", "PromptRow", "ReviewItem",
           "Study", "Task", "User", "WebSession", "alembic_config", "make_engine", "migrate", "now",
           "schema_is_current", "session_factory"]

DEFAULT_DB = "sqlite:///annotations.db"
DEFAULT_STUDY = "default"


def now() -> dt.datetime:
    """The current time in UTC, without tzinfo (stored alike on SQLite and PostgreSQL)."""
    return dt.datetime.now(dt.timezone.utc).replace(tzinfo=None)


class Base(DeclarativeBase):
    type_annotation_map = {dict[str, Any]: JSON, list[Any]: JSON}


class Study(Base):
    """One project in the database: its own prompts, tasks, roles, workflow settings and export."""

    __tablename__ = "studies"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(100), unique=True)
    settings: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)  # WorkflowSettings fields
    created_at: Mapped[dt.datetime] = mapped_column(DateTime, default=now)


class User(Base):
    """An account, shared by every study; its role and categories are per study (`Membership`)."""

    __tablename__ = "users"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(100), unique=True)
    password_hash: Mapped[str] = mapped_column(String(200))
    created_at: Mapped[dt.datetime] = mapped_column(DateTime, default=now)


class Membership(Base):
    __tablename__ = "memberships"
    study_id: Mapped[int] = mapped_column(ForeignKey("studies.id"), primary_key=True)
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id"), primary_key=True)
    role: Mapped[str] = mapped_column(String(20))  # annotator | reviewer | admin
    categories: Mapped[list[Any]] = mapped_column(JSON, default=list)  # main categories of expertise


class WebSession(Base):
    __tablename__ = "web_sessions"
    token_hash: Mapped[str] = mapped_column(String(64), primary_key=True)  # sha256 of the cookie's token
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id"))
    csrf_token: Mapped[str] = mapped_column(String(64))
    expires_at: Mapped[dt.datetime] = mapped_column(DateTime)


class PromptRow(Base):
    __tablename__ = "prompts"
    study_id: Mapped[int] = mapped_column(ForeignKey("studies.id"), primary_key=True)
    id: Mapped[str] = mapped_column(String(200), primary_key=True)
    position: Mapped[int] = mapped_column(Integer)
    prompt: Mapped[Any] = mapped_column(JSON)  # text, or a list of chat messages
    category: Mapped[list[Any]] = mapped_column(JSON, default=list)
    subset: Mapped[str | None] = mapped_column(String(200), nullable=True)
    responses: Mapped[list[Any]] = mapped_column(JSON)  # [{id, content, model?}]
    is_gold: Mapped[bool] = mapped_column(Boolean, default=False)


class Task(Base):
    __tablename__ = "tasks"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    study_id: Mapped[int] = mapped_column(ForeignKey("studies.id"))
    prompt_id: Mapped[str] = mapped_column(String(200))
    round: Mapped[int] = mapped_column(Integer)  # 1..5 for five responses
    response_ids: Mapped[list[Any]] = mapped_column(JSON)  # the triple, in the prompt's order
    queue_key: Mapped[int] = mapped_column(Integer)  # hand-out order: gold mixed in at seeded places
    category: Mapped[str] = mapped_column(String(200))  # main category, for expertise queues
    overlap: Mapped[int] = mapped_column(Integer)  # people to hand it to; 0 for gold: everyone once
    claimed: Mapped[int] = mapped_column(Integer, default=0)  # live assignments
    submitted: Mapped[int] = mapped_column(Integer, default=0)
    state: Mapped[str] = mapped_column(String(20), default="open")  # open | aligning | escalated | done
    agreement: Mapped[float | None] = mapped_column(Float, nullable=True)
    gold_levels: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)  # {response id: level}
    __table_args__ = (ForeignKeyConstraint(["study_id", "prompt_id"], ["prompts.study_id", "prompts.id"],
                                           name="fk_tasks_prompt"),
                      Index("ix_tasks_study_queue", "study_id", "state", "queue_key"))


class Assignment(Base):
    __tablename__ = "assignments"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    task_id: Mapped[int] = mapped_column(ForeignKey("tasks.id"))
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id"))
    shown_order: Mapped[list[Any]] = mapped_column(JSON)  # response ids shown as A, B, C
    claimed_at: Mapped[dt.datetime] = mapped_column(DateTime, default=now)
    submitted_at: Mapped[dt.datetime | None] = mapped_column(DateTime, nullable=True)
    __table_args__ = (UniqueConstraint("task_id", "user_id", name="uq_assignment_task_user"),
                      Index("ix_assignments_open", "user_id", "submitted_at"))


class Annotation(Base):
    """One answer to one task, in response ids: ``scores`` {id: 0-5}, ``pairs`` {"id1|id2": g|b|s}
    for the triple's pairs in task order, ``levels`` {id: level}; ``ranking`` and ``spans`` as the
    annotator wrote them (letters, with ``shown_order`` to read them)."""

    __tablename__ = "annotations"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    task_id: Mapped[int] = mapped_column(ForeignKey("tasks.id"))
    user_id: Mapped[int | None] = mapped_column(ForeignKey("users.id"), nullable=True)  # None: a planted gold item
    phase: Mapped[str] = mapped_column(String(20))  # first | aligned | admin | gold
    shown_order: Mapped[list[Any]] = mapped_column(JSON)
    scores: Mapped[dict[str, Any]] = mapped_column(JSON)
    pairs: Mapped[dict[str, Any]] = mapped_column(JSON)
    levels: Mapped[dict[str, Any]] = mapped_column(JSON)
    ranking: Mapped[str] = mapped_column(String(20))
    spans: Mapped[list[Any]] = mapped_column(JSON, default=list)
    note: Mapped[str] = mapped_column(Text, default="")
    status: Mapped[str] = mapped_column(String(20), default="active")  # active | superseded | rejected
    created_at: Mapped[dt.datetime] = mapped_column(DateTime, default=now)
    __table_args__ = (UniqueConstraint("task_id", "user_id", "phase", name="uq_annotation_task_user_phase"),)


class ReviewItem(Base):
    __tablename__ = "review_items"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    study_id: Mapped[int] = mapped_column(ForeignKey("studies.id"))
    annotation_id: Mapped[int] = mapped_column(ForeignKey("annotations.id"))
    stage: Mapped[int] = mapped_column(Integer)  # 1, 2, ...: each stage samples what the last accepted
    queue_key: Mapped[int] = mapped_column(Integer)
    reviewer_id: Mapped[int | None] = mapped_column(ForeignKey("users.id"), nullable=True)
    claimed_at: Mapped[dt.datetime | None] = mapped_column(DateTime, nullable=True)
    verdict: Mapped[str | None] = mapped_column(String(10), nullable=True)  # accept | reject
    note: Mapped[str] = mapped_column(Text, default="")
    decided_at: Mapped[dt.datetime | None] = mapped_column(DateTime, nullable=True)
    gold_verdict: Mapped[str | None] = mapped_column(String(10), nullable=True)  # the expected verdict of a gold item
    __table_args__ = (UniqueConstraint("annotation_id", "stage", name="uq_review_annotation_stage"),
                      Index("ix_review_items_study_queue", "study_id", "stage", "queue_key"))


def make_engine(url: str) -> Engine:
    """An engine for ``url`` (a SQLAlchemy URL): SQLite files get WAL, a 30 s busy timeout, full
    sync and ``BEGIN IMMEDIATE`` transactions; ``postgresql://`` uses psycopg 3. A malformed URL or
    a missing driver is a CheemsInputError naming the field ``db``."""
    try:
        parsed = make_url(url)
    except ArgumentError:
        raise CheemsInputError(f"not a database URL: {url!r} (e.g. sqlite:///annotations.db or "
                               "postgresql://user@host/db)", field="db") from None
    if parsed.drivername in ("postgresql", "postgres"):
        parsed = parsed.set(drivername="postgresql+psycopg")
    try:
        if parsed.get_backend_name() == "sqlite":
            return _sqlite_engine(parsed)
        return create_engine(parsed, pool_size=20, max_overflow=20, pool_pre_ping=True)
    except (NoSuchModuleError, ImportError) as e:
        raise CheemsInputError(f"no driver for {parsed.drivername} ({e}); PostgreSQL needs "
                               "psycopg: `pip install 'cheems[annotate]'`", field="db") from None


def _sqlite_engine(parsed) -> Engine:
    database = parsed.database
    if database and database != ":memory:":
        folder = Path(database).expanduser().resolve().parent
        if not folder.is_dir():
            raise CheemsInputError(f"the folder of the database file does not exist: {folder}", field="db")
    engine = create_engine(parsed, pool_size=20, max_overflow=20,
                           connect_args={"check_same_thread": False, "timeout": 30, "isolation_level": None})

    @event.listens_for(engine, "connect")
    def _pragmas(dbapi_conn, _record):
        cur = dbapi_conn.cursor()
        cur.execute("PRAGMA journal_mode=WAL")
        cur.execute("PRAGMA synchronous=FULL")
        cur.execute("PRAGMA busy_timeout=30000")
        cur.execute("PRAGMA foreign_keys=ON")
        cur.close()

    @event.listens_for(engine, "begin")
    def _begin_immediate(conn):  # the write lock first: no upgrade from a read lock that can fail
        conn.exec_driver_sql("BEGIN IMMEDIATE")

    return engine


def session_factory(engine: Engine) -> sessionmaker:
    return sessionmaker(engine, expire_on_commit=False)


MIGRATIONS = Path(__file__).with_name("migrations")


def alembic_config(engine: Engine):
    """Alembic's configuration for the migrations of this package, on ``engine``."""
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    cfg.attributes["engine"] = engine
    return cfg


def migrate(engine: Engine) -> str:
    """Upgrade the database to the newest schema revision (creating it when empty); returns it."""
    from alembic import command
    from alembic.script import ScriptDirectory

    cfg = alembic_config(engine)
    command.upgrade(cfg, "head")
    return ScriptDirectory.from_config(cfg).get_current_head()


def schema_is_current(engine: Engine) -> bool:
    """Whether the database holds the newest schema (so `serve` can refuse an uninitialised one)."""
    from alembic.migration import MigrationContext
    from alembic.script import ScriptDirectory

    if not inspect(engine).has_table("alembic_version"):
        return False
    with engine.connect() as conn:
        current = MigrationContext.configure(conn).get_current_revision()
    return current == ScriptDirectory.from_config(alembic_config(engine)).get_current_head()
