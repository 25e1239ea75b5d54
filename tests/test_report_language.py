"""The report page's language (cheems.report.wording, build_report): by default English for data whose text is
all ASCII and Chinese as soon as any name, subset or category is Chinese; an explicit --lang wins; and the page
says which language it is in and how to switch."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cheems.report.page import build_report
from cheems.report.wording import detect_language
from tests.test_report_page import eval_result


def ascii_eval(folder: Path, model: str = "tiny-rm", category: str = "coding") -> Path:
    """An eval report whose text is all ASCII but for what ``model`` and ``category`` hold; no CIs (no plot
    whiskers) and one category per subset, so it renders quickly."""
    doc = eval_result(model, 0.6, 0.7)
    for sub in doc["subsets"].values():
        sub["categories"] = {category: sub["categories"]["代码"]}
    path = folder / f"{model}.json"
    path.write_text(json.dumps(doc, ensure_ascii=False), encoding="utf-8")
    return path


def test_all_ascii_data_gives_an_english_page_that_says_how_to_switch(tmp_path, run_cli):
    done = run_cli("report", ascii_eval(tmp_path), "-o", "page.html", "--markdown", "page.md")
    assert done.returncode == 0, done.stderr
    page = (tmp_path / "page.html").read_text(encoding="utf-8")
    assert '<html lang="en">' in page and "<h2>Leaderboard</h2>" in page
    assert ("This page is in English because the data&#x27;s names and categories hold no Chinese; "
            "the language <code>zh</code> writes it in Chinese.") in page
    markdown = (tmp_path / "page.md").read_text(encoding="utf-8")
    assert markdown.splitlines()[2] == ("This page is in English because the data's names and categories hold no "
                                        "Chinese; the language `zh` writes it in Chinese.")


@pytest.mark.parametrize("model, category", [("奖励模型", "coding"), ("tiny-rm", "代码")])
def test_any_chinese_name_or_category_gives_a_chinese_page(tmp_path, model, category):
    report = build_report([ascii_eval(tmp_path, "other-rm"), ascii_eval(tmp_path, model, category)])
    assert report.lang == "zh" and report.title == "奖励模型评测报告"
    chinese = model if model != "tiny-rm" else category
    assert report.lang_note == f"本页为中文，因为数据的名称或类别含有中文（如“{chinese}”）；选择语言 `en` 可生成英文版。"


def test_an_explicit_lang_wins_and_the_note_says_so(tmp_path, run_cli):
    english, chinese = ascii_eval(tmp_path), ascii_eval(tmp_path, "奖励模型", "代码")
    done = run_cli("report", chinese, "--lang", "en", "-o", "en.html")
    assert done.returncode == 0, done.stderr
    page = (tmp_path / "en.html").read_text(encoding="utf-8")
    assert '<html lang="en">' in page and "This page is in English as asked (language <code>en</code>); " \
                                          "the language <code>zh</code> writes it in Chinese." in page
    report = build_report([english], lang="zh")
    assert report.lang == "zh" and report.sections[1].title == "排行榜"
    assert report.lang_note == "本页按要求（语言 `zh`）以中文生成；选择语言 `en` 可生成英文版。"


def test_detect_language_needs_one_chinese_text():
    assert detect_language([]) == "en" and detect_language(["open", "coding", "Kendall τ", "café"]) == "en"
    assert detect_language(["open", "human", "a", "b", "代码"]) == "zh"
