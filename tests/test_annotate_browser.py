"""The annotation web app in a real browser (Debian's chromium driven by Playwright) against the real
server started with the CLI, as a team would use it:

annotator 1 scores three responses with the keyboard (a tie settled by a pair label), is told live
when the ranking contradicts the scores, marks a span after an emoji (code points, not UTF-16 units)
and submits with Ctrl+Enter; annotator 2 disagrees with the mouse; both see the alignment view and
settle; a reviewer and an admin accept at the two review stages; the admin opens the dashboard;
`cheems annotate export` and `cheems eval` run on the result. One response carries XSS payloads
that must stay inert on every page. Screenshots go to $CHEEMS_TEST_ARTIFACTS (or tmp_path); with
CHEEMS_UPDATE_SCREENSHOTS=1 the annotator page is also saved as docs/images/annotate.png.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from tests.browser import CHROMIUM, require_browser
from tests.conftest import HANG_TIMEOUT_S, REPO_ROOT, CliRun, run_cli_in, write_jsonl_rows

LAUNCH_ARGS = ["--no-sandbox", "--headless=new"]
PASSWORDS = {"ann1": "pass-ann1-x", "ann2": "pass-ann2-y", "rev1": "pass-rev1-z", "boss": "pass-boss-w"}
ROLES = {"ann1": "annotator", "ann2": "annotator", "rev1": "reviewer", "boss": "admin"}

XSS = ("北京很大。<img src=x onerror=\"window.__pwned='img'\">"
       "<script>window.__pwned='script'</script>"
       "[点我](javascript:window.__pwned='link') <svg onload=\"window.__pwned='svg'\"></svg>"
       "<a href=\"javascript:window.__pwned='a'\">链接</a>")
SPAN_TEXT = "长城全长约十万公里"
RESPONSES = {
    "r1": "北京是中华人民共和国的首都，位于华北平原北部，有三千多年建城史。\n\n"
          "```python\nprint('你好，北京')  # 代码高亮\n```",
    "r2": f"北京是中国的首都。😀这句话里有错误：{SPAN_TEXT}。",
    "r3": XSS,
}
PROMPT = "请简单介绍北京。<script>window.__pwned='prompt'</script>"
# annotator 1: r1 > r2 > r3 with r2 and r3 tied on score; annotator 2 first disagrees everywhere
FIRST = {"r1": 5, "r2": 4, "r3": 4}
SECOND = {"r1": 3, "r2": 3, "r3": 5}

NO_XSS_JS = """() => ({
  pwned: window.__pwned === undefined ? null : String(window.__pwned),
  handlers: document.querySelectorAll('[onerror],[onload],[onclick],[onmouseover]').length,
  scripts: [...document.scripts].filter((s) => !s.src.endsWith('/static/app.js')
                                          && !s.src.endsWith('/static/dashboard.js')).length,
  jsLinks: [...document.querySelectorAll('a[href]')]
    .filter((a) => /^\\s*javascript:/i.test(a.getAttribute('href'))).length,
  svgs: document.querySelectorAll('.md svg, .md img').length,
})"""

SELECT_JS = """([id, target]) => {
  const pre = document.getElementById(id);
  const i = pre.textContent.indexOf(target);
  const walker = document.createTreeWalker(pre, NodeFilter.SHOW_TEXT);
  let pos = 0, start = null, end = null;
  while (walker.nextNode()) {
    const n = walker.currentNode;
    if (!start && i < pos + n.data.length) start = [n, i - pos];
    if (!end && i + target.length <= pos + n.data.length) end = [n, i + target.length - pos];
    pos += n.data.length;
  }
  const range = document.createRange();
  range.setStart(...start);
  range.setEnd(...end);
  const sel = document.getSelection();
  sel.removeAllRanges();
  sel.addRange(range);
  return i;
}"""


def cli(*args, stdin: str | None = None) -> CliRun:
    """``cheems ARGS`` run in this process; only the server runs in a process of its own."""
    return run_cli_in(REPO_ROOT, *args, input=stdin)


def ok(r: CliRun) -> CliRun:
    assert r.returncode == 0, f"exit {r.returncode}\nstdout: {r.stdout}\nstderr: {r.stderr}"
    return r


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_until_up(base: str, proc: subprocess.Popen, log: Path, timeout: float = HANG_TIMEOUT_S) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"the server exited with {proc.returncode}:\n{log.read_text()}")
        try:
            with urllib.request.urlopen(base + "/api/guidelines", timeout=2) as r:
                if r.status == 200:
                    return
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            time.sleep(0.2)
    raise AssertionError(f"the server did not answer within {timeout}s:\n{log.read_text()}")


@contextlib.contextmanager
def serving(tmp_path: Path, rows: list[dict], *flags: str):
    """A database with the four accounts and ``rows`` imported, served by ``cheems annotate serve FLAGS``
    on a free loopback port; yields (base URL, database URL, the server's log file)."""
    db = f"sqlite:///{tmp_path / 'a.db'}"
    ok(cli("annotate", "init", "--db", db))
    for name, role in ROLES.items():
        ok(cli("annotate", "add-user", name, "--role", role, "--password-stdin", "--db", db,
               stdin=PASSWORDS[name] + "\n"))
    ok(cli("annotate", "import", write_jsonl_rows(tmp_path / "prompts.jsonl", rows), "--overlap", "2", "--db", db))
    port = free_port()
    log = tmp_path / "server.log"
    with open(log, "w") as out:
        proc = subprocess.Popen([sys.executable, "-m", "cheems.cli", "annotate", "serve", "--db", db,
                                 "--port", str(port), *flags], stdout=out, stderr=subprocess.STDOUT, cwd=REPO_ROOT)
    base = f"http://127.0.0.1:{port}"
    try:
        wait_until_up(base, proc, log)
        yield base, db, log
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


BEIJING = {"id": "beijing", "prompt": PROMPT, "category": ["知识", "地理"],
           "responses": [{"id": rid, "content": text} for rid, text in RESPONSES.items()]}


@pytest.fixture
def server(tmp_path):
    """A database with four accounts and one imported prompt, served on a free loopback port; the
    pair aligns from its first shared task."""
    require_browser()
    with serving(tmp_path, [BEIJING], "--review-rate", "1", "--review-stages", "2",
                 "--alignment-min-shared", "1") as (base, db, _log):
        yield base, db, tmp_path


@pytest.fixture
def artifacts(tmp_path) -> Path:
    folder = Path(os.environ.get("CHEEMS_TEST_ARTIFACTS") or tmp_path / "artifacts")
    folder.mkdir(parents=True, exist_ok=True)
    return folder


@pytest.fixture(scope="module")
def browser():
    """One Chromium for the module: each page opens in a fresh context (its own cookies)."""
    require_browser()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=LAUNCH_ARGS, headless=True)
        try:
            yield b
        finally:
            b.close()


