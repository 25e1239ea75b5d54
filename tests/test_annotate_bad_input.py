"""No input makes the annotation server answer 500: every route, given ids out of range (past
int64, past PostgreSQL's INTEGER, zero, negative, not a number), a lone surrogate or NUL in every
text field, and wrong types in every body field, answers a 4xx naming the field. Run in process
over every case, then over one keep-alive connection to a real `cheems annotate serve`, which
must keep that connection open through every refusal."""

from __future__ import annotations

import http.client
import json
import subprocess
import sys

import pytest
from fastapi.testclient import TestClient

from cheems.annotate import auth
from cheems.annotate.app import create_app
from cheems.annotate.db import make_engine, migrate, session_factory
from cheems.annotate.workflow import WorkflowSettings, import_prompts
from tests.conftest import REPO_ROOT
from tests.test_annotate_api import PASSWORD, prompts
from tests.test_annotate_browser import free_port, wait_until_up

BAD_IDS = ["9223372036854775808", "-9223372036854775809", "2147483648", "0", "-1", "abc", "1.5",
           "1e3", "99999999999999999999999999999"]
LONE = '"\\ud800"'  # JSON for a string holding a lone high surrogate
TEXTS = [LONE, '"\\udfff"', '"a\\ud83dz"', '"\\u0000"']
WRONG = ["null", "1", "-1", "1.5", "1e400", "true", "[]", "{}", '"x"', "[[1]]", '{"A": []}', "[null]"]
VALID = {"note": {"null", '"x"'}, "pairs": {"null", "{}"}, "spans": {"null", "[]"}, "spans[0].note": {'"x"'}}
ANSWER = {"scores": {"A": 5, "B": 3, "C": 1}, "pairs": {}, "ranking": "A>B>C", "spans": [], "note": ""}
# the routes with a JSON body, who calls them, and a valid body to spoil one field at a time
ROUTES = {
    "submit": ("ann", "/api/tasks/{id}/submit", ANSWER),
    "align": ("ann", "/api/alignment/{id}", ANSWER),
    "decide": ("boss", "/api/escalations/{id}", ANSWER),
    "review": ("boss", "/api/review/{id}", {"verdict": "accept", "note": ""}),
    "login": (None, "/api/login", {"username": "ann", "password": PASSWORD}),
}
ID_ROUTES = [("ann", "/api/tasks/{id}/submit"), ("ann", "/api/alignment/{id}"), ("ann", "/api/alignment/{id}/escalate"),
             ("boss", "/api/escalations/{id}"), ("boss", "/api/review/{id}")]


def body_with(body: dict, field: str, raw: str) -> str:
    """``body`` as JSON with ``field`` (``note``, ``scores.A``, ``spans[0].note``) set to the JSON ``raw``."""
    marker = "@@VALUE@@"
    spoiled = json.loads(json.dumps(body))
    if field.startswith("spans[0]"):
        spoiled["spans"] = [{"key": "A", "start": 0, "end": 1, "note": "", field.split(".")[1]: marker}]
    elif "." in field:
        outer, inner = field.split(".")
        spoiled[outer] = dict(spoiled.get(outer) or {}, **{inner: marker})
    else:
        spoiled[field] = marker
    return json.dumps(spoiled).replace(json.dumps(marker), raw)


def cases() -> list[tuple[str, str | None, str, str, str | None]]:
    """(case id, who, path, raw JSON body, the field the refusal must name; None: any 4xx)."""
    out = []
    for who, path in ID_ROUTES:
        for bad in BAD_IDS:
            name = path.split("{id}")[0].rstrip("/").rsplit("/", 1)[-1] + path.split("{id}")[1]
            field = "item_id" if "review" in path else "task_id"
            out.append((f"id-{name}-{bad}", who, path.replace("{id}", bad), json.dumps(ANSWER), field))
    for route, (who, path, body) in ROUTES.items():
        path = path.replace("{id}", "1")
        fields = list(body) + (
            ["scores.A", "pairs.AB", "spans[0].note", "spans[0].key"] if "scores" in body else [])
        for field in fields:
            for i, raw in enumerate(TEXTS):
                out.append((f"text-{route}-{field}-{i}", who, path, body_with(body, field, raw), field))
            for raw in (w for w in WRONG if w not in VALID.get(field, ())):
                out.append((f"type-{route}-{field}-{raw}", who, path, body_with(body, field, raw), None))
        out.append((f"key-{route}", who, path, json.dumps(body)[:-1] + ', ' + LONE + ': 1}', "body"))
        for raw in WRONG + [LONE, '{"a": ' + LONE + "}"]:
            out.append((f"body-{route}-{raw}", who, path, raw, None))
    return out


