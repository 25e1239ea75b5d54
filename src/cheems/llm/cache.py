"""A SQLite file of judge replies, so an interrupted judge run resumes where it stopped.

Every reply is stored under a key made from everything that determines it (model, prompt
template, the exact messages, sampling parameters). A rerun looks each key up first and only
asks the endpoint for what is missing. Each write is its own committed transaction in WAL
mode, so a run killed at any moment keeps every reply it had received.

Runs sharing one file (several processes, or several connections in one) do not ask twice:
right before a request, :meth:`ReplyCache.get_or_claim` either finds the reply or claims the
key for this connection in one transaction; a key claimed by another live run is waited for.
A claim ends with :meth:`ReplyCache.release` (or :meth:`ReplyCache.close`); one left behind by
a process that died is stale at once when that process ran on this host, else when it expires.

Only the standard library and orjson: this module is usable without the ``judge`` extra.
"""

from __future__ import annotations

import hashlib
import os
import socket
import sqlite3
import time
import uuid
from pathlib import Path
from typing import Callable

import orjson

from cheems.io import process_alive
from cheems.records import CheemsInputError

__all__ = ["ReplyCache", "cache_folder", "clock", "default_cache_path"]

SCHEMA = """
CREATE TABLE IF NOT EXISTS replies (
    key     TEXT PRIMARY KEY,
    record  BLOB NOT NULL,
    created REAL NOT NULL
)
"""

CLAIMS = """
CREATE TABLE IF NOT EXISTS claims (
    key     TEXT PRIMARY KEY,
    owner   TEXT NOT NULL,
    host    TEXT NOT NULL,
    pid     INTEGER NOT NULL,
    expires REAL NOT NULL
)
"""
HOST = socket.gethostname()
OPEN_WAIT_S = 30.0
"""How long opening a cache file, or writing to it, waits on another process holding its lock."""


def clock() -> float:
    """Seconds since the epoch: when a reply was stored, when a claim expires (tests put a
    fake clock here to expire claims without waiting)."""
    return time.time()


def cache_folder() -> Path:
    """The user cache folder of cheems (the judge and sample reply caches, the model
    fingerprint cache): ``$CHEEMS_CACHE_DIR``, else ``$XDG_CACHE_HOME/cheems``, else
    ``~/.cache/cheems``. Empty variables count as unset. Not created here."""
    folder = os.environ.get("CHEEMS_CACHE_DIR")
    if folder:
        return Path(folder).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    if xdg:
        return Path(xdg).expanduser() / "cheems"
    return Path.home() / ".cache" / "cheems"


def default_cache_path() -> Path:
    """Where the judge cache lives unless told otherwise: ``judge.sqlite`` in :func:`cache_folder`."""
    return cache_folder() / "judge.sqlite"


