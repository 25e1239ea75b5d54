"""A `cheems annotate serve` killed with SIGKILL under load loses no submission it accepted.

The server runs as a user runs it (``python -m cheems.cli annotate serve``, a real uvicorn on
loopback), on SQLite and on a throwaway PostgreSQL cluster. Several annotators submit from their
own threads over HTTP; once enough submissions were accepted the server is killed with ``kill -9``
in the middle of the load, restarted on the same database, and the annotators carry on until
nothing is left. Then ``cheems annotate export --raw`` must hold every submission answered 201,
each once, every task annotated by exactly ``--overlap`` people, and no 5xx was ever answered.

This module also holds the load driver that `benchmarks/bench_annotate.py` scales up:
``prompt_rows`` (Chinese prompts of five responses, varied lengths), ``random_submission``
(a valid answer from random scores), ``prepare_database`` (init and import through the CLI, run
in this process: only the server needs a process of its own, to be killed),
``ServeProcess`` (the server subprocess), ``run_annotators`` (threads of annotators, recording
every status and latency in a ``LoadLog``) and ``load_problems`` (the invariants, as messages).
"""

from __future__ import annotations

import collections
import itertools
import json
import random
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator

import httpx
import pytest

from tests import postgres_cluster
from tests.conftest import HANG_TIMEOUT_S, run_cli_in
from tests.postgres_cluster import create_database, free_port

postgres_url = postgres_cluster.postgres_url  # the session fixture, found by pytest under this name
PASSWORD = "正确的马-电池-订书钉"
LETTERS = ("A", "B", "C")
PAIR_KEYS = ("AB", "AC", "BC")
READY_TIMEOUT_S = HANG_TIMEOUT_S  # the server answers in seconds; this only catches one that never will

# --------------------------------------------------------------------------------------------- prompts

SUBJECTS = [("数学", "一元二次方程的求根公式"), ("代码", "用 Python 实现快速排序"), ("知识", "长城的修建历史"),
            ("创作", "一首关于秋天的七言绝句"), ("安全", "如何识别网络钓鱼邮件"), ("理解", "《背影》中父亲的形象"),
            ("推理", "三个开关对应三盏灯的谜题"), ("复杂指令", "用三句话、每句不超过十五字介绍杭州")]
SENTENCES = ["首先，我们需要明确问题的条件。", "其次，逐步推导可以得到中间结论。", "这一点常常被忽略，但非常关键。",
             "举个例子会更清楚：假设数值为 3 和 5。", "综上所述，答案是确定的。", "需要注意边界情况，比如空输入。",
             "历史上对此有不同的说法，这里取主流观点。", "如果还有疑问，可以参考教材第二章。"]
CODE = "```python\ndef quick_sort(xs):\n    if len(xs) <= 1:\n        return xs\n    p = xs[0]\n" \
       "    return quick_sort([x for x in xs[1:] if x < p]) + [p] + quick_sort([x for x in xs[1:] if x >= p])\n```"


def response_text(rng: random.Random, subject: str, index: int) -> str:
    """A Chinese answer of 1 to 40 sentences (about 15 to 700 characters), sometimes with a code block."""
    body = "".join(rng.choice(SENTENCES) for _ in range(rng.choice([1, 2, 4, 8, 15, 40])))
    code = f"\n\n{CODE}\n" if rng.random() < 0.2 else ""
    return f"（回答{index + 1}）关于{subject}：{body}{code}"


def prompt_rows(n_prompts: int, seed: int = 0) -> list[dict]:
    """``n_prompts`` Cheems prompt rows of five distinct responses each; every fifth prompt is a chat."""
    rng = random.Random(seed)
    rows = []
    for i in range(n_prompts):
        category, subject = SUBJECTS[i % len(SUBJECTS)]
        question = f"请详细讲讲{subject}（第{i + 1}题）。"
        prompt: str | list = question
        if i % 5 == 4:
            prompt = [{"role": "user", "content": f"你好，我想了解{subject}。"},
                      {"role": "assistant", "content": "好的，请问你想了解哪方面？"},
                      {"role": "user", "content": question}]
        responses = [{"id": f"r{k + 1}", "content": response_text(rng, subject, k), "model": f"model-{k % 3}"}
                     for k in range(5)]
        rows.append({"id": f"p{i + 1:04d}", "prompt": prompt, "responses": responses,
                     "category": [category, "综合"], "subset": "annotate-test"})
    return rows


def write_prompts(path: Path, n_prompts: int, seed: int = 0) -> Path:
    """Write ``prompt_rows`` as UTF-8 JSONL to ``path``."""
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in prompt_rows(n_prompts, seed)),
                    encoding="utf-8")
    return path


