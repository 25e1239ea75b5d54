"""The public calls of the human annotation server (the ``annotate`` extra): annotate_init,
annotate_add_user, annotate_import, annotate_serve, annotate_status, annotate_export,
annotate_add_study, annotate_list_studies.

One database holds several studies side by side; ``db`` is its SQLAlchemy URL (default
``$CHEEMS_ANNOTATE_DB``, else ``sqlite:///annotations.db``) and ``study`` picks the study to
work on."""

from __future__ import annotations

import importlib.util
import os
from typing import TYPE_CHECKING, Callable, Mapping, Sequence, TextIO

from cheems.common_settings import ReadSettings, StatisticsSettings
from cheems.records import CheemsInputError
from cheems.settings import as_settings

if TYPE_CHECKING:  # annotations only: sqlalchemy and fastapi load with the call that needs them
    from cheems.annotate.settings import ServerSettings, WorkflowSettings

__all__ = ["annotate_add_study", "annotate_add_user", "annotate_export", "annotate_import", "annotate_init",
           "annotate_list_studies", "annotate_serve", "annotate_status", "database_url", "open_database"]

EXTRA_MODULES = ("fastapi", "uvicorn", "sqlalchemy", "alembic", "argon2", "nh3", "markdown_it")
"""What the annotate extra installs, checked before any call opens a database."""


def _need_extra() -> None:
    missing = [m for m in EXTRA_MODULES if importlib.util.find_spec(m) is None]
    if missing:
        raise CheemsInputError(f"{', '.join(missing)} not installed: `pip install 'cheems[annotate]'`")


def database_url(db: str | None) -> str:
    """``db``, else ``$CHEEMS_ANNOTATE_DB``, else the SQLite file ``annotations.db`` here."""
    from cheems.annotate.db import DEFAULT_DB

    return db or os.environ.get("CHEEMS_ANNOTATE_DB") or DEFAULT_DB


def open_database(db: str | None):
    """A session on the database ``db``, which must hold the current schema (:func:`annotate_init`)."""
    _need_extra()
    from cheems.annotate.db import make_engine, schema_is_current, session_factory

    url = database_url(db)
    _refuse_missing_sqlite_file(url)
    engine = make_engine(url)
    try:
        current = schema_is_current(engine)
    except Exception as e:  # a server that refuses, a file that is not a database
        raise CheemsInputError(f"cannot open the database: {str(e).splitlines()[0]}", field="db") from None
    if not current:
        raise CheemsInputError("the database is not initialised (or is an older schema): run annotate_init "
                               "(`cheems annotate init`) first", field="db")
    return session_factory(engine)()