def open_page(browser, base: str, name: str):
    """A fresh browser context (own cookies) logged in as ``name``."""
    page = browser.new_context(viewport={"width": 1500, "height": 1000}, locale="zh-CN").new_page()
    page.set_default_timeout(15_000)
    page.goto(base + "/")
    page.fill("#username", name)
    page.fill("#password", PASSWORDS[name])
    page.click("#login")
    page.wait_for_selector("#whoami:has-text('%s')" % name)
    return page


def letters(page) -> dict[str, str]:
    """Which letter this annotator sees each response under (the server shuffles per annotator)."""
    page.wait_for_selector("#task-view:not([hidden])")
    shown = {k: page.text_content(f"#raw-{k}") for k in "ABC"}
    by_text = {text: rid for rid, text in RESPONSES.items()}
    return {by_text[text]: k for k, text in shown.items()}


def pair_of(L: dict[str, str], better: str, worse: str) -> tuple[str, str]:
    """(pair key, label) saying ``better`` beats ``worse`` in this annotator's letters."""
    x, y = sorted((L[better], L[worse]))
    return x + y, "g" if x == L[better] else "b"


def assert_inert(page) -> None:
    found = page.evaluate(NO_XSS_JS)
    assert found == {"pwned": None, "handlers": 0, "scripts": 0, "jsLinks": 0, "svgs": 0}, found


def ranking_message(page, text: str) -> tuple[str, str]:
    page.fill("#ranking", text)
    return page.get_attribute("#ranking-check", "class"), page.text_content("#ranking-check")