# ----------------------------------------------------------------------------------------- submissions


def submission_for(keys: dict[str, tuple[int, int]], rng: random.Random | None = None,
                   contents: dict[str, str] | None = None) -> dict:
    """The submission for ``keys`` {letter: (score, tie-break)}: higher key ranks above, equal keys are "=".

    Pair labels are given for every tied score (required) and, with ``rng``, for half the others
    (optional, consistent); with ``contents`` {letter: text}, sometimes one problem span and a note.
    """
    pairs = {}
    for a, b in PAIR_KEYS:
        if keys[a][0] == keys[b][0] or (rng is not None and rng.random() < 0.5):
            pairs[a + b] = "g" if keys[a] > keys[b] else "b" if keys[a] < keys[b] else "s"
    groups = [sorted(g) for _, g in itertools.groupby(sorted(LETTERS, key=lambda x: keys[x], reverse=True),
                                                      key=lambda x: keys[x])]
    body = {"scores": {x: keys[x][0] for x in LETTERS}, "pairs": pairs,
            "ranking": ">".join("=".join(g) for g in groups), "spans": [], "note": ""}
    if contents and rng is not None and rng.random() < 0.3:
        key = rng.choice(LETTERS)
        start = rng.randrange(len(contents[key]))
        body["spans"] = [{"key": key, "start": start, "end": rng.randint(start + 1, len(contents[key])),
                          "note": "这里的说法不准确"}]
        body["note"] = "整体还行，个别地方有错。"
    return body


def random_submission(rng: random.Random, contents: dict[str, str] | None = None) -> dict:
    """A valid submission from random scores 0-5; ties are broken (g/b) or kept (s) at random."""
    return submission_for({x: (rng.randint(0, 5), rng.randint(0, 1)) for x in LETTERS}, rng, contents)


# --------------------------------------------------------------------------------------------- the CLI


def annotate_cli(*args: str | Path, stdin: str | None = None):
    """Run ``cheems annotate ARGS`` (in this process); fail with its output when it exits non-zero."""
    done = run_cli_in(None, "annotate", *args, input=stdin)
    if done.returncode != 0:
        raise AssertionError(f"cheems annotate {' '.join(map(str, args))} exited {done.returncode}:\n"
                             f"{done.stdout}\n{done.stderr}")
    return done


def prepare_database(url: str, prompts: Path, annotators: list[str], overlap: int = 2) -> None:
    """``init``, then an ``admin`` and the annotators, all with password PASSWORD (through ``auth.add_user``,
    several at a time: each argon2 hash takes a while), then ``import`` the prompts."""
    from cheems.annotate import auth, db

    annotate_cli("init", "--db", url)
    engine = db.make_engine(url)
    sessions = db.session_factory(engine)

    def add(name: str) -> None:
        with sessions() as session:
            auth.add_user(session, name, "admin" if name == "admin" else "annotator", PASSWORD)

    try:
        with ThreadPoolExecutor(4) as pool:
            list(pool.map(add, ["admin", *annotators]))
    finally:
        engine.dispose()
    annotate_cli("import", prompts, "--overlap", overlap, "--db", url)


def stored_annotations(url: str, folder: Path) -> list[dict]:
    """Every stored annotation, as ``cheems annotate export --raw`` writes it."""
    raw = folder / "raw.jsonl"
    annotate_cli("export", "-o", folder / "bench.jsonl", "--raw", raw, "--db", url)
    return [json.loads(line) for line in raw.read_text(encoding="utf-8").splitlines() if line.strip()]


# ------------------------------------------------------------------------------------------ the server


class ServeProcess:
    """``cheems annotate serve`` on 127.0.0.1 and a free port, in a subprocess; output to ``log``."""

    def __init__(self, url: str, log: Path, *extra: str):
        self.url, self.log, self.extra = url, log, extra
        self.base_url = ""
        self.proc: subprocess.Popen | None = None

    def start(self) -> "ServeProcess":
        """Start (or restart, on a new port) and wait until it answers."""
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        with open(self.log, "a", encoding="utf-8") as out:
            self.proc = subprocess.Popen([sys.executable, "-m", "cheems.cli", "annotate", "serve", "--db", self.url,
                                          "--host", "127.0.0.1", "--port", str(self.port), *self.extra],
                                         stdout=out, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + READY_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"serve exited {self.proc.returncode}:\n{self.log.read_text()[-3000:]}")
            try:
                if httpx.get(self.base_url + "/api/guidelines", timeout=2).status_code == 200:
                    return self
            except httpx.TransportError:
                pass
            time.sleep(0.1)
        self.kill()
        raise AssertionError(f"serve did not answer within {READY_TIMEOUT_S} s:\n{self.log.read_text()[-3000:]}")

    def kill(self) -> None:
        """``kill -9``: no shutdown handler runs."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.kill()

    def __enter__(self) -> "ServeProcess":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


# ---------------------------------------------------------------------------------------- the annotators


@dataclass
class LoadLog:
    """What the annotators saw, shared by their threads (append under ``lock``)."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    started: float = 0.0  # perf_counter() when the annotators were released together
    accepted: list[tuple[int, int, str]] = field(default_factory=list)  # (annotation_id, task_id, user)
    handed: dict[str, list[int]] = field(default_factory=lambda: collections.defaultdict(list))  # user -> task ids
    statuses: collections.Counter = field(default_factory=collections.Counter)  # "submit 201", "next 204", ...
    latencies: dict[str, list[float]] = field(default_factory=lambda: collections.defaultdict(list))  # seconds
    in_flight: list[tuple[str, int]] = field(default_factory=list)  # (user, task) of submits cut off by a kill
    problems: list[str] = field(default_factory=list)

    def note(self, what: str, status: int, seconds: float) -> None:
        with self.lock:
            self.statuses[f"{what} {status}"] += 1
            self.latencies[what].append(seconds)