def _refuse_missing_sqlite_file(url: str) -> None:
    """A SQLite URL whose file does not exist, or is empty, is a database never initialised: say
    so before connecting, which would leave a database file behind (or write into the empty one)."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        parsed = make_url(url)
    except ArgumentError:
        return  # make_engine names a malformed URL
    database = parsed.database
    if parsed.get_backend_name() == "sqlite" and database and database != ":memory:" \
            and not database.startswith("file:") and (not os.path.lexists(database) or _empty_file(database)):
        what = "is empty (0 bytes)" if os.path.lexists(database) else "does not exist"
        raise CheemsInputError(f"the database file {database} {what}: the database is not initialised; run "
                               "annotate_init (`cheems annotate init`) first", field="db")


def _empty_file(path: str) -> bool:
    return os.path.isfile(path) and os.path.getsize(path) == 0


def annotate_init(db: str | None = None) -> dict:
    """Create (or upgrade) the schema of an annotation database.

    Args:
        db: The database's SQLAlchemy URL (default ``$CHEEMS_ANNOTATE_DB``, else ``sqlite:///annotations.db``).

    Returns:
        ``database`` (its URL) and ``schema`` (the migration it is at now).

    Raises:
        CheemsInputError: The annotate extra not installed, or a database that cannot be set up.

    Paper: §3.2 and Appendix D.1 (the annotation pipeline).
    """
    _need_extra()
    from cheems.annotate.db import make_engine, migrate

    url = database_url(db)
    try:
        head = migrate(make_engine(url))
    except CheemsInputError:
        raise
    except Exception as e:
        raise CheemsInputError(f"cannot set up the database: {str(e).splitlines()[0]}", field="db") from None
    return {"database": url, "schema": head}


def annotate_add_user(name: str, password: str | Callable[[], str], *, role: str = "annotator", categories: Sequence[str] = (),
                      study: str = "default", db: str | None = None):
    """Add an account with its role in a study, or give an existing account (with its own password) a role in another.

    Args:
        name: The login name.
        password: Its password (an existing account's own, to join another study), or a function
            that asks for it, called once the database is open.
        role: ``annotator``, ``reviewer`` or ``admin``.
        categories: Main categories of expertise (their tasks come first), e.g. 数学, 代码.
        study: The study the role is in.
        db: The database's SQLAlchemy URL.

    Returns:
        The member: ``name``, ``role``, ``study``, ``categories``.

    Raises:
        CheemsInputError: A database not initialised, an unknown role or study, an empty password, a
            name that already has a role there, or another account's password.
    """
    from cheems.annotate.auth import add_user

    session = open_database(db)
    return add_user(session, name, role, password() if callable(password) else password, list(categories),
                    study=study)


def annotate_import(path: str | os.PathLike, *, overlap: int = 2, gold: str | os.PathLike | None = None,
                    read: ReadSettings | Mapping | None = None, statistics: StatisticsSettings | Mapping | None = None,
                    study: str = "default", db: str | None = None) -> dict:
    """Turn every prompt of a file into its triple-wise annotation tasks in a study, keeping id, category and subset.

    Rows of one prompt are joined; a prompt already imported with the same content is skipped.

    Args:
        path: Prompts with responses (any supported format).
        overlap: Annotators per task.
        gold: Ranked prompts with known answers, mixed into the annotation and review streams.
        read: How rows are read (a :class:`~cheems.common_settings.ReadSettings`, or a mapping of
            its fields): ``format`` reads every row as this format instead of detecting it row by
            row; ``skip_invalid`` skips bad rows (their errors go to ``errors``) instead of
            raising at the first.
        statistics: The randomness (a :class:`~cheems.common_settings.StatisticsSettings`, or a
            mapping of its fields): ``seed``, where gold tasks land in the queue (an integer >= 0).
        study: The study to import into.
        db: The database's SQLAlchemy URL.

    Returns:
        ``prompts``, ``tasks``, ``gold_prompts``, ``gold_tasks``, ``skipped`` (already there) and
        ``errors`` (of the rows skipped).

    Raises:
        CheemsInputError: A bad ``read`` or ``statistics`` setting, a bad overlap, a database not
            initialised, a file that cannot be read, or a prompt id imported before with other content.

    Paper: §3.2 (Benchmark Labeling: triple-wise tasks of adjacent responses, several annotators each).
    """
    from cheems.annotate.workflow import import_prompts
    from cheems.formats import merge_prompts, read_many

    how = as_settings(ReadSettings, read, "read", uses=("format", "skip_invalid"))
    seed = as_settings(StatisticsSettings, statistics, "statistics", uses=("seed",)).seed
    skip_invalid, fmt = how.skip_invalid, how.format
    if not isinstance(seed, int) or seed < 0:
        raise CheemsInputError(f"must be a non-negative integer, got {seed}", field="seed")
    session = open_database(db)
    res = read_many([path], skip_invalid=skip_invalid, fmt=fmt)
    prompts, gold_prompts, errors = merge_prompts(res.prompts, res.locations()), [], list(res.errors)
    if gold is not None:
        g = read_many([gold], skip_invalid=skip_invalid, fmt=fmt)
        gold_prompts = merge_prompts(g.prompts, g.locations())
        errors.extend(g.errors)
    counts = import_prompts(session, prompts, overlap=overlap, gold=gold_prompts, seed=seed, study=study)
    return {**counts, "errors": errors}


def annotate_serve(db: str | None = None, workflow: WorkflowSettings | None = None,
                   server: ServerSettings | None = None, *, on_ready: Callable[[dict], None] | None = None,
                   log: TextIO | None = None) -> None:
    """Run the annotation web app for every study of a database until interrupted.

    Annotators work at ``http://HOST:PORT/``, the dashboard is at ``/dashboard``
    (:func:`cheems.annotate.app.create_app`).

    Args:
        db: The database's SQLAlchemy URL (initialised by :func:`annotate_init`).
        workflow: The workflow settings of the study ``default`` (every other study runs on those
            stored with it by :func:`annotate_add_study`).
        server: Where and how to serve (a :class:`~cheems.annotate.settings.ServerSettings`: host, port, cookies).
        on_ready: ``on_ready(info)`` once the sockets listen: ``url``, ``database``, ``users``.
        log: A stream for one access line per request (method, path, status, milliseconds, user id).

    Returns:
        None, once the server has stopped.

    Raises:
        CheemsInputError: The annotate extra not installed, or a database not initialised.

    Paper: §3.2 and Appendix D.1 (the annotation pipeline: double-blind overlap, alignment, review).
    """
    _need_extra()
    from cheems.annotate.app import create_app
    from cheems.annotate.server import log_to, run
    from cheems.annotate.settings import ServerSettings, WorkflowSettings

    server = server or ServerSettings()
    open_database(db).close()  # a database that is missing, not a database or not initialised: one error
    web_app = create_app(database_url(db), workflow or WorkflowSettings(), secure_cookies=server.secure_cookies)
    if log is not None:
        log_to(log)
    run(web_app, server.host, server.port, on_ready=on_ready or (lambda info: None))


def annotate_status(study: str = "default", db: str | None = None) -> dict:
    """Compute the progress, agreement, gold accuracy and bias of one study: the numbers of the dashboard.

    Args:
        study: The study.
        db: The database's SQLAlchemy URL.

    Returns:
        ``tasks``, ``by_category``, ``agreement``, ``krippendorff``, ``by_annotator``,
        ``conflict_ratio``, ... (:func:`cheems.annotate.dashboard.stats`).

    Raises:
        CheemsInputError: A database not initialised, or an unknown study.

    Paper: §3.2 (agreement between annotators) and Appendix D.3 (annotation bias).
    """
    from cheems.annotate.dashboard import stats

    return stats(open_database(db), study)


def annotate_export(output: str | os.PathLike, *, raw: str | os.PathLike | None = None,
                    report: str | os.PathLike | None = None, study: str = "default", db: str | None = None) -> dict:
    """Export a study's settled answers as a ranked benchmark: answers -> comparisons -> conflict resolution.

    Args:
        output: The benchmark file (JSONL) for :func:`cheems.evaluate`.
        raw: Also every answer with annotator, time, shown order, scores, pairs, spans and review verdicts.
        report: Also the conflict statistics (JSON).
        study: The study.
        db: The database's SQLAlchemy URL.

    Returns:
        ``prompts`` (written), ``prompts_waiting`` (without a settled task yet), ``raw_rows`` and
        ``conflicts`` (the conflict report).

    Raises:
        CheemsInputError: A database not initialised, an unknown study, or two outputs that are one file.

    Paper: §3.2 Conflict Resolving and Algorithm 1.
    """
    from cheems.annotate.export import export_benchmark
    from cheems.io import check_outputs

    check_outputs([output, raw, report])
    return export_benchmark(open_database(db), output, raw=raw, report=report, study=study)


def annotate_add_study(name: str, settings: WorkflowSettings | None = None, db: str | None = None):
    """Add an empty study to an annotation database, with the workflow settings it runs on.

    Args:
        name: The new study's name.
        settings: Its workflow settings (a :class:`~cheems.annotate.settings.WorkflowSettings`).
        db: The database's SQLAlchemy URL.

    Returns:
        The study (its ``name``).

    Raises:
        CheemsInputError: A database not initialised, or a name taken or empty.
    """
    from cheems.annotate.settings import WorkflowSettings
    from cheems.annotate.studies import add_study

    return add_study(open_database(db), name, settings or WorkflowSettings())


def annotate_list_studies(db: str | None = None) -> list[dict]:
    """List the studies of an annotation database with their prompts, tasks and members.

    Args:
        db: The database's SQLAlchemy URL.

    Returns:
        Per study: ``name``, ``prompts``, ``tasks``, ``members``, ``created_at``.

    Raises:
        CheemsInputError: A database not initialised.
    """
    from cheems.annotate.studies import list_studies

    return list_studies(open_database(db))
