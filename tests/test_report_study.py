"""`cheems report DIR` on an experiment folder (cheems.report.study): the study section holds the tables of the
paper's Tables 3 / 4 (the paper's figures beside matching datasets of CheemsBench), Figure 6 (accuracy against
training pairs) and Figure 7 (accuracy against model parameters); every number on the page points into the
study's JSON (the same document as DIR/tables/table.json); a bad folder is one error naming it; and the page
works in a real browser (headless Chromium): it loads without errors or requests, its figures are drawn with
a real size, and its table cells hold the numbers.

The experiment folders are written by hand in the layout `cheems experiment run` writes
(`tests.test_experiment_table.write_experiment`).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from cheems.experiments.results import read_experiment
from cheems.experiments.table import study_tables, write_tables
from cheems.records import CheemsInputError
from cheems.report.page import Figure, Num, Table, build_report, render_html, write_report
from tests.browser import offline_page, require_browser
from tests.test_experiment_table import cell_line, figures, write_experiment
from tests.test_report_browser import NUMBERS_JS


def grid_folder(tmp_path: Path, **kwargs) -> Path:
    """Two datasets (one of the paper's), pretrained 0.5B / 1.5B and 0.5B-Instruct, three data sizes, three
    seeds: 54 finished cells."""
    return write_experiment(tmp_path / "exp", ["hh-rlhf-cn", "my-prefs"], models=("0.5B", "1.5B", "0.5B-Instruct"),
                            sizes=(1000, 4000, "all"), seeds=(0, 1, 2), **kwargs)


def study_blocks(report) -> list:
    (section,) = [s for s in report.sections if s.anchor == "study"]
    return section.blocks


def nums(cell) -> list[Num]:
    return [p for p in (cell if isinstance(cell, tuple) else (cell,)) if isinstance(p, Num)]


def value_at(doc, path: tuple):
    for key in path:
        doc = doc[key]
    return doc


def test_the_study_section_holds_the_tables_and_both_figures(tmp_path):
    folder = grid_folder(tmp_path)
    report = build_report([folder], lang="en")
    assert [s.kind for s in report.sources] == ["experiment"] and report.sources[0].label == "exp"
    blocks = study_blocks(report)
    tables = [b for b in blocks if isinstance(b, Table)]
    assert len(tables) == 9  # 3 base models x 3 data sizes
    assert tables[0].caption == "Base model 0.5B (pretrained, 494M), data size 1000 pairs"
    assert tables[0].header == ["Dataset", "Training pairs", "Seeds", "Open Prompt Acc.", "Open Prompt Exact",
                                "Human Instruction Acc.", "Human Instruction Exact", "Overall"]
    assert [row[0] for row in tables[0].rows] == ["hh-rlhf-cn", "hh-rlhf-cn (paper)", "my-prefs"]
    names = [b.name for b in blocks if isinstance(b, Figure)]
    assert sorted(n for n in names if n.startswith("fig6_")) == [
        "fig6_hh-rlhf-cn_0_5B", "fig6_hh-rlhf-cn_0_5B-Instruct", "fig6_hh-rlhf-cn_1_5B", "fig6_my-prefs_0_5B",
        "fig6_my-prefs_0_5B-Instruct", "fig6_my-prefs_1_5B"]
    assert sorted(n for n in names if n.startswith("fig7_")) == [
        "fig7_hh-rlhf-cn_1000", "fig7_hh-rlhf-cn_4000", "fig7_hh-rlhf-cn_all", "fig7_my-prefs_1000",
        "fig7_my-prefs_4000", "fig7_my-prefs_all"]
    fig7 = next(b for b in blocks if isinstance(b, Figure) and b.name == "fig7_hh-rlhf-cn_all")
    assert "Open Prompt (instruct)" in fig7.texts and "Human Instruction (pretrained)" in fig7.texts
    assert "494M" in fig7.texts and "1.54B" in fig7.texts


def test_every_number_points_into_the_tables_json(tmp_path):
    folder = grid_folder(tmp_path)
    report = build_report([folder])
    written = json.loads(write_tables(study_tables(read_experiment(folder)), folder / "tables")[2]
                         .read_text(encoding="utf-8"))
    shown = [n for b in study_blocks(report) if isinstance(b, Table) for row in b.rows for c in row for n in nums(c)]
    # per table two datasets (pairs, seeds, five figures with their half-widths) and the paper's four figures;
    # the pairs of "all" vary by seed: a range of two numbers
    assert len(shown) == 9 * (2 * 12 + 4) + 3 * 2
    for n in shown:
        assert value_at(written, n.path) == n.value, n.path
    first = next(b for b in study_blocks(report) if isinstance(b, Table))
    acc = [figures("hh-rlhf-cn", "0.5B", 1000, s, "open")[0] for s in (0, 1, 2)]
    mean, plus, half = first.rows[0][3]
    assert (mean.value, plus) == (pytest.approx(sum(acc) / 3), " ± ") and half.value > 0
    assert [n.value for c in first.rows[1][3:7] for n in nums(c)] == [0.704, 0.306, 0.646, 0.212]


def test_chinese_labels_give_a_chinese_page(tmp_path):
    report = build_report([grid_folder(tmp_path)])
    assert report.lang == "zh"  # the evaluations' categories are Chinese
    table = next(b for b in study_blocks(report) if isinstance(b, Table))
    assert table.header[3] == "开放提示 准确率" and table.rows[1][0] == "hh-rlhf-cn（论文）"


def test_no_paper_rows_for_other_subsets(tmp_path):
    folder = write_experiment(tmp_path / "exp", ["hh-rlhf-cn", "huozi"], sizes=(1000, 4000), subsets=("dev", "test"))
    report = build_report([folder], lang="en")
    tables = [b for b in study_blocks(report) if isinstance(b, Table)]
    assert tables[0].header[3:] == ["dev Acc.", "dev Exact", "test Acc.", "test Exact", "Overall"]
    assert all("paper" not in row[0] for t in tables for row in t.rows)
    assert not any(isinstance(b, str) and "(paper)" in b for b in study_blocks(report))
    assert [b.name for b in study_blocks(report) if isinstance(b, Figure)] == ["fig6_hh-rlhf-cn_0_5B",
                                                                              "fig6_huozi_0_5B"]


def test_models_without_a_parameter_count_stand_by_name_with_a_note(tmp_path):
    folder = write_experiment(tmp_path / "exp", ["huozi"], models=("1.5B", "tiny", "0.5B"))
    report = build_report([folder], lang="en")
    blocks = study_blocks(report)
    (fig7,) = [b for b in blocks if isinstance(b, Figure) and b.name.startswith("fig7_")]
    assert "base model" in fig7.texts and "base model parameters (log scale)" not in fig7.texts
    assert fig7.texts[-3:] == ["0.5B", "1.5B", "tiny"]  # counted ones by size, then the others by name
    note = blocks[blocks.index(fig7) + 1]
    assert note.startswith("tiny: no parameter count")


def test_the_markdown_version_has_the_plots_as_png(tmp_path):
    folder = write_experiment(tmp_path / "exp", ["hh-rlhf-cn"], models=("0.5B", "1.5B"), sizes=(1000, "all"))
    report = build_report([folder], lang="en")
    written = write_report(report, tmp_path / "page.html", tmp_path / "page.md")
    md = (tmp_path / "page.md").read_text(encoding="utf-8")
    pngs = sorted(p.name for p in written if p.suffix == ".png")
    assert pngs == ["fig6_hh-rlhf-cn_0_5B.png", "fig6_hh-rlhf-cn_1_5B.png", "fig7_hh-rlhf-cn_1000.png",
                    "fig7_hh-rlhf-cn_all.png"]
    assert all(f"(page_files/{name})" in md for name in pngs)
    assert all((tmp_path / "page_files" / name).read_bytes()[:4] == b"\x89PNG" for name in pngs)
    assert "| hh-rlhf-cn (paper) | – | – | 0.704 | 0.306 | 0.646 | 0.212 | – |" in md
    html = (tmp_path / "page.html").read_text(encoding="utf-8")
    assert len(re.findall(r'<figure id="fig-fig[67]_[^"]+"><svg', html)) == 4


def test_a_bad_results_line_is_one_error_naming_it(tmp_path, run_cli):
    folder = write_experiment(tmp_path / "exp", ["huozi", "hh-rlhf-cn"])
    path = folder / "results.jsonl"
    broken = cell_line("zhihu", "0.5B", 1000, 0)
    broken["seed"] = "0"
    with open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps(broken, ensure_ascii=False) + "\n")
    with pytest.raises(CheemsInputError) as caught:
        build_report([folder])
    assert str(caught.value).startswith(f"{path}:3: seed: expected an integer")
    done = run_cli("report", folder, "-o", tmp_path / "page.html")
    assert done.returncode == 2 and done.stderr.strip().splitlines() == [f"error: {caught.value}"]
    assert not (tmp_path / "page.html").exists()


def test_a_folder_that_is_no_experiment_is_one_error(tmp_path, run_cli):
    (tmp_path / "empty").mkdir()
    with pytest.raises(CheemsInputError, match="is a folder without results.jsonl"):
        build_report([tmp_path / "empty"])
    done = run_cli("report", tmp_path / "empty", "-o", tmp_path / "page.html")
    assert done.returncode == 2 and "empty: is a folder without results.jsonl" in done.stderr


def test_the_report_command_takes_an_experiment_folder(tmp_path, run_cli):
    folder = write_experiment(tmp_path / "exp", ["hh-rlhf-cn"], models=("0.5B", "1.5B"), sizes=(1000, "all"))
    done = run_cli("report", folder, "-o", "page.html", "--lang", "en")
    assert done.returncode == 0, done.stderr
    html = (tmp_path / "page.html").read_text(encoding="utf-8")
    assert '<section id="study">' in html and "Fig. 6: accuracy by training pairs: hh-rlhf-cn, 0.5B" in html
    assert html.count("<svg") == 4


# ----------------------------------------------------------------------------- in a browser

FIGURES_JS = """() => [...document.querySelectorAll('#study figure')].map((f) => {
  const box = f.querySelector('svg').getBoundingClientRect();
  return [f.id, box.width, box.height, f.querySelector('figcaption').textContent];
})"""

CELLS_JS = """() => [...document.querySelectorAll('#study table')].map((t) => ({
  caption: t.caption ? t.caption.textContent : '',
  rows: [...t.tBodies[0].rows].map((r) => [...r.cells].map((c) => c.textContent)),
}))"""


def test_the_study_page_in_a_browser(tmp_path):
    require_browser()
    folder = grid_folder(tmp_path)
    html_path = tmp_path / "page.html"
    html_path.write_text(render_html(build_report([folder], lang="en")), encoding="utf-8")
    study = study_tables(read_experiment(folder))
    with offline_page(html_path) as (page, tried, errors):
        drawn = page.evaluate(FIGURES_JS)
        numbers = page.evaluate(NUMBERS_JS)
        tables = page.evaluate(CELLS_JS)
        page.locator("#fig-fig7_hh-rlhf-cn_all").scroll_into_view_if_needed()
        visible = page.locator("#fig-fig7_hh-rlhf-cn_all svg").is_visible()
    assert tried == [] and errors == []
    assert len(drawn) == 12 and visible
    assert all(width > 300 and height > 150 for _, width, height, _ in drawn), drawn
    assert [d[3] for d in drawn if d[0] == "fig-fig6_my-prefs_1_5B"] == ["Fig. 6: accuracy by training pairs: "
                                                                          "my-prefs, 1.5B"]
    assert numbers["count"] > 250 and numbers["wrong"] == [], numbers["wrong"][:5]
    assert len(tables) == 9 and tables[0]["caption"] == "Base model 0.5B (pretrained, 494M), data size 1000 pairs"
    expected = study["tables"][0]["rows"][0]["subsets"]["human"]["exact_match"]
    assert tables[0]["rows"][0][:3] == ["hh-rlhf-cn", "1000", "3"]
    assert tables[0]["rows"][0][6] == f"{expected['mean']:.3f} ± {expected['ci95_half_width']:.3f}"
    assert tables[0]["rows"][1] == ["hh-rlhf-cn (paper)", "–", "–", "0.704", "0.306", "0.646", "0.212", "–"]
    assert tables[2]["rows"][0][1] == "8000–8026"  # "all": the pairs each seed's sample held
