"""A throwaway PostgreSQL cluster in a temporary folder, for tests and benchmarks that need a real server.

``throwaway_cluster()`` runs ``initdb`` in a fresh temporary folder, starts ``postgres`` listening on
127.0.0.1 on a free port (its unix socket in the same folder, trust authentication for local users),
creates one database and yields its SQLAlchemy URL ``postgresql+psycopg://USER@127.0.0.1:PORT/DBNAME``.
On exit the server is stopped (immediate mode) and the folder removed.

``initdb`` and ``postgres`` refuse to run as root. Running as root, the cluster belongs to the existing
``postgres`` system user, or to a ``cheems-pg`` system user created with ``useradd --system`` when there
is none, and every server binary runs through ``runuser -u USER --``. Running as anyone else, it is
simply that user's.

The binaries are looked up in ``$CHEEMS_PG_BIN``, then ``/usr/lib/postgresql/15/bin``, then any other
``/usr/lib/postgresql/*/bin``, then ``PATH``. When no cluster can be had, ``ClusterUnavailable`` says why;
the session fixture ``postgres_url`` turns that into a skip with the reason printed.

    with throwaway_cluster() as url:
        engine = sqlalchemy.create_engine(url)
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path
from typing import Iterator

import pytest

PREFERRED_VERSION = "15"
FALLBACK_USER = "cheems-pg"
DATABASE = "cheems"
START_TIMEOUT_S = 600  # initdb and a server start take seconds; this only catches one that hangs


class ClusterUnavailable(RuntimeError):
    """No throwaway cluster can be started here; the message says why."""


def find_bin_dir() -> Path:
    """The folder holding ``initdb``, ``pg_ctl`` and ``createdb``."""
    candidates = [os.environ.get("CHEEMS_PG_BIN", ""), f"/usr/lib/postgresql/{PREFERRED_VERSION}/bin"]
    candidates += sorted((str(p) for p in Path("/usr/lib/postgresql").glob("*/bin")), reverse=True)
    on_path = shutil.which("initdb")
    candidates.append(str(Path(on_path).parent) if on_path else "")
    for folder in filter(None, candidates):
        if all((Path(folder) / name).is_file() for name in ("initdb", "pg_ctl", "createdb")):
            return Path(folder)
    raise ClusterUnavailable("PostgreSQL server binaries (initdb, pg_ctl) not found in /usr/lib/postgresql/*/bin, "
                             "on PATH or in $CHEEMS_PG_BIN")


def server_user() -> str:
    """The unprivileged user that owns the cluster, created as a system user if needed when we are root."""
    if os.geteuid() != 0:
        return pwd.getpwuid(os.geteuid()).pw_name
    if shutil.which("runuser") is None:
        raise ClusterUnavailable("running as root and `runuser` is missing: no way to start postgres unprivileged")
    for name in ("postgres", FALLBACK_USER):
        with contextlib.suppress(KeyError):
            pwd.getpwnam(name)
            return name
    if shutil.which("useradd") is None:
        raise ClusterUnavailable(f"running as root, no `postgres` user and no `useradd` to create {FALLBACK_USER}")
    done = subprocess.run(["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", FALLBACK_USER],
                          capture_output=True, text=True)
    if done.returncode != 0 and "already exists" not in done.stderr:
        raise ClusterUnavailable(f"useradd {FALLBACK_USER} failed: {done.stderr.strip()}")
    return FALLBACK_USER


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def run_as(user: str, argv: list[str], timeout: float = START_TIMEOUT_S) -> subprocess.CompletedProcess:
    """Run ``argv`` as ``user`` (through runuser when we are root); raise ClusterUnavailable on failure."""
    if os.geteuid() == 0:
        argv = ["runuser", "-u", user, "--", *argv]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired) as err:
        raise ClusterUnavailable(f"{Path(argv[0]).name}: {err}") from err
    if done.returncode != 0:
        command = " ".join(Path(a).name if i == 0 else a for i, a in enumerate(argv))
        raise ClusterUnavailable(f"`{command}` exited {done.returncode}: {(done.stderr or done.stdout).strip()}")
    return done


def make_folder(user: str) -> Path:
    """A fresh temporary folder owned by ``user``, in a parent every user can traverse."""
    parent = tempfile.gettempdir()
    if os.geteuid() == 0 and not all(os.stat(p).st_mode & 0o001 for p in [parent, *map(str, Path(parent).parents)]):
        parent = "/tmp"  # a private TMPDIR of root's would be unreachable for the server user
    folder = Path(tempfile.mkdtemp(prefix="cheems-pg-", dir=parent))
    entry = pwd.getpwnam(user)
    os.chown(folder, entry.pw_uid, entry.pw_gid)
    return folder


def server_options(port: int, folder: Path, durable: bool) -> str:
    """``postgres`` command-line options: loopback only, our socket folder, fsync off unless ``durable``."""
    options = f"-h 127.0.0.1 -p {port} -k {folder} -c max_connections=200"
    if not durable:  # a crash of the test machine loses nothing we keep; a killed app server is unaffected
        options += " -c fsync=off -c synchronous_commit=off -c full_page_writes=off"
    return options


@contextlib.contextmanager
def throwaway_cluster(durable: bool = False, database: str = DATABASE) -> Iterator[str]:
    """Start a PostgreSQL cluster in a temporary folder and yield the SQLAlchemy URL of ``database``.

    ``durable=False`` turns fsync off (faster; a killed client loses nothing either way), ``durable=True``
    keeps PostgreSQL's crash-safe defaults, for timings that compare fairly with a durable SQLite.
    """
    bin_dir = find_bin_dir()
    user = server_user()
    folder = make_folder(user)
    data, log = folder / "data", folder / "server.log"
    started = False
    try:
        run_as(user, [str(bin_dir / "initdb"), "-D", str(data), "-U", user, "--auth=trust", "-E", "UTF8",
                      "--locale=C", "--no-sync"])
        port = free_port()
        run_as(user, [str(bin_dir / "pg_ctl"), "-D", str(data), "-l", str(log), "-w", "-t", str(START_TIMEOUT_S),
                      "-o", server_options(port, folder, durable), "start"])
        started = True
        run_as(user, [str(bin_dir / "createdb"), "-h", "127.0.0.1", "-p", str(port), "-U", user, database])
        yield f"postgresql+psycopg://{user}@127.0.0.1:{port}/{database}"
    except ClusterUnavailable as err:
        if log.is_file():
            tail = log.read_text(errors="replace").strip().splitlines()[-5:]
            raise ClusterUnavailable(f"{err}\nserver log: " + " | ".join(tail)) from None
        raise
    finally:
        if started:
            with contextlib.suppress(ClusterUnavailable):
                run_as(user, [str(bin_dir / "pg_ctl"), "-D", str(data), "-m", "immediate", "-w", "stop"])
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    """SQLAlchemy URL of a database in a throwaway PostgreSQL cluster, shared by the session; skips without one."""
    cluster = throwaway_cluster()
    try:
        url = cluster.__enter__()
    except ClusterUnavailable as err:
        print(f"no throwaway PostgreSQL cluster: {err}")
        pytest.skip(f"no throwaway PostgreSQL cluster: {err}")
    try:
        yield url
    finally:
        cluster.__exit__(None, None, None)


def create_database(url: str, name: str) -> str:
    """Create database ``name`` in the cluster of ``url`` (dropping an old one) and return its URL."""
    import sqlalchemy

    engine = sqlalchemy.create_engine(url, isolation_level="AUTOCOMMIT")
    try:
        with engine.connect() as conn:
            conn.execute(sqlalchemy.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
            conn.execute(sqlalchemy.text(f'CREATE DATABASE "{name}"'))
    finally:
        engine.dispose()
    return str(sqlalchemy.engine.make_url(url).set(database=name).render_as_string(hide_password=False))
