"""The annotation server's JSON API through its real app and a real SQLite file: login, CSRF,
role checks on every route, the protocol's refusals, double-blind hand-out, agreement, alignment,
escalation, review with gold items, reclaiming, export and `cheems eval` on the export."""

from __future__ import annotations

import itertools
import json
import random

import pytest
from fastapi.testclient import TestClient

from cheems.annotate import auth
from cheems.annotate.app import create_app
from cheems.annotate.db import make_engine, migrate, session_factory
from cheems.annotate.workflow import WorkflowSettings, import_prompts
from cheems.records import Prompt, Response
from tests.conftest import run_cli_in

PASSWORD = "口令-123"


def prompts(n: int = 3, k: int = 5) -> list[Prompt]:
    cats = ["数学", "代码", "写作"]
    return [Prompt(f"p{i}", f"第{i}个问题：请解释{i}的意义。",
                   [Response(f"p{i}r{j}", f"回答{j}：" + "内容，" * (j + 1)) for j in range(k)],
                   category=[cats[i % 3]], subset="open") for i in range(n)]


def gold_prompts() -> list[Prompt]:
    texts = ["答案是二。", "二", "答案是二，因为一加一等于二。"]  # longer is better here, as true_order assumes
    p = Prompt("g0", "金标准问题：1+1 等于几？", [Response(f"g0r{j}", t) for j, t in enumerate(texts)],
               rank={"g0r2": 0, "g0r0": 1, "g0r1": 2}, category=["数学"])
    return [p]


@pytest.fixture
def server(tmp_path):
    url = f"sqlite:///{tmp_path / 'a.db'}"
    engine = make_engine(url)
    migrate(engine)
    s = session_factory(engine)()
    for name, role in [("ann1", "annotator"), ("ann2", "annotator"), ("ann3", "annotator"), ("rev", "reviewer"),
                       ("boss", "admin")]:
        auth.add_user(s, name, role, PASSWORD, ["数学"] if name == "ann1" else [])
    import_prompts(s, prompts(), overlap=2, gold=gold_prompts())
    s.close()
    settings = WorkflowSettings(review_rate=1.0, review_stages=1, alignment_min_shared=1)
    return url, create_app(url, settings), tmp_path


def client(app, name: str | None) -> TestClient:
    c = TestClient(app)
    if name is not None:
        r = c.post("/api/login", json={"username": name, "password": PASSWORD})
        assert r.status_code == 200, r.text
        c.headers["X-CSRF-Token"] = r.json()["csrf_token"]
    return c


def call(c: TestClient, method: str, path: str, body: dict):
    return c.get(path) if method == "get" else c.post(path, json=body)


def answer(view: dict, order: str) -> dict:
    """A valid submission ranking the letters as ``order`` (e.g. "BAC": B best), scores 5, 3, 1."""
    scores = {k: 5 - 2 * order.index(k) for k in "ABC"}
    return {"scores": scores, "pairs": {}, "ranking": ">".join(order), "spans": [], "note": ""}


def test_login_cookie_csrf_and_roles(server):
    _, app, _ = server
    anon = TestClient(app)
    assert anon.post("/api/login", json={"username": "ann1", "password": "wrong"}).status_code == 401
    assert anon.post("/api/login", json={"username": "nobody", "password": PASSWORD}).status_code == 401
    r = anon.post("/api/login", json={"username": "ann1", "password": PASSWORD})
    cookie = r.headers["set-cookie"].lower()
    assert "httponly" in cookie and "samesite=strict" in cookie
    view = anon.get("/api/tasks/next").json()
    body = answer(view, "ABC")
    assert anon.post(f"/api/tasks/{view['task_id']}/submit", json=body).status_code == 403  # no CSRF header
    assert anon.post(f"/api/tasks/{view['task_id']}/submit", json=body,
                     headers={"X-CSRF-Token": "forged"}).status_code == 403
    for method, path in [("get", "/api/tasks/next"), ("post", "/api/tasks/1/submit"), ("get", "/api/me"),
                         ("get", "/api/review/next"), ("post", "/api/review/1"), ("get", "/api/stats"),
                         ("get", "/api/alignment/next"), ("post", "/api/alignment/1"),
                         ("post", "/api/alignment/1/escalate"), ("get", "/api/escalations"),
                         ("post", "/api/escalations/1"), ("post", "/api/logout")]:
        assert call(TestClient(app), method, path, {}).status_code == 401, path
    ann = client(app, "ann2")
    for method, path in [("get", "/api/review/next"), ("post", "/api/review/1"), ("get", "/api/stats"),
                         ("get", "/api/escalations"), ("post", "/api/escalations/1")]:
        assert call(ann, method, path, {"verdict": "accept"}).status_code == 403, path
    rev = client(app, "rev")
    assert rev.get("/api/stats").status_code == 403
    assert client(app, "boss").get("/api/stats").status_code == 200


