"""What `cheems annotate serve` prints, run as a user runs it: one line when it is ready (the URL
as listening, the database, the number of accounts), then one access line per request with
method, path, status, milliseconds and user id, and never a password, a cookie or a CSRF token."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from tests.conftest import HANG_TIMEOUT_S, REPO_ROOT
from tests.test_annotate_api import PASSWORD
from tests.test_annotate_bad_input import prepare

READY = re.compile(r"^cheems annotate: ready at (http://127\.0\.0\.1:(\d+)/) \(dashboard: \S+\); "
                   r"database (\S+); (\d+) users; Ctrl\+C stops$")
ACCESS = re.compile(r"^\S+ \S+ (GET|POST) (\S+) (\d{3}) (\d+\.\d)ms user=(\d+|-)$")


def wait_for_ready(proc: subprocess.Popen, log: Path) -> re.Match:
    deadline = time.monotonic() + HANG_TIMEOUT_S
    while time.monotonic() < deadline:
        for line in log.read_text().splitlines():
            if found := READY.match(line):
                return found
        if proc.poll() is not None:
            raise AssertionError(f"serve exited {proc.returncode}:\n{log.read_text()}")
        time.sleep(0.1)
    raise AssertionError(f"no ready line within {HANG_TIMEOUT_S}s:\n{log.read_text()}")


def call(base: str, method: str, path: str, body: dict | None = None, headers: dict | None = None):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(base + path, data=data, method=method,
                                 headers={"content-type": "application/json", **(headers or {})})
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, r.headers, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.headers, e.read()


def test_serve_says_when_it_is_ready_and_logs_each_request(tmp_path):
    url = prepare(tmp_path)  # two accounts: ann (annotator, id 1) and boss (admin, id 2)
    log = tmp_path / "serve.log"
    with open(log, "w") as out:  # port 0: the ready line says which port it got
        proc = subprocess.Popen([sys.executable, "-m", "cheems.cli", "annotate", "serve", "--db", url, "--port", "0"],
                                stdout=out, stderr=subprocess.STDOUT, cwd=REPO_ROOT)
    try:
        ready = wait_for_ready(proc, log)
        base, port, database, users = ready.group(1).rstrip("/"), int(ready.group(2)), ready.group(3), ready.group(4)
        assert port > 0 and database == url and users == "2"
        status, headers, body = call(base, "POST", "/api/login", {"username": "ann", "password": PASSWORD})
        assert status == 200
        cookie = headers["set-cookie"].split(";")[0]
        csrf = json.loads(body)["csrf_token"]
        auth = {"cookie": cookie, "x-csrf-token": csrf}
        assert call(base, "GET", "/api/tasks/next", headers=auth)[0] == 200
        assert call(base, "POST", "/api/tasks/1/submit?x=1", {"note": "备注"}, auth)[0] == 422
        assert call(base, "POST", "/api/login", {"username": "ann", "password": "wrong-口令"})[0] == 401
        assert call(base, "GET", "/api/nothing")[0] == 404
        assert call(base, "POST", "/api/tasks/99999999999/submit", {}, auth)[0] == 422
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    text = log.read_text()
    lines = text.splitlines()
    assert sum(bool(READY.match(x)) for x in lines) == 1, text
    access = [m.groups() for x in lines if (m := ACCESS.match(x))]
    assert [(m, p, s, u) for m, p, s, _ms, u in access] == [
        ("POST", "/api/login", "200", "1"), ("GET", "/api/tasks/next", "200", "1"),
        ("POST", "/api/tasks/1/submit", "422", "1"), ("POST", "/api/login", "401", "-"),
        ("GET", "/api/nothing", "404", "-"), ("POST", "/api/tasks/99999999999/submit", "422", "-"),
    ], text
    assert len(lines) == 1 + len(access), text  # nothing else: no uvicorn banner, no tracebacks
    for secret in (PASSWORD, "wrong-口令", cookie.split("=", 1)[1], csrf, "备注"):
        assert secret not in text
