"""The annotation server: a FastAPI app over the workflow, the JSON API the page uses, and the
static annotator and dashboard pages.

Every ``/api`` route but login and the guidelines needs the session cookie (401 without it);
every POST but login needs the session's CSRF token in ``X-CSRF-Token`` (403). A route works in
one study, named by the query parameter ``study`` (``default`` without it): an unknown study is a
404, a user with no role in it gets 403, and reviewer and admin routes check the role there (403).
The workflow settings given to :func:`create_app` (the flags of `serve`) hold in the ``default``
study; every other study runs on the settings stored with it (`cheems annotate study add`).
Refusals are JSON ``{"detail", "field"}`` with a 4xx status; the handlers hold no state between
requests, so several server processes can share a database.
"""

from __future__ import annotations

import contextlib
import json
import threading
from pathlib import Path
from typing import Annotated, Any, Callable

from fastapi import Body, Depends, FastAPI, Path as PathParam, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, Response
from fastapi.staticfiles import StaticFiles
from sqlalchemy import select
from starlette.exceptions import HTTPException

from cheems.annotate import auth, dashboard, progress, workflow
from cheems.annotate.db import DEFAULT_STUDY, Study, User, make_engine, schema_is_current, session_factory
from cheems.annotate.guard import Guard
from cheems.annotate.inputs import MAX_ID, BadInput, check_text
from cheems.annotate.studies import Member, member_of, studies_of
from cheems.annotate.workflow import WorkflowError, WorkflowSettings
from cheems.records import CheemsInputError

__all__ = ["COOKIE", "Work", "create_app"]

COOKIE = "cheems_session"
STATIC = Path(__file__).with_name("static")
# a database id in a path: 1 to the largest INTEGER (422 naming the parameter otherwise)
Id = Annotated[int, PathParam(ge=1, le=MAX_ID)]


def json_body(payload: Any = Body(None)) -> Any:
    """The request's JSON body, every text in it storable (a lone surrogate or NUL: 422 naming the field)."""
    return check_text(payload)


Payload = Annotated[Any, Depends(json_body)]


def _with_html(view: dict) -> dict:
    from cheems.annotate.render import render_markdown

    view["prompt_html"] = render_markdown(view["prompt"])
    for r in view["responses"]:
        r["html"] = render_markdown(r["content"])
    return view


def create_app(db_url: str, settings: WorkflowSettings = WorkflowSettings(), *, secure_cookies: bool = False
               ) -> FastAPI:
    """The app on the database at ``db_url``, which must hold the current schema
    (`cheems annotate init`), serving every study in it; ``settings`` hold in the ``default``
    study, ``secure_cookies`` marks the cookie Secure (behind HTTPS)."""
    engine = make_engine(db_url)
    if not schema_is_current(engine):
        raise CheemsInputError("the database is not initialised (or is an older schema): run "
                               "`cheems annotate init` on it first", field="db")
    app = FastAPI(title="cheems annotate", docs_url=None, redoc_url=None, openapi_url=None)
    app.state.engine = engine
    app.state.secure_cookies = secure_cookies
    app.add_middleware(Guard)
    work = Work(session_factory(engine), serialise=engine.dialect.name == "sqlite", default_settings=settings)
    _errors(app)
    _pages(app)
    _session_routes(app, work)
    _task_routes(app, work)
    _alignment_routes(app, work)
    _review_routes(app, work)
    return app