def annotate_first(page, artifacts: Path) -> dict:
    """Annotator 1: keyboard scores, a tie label, live ranking checks, a span; returns the posted body."""
    L = letters(page)
    assert_inert(page)
    xss = L["r3"]
    assert "<script>window.__pwned='script'</script>" in page.inner_text(f"#html-{xss}")  # shown as text
    assert "<script>" in page.inner_text("#prompt")
    assert page.locator(f"#html-{L['r1']} pre.highlight span.nb").count() >= 1  # print highlighted
    assert "Ctrl" in page.inner_text("#shortcuts")

    page.click("#prompt")  # keyboard focus on the page, not in a field
    page.keyboard.press("Shift+Digit1")
    assert "active" in page.get_attribute("#response-A", "class")
    for k in "ABC":  # 0-5 scores the active response and moves to the next
        rid = next(r for r, letter in L.items() if letter == k)
        page.keyboard.press(str(FIRST[rid]))
    for rid, k in L.items():
        assert page.is_checked(f"#score-{k}-{FIRST[rid]}")
    tie, label = pair_of(L, "r2", "r3")
    for pk in ("AB", "AC", "BC"):
        assert page.is_visible(f"#pair-{pk}") == (pk == tie), pk

    cls, msg = ranking_message(page, f"{L['r3']}>{L['r2']}>{L['r1']}")
    assert "bad" in cls and "分数" in msg and "应为" in msg, msg
    cls, msg = ranking_message(page, f"{L['r1']}>{L['r2']}>{L['r3']}")
    assert "bad" in cls and "两两比较" in msg, msg  # the tie is not labelled yet
    page.click(f"#pair-{tie}-{label}")
    cls, msg = ranking_message(page, f"{L['r1']}>{L['r2']}={L['r3']}")
    assert "bad" in cls and "并列" in msg, msg
    cls, msg = ranking_message(page, f"{L['r1']}＞{L['r2']} > {L['r3']}")  # full-width > and spaces accepted
    assert "ok" in cls, msg
    cls, msg = ranking_message(page, f"{L['r1']}>{L['r2']}>{L['r1']}")
    assert "bad" in cls and "两次" in msg, msg
    cls, msg = ranking_message(page, f"{L['r1']}>{L['r2']}>{L['r3']}")
    assert "ok" in cls and "一致" in msg, msg

    raw = f"#raw-{L['r2']}"
    page.click(f"#view-raw-{L['r2']}")
    utf16 = page.evaluate(SELECT_JS, [raw[1:], SPAN_TEXT])
    start = RESPONSES["r2"].index(SPAN_TEXT)
    assert utf16 == start + 1  # the emoji before the span is two UTF-16 units, one code point
    page.wait_for_selector(f"#span-selection:has-text('{SPAN_TEXT}')")
    page.fill("#span-note", "事实错误：长城约两万公里")
    page.click("#add-span")
    assert page.locator("#span-list li").count() == 1
    assert page.text_content(f"{raw} mark") == SPAN_TEXT
    page.fill("#note", "第三个回答含有未渲染的 HTML")
    page.screenshot(path=str(artifacts / "annotate.png"), full_page=True)
    if os.environ.get("CHEEMS_UPDATE_SCREENSHOTS") == "1":
        (REPO_ROOT / "docs" / "images").mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(REPO_ROOT / "docs" / "images" / "annotate.png"), full_page=True)

    page.click("#prompt")
    with page.expect_request(lambda r: r.method == "POST" and r.url.endswith("/submit")) as sent:
        page.keyboard.press("Control+Enter")
    request = sent.value
    assert request.headers.get("x-csrf-token")
    body = request.post_data_json
    assert body["spans"] == [{"key": L["r2"], "start": start, "end": start + len(SPAN_TEXT),
                              "note": "事实错误：长城约两万公里"}]
    assert body["pairs"] == {tie: label}
    assert body["ranking"] == f"{L['r1']}>{L['r2']}>{L['r3']}"
    page.wait_for_selector("#empty-view:not([hidden])")
    assert "已提交" in page.text_content("#message")
    assert "没有待标注的任务" in page.text_content("#empty-text")
    return body