class ReplyCache:
    """Judge replies by key, in a SQLite file (created with its parent folders).

    ``put`` commits at once, so nothing acknowledged is lost when the process dies
    (``synchronous=NORMAL`` under WAL: durable against a killed process, not a power cut).
    Calls are synchronous and short; use one instance from one thread or one asyncio event
    loop. Several processes may share the file (SQLite locks it; writers wait up to 30 s).
    ``owner`` names this connection in the claims it makes (host, process id and a random part).
    """

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        if self.path.is_dir():
            raise CheemsInputError("is a folder; give the cache a file name such as judge.sqlite", file=str(self.path))
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._db = self._open()
        except (OSError, sqlite3.Error) as e:
            raise CheemsInputError(f"cannot be used as a reply cache ({e})", file=str(self.path),
                                   remedy=("cache_path", "give {} another file")) from None
        self.owner = f"{HOST}:{os.getpid()}:{uuid.uuid4().hex[:12]}"

    def _open(self) -> sqlite3.Connection:
        """The connection, in WAL mode, with the tables. Several processes opening a new file at once
        contend for it: the switch to WAL and the first CREATE TABLE can answer "database is locked"
        at once, without SQLite's busy wait, so the opening is tried again, with a growing pause,
        for up to ``OPEN_WAIT_S`` seconds (what a writer waits on a lock, too)."""
        deadline = time.monotonic() + OPEN_WAIT_S
        pause = 0.01
        while True:
            db = sqlite3.connect(self.path, timeout=OPEN_WAIT_S, isolation_level=None)
            try:
                db.execute("PRAGMA journal_mode=WAL")
                db.execute("PRAGMA synchronous=NORMAL")
                db.execute(SCHEMA)
                db.execute(CLAIMS)
                return db
            except sqlite3.OperationalError as e:
                db.close()
                if "locked" not in str(e) or time.monotonic() + pause > deadline:
                    raise
                time.sleep(pause)
                pause = min(pause * 2, 1.0)

    @staticmethod
    def key(**parts) -> str:
        """sha256 (hex) of the parts as canonical JSON: sorted keys, UTF-8, no escaping."""
        data = orjson.dumps(parts, option=orjson.OPT_SORT_KEYS)
        return hashlib.sha256(data).hexdigest()

    def get(self, key: str) -> dict | None:
        row = self._db.execute("SELECT record FROM replies WHERE key = ?", (key,)).fetchone()
        return None if row is None else orjson.loads(row[0])

    def put(self, key: str, record: dict) -> None:
        """Store (or replace) one record and commit it."""
        self._db.execute("INSERT OR REPLACE INTO replies (key, record, created) VALUES (?, ?, ?)",
                         (key, orjson.dumps(record), clock()))

    def get_or_claim(self, key: str, ttl: float,
                     usable: Callable[[dict], bool] = lambda record: True) -> tuple[dict | None, bool]:
        """Right before asking for ``key``: ``(record, False)`` when a usable reply is stored,
        ``(None, True)`` when this connection now holds the key's claim (for ``ttl`` seconds;
        asking again renews it) and should ask, ``(None, False)`` when another live run holds
        it: wait and ask again. One write transaction decides, so of several runs asking at
        once exactly one gets the claim; a plain read first keeps waiting runs off the lock."""
        found = self._lookup(key, usable)
        if found is not None or self._claimed_by_other(key):
            return found, False
        self._db.execute("BEGIN IMMEDIATE")
        try:
            found = self._lookup(key, usable)
            mine = found is None and not self._claimed_by_other(key)
            if mine:
                self._db.execute("INSERT OR REPLACE INTO claims (key, owner, host, pid, expires) "
                                 "VALUES (?, ?, ?, ?, ?)", (key, self.owner, HOST, os.getpid(), clock() + ttl))
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        self._db.execute("COMMIT")
        return found, mine

    def release(self, key: str) -> None:
        """Drop this connection's claim of ``key`` (if it holds one)."""
        self._db.execute("DELETE FROM claims WHERE key = ? AND owner = ?", (key, self.owner))

    def _lookup(self, key: str, usable: Callable[[dict], bool]) -> dict | None:
        record = self.get(key)
        return record if record is not None and usable(record) else None

    def _claimed_by_other(self, key: str) -> bool:
        row = self._db.execute("SELECT owner, host, pid, expires FROM claims WHERE key = ?", (key,)).fetchone()
        if row is None or row[0] == self.owner:
            return False
        _, host, pid, expires = row
        return expires > clock() and (host != HOST or process_alive(pid))

    def __contains__(self, key: str) -> bool:
        return self._db.execute("SELECT 1 FROM replies WHERE key = ?", (key,)).fetchone() is not None

    def __len__(self) -> int:
        return self._db.execute("SELECT COUNT(*) FROM replies").fetchone()[0]

    def close(self) -> None:
        """Drop this connection's claims and close it."""
        try:
            self._db.execute("DELETE FROM claims WHERE owner = ?", (self.owner,))
        finally:
            self._db.close()

    def __enter__(self) -> "ReplyCache":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
