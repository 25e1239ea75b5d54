"""Several studies in one annotation database: two studies with the same prompt ids, users with a
different role in each, tasks, answers, status and exports kept apart, the page's API refusing a
study the user has no role in, the CLI's ``--study`` and ``study add`` / ``study list``, and the
upgrade of a database made by the first schema revision (its rows land in the study ``default``);
on SQLite and, the two-study case and the upgrade, on a throwaway PostgreSQL cluster."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("fastapi")
from alembic.autogenerate import compare_metadata  # noqa: E402
from alembic.migration import MigrationContext  # noqa: E402
from fastapi.testclient import TestClient  # noqa: E402
from sqlalchemy import select, text  # noqa: E402

from cheems.annotate import auth  # noqa: E402
from cheems.annotate.app import create_app  # noqa: E402
from cheems.annotate.dashboard import stats  # noqa: E402
from cheems.annotate.db import (Base, Membership, PromptRow, ReviewItem, Study, Task, User, make_engine,  # noqa: E402
                                migrate, session_factory)
from cheems.annotate.export import export_benchmark  # noqa: E402
from cheems.annotate.studies import add_study, list_studies  # noqa: E402
from cheems.annotate.workflow import WorkflowSettings, import_prompts  # noqa: E402
from cheems.records import CheemsInputError, Prompt, Response  # noqa: E402
from tests import postgres_cluster  # noqa: E402
from tests.conftest import run_cli_in  # noqa: E402
from tests.postgres_cluster import create_database  # noqa: E402

postgres_url = postgres_cluster.postgres_url  # a fixture, found by pytest under this name
PASSWORD = "口令-123"


def prompts(topic: str, n: int = 2) -> list[Prompt]:
    """``n`` prompts p0, p1, ... of three responses each; ``topic`` tells the studies' contents apart."""
    return [Prompt(f"p{i}", f"{topic}：第{i}个问题？",
                   [Response(f"r{j}", f"{topic}回答{j}：" + "好" * (j + 1)) for j in range(3)], category=[topic])
            for i in range(n)]


def answer(order: str = "ABC") -> dict:
    scores = {k: 5 - 2 * order.index(k) for k in "ABC"}
    return {"scores": scores, "pairs": {}, "ranking": ">".join(order), "spans": [], "note": ""}


def login(app, name: str) -> TestClient:
    c = TestClient(app)
    r = c.post("/api/login", json={"username": name, "password": PASSWORD})
    assert r.status_code == 200, r.text
    c.headers["X-CSRF-Token"] = r.json()["csrf_token"]
    return c


def two_studies(url: str) -> None:
    """``default`` (math prompts) and ``b`` (poetry prompts, the same ids, overlap 1, no review), and
    users: 甲 annotator in default and reviewer in b, 乙 annotator in b only, 丙 annotator in both,
    boss admin of default."""
    engine = make_engine(url)
    migrate(engine)
    with session_factory(engine)() as s:
        add_study(s, "b", WorkflowSettings(review_rate=0))
        auth.add_user(s, "甲", "annotator", PASSWORD, ["数学"])
        auth.add_user(s, "甲", "reviewer", PASSWORD, study="b")
        auth.add_user(s, "乙", "annotator", PASSWORD, study="b")
        auth.add_user(s, "丙", "annotator", PASSWORD)
        auth.add_user(s, "丙", "annotator", PASSWORD, study="b")
        auth.add_user(s, "boss", "admin", PASSWORD)
        assert import_prompts(s, prompts("数学"), overlap=2)["tasks"] == 2
        assert import_prompts(s, prompts("诗歌"), overlap=1, study="b")["tasks"] == 2
    engine.dispose()