class Work:
    """Runs one request's database work: authentication, role and CSRF checks and the work itself
    in one session, one thread and short transactions, closed before the request returns. (A
    transaction left open between FastAPI's dependency and endpoint calls would hold SQLite's
    write lock while the request waits for a second worker thread; with every worker thread so
    waiting, nothing moves.) On SQLite the work of this process is also taken in turn under one
    lock, so concurrent writers queue here instead of sleeping in SQLite's busy handler. The
    user's id goes to ``request.state.user_id`` for the access log. ``fn`` is given the user as
    a :class:`~cheems.annotate.studies.Member` of the request's study, or the account itself
    when ``in_study`` is false."""

    def __init__(self, sessions, *, serialise: bool, default_settings: WorkflowSettings = WorkflowSettings()):
        self.sessions = sessions
        self.lock = threading.Lock() if serialise else contextlib.nullcontext()
        self.default_settings = default_settings

    def __call__(self, request: Request, fn: Callable, *roles: str, in_study: bool = True):
        with self.lock:
            s = self.sessions()
            try:
                user = self.authenticate(s, request)
                if in_study:
                    user = self.member(s, request, user, roles)
                s.commit()  # the check's read ends here; the work starts its own transaction
                result = fn(s, user)
                s.commit()
                return result
            except BaseException:
                s.rollback()
                raise
            finally:
                s.close()

    @staticmethod
    def authenticate(s, request: Request) -> User:
        found = auth.session_of(s, request.cookies.get(COOKIE))
        if found is None:
            raise WorkflowError(401, "not logged in")
        ws, user = found
        request.state.user_id = user.id
        if request.method == "POST" and not auth.check_csrf(ws, request.headers.get("x-csrf-token")):
            raise WorkflowError(403, "missing or wrong X-CSRF-Token header")
        return user

    def member(self, s, request: Request, user: User, roles: tuple[str, ...]) -> Member:
        """The user in the request's study (``?study=NAME``, else ``default``), with a role there."""
        name = request.query_params.get("study") or DEFAULT_STUDY
        study = s.scalar(select(Study).where(Study.name == name))
        if study is None:
            raise WorkflowError(404, f"no study {name!r}", field="study")
        member = member_of(s, user, study, self.default_settings if study.name == DEFAULT_STUDY else None)
        if member is None:
            raise WorkflowError(403, f"you have no role in study {name!r}", field="study")
        if roles and member.role not in roles:
            raise WorkflowError(403, f"this needs the role {' or '.join(roles)}", field="role")
        return member


def _refusal(status: int, detail: str, field: str | None) -> Response:
    """A 4xx as JSON ``{"detail", "field"}``; ASCII escapes, so no text in a message can fail to encode."""
    body = json.dumps({"detail": detail, "field": field}, ensure_ascii=True)
    return Response(body, status_code=status, media_type="application/json")


def _errors(app: FastAPI) -> None:
    @app.exception_handler(WorkflowError)
    async def refused(_request: Request, e: WorkflowError):
        return _refusal(e.status, e.detail, e.field)

    @app.exception_handler(BadInput)
    async def unstorable(_request: Request, e: BadInput):
        return _refusal(422, str(e), e.field)

    @app.exception_handler(RequestValidationError)
    async def malformed(_request: Request, e: RequestValidationError):
        first = e.errors()[0] if e.errors() else {}
        where = ".".join(str(x) for x in first.get("loc", ()) if x not in ("body", "path", "query")) or "body"
        return _refusal(422, f"{where}: {first.get('msg', 'malformed request')}", where)

    @app.exception_handler(HTTPException)
    async def http_error(_request: Request, e: HTTPException):  # unknown route, wrong method, unparsable body
        field = "body" if e.status_code == 400 else None
        return _refusal(e.status_code, str(e.detail), field)


def _pages(app: FastAPI) -> None:
    app.mount("/static", StaticFiles(directory=STATIC), name="static")

    @app.get("/", include_in_schema=False)
    def index():
        return FileResponse(STATIC / "index.html")

    @app.get("/dashboard", include_in_schema=False)
    def dashboard_page():
        return FileResponse(STATIC / "dashboard.html")

    @app.get("/api/guidelines")
    def guidelines():
        from cheems.annotate.guidelines import DIMENSIONS, SCALE

        return {"dimensions": DIMENSIONS, "scale": SCALE}