class Annotator:
    """One person at the JSON API, over their own HTTP client (their own cookie)."""

    def __init__(self, client: httpx.Client, name: str, password: str = PASSWORD):
        self.client, self.name, self.password = client, name, password
        self.csrf = ""

    def login(self) -> None:
        reply = self.client.post("/api/login", json={"username": self.name, "password": self.password})
        assert reply.status_code == 200, f"login of {self.name}: {reply.status_code} {reply.text}"
        self.csrf = reply.json()["csrf_token"]

    def post(self, path: str, body: dict) -> httpx.Response:
        return self.client.post(path, json=body, headers={"X-CSRF-Token": self.csrf})

    def next_task(self) -> httpx.Response:
        return self.client.get("/api/tasks/next")

    def submit(self, task_id: int, body: dict) -> httpx.Response:
        return self.post(f"/api/tasks/{task_id}/submit", body)


def contents_of(task: dict) -> dict[str, str]:
    return {r["key"]: r["content"] for r in task["responses"]}


def timed(log: LoadLog, what: str, call: Callable[[], httpx.Response]) -> httpx.Response:
    t = time.perf_counter()
    reply = call()
    log.note(what, reply.status_code, time.perf_counter() - t)
    if reply.status_code >= 500:
        with log.lock:
            log.problems.append(f"{what} answered {reply.status_code}: {reply.text[:300]}")
    return reply


def annotate_until_done(annotator: Annotator, rng: random.Random, log: LoadLog, retries: int = 3) -> None:
    """next/submit until 204 or until the server goes away (the submission in flight is noted). A 5xx,
    noted as a problem, is retried as a person would, up to ``retries`` times in a row."""
    failures = 0
    while failures <= retries:
        reply = timed(log, "next", annotator.next_task)
        if reply.status_code >= 500:
            failures += 1
            time.sleep(0.2)
            continue
        if reply.status_code != 200:
            if reply.status_code != 204:
                with log.lock:
                    log.problems.append(f"{annotator.name}: next answered {reply.status_code}: {reply.text[:300]}")
            return
        task = reply.json()
        with log.lock:
            log.handed[annotator.name].append(task["task_id"])
        body = random_submission(rng, contents_of(task))
        try:
            reply = timed(log, "submit", lambda: annotator.submit(task["task_id"], body))
        except httpx.TransportError:
            with log.lock:
                log.in_flight.append((annotator.name, task["task_id"]))
            raise
        if reply.status_code == 201:
            failures = 0
            with log.lock:
                log.accepted.append((reply.json()["annotation_id"], task["task_id"], annotator.name))
        elif reply.status_code >= 500:
            failures += 1
            with log.lock:  # stored or not: unknown, as for a submission cut off by a kill
                log.in_flight.append((annotator.name, task["task_id"]))
        else:
            with log.lock:
                log.problems.append(f"{annotator.name}: submit of task {task['task_id']} answered "
                                    f"{reply.status_code}: {reply.text[:300]}")
            return


def run_annotators(base_url: str, names: list[str], log: LoadLog, seed: int = 0) -> Iterator[threading.Thread]:
    """Start one thread per annotator, all released at once once logged in; yields the started threads."""
    barrier = threading.Barrier(len(names), action=lambda: setattr(log, "started", time.perf_counter()))

    def work(name: str, rng: random.Random) -> None:
        with httpx.Client(base_url=base_url, timeout=60) as client:
            annotator = Annotator(client, name)
            try:
                annotator.login()
                barrier.wait(timeout=60)
                annotate_until_done(annotator, rng, log)
            except httpx.TransportError:
                barrier.abort()  # the server was killed; what was in flight is in log.in_flight
            except threading.BrokenBarrierError:
                pass  # another annotator could not log in
            except AssertionError as err:
                barrier.abort()
                with log.lock:
                    log.problems.append(str(err))

    for i, name in enumerate(names):
        thread = threading.Thread(target=work, args=(name, random.Random(seed * 1000 + i)), daemon=True)
        thread.start()
        yield thread