def answer(page, scores: dict[str, int], ties: dict[tuple[str, str], str]) -> None:
    """Fill the form with the mouse: ``scores`` by response id, ``ties`` {(rid, rid): ">" or "="} for the
    tied pairs, then the ranking from the "generate" button."""
    L = letters(page)
    for rid, score in scores.items():
        page.check(f"#score-{L[rid]}-{score}")
    for (better, worse), rel in ties.items():
        pk, label = pair_of(L, better, worse)
        page.click(f"#pair-{pk}-{'s' if rel == '=' else label}")
    page.click("#ranking-fill")
    assert "ok" in page.get_attribute("#ranking-check", "class"), page.text_content("#ranking-check")


def annotate_second(page) -> None:
    """Annotator 2 disagrees: scores by mouse, r1 and r2 tied and judged equal."""
    L = letters(page)
    assert_inert(page)
    answer(page, SECOND, {("r1", "r2"): "="})
    x, y = sorted((L["r1"], L["r2"]))
    assert page.input_value("#ranking") == f"{L['r3']}>{x}={y}"
    page.click("#submit")
    page.wait_for_selector("#empty-view:not([hidden])")


def align_second(page) -> None:
    """Annotator 2 opens the alignment view, sees the disagreement and adopts annotator 1's order."""
    page.click("#nav-alignment")
    page.wait_for_selector("#align-panel:not([hidden])")
    L = letters(page)
    assert_inert(page)
    assert page.text_content("#align-agreement") == "0%"
    assert page.locator("#align-table tr.diff").count() >= 3
    assert page.is_visible("#escalate")
    assert page.is_checked(f"#score-{L['r3']}-5")  # the form starts from my own answer
    assert "事实错误" in page.inner_text("#align-theirs-spans")
    answer(page, FIRST, {("r2", "r3"): ">"})
    assert page.input_value("#ranking") == f"{L['r1']}>{L['r2']}>{L['r3']}"
    page.click("#submit")
    page.wait_for_selector("#empty-view:not([hidden])")
    assert "等待" in page.text_content("#message")


def align_first(page) -> None:
    """Annotator 1 keeps their answer (prefilled) and the task settles."""
    page.click("#nav-alignment")
    page.wait_for_selector("#align-panel:not([hidden])")
    L = letters(page)
    for rid, score in FIRST.items():
        assert page.is_checked(f"#score-{L[rid]}-{score}")
    assert page.locator("#span-list li").count() == 1
    assert "ok" in page.get_attribute("#ranking-check", "class"), page.text_content("#ranking-check")
    page.click("#submit")
    page.wait_for_selector("#empty-view:not([hidden])")
    assert "一致" in page.text_content("#message")


def accept_all_reviews(page) -> list[int]:
    """Accept every review item handed to this page's user; per item, the spans marked in its raw views."""
    marks = []
    page.wait_for_selector("#nav-review.current")
    for _ in range(10):
        page.wait_for_selector("#review-view:not([hidden]), #empty-view:not([hidden])")
        if page.is_visible("#empty-view"):
            return marks
        assert_inert(page)
        assert page.locator("#review-annotation tr").count() >= 5
        marks.append(page.locator("#review-responses pre.raw mark").count())
        meta = page.text_content("#review-meta")
        page.click("#review-accept")
        page.wait_for_function("m => !document.getElementById('review-view').offsetParent"
                               " || document.getElementById('review-meta').textContent !== m", arg=meta)
    raise AssertionError("the review queue did not end")


def review(browser, base: str, artifacts: Path) -> None:
    page = open_page(browser, base, "rev1")
    page.wait_for_selector("#review-view:not([hidden])")
    page.click("#review-reject")  # no note: refused in the page, nothing sent
    assert "理由" in page.text_content("#message")
    assert page.is_visible("#review-view")
    assert sorted(accept_all_reviews(page)) == [0, 1]  # both settled answers at stage 1; one marked a span
    boss = open_page(browser, base, "boss")  # an admin lands on the review queue
    assert len(accept_all_reviews(boss)) == 2  # stage 2, by someone who did not review stage 1
    boss.goto(base + "/dashboard")
    boss.wait_for_selector("#stats-view:not([hidden])")
    assert "ann1" in boss.inner_text("#stats-by_annotator")
    assert boss.locator("#stats table").count() >= 5
    assert_inert(boss)
    boss.screenshot(path=str(artifacts / "dashboard.png"), full_page=True)