def _session_routes(app: FastAPI, work: Work) -> None:
    @app.post("/api/login")
    def login(request: Request, response: Response, payload: Payload):
        if not isinstance(payload, dict):
            raise WorkflowError(422, "body: must be an object {username, password}", field="body")
        s = work.sessions()
        try:  # the password check runs outside any transaction and outside the SQLite lock
            found = auth.log_in(s, payload.get("username"), payload.get("password"), lock=work.lock)
        finally:
            s.close()
        if found is None:
            raise WorkflowError(401, "wrong user name or password")
        token, ws, user = found
        request.state.user_id = user.id
        response.set_cookie(COOKIE, token, httponly=True, samesite="strict", path="/",
                            max_age=auth.SESSION_HOURS * 3600, secure=app.state.secure_cookies)
        with work.lock:
            s = work.sessions()
            try:
                mine = studies_of(s, user)
            finally:
                s.close()
        wanted = request.query_params.get("study") or DEFAULT_STUDY
        role = next((m["role"] for m in mine if m["name"] == wanted), None)
        return {"csrf_token": ws.csrf_token, "username": user.name, "role": role, "studies": mine}

    @app.post("/api/logout")
    def logout(request: Request, response: Response):
        work(request, lambda s, user: auth.end_session(s, request.cookies.get(COOKIE)), in_study=False)
        response.delete_cookie(COOKIE, path="/")
        return {"ok": True}

    @app.get("/api/me")
    def me(request: Request):  # the account, its studies, and its role in the asked study (None: no role)
        def about(s, user):
            mine = studies_of(s, user)
            wanted = request.query_params.get("study") or DEFAULT_STUDY
            study = s.scalar(select(Study).where(Study.name == wanted))
            member = member_of(s, user, study) if study is not None else None
            return {"username": user.name, "role": member.role if member else None,
                    "categories": member.categories if member else [], "study": wanted, "studies": mine}
        return work(request, about, in_study=False)

    @app.get("/api/progress")
    def my_progress(request: Request):
        return work(request, progress.progress_of)


def _shown(view: dict | None):
    return Response(status_code=204) if view is None else _with_html(view)


def _task_routes(app: FastAPI, work: Work) -> None:
    def next_task_view(s, user):
        found = workflow.next_task(s, user, user.settings)
        return None if found is None else workflow.task_view(s, found[0], found[1].shown_order)

    @app.get("/api/tasks/next")
    def next_task(request: Request):  # only annotators are handed tasks: opening a page claims nothing else
        return _shown(work(request, next_task_view, "annotator"))

    @app.post("/api/tasks/{task_id}/submit", status_code=201)
    def submit(request: Request, task_id: Id, payload: Payload):
        return work(request, lambda s, user: {"annotation_id": workflow.submit(s, user, task_id, payload,
                                                                                user.settings).id})


def _alignment_routes(app: FastAPI, work: Work) -> None:
    @app.get("/api/alignment/next")
    def next_alignment(request: Request):
        return _shown(work(request, lambda s, user: workflow.next_alignment(s, user)))

    @app.post("/api/alignment/{task_id}")
    def align(request: Request, task_id: Id, payload: Payload):
        return work(request, lambda s, user: {"state": workflow.align(s, user, task_id, payload, user.settings)})

    @app.post("/api/alignment/{task_id}/escalate")
    def escalate(request: Request, task_id: Id):
        return work(request, lambda s, user: {"state": workflow.escalate(s, user, task_id)})

    @app.get("/api/escalations")
    def escalations(request: Request):
        return [_with_html(v) for v in work(request, lambda s, user: workflow.escalations(s, user.study_id),
                                            "admin")]

    @app.post("/api/escalations/{task_id}")
    def decide(request: Request, task_id: Id, payload: Payload):
        return work(request, lambda s, user: {
            "annotation_id": workflow.resolve_escalation(s, user, task_id, payload).id}, "admin")


def _review_routes(app: FastAPI, work: Work) -> None:
    @app.get("/api/review/next")
    def next_review(request: Request):
        return _shown(work(request, lambda s, user: workflow.next_review(s, user, user.settings),
                           "reviewer", "admin"))

    @app.post("/api/review/{item_id}")
    def review(request: Request, item_id: Id, payload: Payload):
        def decide(s, user):
            if not isinstance(payload, dict):
                raise WorkflowError(422, "body: must be an object {verdict, note}", field="body")
            item = workflow.review(s, user, item_id, payload.get("verdict"), payload.get("note", ""), user.settings)
            return {"item_id": item.id, "verdict": item.verdict}
        return work(request, decide, "reviewer", "admin")

    @app.get("/api/stats")
    def stats(request: Request):
        return work(request, lambda s, user: dashboard.stats(s, user.study), "admin")
