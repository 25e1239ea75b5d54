"""The annotation server on a real PostgreSQL (a throwaway cluster), and under concurrent annotators.

``test_workflow_on_postgres``: a schema made by ``cheems annotate init``, a user added by ``add-user``,
a Chinese prompt file by ``import``, then the JSON API of ``create_app(url)``: two annotators answer every
triple task (overlap 2), the tasks they disagree on go to alignment (one settles, one is escalated and
decided by the admin), the dashboard counts it all, and ``cheems annotate export`` ranks every prompt
as the answers say.

``test_concurrent_annotators``: 20 annotators hit next/submit at the same moment against a real
uvicorn serving ``create_app(url)``, on SQLite and on PostgreSQL: every 201 is stored exactly once,
no task is handed twice to one person or to more than ``--overlap`` people, no 5xx.
``test_one_person_racing_themselves``: one person's parallel next calls (two tabs) get one task, and
parallel submits of it one 201 and one 409.
"""

from __future__ import annotations

import contextlib
import json
import random
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Iterator

import httpx
import pytest

from tests import postgres_cluster, test_annotate_kill
from tests.conftest import HANG_TIMEOUT_S
from tests.postgres_cluster import create_database, free_port
from tests.test_annotate_kill import (LETTERS, PAIR_KEYS, PASSWORD, Annotator, LoadLog, annotate_cli, contents_of,
                                      load_problems, prepare_database, prompt_rows, run_annotators, stored_annotations,
                                      submission_for, write_prompts)

postgres_url = postgres_cluster.postgres_url  # fixtures, found by pytest under these names
database_url = test_annotate_kill.database_url
fastapi_testclient = pytest.importorskip("fastapi.testclient")
uvicorn = pytest.importorskip("uvicorn")

TRUTH = {"r1": (5, 0), "r2": (3, 0), "r3": (3, 0), "r4": (3, 1), "r5": (0, 0)}  # (score, tie-break) per response
TRUTH_ORDER = ["r1", "r4", "r2=r3", "r5"]  # what every prompt's exported rank must say


def truth_by_content(rows: list[dict]) -> dict[str, tuple[int, int]]:
    return {r["content"]: TRUTH[r["id"]] for row in rows for r in row["responses"]}


def answer(task: dict, truth: dict[str, tuple[int, int]], reverse: bool = False) -> dict:
    """The submission that follows ``truth`` (or its exact reverse) under the letters this task shows."""
    keys = {k: truth[text] for k, text in contents_of(task).items()}
    if reverse:
        keys = {k: (5 - s, 1 - t) for k, (s, t) in keys.items()}
    return submission_for(keys)


def relations(body: dict) -> dict[str, str]:
    """g/b/s of every pair, read off the ranking."""
    level = {x: i for i, group in enumerate(body["ranking"].split(">")) for x in group.split("=")}
    return {a + b: "g" if level[a] < level[b] else "b" if level[a] > level[b] else "s" for a, b in PAIR_KEYS}


def take_all(person: Annotator, truth: dict, reverse_first: int = 0) -> list[int]:
    """Answer every task the server hands out; the first ``reverse_first`` answers are reversed."""
    done: list[int] = []
    while True:
        reply = person.next_task()
        if reply.status_code == 204:
            return done
        assert reply.status_code == 200, reply.text
        task = reply.json()
        reply = person.submit(task["task_id"], answer(task, truth, reverse=len(done) < reverse_first))
        assert reply.status_code == 201, reply.text
        assert isinstance(reply.json()["annotation_id"], int)
        done.append(task["task_id"])


def check_task_view(person: Annotator, rows: list[dict]) -> None:
    """The task shape of the spec: letters only, no ids or models, the same task until submitted, chats as turns."""
    reply = person.next_task()
    assert reply.status_code == 200, reply.text
    task = reply.json()
    assert {"task_id", "prompt", "prompt_html", "category", "responses"} <= set(task)
    assert [r["key"] for r in task["responses"]] == list(LETTERS)
    assert all({"key", "content", "html"} <= set(r) for r in task["responses"])
    assert "model-" not in reply.text and '"r1"' not in reply.text
    assert person.next_task().json()["task_id"] == task["task_id"]
    chats = [row for row in rows if isinstance(row["prompt"], list)]
    assert chats, "the prompt file should hold a chat prompt"
    text = "\n\n".join(("用户：" if m["role"] == "user" else "助手：") + m["content"] for m in chats[0]["prompt"])
    assert text.endswith(chats[0]["prompt"][-1]["content"])