def test_annotation_flow_in_browser(server, browser, artifacts):
    base, db, tmp = server
    first = open_page(browser, base, "ann1")
    annotate_first(first, artifacts)
    second = open_page(browser, base, "ann2")
    annotate_second(second)
    align_second(second)
    align_first(first)
    for page in (first, second):
        assert_inert(page)
    review(browser, base, artifacts)

    bench, raw = tmp / "bench.jsonl", tmp / "raw.jsonl"
    ok(cli("annotate", "export", "-o", bench, "--raw", raw, "--db", db))
    rows = [json.loads(line) for line in bench.read_text(encoding="utf-8").splitlines()]
    assert len(rows) == 1 and rows[0]["id"] == "beijing"
    rank = rows[0]["rank"]
    assert rank["r1"] < rank["r2"] < rank["r3"], rank
    raw_text = raw.read_text(encoding="utf-8")
    assert SPAN_TEXT in raw_text
    ok(cli("eval", bench, "--scorer", "length"))


def test_sanitised_html_is_inert_without_the_page_csp(browser):
    """The renderer alone (no Content-Security-Policy to fall back on) keeps every payload inert."""
    from cheems.annotate.render import render_markdown

    page = browser.new_page()
    page.set_content("<div class='md'>" + render_markdown(PROMPT + "\n\n" + XSS) + "</div>")
    page.wait_for_timeout(300)  # an <img onerror> would have fired by now
    assert_inert(page)
    assert "window.__pwned='script'" in page.inner_text(".md")
    # the same markup without the sanitiser does run: the check above can fail
    page.set_content("<img src=x onerror=\"window.__pwned='img'\">")
    page.wait_for_function("() => window.__pwned === 'img'")


def test_escalation_in_browser(server, browser):
    """Annotators who cannot agree escalate from the alignment view; the admin decides in the page."""
    base, db, tmp = server
    first, second = open_page(browser, base, "ann1"), open_page(browser, base, "ann2")
    for page, scores, ties in ((first, FIRST, {("r2", "r3"): ">"}), (second, SECOND, {("r1", "r2"): "="})):
        answer(page, scores, ties)
        page.click("#submit")
        page.wait_for_selector("#empty-view:not([hidden])")
    first.click("#nav-alignment")
    first.wait_for_selector("#align-panel:not([hidden])")
    first.click("#escalate")
    first.wait_for_selector("#empty-view:not([hidden])")
    assert "上级" in first.text_content("#message")
    second.click("#nav-alignment")
    second.wait_for_selector("#empty-text:has-text('没有需要对齐的任务')")

    boss = open_page(browser, base, "boss")
    boss.wait_for_selector("#empty-view:not([hidden])")
    boss.click("#nav-escalations")
    boss.wait_for_selector("#escalation-panel:not([hidden])")
    assert_inert(boss)
    answers = boss.inner_text("#escalation-answers")
    assert "ann1" in answers and "ann2" in answers
    answer(boss, FIRST, {("r2", "r3"): ">"})
    boss.click("#submit")
    boss.wait_for_selector("#empty-text:has-text('没有待仲裁的任务')")
    assert "仲裁结果已保存" in boss.text_content("#message")

    bench = tmp / "bench.jsonl"
    ok(cli("annotate", "export", "-o", bench, "--db", db))
    rank = json.loads(bench.read_text(encoding="utf-8"))["rank"]
    assert rank["r1"] < rank["r2"] < rank["r3"], rank