def test_the_protocol_refusals_name_the_field(server):
    _, app, _ = server
    c = client(app, "ann2")
    view = c.get("/api/tasks/next").json()
    assert c.get("/api/tasks/next").json()["task_id"] == view["task_id"]  # the same task until submitted
    assert {r["key"] for r in view["responses"]} == {"A", "B", "C"}
    assert "p0r" not in json.dumps(view, ensure_ascii=False)  # never response ids
    url = f"/api/tasks/{view['task_id']}/submit"
    bad = [
        ({"scores": {"A": 6, "B": 1, "C": 2}, "ranking": "A>C>B"}, "scores.A"),
        ({"scores": {"A": 3, "B": 3, "C": 1}, "ranking": "A>B>C"}, "pairs.AB"),  # tie without a label
        ({"scores": {"A": 3, "B": 3, "C": 1}, "pairs": {"AB": "b"}, "ranking": "A>B>C"}, "ranking"),
        ({"scores": {"A": 5, "B": 3, "C": 1}, "ranking": "C>B>A"}, "ranking"),
        ({"scores": {"A": 5, "B": 3, "C": 1}, "ranking": "A>B>C", "spans": [{"key": "A", "start": 3, "end": 2}]},
         "spans[0]"),
        ("not an object", "body"),
    ]
    for body, field in bad:
        r = c.post(url, json=body)
        assert r.status_code == 422 and r.json()["field"] == field, (body, r.text)
    tie = {"scores": {"A": 3, "B": 3, "C": 1}, "pairs": {"AB": "s"}, "ranking": "B=A>C",
           "spans": [{"key": "A", "start": 0, "end": 2, "note": "开头"}]}
    assert c.post(url, json=tie).status_code == 201
    assert c.post(url, json=tie).status_code == 409
    other = client(app, "ann3")
    assert other.post(url, json=tie).status_code == 403  # not handed to them
    assert other.post(url, json={"note": "长" * (1 << 20)}).status_code == 413
    assert other.post("/api/tasks/abc/submit", json=tie).status_code == 422
    assert c.post("/api/tasks/99999/submit", json=tie).status_code == 404


def work_through(c: TestClient, orders) -> list[int]:
    done = []
    while (r := c.get("/api/tasks/next")).status_code == 200:
        view = r.json()
        order = orders(view)
        assert c.post(f"/api/tasks/{view['task_id']}/submit", json=answer(view, order)).status_code == 201
        if not view["prompt"].startswith("金标准"):  # gold goes to everyone
            done.append(view["task_id"])
    assert r.status_code == 204
    return done


def true_order(view: dict) -> str:
    """Rank by the length of the response (a stand-in for quality both annotators see)."""
    return "".join(sorted("ABC", key=lambda k: -len(next(x["content"] for x in view["responses"] if x["key"] == k))))