def check_two_studies(url: str, out: Path) -> None:
    two_studies(url)
    app = create_app(url, WorkflowSettings(review_rate=0))
    jia, yi, bing, boss = (login(app, n) for n in ("甲", "乙", "丙", "boss"))
    assert jia.get("/api/me").json()["studies"] == [{"name": "default", "role": "annotator"},
                                                    {"name": "b", "role": "reviewer"}]
    assert jia.get("/api/me?study=b").json()["role"] == "reviewer"
    mine = jia.get("/api/tasks/next").json()
    assert mine["prompt"].startswith("数学")
    r = yi.get("/api/tasks/next")  # no role in default
    assert r.status_code == 403 and r.json()["field"] == "study"
    assert jia.get("/api/tasks/next?study=b").json()["field"] == "role"  # a reviewer there
    assert yi.get("/api/tasks/next?study=nosuch").status_code == 404
    assert yi.post(f"/api/tasks/{mine['task_id']}/submit?study=b", json=answer()).status_code == 404
    assert boss.get("/api/stats?study=b").status_code == 403
    done = []
    for person in (yi, bing):  # overlap 1 in b: each settles the task they take
        view = person.get("/api/tasks/next?study=b").json()
        assert view["prompt"].startswith("诗歌")
        assert person.post(f"/api/tasks/{view['task_id']}/submit?study=b", json=answer()).status_code == 201
        done.append(view["task_id"])
    assert yi.get("/api/tasks/next?study=b").status_code == 204
    assert yi.get("/api/progress?study=b").json()["done_total"] == 1
    assert jia.get("/api/progress").json() == {"done_today": 0, "done_total": 0, "queue_left": 2,
                                               "alignment_waiting": 0}
    assert jia.post(f"/api/tasks/{mine['task_id']}/submit", json=answer()).status_code == 201
    engine = make_engine(url)
    with session_factory(engine)() as s:
        b, default = stats(s, "b"), stats(s)
        assert b["tasks"] == {"total": 2, "gold": 0, "done": 2}
        assert default["tasks"] == {"total": 2, "gold": 0, "open": 2}
        assert set(b["by_annotator"]) == {"甲", "乙", "丙"} and b["by_annotator"]["甲"]["role"] == "reviewer"
        assert set(default["by_annotator"]) == {"甲", "丙", "boss"}
        assert export_benchmark(s, out / "b.jsonl", study="b")["prompts"] == 2
        assert export_benchmark(s, out / "default.jsonl")["prompts_waiting"] == 2
        with pytest.raises(CheemsInputError, match="no study 'c'"):
            stats(s, "c")
        assert [(x["name"], x["prompts"], x["members"]) for x in list_studies(s)] == [("default", 2, 3), ("b", 2, 3)]
    engine.dispose()
    rows = [json.loads(line) for line in (out / "b.jsonl").read_text(encoding="utf-8").splitlines()]
    assert [r["id"] for r in rows] == ["p0", "p1"] and all(r["prompt"].startswith("诗歌") for r in rows)
    assert (out / "default.jsonl").read_text(encoding="utf-8") == ""


def test_two_studies_in_one_sqlite_database(tmp_path):
    check_two_studies(f"sqlite:///{tmp_path / 'a.db'}", tmp_path)


def test_two_studies_on_postgres(postgres_url, tmp_path):
    check_two_studies(create_database(postgres_url, "studies"), tmp_path)


def test_joining_another_study_needs_the_accounts_password(tmp_path):
    engine = make_engine(f"sqlite:///{tmp_path / 'a.db'}")
    migrate(engine)
    with session_factory(engine)() as s:
        add_study(s, "b")
        auth.add_user(s, "甲", "annotator", PASSWORD)
        with pytest.raises(CheemsInputError, match="own password"):
            auth.add_user(s, "甲", "admin", "wrong", study="b")
        with pytest.raises(CheemsInputError, match="already exists"):
            auth.add_user(s, "甲", "admin", PASSWORD)
        with pytest.raises(CheemsInputError, match="already exists"):
            add_study(s, "b")
        assert auth.add_user(s, "甲", "admin", PASSWORD, study="b").role == "admin"
        assert s.scalar(select(Membership.role).where(Membership.study_id == 1)) == "annotator"


def test_the_cli_works_on_the_named_study(tmp_path):
    url = f"sqlite:///{tmp_path / 'a.db'}"
    rows = [p.to_dict() for p in prompts("诗歌", 3)]
    (tmp_path / "b.jsonl").write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows),
                                      encoding="utf-8")

    def cli(*args, stdin=None):
        return run_cli_in(tmp_path, "annotate", *args, "--db", url, input=stdin)

    assert cli("init").returncode == 0
    r = cli("study", "add", "b", "--review-rate", "0.5", "--agreement-bar", "0.8")
    assert r.returncode == 0 and "added study b" in r.stdout, r.stderr
    assert cli("study", "add", "b").returncode == 2
    assert cli("study", "add", "c", "--review-rate", "2").returncode == 2
    r = cli("add-user", "甲", "--role", "reviewer", "--study", "b", "--password-stdin", stdin=PASSWORD + "\n")
    assert r.returncode == 0 and "added reviewer 甲 in study b" in r.stdout, r.stderr
    assert cli("import", "b.jsonl", "--study", "b", "--overlap", "1").returncode == 0
    r = cli("import", "b.jsonl", "--study", "nosuch")
    assert r.returncode == 2 and "--study" in r.stderr and "no study 'nosuch'" in r.stderr
    listed = json.loads(cli("study", "list", "--json").stdout)
    assert [(x["name"], x["prompts"], x["tasks"], x["members"]) for x in listed] == [("default", 0, 0, 0),
                                                                                      ("b", 3, 3, 1)]
    assert listed[1]["settings"]["review_rate"] == 0.5 and listed[1]["settings"]["agreement_bar"] == 0.8
    assert json.loads(cli("status", "--json", "--study", "b").stdout)["tasks"]["total"] == 3
    assert json.loads(cli("status", "--json").stdout)["tasks"]["total"] == 0
    r = cli("export", "--study", "b", "-o", "b-bench.jsonl")
    assert r.returncode == 0 and "3 prompts without a settled task yet" in r.stdout
    app = create_app(url)
    c = login(app, "甲")
    assert c.get("/api/review/next?study=b").status_code == 204
    assert c.get("/api/review/next").status_code == 403