CASES = cases()


def prepare(folder) -> str:
    url = f"sqlite:///{folder / 'a.db'}"
    engine = make_engine(url)
    migrate(engine)
    s = session_factory(engine)()
    auth.add_user(s, "ann", "annotator", PASSWORD)
    auth.add_user(s, "boss", "admin", PASSWORD)
    import_prompts(s, prompts(2, 3), overlap=2)
    s.close()
    return url


@pytest.fixture(scope="module")
def clients(tmp_path_factory):
    url = prepare(tmp_path_factory.mktemp("bad-input"))
    app = create_app(url, WorkflowSettings(alignment_min_shared=1))
    out = {None: TestClient(app, raise_server_exceptions=False)}
    for name in ("ann", "boss"):
        c = TestClient(app, raise_server_exceptions=False)
        r = c.post("/api/login", json={"username": name, "password": PASSWORD})
        c.headers["X-CSRF-Token"] = r.json()["csrf_token"]
        out[name] = c
    assert out["ann"].get("/api/tasks/next").json()["task_id"] == 1  # task 1 is handed to ann: checks run deep
    return out


def check_refusal(status: int, text: str, field: str | None, case: str) -> None:
    assert 400 <= status < 500, (case, status, text)
    reply = json.loads(text)
    assert set(reply) == {"detail", "field"}, (case, text)
    if field is not None:
        assert reply["field"] == field and field in reply["detail"], (case, text)
    elif status == 422:
        assert reply["field"], (case, text)


@pytest.mark.parametrize("case, who, path, body, field", CASES, ids=[c[0] for c in CASES])
def test_every_bad_input_is_a_4xx_naming_the_field(clients, case, who, path, body, field):
    r = clients[who].post(path, content=body.encode(), headers={"content-type": "application/json"})
    check_refusal(r.status_code, r.text, field, case)


def test_the_annotator_can_still_work_after_the_refusals(clients):
    ann = clients["ann"]
    assert ann.post("/api/tasks/1/submit", json=ANSWER).status_code == 201
    assert ann.get("/api/progress").json()["done_total"] == 1


def test_a_real_server_keeps_the_connection_through_every_refusal(tmp_path):
    url = prepare(tmp_path)
    port = free_port()
    log = tmp_path / "serve.log"
    with open(log, "w") as out:
        proc = subprocess.Popen([sys.executable, "-m", "cheems.cli", "annotate", "serve", "--db", url,
                                 "--port", str(port)], stdout=out, stderr=subprocess.STDOUT, cwd=REPO_ROOT)
    try:
        wait_until_up(f"http://127.0.0.1:{port}", proc, log)
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        headers = {}
        for name in ("ann", "boss"):
            conn.request("POST", "/api/login", json.dumps({"username": name, "password": PASSWORD}),
                         {"content-type": "application/json"})
            r = conn.getresponse()
            cookie = r.getheader("set-cookie").split(";")[0]
            headers[name] = {"cookie": cookie, "x-csrf-token": json.loads(r.read())["csrf_token"],
                             "content-type": "application/json"}
        headers[None] = {"content-type": "application/json"}
        conn.request("GET", "/api/tasks/next", headers=headers["ann"])
        assert json.loads(conn.getresponse().read())["task_id"] == 1
        sock = conn.sock
        for case, who, path, body, field in CASES + [("too-large", "ann", "/api/tasks/1/submit",
                                                      '"' + "x" * (2 << 20) + '"', "body")]:
            conn.request("POST", path, body.encode(), headers[who])
            r = conn.getresponse()
            check_refusal(r.status, r.read().decode(), field, case)
            assert conn.sock is sock and r.getheader("connection") != "close", case  # the same connection
        assert "Traceback" not in log.read_text() and " 500 " not in log.read_text()
    finally:
        proc.terminate()
        proc.wait(timeout=30)