def test_double_blind_overlap_alignment_review_and_export(server):
    url, app, tmp = server
    a1, a2, a3 = (client(app, n) for n in ("ann1", "ann2", "ann3"))
    t1 = work_through(a1, true_order)
    t2 = work_through(a2, lambda v: true_order(v)[::-1] if v["task_id"] % 2 else true_order(v))
    t3 = work_through(a3, true_order)
    assert len(t1) == len(set(t1)) and len(t2) == len(set(t2))
    assert all(sum(t in ts for ts in (t1, t2, t3)) == 2 for t in set(t1 + t2 + t3))  # overlap 2, gold aside
    boss = client(app, "boss")
    st = boss.get("/api/stats").json()
    assert st["tasks"].get("aligning", 0) > 0
    # alignment: the pair disagreed, so the disagreements come back; one settles, one escalates
    settled = escalated = 0
    for c in (a1, a2, a3):
        while (r := c.get("/api/alignment/next")).status_code == 200:
            v = r.json()
            assert v["theirs"] is not None and set(v["mine"]["scores"]) == {"A", "B", "C"}
            if v["task_id"] % 4 == 1:
                res = c.post(f"/api/alignment/{v['task_id']}/escalate").json()["state"]
            else:
                res = c.post(f"/api/alignment/{v['task_id']}", json=answer(v, true_order(v))).json()["state"]
            settled += res == "settled"
            escalated += res == "escalated"
    assert settled > 0 and escalated > 0
    for e in boss.get("/api/escalations").json():
        assert boss.post(f"/api/escalations/{e['task_id']}", json=answer(e, true_order(e))).status_code == 200
    rev = client(app, "rev")
    verdicts = {"accept": 0, "reject": 0}
    while (r := rev.get("/api/review/next")).status_code == 200:
        item = r.json()
        assert "annotator" not in json.dumps(item)
        v = "reject" if item["annotation"]["ranking"] != ">".join(true_order(item)) else "accept"
        assert rev.post(f"/api/review/{item['item_id']}", json={"verdict": v, "note": ""}).status_code == 200
        verdicts[v] += 1
    assert verdicts["accept"] > 0
    st = boss.get("/api/stats").json()
    assert st["gold"]["reviewers"]["rev"]["accuracy"] == 1.0
    assert st["gold"]["annotators"]["ann1"]["gold_tasks"] == 1
    assert set(st["position_bias"]) >= {"ann1", "ann2"}
    assert st["krippendorff"]["scores_ordinal"]["units"] > 0
    r = run_cli_in(tmp, "annotate", "export", "--db", url, "-o", "bench.jsonl", "--raw", "raw.jsonl")
    assert r.returncode == 0, r.stderr
    rows = [json.loads(x) for x in (tmp / "bench.jsonl").read_text(encoding="utf-8").splitlines()]
    assert rows and all("rank" in row for row in rows)
    raw = [json.loads(x) for x in (tmp / "raw.jsonl").read_text(encoding="utf-8").splitlines()]
    assert any(x["reviews"] for x in raw) and all(x["shown_order"] for x in raw)
    r = run_cli_in(tmp, "eval", "bench.jsonl", "--scorer", "length")
    assert r.returncode == 0, r.stderr


def test_abandoned_assignments_are_reclaimed(tmp_path, monkeypatch):
    """The workflow's clock (``now``) is a fake one the test moves forward: no sleeping."""
    import datetime as dt

    from cheems.annotate import workflow

    clock = [workflow.now()]
    monkeypatch.setattr(workflow, "now", lambda: clock[0])
    url = f"sqlite:///{tmp_path / 'a.db'}"
    engine = make_engine(url)
    migrate(engine)
    s = session_factory(engine)()
    for name in ("x", "y", "z"):
        auth.add_user(s, name, "annotator", PASSWORD)
    import_prompts(s, prompts(1, 3), overlap=1)  # one task, one annotator
    s.close()
    app = create_app(url, WorkflowSettings(claim_timeout_s=60))
    x, y = client(app, "x"), client(app, "y")
    view = x.get("/api/tasks/next").json()
    assert y.get("/api/tasks/next").status_code == 204  # taken
    clock[0] += dt.timedelta(seconds=59)
    assert y.get("/api/tasks/next").status_code == 204  # still x's within the claim timeout
    clock[0] += dt.timedelta(seconds=2)
    assert y.get("/api/tasks/next").json()["task_id"] == view["task_id"]  # reclaimed from x
    assert x.post(f"/api/tasks/{view['task_id']}/submit", json=answer(view, "ABC")).status_code == 403


def reference_consistent(scores: dict, pairs: dict, ranking: str) -> bool:
    """The protocol's rule written plainly: every pair ordered by the ranking as the scores say,
    and tied scores as their label says (a label required there, and agreeing where given)."""
    level = {}
    for i, group in enumerate(ranking.split(">")):
        for k in group.split("="):
            level[k] = i
    for x, y in itertools.combinations("ABC", 2):
        rel = "g" if level[x] < level[y] else "b" if level[x] > level[y] else "s"
        if scores[x] != scores[y]:
            want = "g" if scores[x] > scores[y] else "b"
            if rel != want or pairs.get(x + y, want) != want:
                return False
        elif pairs.get(x + y) != rel:
            return False
    return True


def test_check_submission_agrees_with_a_plain_reference():
    from hypothesis import given, settings, strategies as st

    from cheems.annotate.protocol import SubmissionError, check_submission

    rankings = ["".join(p) for p in itertools.permutations("ABC")]

    @st.composite
    def bodies(draw):
        scores = {k: draw(st.integers(0, 5)) for k in "ABC"}
        pairs = {x + y: draw(st.sampled_from("gbs")) for x, y in itertools.combinations("ABC", 2)
                 if draw(st.booleans())}
        order = draw(st.sampled_from(rankings))
        seps = [draw(st.sampled_from(">=")) for _ in range(2)]
        return scores, pairs, order[0] + seps[0] + order[1] + seps[1] + order[2]

    @settings(max_examples=400, deadline=None)
    @given(bodies())
    def check(case):
        scores, pairs, ranking = case
        try:
            check_submission({"scores": scores, "pairs": pairs, "ranking": ranking}, {k: "文本" for k in "ABC"})
            ok = True
        except SubmissionError:
            ok = False
        assert ok == reference_consistent(scores, pairs, ranking)

    check()


