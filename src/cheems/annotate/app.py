"""The annotation server: a FastAPI app over the workflow, the JSON API the page uses, and the
static annotator and dashboard pages.

Every ``/api`` route but login and the guidelines needs the session cookie (401 without it);
every POST but login needs the session's CSRF token in ``X-CSRF-Token`` (403); reviewer and
admin routes check the role (403). Refusals are JSON ``{"detail", "field"}`` with a 4xx status;
the handlers hold no state between requests, so several server processes can share a database.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from fastapi import Body, Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, JSONResponse, Response
from fastapi.staticfiles import StaticFiles

from cheems.annotate import auth, dashboard, workflow
from cheems.annotate.db import User, make_engine, schema_is_current, session_factory
from cheems.annotate.workflow import WorkflowError, WorkflowSettings
from cheems.records import CheemsInputError

__all__ = ["COOKIE", "MAX_BODY_BYTES", "create_app"]

COOKIE = "cheems_session"
STATIC = Path(__file__).with_name("static")
MAX_BODY_BYTES = 1 << 20  # an answer with notes is a few KiB
SECURITY_HEADERS = {
    # responses are rendered HTML from untrusted text: no inline script may ever run, and the
    # page loads nothing from elsewhere (images in responses included)
    "Content-Security-Policy": "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
                               "img-src 'self' data:; object-src 'none'; base-uri 'none'; frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
}


def _with_html(view: dict) -> dict:
    from cheems.annotate.render import render_markdown

    view["prompt_html"] = render_markdown(view["prompt"])
    for r in view["responses"]:
        r["html"] = render_markdown(r["content"])
    return view


def create_app(db_url: str, settings: WorkflowSettings = WorkflowSettings(), *, secure_cookies: bool = False
               ) -> FastAPI:
    """The app on the database at ``db_url``, which must hold the current schema
    (`cheems annotate init`); ``secure_cookies`` marks the cookie Secure (behind HTTPS)."""
    engine = make_engine(db_url)
    if not schema_is_current(engine):
        raise CheemsInputError("the database is not initialised (or is an older schema): run "
                               "`cheems annotate init --db ...` first", field="--db")
    sessions = session_factory(engine)
    app = FastAPI(title="cheems annotate", docs_url=None, redoc_url=None, openapi_url=None)
    app.state.engine = engine
    app.state.secure_cookies = secure_cookies

    def db():
        s = sessions()
        try:
            yield s
        finally:
            s.close()

    def login_required(request: Request, s=Depends(db)):
        found = auth.session_of(s, request.cookies.get(COOKIE))
        if found is None:
            raise WorkflowError(401, "not logged in")
        ws, user = found
        if request.method == "POST" and not auth.check_csrf(ws, request.headers.get("x-csrf-token")):
            raise WorkflowError(403, "missing or wrong X-CSRF-Token header")
        return user

    def role(*allowed: str) -> Callable:
        def check(user: User = Depends(login_required)) -> User:
            if user.role not in allowed:
                raise WorkflowError(403, f"this needs the role {' or '.join(allowed)}")
            return user
        return check

    _errors(app)
    _pages(app)
    _session_routes(app, db, login_required)
    _work_routes(app, db, login_required, role, settings)
    return app


def _errors(app: FastAPI) -> None:
    @app.exception_handler(WorkflowError)
    async def refused(_request: Request, e: WorkflowError):
        return JSONResponse({"detail": e.detail, "field": e.field}, status_code=e.status)

    @app.exception_handler(RequestValidationError)
    async def malformed(_request: Request, e: RequestValidationError):
        first = e.errors()[0] if e.errors() else {}
        where = ".".join(str(x) for x in first.get("loc", ()) if x != "body") or "body"
        return JSONResponse({"detail": f"{where}: {first.get('msg', 'malformed request')}", "field": where},
                            status_code=422)

    @app.middleware("http")
    async def headers(request: Request, call_next):
        size = request.headers.get("content-length", "0")
        if not size.isdigit() or int(size) > MAX_BODY_BYTES:
            return JSONResponse({"detail": f"body: larger than {MAX_BODY_BYTES // 1024} KiB", "field": "body"},
                                status_code=413, headers=SECURITY_HEADERS)
        response = await call_next(request)
        response.headers.update(SECURITY_HEADERS)
        return response


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


def _session_routes(app: FastAPI, db: Callable, login_required: Callable) -> None:
    @app.post("/api/login")
    def login(response: Response, payload: Any = Body(None), s=Depends(db)):
        if not isinstance(payload, dict):
            raise WorkflowError(422, "body: must be an object {username, password}", field="body")
        found = auth.log_in(s, payload.get("username"), payload.get("password"))
        if found is None:
            raise WorkflowError(401, "wrong user name or password")
        token, ws, user = found
        response.set_cookie(COOKIE, token, httponly=True, samesite="strict", path="/",
                            max_age=auth.SESSION_HOURS * 3600, secure=app.state.secure_cookies)
        return {"csrf_token": ws.csrf_token, "username": user.name, "role": user.role}

    @app.post("/api/logout")
    def logout(request: Request, response: Response, user: User = Depends(login_required), s=Depends(db)):
        auth.end_session(s, request.cookies.get(COOKIE))
        response.delete_cookie(COOKIE, path="/")
        return {"ok": True}

    @app.get("/api/me")
    def me(user: User = Depends(login_required)):
        return {"username": user.name, "role": user.role, "categories": user.categories}


def _work_routes(app: FastAPI, db: Callable, login_required: Callable, role: Callable,
                 settings: WorkflowSettings) -> None:
    @app.get("/api/tasks/next")
    def next_task(user: User = Depends(login_required), s=Depends(db)):
        found = workflow.next_task(s, user, settings)
        if found is None:
            return Response(status_code=204)
        task, assignment = found
        return _with_html(workflow.task_view(s, task, assignment.shown_order))

    @app.post("/api/tasks/{task_id}/submit", status_code=201)
    def submit(task_id: int, payload: Any = Body(None), user: User = Depends(login_required), s=Depends(db)):
        return {"annotation_id": workflow.submit(s, user, task_id, payload, settings).id}

    @app.get("/api/alignment/next")
    def next_alignment(user: User = Depends(login_required), s=Depends(db)):
        view = workflow.next_alignment(s, user)
        return Response(status_code=204) if view is None else _with_html(view)

    @app.post("/api/alignment/{task_id}")
    def align(task_id: int, payload: Any = Body(None), user: User = Depends(login_required), s=Depends(db)):
        return {"state": workflow.align(s, user, task_id, payload, settings)}

    @app.post("/api/alignment/{task_id}/escalate")
    def escalate(task_id: int, user: User = Depends(login_required), s=Depends(db)):
        return {"state": workflow.escalate(s, user, task_id)}

    @app.get("/api/review/next")
    def next_review(user: User = Depends(role("reviewer", "admin")), s=Depends(db)):
        view = workflow.next_review(s, user, settings)
        return Response(status_code=204) if view is None else _with_html(view)

    @app.post("/api/review/{item_id}")
    def review(item_id: int, payload: Any = Body(None), user: User = Depends(role("reviewer", "admin")),
               s=Depends(db)):
        if not isinstance(payload, dict):
            raise WorkflowError(422, "body: must be an object {verdict, note}", field="body")
        item = workflow.review(s, user, item_id, payload.get("verdict"), payload.get("note", ""), settings)
        return {"item_id": item.id, "verdict": item.verdict}

    @app.get("/api/escalations")
    def escalations(user: User = Depends(role("admin")), s=Depends(db)):
        return [_with_html(v) for v in workflow.escalations(s)]

    @app.post("/api/escalations/{task_id}")
    def decide(task_id: int, payload: Any = Body(None), user: User = Depends(role("admin")), s=Depends(db)):
        return {"annotation_id": workflow.resolve_escalation(s, user, task_id, payload).id}

    @app.get("/api/stats")
    def stats(user: User = Depends(role("admin")), s=Depends(db)):
        return dashboard.stats(s)