def test_admins_and_reviewers_opening_the_page_claim_nothing(server, browser):
    """The one task (overlap 2) is still there for both annotators after an admin and a reviewer
    opened the page; annotators see their progress, and the waiting alignment as a count."""
    base, db, _tmp = server
    for name in ("boss", "rev1"):
        page = open_page(browser, base, name)
        page.wait_for_selector("#nav-review.current")
        assert page.is_hidden("#nav-task") and page.is_hidden("#progress")
    by_annotator = json.loads(ok(cli("annotate", "status", "--json", "--db", db)).stdout)["by_annotator"]
    assert by_annotator["boss"]["open"] == 0 and by_annotator["rev1"]["open"] == 0
    first, second = open_page(browser, base, "ann1"), open_page(browser, base, "ann2")
    first.wait_for_selector("#progress-left:has-text('1')")
    assert first.text_content("#progress-total") == "0" and first.is_hidden("#alignment-badge")
    for page, scores, ties in ((first, FIRST, {("r2", "r3"): ">"}), (second, SECOND, {("r1", "r2"): "="})):
        answer(page, scores, ties)
        page.click("#submit")
        page.wait_for_selector("#empty-view:not([hidden])")
    second.wait_for_selector("#alignment-badge:not([hidden]):has-text('1')")
    for field, value in (("today", "1"), ("total", "1"), ("left", "0"), ("align", "1")):
        assert second.text_content(f"#progress-{field}") == value, field


def test_the_score_keys_score_the_next_task_after_ctrl_enter_from_the_note(tmp_path, browser):
    second = dict(BEIJING, id="shanghai", prompt="请简单介绍上海。",
                  responses=[{"id": f"s{i}", "content": f"上海介绍{i}。" * i} for i in (1, 2, 3)])
    with serving(tmp_path, [BEIJING, second]) as (base, _db, _log):
        page = open_page(browser, base, "ann1")
        for n in (1, 2):
            page.wait_for_selector("#task-view:not([hidden])")
            meta = page.text_content("#task-meta")
            page.click("#prompt")
            for key in "531":
                page.keyboard.press(key)
            assert [page.is_checked(f"#score-{k}-{v}") for k, v in zip("ABC", (5, 3, 1))] == [True] * 3, n
            assert page.input_value("#note") == ""  # no score key typed into the note
            page.click("#ranking-fill")
            page.click("#note")
            page.keyboard.type(f"第{n}题备注")
            with page.expect_request(lambda r: r.method == "POST" and r.url.endswith("/submit")) as sent:
                page.keyboard.press("Control+Enter")
            assert sent.value.post_data_json["note"] == f"第{n}题备注"
            if n == 1:
                page.wait_for_function("m => document.getElementById('task-meta').textContent !== m", arg=meta)
                assert page.evaluate("document.activeElement.id") == "response-A"
        page.wait_for_selector("#empty-view:not([hidden])")


def test_a_user_of_two_studies_picks_one_on_the_page(server, browser):
    """ann1 annotates in ``default`` and in a second study: the page opens in ``default`` with a
    picker of both; picking the other reloads the page there, with that study's task and its
    dashboard link; rev1 (no role in the other study) has no picker and is refused there."""
    base, db, tmp = server
    ok(cli("annotate", "study", "add", "诗歌", "--db", db))
    ok(cli("annotate", "add-user", "ann1", "--role", "annotator", "--study", "诗歌", "--password-stdin", "--db", db,
           stdin=PASSWORDS["ann1"] + "\n"))
    poem = dict(BEIJING, prompt="请写一首关于长城的诗。")  # the same prompt id in the other study
    ok(cli("annotate", "import", write_jsonl_rows(tmp / "poems.jsonl", [poem]), "--study", "诗歌", "--db", db))
    page = open_page(browser, base, "ann1")
    page.wait_for_selector("#task-view:not([hidden])")
    assert "北京" in page.text_content("#prompt")
    assert page.is_visible("#study") and page.eval_on_selector_all("#study option", "os => os.map(o => o.value)") \
        == ["default", "诗歌"]
    page.select_option("#study", "诗歌")
    page.wait_for_url("**/?study=*")
    page.wait_for_selector("#prompt:has-text('长城的诗')")
    assert page.input_value("#study") == "诗歌"
    assert page.get_attribute("#nav-dashboard", "href").startswith("/dashboard?study=")
    reviewer = open_page(browser, base, "rev1")
    reviewer.wait_for_selector("#nav-review.current")
    assert reviewer.is_hidden("#study")
    refused = reviewer.evaluate("fetch('/api/review/next?study=' + encodeURIComponent('诗歌')).then(r => r.status)")
    assert refused == 403