# ---------------------------------------------------------------------------------------------- checks


def load_problems(log: LoadLog, stored: list[dict], overlap: int, n_tasks: int | None = None) -> list[str]:
    """Every broken invariant as a message: 5xx answers, accepted submissions missing or stored twice,
    a task handed twice to one person or to more than ``overlap`` people; with ``n_tasks``, a task
    not annotated by exactly ``overlap`` people (the load ran to the end)."""
    problems = list(log.problems)
    first = [r for r in stored if r["phase"] == "first"]
    ids = collections.Counter(r["annotation_id"] for r in first)
    problems += [f"annotation {i} stored {n} times" for i, n in ids.items() if n > 1]
    problems += [f"accepted annotation {a} (task {t}, {u}) is not stored" for a, t, u in log.accepted if a not in ids]
    by_id = {r["annotation_id"]: r for r in first}
    problems += [f"accepted annotation {a} is stored for task {by_id[a]['task_id']} / {by_id[a]['annotator']}, "
                 f"not task {t} / {u}" for a, t, u in log.accepted
                 if a in by_id and (by_id[a]["task_id"], by_id[a]["annotator"]) != (t, u)]
    pairs = collections.Counter((r["task_id"], r["annotator"]) for r in first)
    problems += [f"task {t} stored {n} times for {u}" for (t, u), n in pairs.items() if n > 1]
    for user, tasks in log.handed.items():
        again = [t for t, n in collections.Counter(tasks).items() if n > 1]
        problems += [f"task {t} handed to {user} again after a submission" for t in again
                     if (user, t) not in log.in_flight]
    people = collections.defaultdict(set)
    for user, tasks in log.handed.items():
        for t in tasks:
            people[t].add(user)
    for (t, u) in pairs:
        people[t].add(u)
    problems += [f"task {t} handed to {len(p)} people: {sorted(p)}" for t, p in people.items() if len(p) > overlap]
    if n_tasks is not None:
        per_task = collections.Counter(t for t, _ in pairs)
        problems += [f"task {t} annotated by {n} people, not {overlap}" for t, n in per_task.items() if n != overlap]
        if len(per_task) != n_tasks:
            problems.append(f"{len(per_task)} tasks annotated, not {n_tasks}")
    return problems


# ----------------------------------------------------------------------------------------------- tests


@pytest.fixture(params=["sqlite", "postgres"])
def database_url(request, tmp_path: Path) -> str:
    """A fresh, empty database: a SQLite file, or a database in the throwaway PostgreSQL cluster."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'annotations.db'}"
    return create_database(request.getfixturevalue("postgres_url"), "annotate")


def test_sigkill_mid_load_loses_no_accepted_submission(database_url: str, tmp_path: Path):
    names = [f"标注员{i}" for i in range(6)]
    n_prompts, overlap = 16, 2  # 80 triple tasks, 160 submissions
    prepare_database(database_url, write_prompts(tmp_path / "prompts.jsonl", n_prompts), names, overlap)
    log = LoadLog()
    server = ServeProcess(database_url, tmp_path / "serve.log").start()
    try:
        threads = list(run_annotators(server.base_url, names, log, seed=1))
        deadline = time.monotonic() + HANG_TIMEOUT_S
        while len(log.accepted) < 40 and time.monotonic() < deadline and any(t.is_alive() for t in threads):
            time.sleep(0.005)
        assert len(log.accepted) >= 40, f"too few submissions before the kill: {log.statuses}"
        server.kill()
        for thread in threads:
            thread.join(timeout=HANG_TIMEOUT_S)
        accepted_before_kill = len(log.accepted)
        assert accepted_before_kill < n_prompts * 5 * overlap, "the load ended before the kill"

        server.start()  # the same database, a fresh process
        for thread in list(run_annotators(server.base_url, names, log, seed=2)):
            thread.join(timeout=HANG_TIMEOUT_S)
    finally:
        server.stop()
    stored = stored_annotations(database_url, tmp_path)
    problems = load_problems(log, stored, overlap, n_tasks=n_prompts * 5)
    assert not problems, "\n".join(problems[:20])
    assert len([r for r in stored if r["phase"] == "first"]) == n_prompts * 5 * overlap
    assert log.statuses["next 204"] == len(names), log.statuses