def make_first_schema_database(url: str) -> None:
    """A database at revision 0001 (the one-project schema) holding a reviewer 甲, an annotator 乙, a
    prompt, a task, 乙's assignment and answer, and a review item of it."""
    from alembic import command

    from cheems.annotate.db import alembic_config

    engine = make_engine(url)
    command.upgrade(alembic_config(engine), "0001")
    hashed = auth.password_hash(PASSWORD)
    p = prompts("数学", 1)[0]
    with engine.begin() as conn:
        conn.execute(text("INSERT INTO users (id, name, role, categories, password_hash, created_at) VALUES "
                          "(1, '甲', 'reviewer', :cats, :hash, '2024-01-01 00:00:00')"),
                     {"cats": json.dumps(["数学"]), "hash": hashed})
        conn.execute(text("INSERT INTO users (id, name, role, categories, password_hash, created_at) VALUES "
                          "(2, '乙', 'annotator', '[]', :hash, '2024-01-01 00:00:00')"), {"hash": hashed})
        conn.execute(text("INSERT INTO prompts (id, position, prompt, category, subset, responses, is_gold) "
                          "VALUES ('p0', 0, :prompt, :cat, NULL, :responses, false)"),
                     {"prompt": json.dumps(p.prompt), "cat": json.dumps(["数学"]),
                      "responses": json.dumps([r.to_dict() for r in p.responses])})
        conn.execute(text("INSERT INTO tasks (id, prompt_id, round, response_ids, queue_key, category, overlap, "
                          "claimed, submitted, state) VALUES (1, 'p0', 1, :rids, 1000, '数学', 1, 1, 1, 'done')"),
                     {"rids": json.dumps(["r0", "r1", "r2"])})
        conn.execute(text("INSERT INTO assignments (id, task_id, user_id, shown_order, claimed_at, submitted_at) "
                          "VALUES (1, 1, 2, :order, '2024-01-01 00:00:00', '2024-01-01 00:01:00')"),
                     {"order": json.dumps(["r0", "r1", "r2"])})
        conn.execute(text("INSERT INTO annotations (id, task_id, user_id, phase, shown_order, scores, pairs, levels, "
                          "ranking, spans, note, status, created_at) VALUES (1, 1, 2, 'first', :order, :scores, "
                          ":pairs, :levels, 'A>B>C', '[]', '', 'active', '2024-01-01 00:01:00')"),
                     {"order": json.dumps(["r0", "r1", "r2"]), "scores": json.dumps({"r0": 5, "r1": 3, "r2": 1}),
                      "pairs": json.dumps({"r0|r1": "g", "r0|r2": "g", "r1|r2": "g"}),
                      "levels": json.dumps({"r0": 0, "r1": 1, "r2": 2})})
        conn.execute(text("INSERT INTO review_items (id, annotation_id, stage, queue_key, note) "
                          "VALUES (1, 1, 1, 7, '')"))
        if conn.dialect.name == "postgresql":  # rows given their ids: the sequences go on after them
            for table in ("users", "tasks", "assignments", "annotations", "review_items"):
                conn.execute(text(f"SELECT setval(pg_get_serial_sequence('{table}', 'id'), "
                                  f"(SELECT max(id) FROM {table}))"))
    engine.dispose()


def check_upgrade(url: str, out: Path) -> None:
    make_first_schema_database(url)
    engine = make_engine(url)
    migrate(engine)
    with engine.connect() as conn:  # the upgraded schema is the one the models declare
        assert compare_metadata(MigrationContext.configure(conn), Base.metadata) == []
    with session_factory(engine)() as s:
        (default,) = s.scalars(select(Study)).all()
        assert default.name == "default" and default.settings["review_rate"] == 0.3
        member = s.get(Membership, (default.id, 1))
        assert (member.role, member.categories) == ("reviewer", ["数学"])
        assert s.get(PromptRow, (default.id, "p0")).prompt.startswith("数学")
        assert s.get(Task, 1).study_id == default.id and s.get(ReviewItem, 1).study_id == default.id
        assert s.get(User, 1).name == "甲" and s.get(Membership, (default.id, 2)).role == "annotator"
        add_study(s, "b")
        assert import_prompts(s, prompts("诗歌", 1), study="b")["prompts"] == 1  # the same id, another study
        assert export_benchmark(s, out / "bench.jsonl")["prompts"] == 1
    engine.dispose()
    c = login(create_app(url), "甲")
    assert c.get("/api/me").json()["role"] == "reviewer"
    item = c.get("/api/review/next").json()
    assert item["item_id"] == 1 and item["prompt"].startswith("数学")


def test_a_first_schema_database_upgrades_into_the_default_study(tmp_path):
    check_upgrade(f"sqlite:///{tmp_path / 'old.db'}", tmp_path)


def test_a_first_schema_database_upgrades_on_postgres(postgres_url, tmp_path):
    check_upgrade(create_database(postgres_url, "upgrade"), tmp_path)