def test_random_orders_are_a_permutation_per_annotator(server):
    _, app, _ = server
    seen = set()
    for name in ("ann2", "ann3"):
        c = client(app, name)
        v = c.get("/api/tasks/next").json()
        seen.add(tuple(r["content"] for r in v["responses"]))
        assert len({r["content"] for r in v["responses"]}) == 3
    assert random  # the shown orders are drawn per (task, annotator) from the serve seed


def test_alignment_shows_the_others_latest_answer_and_keeps_the_first_round_agreement(server):
    _, app, _ = server
    a1, a2 = client(app, "ann2"), client(app, "ann3")
    v1 = a1.get("/api/tasks/next").json()
    v2 = a2.get("/api/tasks/next").json()
    assert v1["task_id"] == v2["task_id"]  # neither has categories: the first task in queue order for both
    best1 = true_order(v1)
    assert a1.post(f"/api/tasks/{v1['task_id']}/submit", json=answer(v1, best1)).status_code == 201
    assert a2.post(f"/api/tasks/{v2['task_id']}/submit", json=answer(v2, true_order(v2)[::-1])).status_code == 201
    first1 = a1.get("/api/alignment/next").json()
    assert first1["agreement"] == 0.0 and first1["theirs"]["ranking"] == ">".join(best1[::-1])
    revised = a2.get("/api/alignment/next").json()
    assert a2.post(f"/api/alignment/{v2['task_id']}", json=answer(revised, true_order(revised))).json() == {
        "state": "waiting"}
    again = a1.get("/api/alignment/next").json()
    assert again["theirs"]["ranking"] == ">".join(best1)  # the revised answer, in a1's letters
    assert a1.post(f"/api/alignment/{v1['task_id']}", json=answer(again, best1)).json() == {"state": "settled"}
    st = client(app, "boss").get("/api/stats").json()
    assert st["agreement"]["percent"] == 0.0 and st["tasks"]["done"] == 1


def test_alignment_waits_until_the_pair_shares_enough_tasks(tmp_path):
    """With ``alignment_min_shared=3`` the first two disagreements settle as they are; the third
    shared task, still below the bar, goes to alignment."""
    url = f"sqlite:///{tmp_path / 'a.db'}"
    engine = make_engine(url)
    migrate(engine)
    s = session_factory(engine)()
    for name in ("x", "y"):
        auth.add_user(s, name, "annotator", PASSWORD)
    import_prompts(s, prompts(4, 3), overlap=2)  # four tasks, both annotators on each
    s.close()
    assert WorkflowSettings().alignment_min_shared == 10
    app = create_app(url, WorkflowSettings(alignment_min_shared=3, review_rate=0))
    x, y = client(app, "x"), client(app, "y")
    states = []
    for _ in range(4):
        vx, vy = x.get("/api/tasks/next").json(), y.get("/api/tasks/next").json()
        assert vx["task_id"] == vy["task_id"]
        assert x.post(f"/api/tasks/{vx['task_id']}/submit", json=answer(vx, true_order(vx))).status_code == 201
        assert y.post(f"/api/tasks/{vy['task_id']}/submit", json=answer(vy, true_order(vy)[::-1])).status_code == 201
        states.append(y.get("/api/progress").json()["alignment_waiting"])
    assert states == [0, 0, 1, 2]
    st = client(app, "x")
    assert st.get("/api/alignment/next").json()["task_id"] == 3


def test_progress_counts_and_admins_and_reviewers_claim_nothing(server):
    _, app, _ = server
    boss, rev, ann = client(app, "boss"), client(app, "rev"), client(app, "ann3")
    for c in (boss, rev):
        r = c.get("/api/tasks/next")
        assert r.status_code == 403 and r.json()["field"] == "role", r.text
    opened = boss.get("/api/stats").json()["by_annotator"]
    assert opened["boss"]["open"] == 0 and opened["rev"]["open"] == 0
    total = boss.get("/api/stats").json()["tasks"]["total"] + 1  # the gold task too
    assert ann.get("/api/progress").json() == {"done_today": 0, "done_total": 0, "queue_left": total,
                                               "alignment_waiting": 0}
    for done in (1, 2):
        view = ann.get("/api/tasks/next").json()
        assert ann.post(f"/api/tasks/{view['task_id']}/submit", json=answer(view, "ABC")).status_code == 201
        assert ann.get("/api/progress").json() == {"done_today": done, "done_total": done,
                                                   "queue_left": total - done, "alignment_waiting": 0}
