"""Accounts and sessions: argon2 password hashes (argon2-cffi), random session tokens kept only
as SHA-256 digests in the database, and one CSRF token per session that every state-changing
request must echo in the ``X-CSRF-Token`` header."""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import secrets
from datetime import timedelta

from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError
from sqlalchemy import delete, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from cheems.annotate.db import DEFAULT_STUDY, Membership, User, WebSession, now
from cheems.annotate.studies import Member, find_study, member_of
from cheems.annotate.workflow import ROLES
from cheems.records import CheemsInputError

__all__ = ["SESSION_HOURS", "add_user", "password_hash", "check_csrf", "end_session", "log_in", "session_of"]

SESSION_HOURS = 12
_hasher = PasswordHasher()
_DUMMY_HASH = _hasher.hash("not a password of anyone")  # unknown names cost as much time as wrong passwords


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def password_hash(password: str) -> str:
    """The argon2 hash of a password, as accounts store it."""
    return _hasher.hash(password)


def add_user(session: Session, name: str, role: str, password: str, categories: list[str] = (), *,
             study: str = DEFAULT_STUDY) -> Member:
    """Give ``name`` a role (and categories) in ``study``, creating the account when it is new; an
    existing account joins another study only with its own password. A name that already has a
    role there, an unknown role or study, or an empty password is a CheemsInputError. Commits."""
    name = name.strip() if isinstance(name, str) else name
    if not name or len(name) > 100:
        raise CheemsInputError("a user name of 1 to 100 characters is needed", field="NAME")
    if role not in ROLES:
        raise CheemsInputError(f"unknown role {role!r}", field="role",
                               remedy=("role", f"{{}} is one of {', '.join(ROLES)}"))
    if not password:
        raise CheemsInputError("the password is empty", field="password")
    where = find_study(session, study)
    user = session.scalar(select(User).where(User.name == name))
    if user is None:
        user = User(name=name, password_hash=password_hash(password))
        session.add(user)
    elif session.get(Membership, (where.id, user.id)) is not None:
        raise CheemsInputError(f"user {name!r} already exists (in study {where.name!r})", field="NAME")
    elif not _password_matches(user.password_hash, password):
        raise CheemsInputError(f"user {name!r} already exists: give their own password to add them to study "
                               f"{where.name!r}", field="password")
    try:
        session.flush()
        session.add(Membership(study_id=where.id, user_id=user.id, role=role, categories=[c for c in categories if c]))
        session.commit()
    except IntegrityError:
        session.rollback()
        raise CheemsInputError(f"user {name!r} already exists", field="NAME") from None
    return member_of(session, user, where)


def _password_matches(password_hash: str, password: str) -> bool:
    try:
        return _hasher.verify(password_hash, password)
    except (VerificationError, InvalidHashError):
        return False


def log_in(session: Session, name: object, password: object, *,
           lock=contextlib.nullcontext()) -> tuple[str, WebSession, User] | None:
    """A new session (its cookie token, the stored row, the user) for a right name and password,
    else None. The slow password check (about 0.1 s of argon2) runs between two short
    transactions and outside ``lock``, so logins never hold up other requests."""
    with lock:
        user = session.scalar(select(User).where(User.name == name)) if isinstance(name, str) else None
        if user is not None:
            session.expunge(user)  # keeps its loaded fields after the read transaction ends
        session.rollback()
    try:
        _hasher.verify(user.password_hash if user else _DUMMY_HASH, password if isinstance(password, str) else "")
    except (VerificationError, InvalidHashError):
        return None
    if user is None:
        return None
    token = secrets.token_urlsafe(32)
    ws = WebSession(token_hash=_digest(token), user_id=user.id, csrf_token=secrets.token_urlsafe(32),
                    expires_at=now() + timedelta(hours=SESSION_HOURS))
    with lock:
        session.execute(delete(WebSession).where(WebSession.expires_at < now()))
        session.add(ws)
        session.commit()
    return token, ws, user


def session_of(session: Session, token: str | None) -> tuple[WebSession, User] | None:
    """The live session of a cookie token and its user, or None."""
    if not token:
        return None
    ws = session.get(WebSession, _digest(token))
    if ws is None or ws.expires_at < now():
        return None
    return ws, session.get(User, ws.user_id)


def end_session(session: Session, token: str) -> None:
    session.execute(delete(WebSession).where(WebSession.token_hash == _digest(token)))
    session.commit()


def check_csrf(ws: WebSession, header: str | None) -> bool:
    return bool(header) and hmac.compare_digest(ws.csrf_token.encode(), header.encode())
