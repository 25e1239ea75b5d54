"""The leaderboards of `cheems report` (the paper's Table 2: discriminative reward models and generative
judges apart) and `cheems compare` across the two kinds, from reports the real commands write: two
baselines (length, random) and the tiny causal LM as a local judge, on two subsets of the bundled sample.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import run_cli_in, write_jsonl_rows
from tests.test_report_page import check_numbers, parse_page
from tests.tiny_models import require_models_extra

pytestmark = pytest.mark.usefixtures("single_torch_thread")


@pytest.fixture(scope="module")
def reports(tmp_path_factory, sample_annotations, causal_lm_model) -> Path:
    """A folder with length.json, random.json and judge.json (each with its items file), evaluated on
    open.jsonl and human.jsonl: two ranked prompts of each subset of the sample."""
    require_models_extra()
    folder = tmp_path_factory.mktemp("leaderboards")
    for subset in ("open", "human"):
        assert run_cli_in(folder, "rank", sample_annotations / f"{subset}.jsonl", "-o", "ranked.jsonl").returncode == 0
        rows = [json.loads(x) for x in (folder / "ranked.jsonl").read_text(encoding="utf-8").splitlines()][:2]
        write_jsonl_rows(folder / f"{subset}.jsonl", [{k: v for k, v in r.items() if k != "subset"} for r in rows])
    for args in (("--scorer", "length", "--json", "length.json"), ("--scorer", "random", "--json", "random.json"),
                 ("--judge-model", causal_lm_model, "--name", "tiny-judge", "--max-length", "256", "--json",
                  "judge.json")):
        done = run_cli_in(folder, "eval", "open.jsonl", "human.jsonl", "--bootstrap", "20", *args)
        assert done.returncode == 0, done.stderr
    return folder


def _report(folder: Path, name: str) -> dict:
    return json.loads((folder / name).read_text(encoding="utf-8"))


def _boards(page) -> dict[str, list[list[str]]]:
    """The leaderboard tables by their first row's model kind: discriminative or generative."""
    return {("generative" if t[1][0] == "tiny-judge" else "discriminative"): t
            for t in page.tables if t[0][0] in ("Model", "模型") and t[0][-2] in ("Overall", "总分")}


def test_the_report_shows_discriminative_and_generative_leaderboards_apart(reports, tmp_path):
    overall = {n: _report(reports, f"{n}.json")["overall"] for n in ("length", "random")}
    assert overall["length"] != overall["random"]
    worse_first = sorted(overall, key=overall.get)  # the page must put the better one first
    files = [reports / f"{worse_first[0]}.json", reports / "judge.json", reports / f"{worse_first[1]}.json"]
    done = run_cli_in(tmp_path, "report", *files, "-o", "report.html", "--lang", "en")
    assert done.returncode == 0, done.stderr
    text = (tmp_path / "report.html").read_text(encoding="utf-8")
    assert "Discriminative reward models" in text and "Generative reward models" in text
    assert "A generative judge gets a pair right when its verdict names the better response" in text
    page = parse_page(text)
    check_numbers(page, files)
    boards = _boards(page)
    judge = _report(reports, "judge.json")
    subsets = list(judge["subsets"])
    assert sorted(subsets) == ["human", "open"]
    header = ["Model", *(f"{s} {m}" for s in subsets for m in ("Acc.", "Exact")), "Overall", "Overall 95% CI"]
    assert boards["discriminative"][0] == boards["generative"][0] == header
    assert [row[0] for row in boards["discriminative"][1:]] == worse_first[::-1]
    assert [row[0] for row in boards["generative"][1:]] == ["tiny-judge"]
    assert boards["generative"][1][5] == f"{judge['overall']:.3f}"
    assert boards["generative"][1][1] == f"{judge['subsets'][subsets[0]]['accuracy']:.3f}"
    judges = next(t for t in page.tables if t[0][0] == "Judge")
    assert judges[0] == ["Judge", "Verdicts from", "Judgements", "Position consistency", "First-position rate",
                         "Tie verdicts"]
    assert judges[1][:3] == ["tiny-judge", "local model (transformers): verdict probabilities",
                             str(judge["judgements"])]


def test_the_leaderboards_in_chinese(reports, tmp_path):
    done = run_cli_in(tmp_path, "report", reports / "length.json", reports / "judge.json", "-o", "report.html",
                      "--lang", "zh")
    assert done.returncode == 0, done.stderr
    text = (tmp_path / "report.html").read_text(encoding="utf-8")
    for words in ("判别式奖励模型", "生成式奖励模型", "生成式评审的判断指向较好的回答即为判对", "本地模型（transformers）：判决概率",
                  "平局判决", "判决来源"):
        assert words in text, words
    boards = _boards(parse_page(text))
    first = next(iter(_report(reports, "judge.json")["subsets"]))
    assert boards["generative"][0][:3] == ["模型", f"{first} 准确率", f"{first} 完全匹配"]


def test_compare_pairs_a_generative_judge_with_a_discriminative_model(reports, tmp_path):
    done = run_cli_in(tmp_path, "compare", reports / "length.json", reports / "judge.json", "--bootstrap", "200",
                      "--json", "cmp.json")
    assert done.returncode == 0, done.stderr
    assert "A = length (discriminative) vs B = tiny-judge (generative)" in done.stdout
    result = json.loads((tmp_path / "cmp.json").read_text(encoding="utf-8"))
    length, judge = _report(reports, "length.json"), _report(reports, "judge.json")
    assert result["scorers"] == {"a": "discriminative", "b": "generative"}
    assert result["overall"]["a"] == pytest.approx(length["overall"], abs=1e-12)
    assert result["overall"]["b"] == pytest.approx(judge["overall"], abs=1e-12)
    for name in ("open", "human"):
        for metric in ("accuracy", "exact_match"):
            assert result["subsets"][name][metric]["a"] == pytest.approx(length["subsets"][name][metric], abs=1e-12)
            assert result["subsets"][name][metric]["b"] == pytest.approx(judge["subsets"][name][metric], abs=1e-12)
    right = {}
    for side, name in (("a", "length"), ("b", "judge")):
        items = [json.loads(x) for x in (reports / f"{name}.items.jsonl").read_text(encoding="utf-8").splitlines()]
        right[side] = {(it["prompt_id"], b, w): outcome == "right" for it in items for b, w, outcome in it["pairs"]}
    assert right["a"].keys() == right["b"].keys()  # the same ranked pairs
    only_a = sum(right["a"][k] and not right["b"][k] for k in right["a"])
    only_b = sum(right["b"][k] and not right["a"][k] for k in right["a"])
    assert (result["mcnemar"]["only_a"], result["mcnemar"]["only_b"]) == (only_a, only_b)
    shown = run_cli_in(tmp_path, "report", reports / "length.json", reports / "judge.json", "cmp.json", "-o", "r.html")
    assert shown.returncode == 0, shown.stderr
    assert "length vs tiny-judge" in (tmp_path / "r.html").read_text(encoding="utf-8")