def bad_requests(jia: Annotator, yi: Annotator, truth: dict) -> None:
    """422 naming the field, 403 for someone else's task, 403 without the CSRF header, 404 for no task."""
    task = jia.next_task().json()
    body = answer(task, truth)
    tied = next((k for k in PAIR_KEYS if body["scores"][k[0]] == body["scores"][k[1]]), None)
    assert tied, "the first task (r1, r2, r3) has a tie"
    reply = jia.submit(task["task_id"], dict(body, pairs={}))
    assert reply.status_code == 422 and tied in reply.json()["detail"], reply.text
    assert yi.submit(task["task_id"], body).status_code == 403
    assert jia.client.post(f"/api/tasks/{task['task_id']}/submit", json=body).status_code == 403
    assert jia.submit(10**6, body).status_code == 404


def align_two(jia: Annotator, yi: Annotator, disputed: list[int], truth: dict) -> tuple[int, int]:
    """Alignment of the two disputed tasks: both agree on the first (settled), 乙 insists on the second (escalated)."""
    settled, escalated = sorted(disputed)
    views = {}
    for person in (jia, yi):
        reply = person.client.get("/api/alignment/next")
        assert reply.status_code == 200, reply.text
        view = views[person.name] = reply.json()
        assert view["task_id"] == settled
        mine_first = person is jia
        assert view["mine"]["scores"] == answer(view, truth, reverse=not mine_first)["scores"]
        assert view["theirs"]["scores"] == answer(view, truth, reverse=mine_first)["scores"]  # in MY letters
        agree = sum(relations(view["mine"])[k] == relations(view["theirs"])[k] for k in PAIR_KEYS) / 3
        assert view["agreement"] == pytest.approx(agree) and agree < 0.9
    states = [p.post(f"/api/alignment/{settled}", answer(views[p.name], truth)).json()["state"] for p in (jia, yi)]
    assert states == ["waiting", "settled"]
    view = jia.client.get("/api/alignment/next").json()
    assert view["task_id"] == escalated
    assert jia.post(f"/api/alignment/{escalated}", answer(view, truth)).json()["state"] == "waiting"
    view = yi.client.get("/api/alignment/next").json()
    assert yi.post(f"/api/alignment/{escalated}", answer(view, truth, reverse=True)).json()["state"] == "escalated"
    assert jia.client.get("/api/alignment/next").status_code == 204
    assert yi.client.get("/api/alignment/next").status_code == 204
    return settled, escalated


def check_export(url: str, folder: Path, rows: list[dict]) -> list[dict]:
    """Every prompt exported, ranked as TRUTH; the raw file holds every answer given (returned)."""
    raw = stored_annotations(url, folder)
    phases = [r["phase"] for r in raw]
    assert (phases.count("first"), phases.count("aligned"), phases.count("admin")) == (len(rows) * 5 * 2, 4, 1)
    exported = [json.loads(line) for line in (folder / "bench.jsonl").read_text(encoding="utf-8").splitlines()]
    assert [row["id"] for row in exported] == [row["id"] for row in rows]
    level = {rid: i for i, group in enumerate(TRUTH_ORDER) for rid in group.split("=")}
    for row in exported:
        rank = row["rank"]
        for a in TRUTH:
            for b in TRUTH:
                assert (rank[a] < rank[b]) == (level[a] < level[b]), (row["id"], rank)
    return raw


def test_workflow_on_postgres(postgres_url: str, tmp_path: Path):
    from cheems.annotate.app import create_app
    from cheems.annotate.settings import WorkflowSettings

    url = create_database(postgres_url, "workflow")
    rows = prompt_rows(5, seed=3)  # 25 triple tasks; the fifth prompt is a chat
    prepare_database(url, write_prompts(tmp_path / "prompts.jsonl", 5, seed=3), ["甲"], overlap=2)
    annotate_cli("add-user", "乙", "--role", "annotator", "--password-stdin", "--db", url, stdin=PASSWORD + "\n")
    truth = truth_by_content(rows)
    app = create_app(url, WorkflowSettings(alignment_min_shared=1))  # the first disagreements align
    with contextlib.ExitStack() as stack:
        jia, yi, admin = (Annotator(stack.enter_context(fastapi_testclient.TestClient(app)), name)
                          for name in ("甲", "乙", "admin"))
        for person in (jia, yi, admin):
            person.login()
        check_task_view(jia, rows)
        bad_requests(jia, yi, truth)
        assert len(take_all(jia, truth)) == 25
        disputed = take_all(yi, truth, reverse_first=2)
        assert len(disputed) == 25
        settled, escalated = align_two(jia, yi, disputed[:2], truth)

        assert yi.client.get("/api/escalations").status_code == 403
        listed = admin.client.get("/api/escalations").json()
        assert [e["task_id"] for e in listed] == [escalated]
        assert len(listed[0]["answers"]) == 2
        decision = answer(listed[0], truth)
        assert admin.post(f"/api/escalations/{escalated}", decision).status_code == 200

        assert yi.client.get("/api/stats").status_code == 403
        stats = admin.client.get("/api/stats").json()
        assert {"tasks", "by_annotator", "agreement", "krippendorff", "conflict_ratio"} <= set(stats)
        assert {"甲", "乙"} <= set(stats["by_annotator"])
        assert {"scores_ordinal", "pairs_nominal"} <= set(stats["krippendorff"])
    raw = check_export(url, tmp_path, rows)
    assert [r["phase"] for r in raw if r["task_id"] == escalated] == ["first", "first", "aligned", "aligned", "admin"]
    assert [r["status"] for r in raw if r["task_id"] == settled] == ["superseded", "superseded", "active", "active"]


