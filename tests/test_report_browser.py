"""The report page in a real browser (Debian's chromium driven by Playwright), made from real results: the
bundled sample annotations ranked and evaluated with the length and random baselines by the CLI, the sample's
annotator bias and a debias stage report from the CLI, hand-written bon / compare / correlate results that
follow the contract, and a training log.

The page must make no request (every URL other than file: and data: is refused and none may be tried, and the
Content-Security-Policy must report no violation), run without script errors, show every span.num as its
data-value written in its data-fmt (formatted here in JavaScript, independently of the page's code), and re-sort
the leaderboard when a header is clicked. A full-page screenshot goes to $CHEEMS_TEST_ARTIFACTS (or tmp_path);
with CHEEMS_UPDATE_SCREENSHOTS=1 it is also saved as docs/images/report.png.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from cheems.report.page import build_report, write_report
from tests.browser import offline_page, require_browser
from tests.conftest import REPO_ROOT, run_cli_in
from tests.test_report_page import bon_result, compare_result, correlate_result, train_log_lines


NUMBERS_JS = """() => {
  function written(v, fmt) {
    if (fmt === 'd') { return String(Math.trunc(v)); }
    if (fmt === 'p') { return v < 0.001 ? '<0.001' : v.toFixed(3); }
    if (fmt.startsWith('pb')) {
      const floor = 1 / (Number(fmt.slice(2)) + 1);
      if (v < floor) { return '< ' + (floor >= 1e-4 ? floor.toFixed(4) : floor.toExponential(3)); }
      return v.toFixed(4);
    }
    if (fmt === 'e3') { return v === 0 ? '0.000e+0' : v.toExponential(3); }
    return v.toFixed(Number(fmt.slice(1)));
  }
  const wrong = [];
  const spans = [...document.querySelectorAll('span.num')];
  for (const s of spans) {
    const v = JSON.parse(s.dataset.value);
    if (typeof v !== 'number' || s.textContent !== written(v, s.dataset.fmt)) {
      wrong.push([s.dataset.src, s.dataset.path, s.dataset.value, s.dataset.fmt, s.textContent]);
    }
  }
  return {count: spans.length, wrong: wrong};
}"""

ROWS_JS = """(col) => {
  const table = document.querySelector('#leaderboard table.sortable');
  return [...table.tBodies[0].rows].map((r) => [r.cells[0].textContent, r.cells[col].textContent]);
}"""


def cli(cwd: Path, *args) -> None:
    done = run_cli_in(cwd, *args)
    assert done.returncode == 0, done.stderr


def real_results(folder: Path) -> list[Path]:
    """The inputs of the page: CLI results on the bundled sample, hand-written ones and a training log."""
    folder.mkdir(parents=True, exist_ok=True)
    cli(folder, "example-data", "-o", "sample")
    annotations = sorted((folder / "sample" / "annotations").glob("*.jsonl"))
    cli(folder, "rank", *annotations, "-o", "bench.jsonl")
    for scorer in ("length", "random"):
        cli(folder, "eval", "bench.jsonl", "--scorer", scorer, "--json", f"{scorer}.json")
    cli(folder, "analyze", "bias", *annotations, "--json", "bias.json")
    cli(folder, "curate", "debias", annotations[0], "-o", "debiased.jsonl", "--seed", "0")
    written = {"bon_length.json": bon_result("length", 0.3), "bon_random.json": bon_result("random", 0.2),
               "compare.json": compare_result("length", "random"), "correlate.json": correlate_result()}
    for name, doc in written.items():
        (folder / name).write_text(json.dumps(doc, ensure_ascii=False), encoding="utf-8")
    (folder / "train_log.jsonl").write_text("\n".join(train_log_lines()) + "\n", encoding="utf-8")
    names = ["length.json", "random.json", "bias.json", "debiased.report.json", *written, "train_log.jsonl"]
    return [folder / n for n in names]


def artifacts(tmp_path: Path) -> Path:
    folder = Path(os.environ.get("CHEEMS_TEST_ARTIFACTS") or tmp_path / "artifacts")
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def as_numbers(rows: list[list[str]]) -> list[float]:
    return [float(value) for _, value in rows]


def test_report_page_in_a_browser(tmp_path):
    require_browser()
    inputs = real_results(tmp_path / "results")
    report = build_report(inputs)
    assert report.lang == "zh"  # the sample's categories are Chinese, so are the page's words
    assert [s.kind for s in report.sources] == ["eval", "eval", "bias", "curate", "bon", "bon", "compare",
                                                "correlate", "train_log"]
    html_path = tmp_path / "report.html"
    write_report(report, html_path, tmp_path / "report.md")

    watch = ("window.__violations = [];"
             "document.addEventListener('securitypolicyviolation',"
             " (e) => window.__violations.push(e.blockedURI + ' ' + e.violatedDirective));")
    with offline_page(html_path, init_script=watch) as (page, tried, errors):
        shot = artifacts(tmp_path) / "report.png"
        page.screenshot(path=str(shot), full_page=True)
        if os.environ.get("CHEEMS_UPDATE_SCREENSHOTS") == "1":
            (REPO_ROOT / "docs" / "images").mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(REPO_ROOT / "docs" / "images" / "report.png"), full_page=True)

        numbers = page.evaluate(NUMBERS_JS)
        assert numbers["count"] > 300 and numbers["wrong"] == [], numbers["wrong"][:5]
        assert page.locator("figure svg").count() == 6
        assert all(box["width"] > 300 for box in (page.locator("figure svg").nth(i).bounding_box()
                                                 for i in range(6)))

        headers = page.locator("#leaderboard table.sortable thead th")
        names = [headers.nth(i).inner_text().strip() for i in range(headers.count())]
        overall = names.index("总分")
        before = page.evaluate(ROWS_JS, overall)
        assert sorted(r[0] for r in before) == ["length", "random"]
        headers.nth(overall).click()
        ascending = page.evaluate(ROWS_JS, overall)
        assert as_numbers(ascending) == sorted(as_numbers(before))
        assert headers.nth(overall).get_attribute("aria-sort") == "ascending"
        headers.nth(overall).click()
        descending = page.evaluate(ROWS_JS, overall)
        assert as_numbers(descending) == sorted(as_numbers(before), reverse=True)
        assert ascending[0][0] != descending[0][0]
        headers.nth(0).click()
        assert [r[0] for r in page.evaluate(ROWS_JS, 0)] == ["length", "random"]
        violations = page.evaluate("window.__violations")
    assert tried == [], f"the page tried to reach {tried}"
    assert violations == [] and errors == [], (violations, errors)
    assert shot.stat().st_size > 50_000