# ------------------------------------------------------------------------------------------- concurrency


@contextlib.contextmanager
def uvicorn_server(app) -> Iterator[str]:
    """A real uvicorn serving ``app`` on loopback from a background thread; yields its base URL."""
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + HANG_TIMEOUT_S
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=30)


def same_person_races(base_url: str, names: list[str], log: LoadLog) -> None:
    """Each person asks for a task from two threads at once (one task), then submits it twice at once
    (one 201, one 409)."""
    for name in names:
        with httpx.Client(base_url=base_url, timeout=60) as client:
            person = Annotator(client, name)
            person.login()
            with ThreadPoolExecutor(2) as pool:
                tasks = [r.json() for r in pool.map(lambda _: person.next_task(), range(2))]
                assert tasks[0]["task_id"] == tasks[1]["task_id"], f"{name} got two tasks at once"
                body = submission_for({x: (3, 0) for x in LETTERS})
                replies = list(pool.map(lambda _: person.submit(tasks[0]["task_id"], body), range(2)))
            assert sorted(r.status_code for r in replies) == [201, 409], [r.text for r in replies]
            won = next(r for r in replies if r.status_code == 201)
            log.accepted.append((won.json()["annotation_id"], tasks[0]["task_id"], name))
            log.handed[name].append(tasks[0]["task_id"])


def test_concurrent_annotators(database_url: str, tmp_path: Path):
    from cheems.annotate.app import create_app

    url = database_url
    names = [f"annotator{i:02d}" for i in range(20)]
    n_prompts, overlap = 8, 2  # 40 tasks, 80 submissions
    prepare_database(url, write_prompts(tmp_path / "prompts.jsonl", n_prompts, seed=7), names, overlap)
    log = LoadLog()
    with uvicorn_server(create_app(url)) as base_url:
        threads = list(run_annotators(base_url, names, log, seed=11))
        for thread in threads:
            thread.join(timeout=HANG_TIMEOUT_S)
        assert not any(t.is_alive() for t in threads), f"annotators still running after {HANG_TIMEOUT_S} s"
    stored = stored_annotations(url, tmp_path)
    problems = load_problems(log, stored, overlap, n_tasks=n_prompts * 5)
    assert not problems, "\n".join(problems[:20])
    assert len(log.accepted) == len(stored) == n_prompts * 5 * overlap
    assert log.statuses["next 204"] == len(names)
    assert not [s for s in log.statuses if s.split()[1][0] == "5"], log.statuses


def test_one_person_racing_themselves(database_url: str, tmp_path: Path):
    """Two tabs of one person: parallel next calls get one task, parallel submits of it one 201 and one 409."""
    from cheems.annotate.app import create_app

    names = [f"annotator{i:02d}" for i in range(4)]
    prepare_database(database_url, write_prompts(tmp_path / "prompts.jsonl", 2, seed=5), names, overlap=2)
    log = LoadLog()
    with uvicorn_server(create_app(database_url)) as base_url:
        same_person_races(base_url, names, log)
    assert not load_problems(log, stored_annotations(database_url, tmp_path), overlap=2)


def test_random_submissions_follow_the_protocol():
    """The load's answers are valid: ``random_submission`` passes the server's own check."""
    from cheems.annotate.protocol import check_submission
    from tests.test_annotate_kill import random_submission

    rng = random.Random(0)
    contents = {"A": "第一个回答", "B": "第二个回答，长一点。", "C": "三"}
    for _ in range(2000):
        body = random_submission(rng, contents)
        check_submission(body, contents)
