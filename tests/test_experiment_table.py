"""`cheems experiment table DIR` (cheems.experiments.results, .table, .paper): the paper's Tables 3 / 4 from an
experiment folder written here by hand in the layout `cheems experiment run` writes (experiment.json,
results.jsonl with one line per finished cell and its full eval report).

Checked: one seed shows the figures alone; three seeds show the mean ± the 95% t half-width, against a plain
computation; the paper's figures sit beside matching datasets for CheemsBench's subsets and not for other
subset names; the Markdown, CSV and JSON hold the same figures; a bad line of results.jsonl is one error
naming file:line; a cell listed twice counts once (its last line) with a note; several base models and data
sizes give one labelled table each.

`write_experiment` is used by the report's tests as well.
"""

from __future__ import annotations

import csv
import io
import json
import math
import statistics
import zlib
from pathlib import Path
from types import SimpleNamespace

import pytest

from cheems.experiments.paper import PAPER_RESULTS, paper_result
from cheems.experiments.results import read_experiment, read_results
from cheems.experiments.table import study_tables, t_interval, write_tables
from cheems.records import CheemsInputError
from tests.conftest import run_cli_in

T_975_2 = 4.302652729911275  # Student t, 97.5% quantile, 2 degrees of freedom (three seeds), from printed tables
CATEGORIES = ("代码", "数学", "理解")

MODELS = {"0.5B": {"path": "Qwen/Qwen2.5-0.5B", "parameters": 494032768, "variant": "pretrained"},
          "1.5B": {"path": "Qwen/Qwen2.5-1.5B", "parameters": 1543714304, "variant": "pretrained"},
          "0.5B-Instruct": {"path": "Qwen/Qwen2.5-0.5B-Instruct", "parameters": 494032768, "variant": "instruct"},
          "tiny": {"path": "models/tiny-rm", "parameters": None, "variant": None}}


def figures(dataset: str, model: str, size, seed: int, subset: str) -> tuple[float, float]:
    """A cell's (accuracy, exact match) on a subset: better with more data and a bigger model, a little noise
    by seed; every cell different."""
    base = {"hh-rlhf-cn": 0.62, "huozi": 0.65, "ultrafeedback": 0.68, "my-prefs": 0.6}.get(dataset, 0.55)
    pairs = 8000 if size == "all" else size
    params = MODELS.get(model, {}).get("parameters") or 3e8
    acc = base + 0.02 * math.log10(pairs / 1000) + 0.015 * math.log10(params / 5e8) + 0.0073 * seed
    acc -= 0.04 if subset in ("human", "test") else 0.0
    acc += 0.006 if MODELS.get(model, {}).get("variant") == "instruct" else 0.0
    return round(acc, 6), round(acc * 0.42 - 0.05 + 0.0031 * seed, 6)


def eval_report(dataset: str, model: str, size, seed: int, subsets=("open", "human")) -> dict:
    """The `cheems eval --json` report of one cell's final model (subsets sorted, as cheems eval writes them)."""
    out = {}
    for name in sorted(subsets):
        acc, exact = figures(dataset, model, size, seed, name)
        out[name] = {"accuracy": acc, "exact_match": exact, "score": (acc + exact) / 2, "n_prompts": 30,
                     "n_skipped": 0, "n_comparisons": 212, "n_tied": 0,
                     "categories": {c: {"accuracy": acc - 0.05 * k, "exact_match": exact, "n_prompts": 10,
                                        "n_comparisons": 70} for k, c in enumerate(CATEGORIES)}}
    overall = statistics.fmean(s["score"] for s in out.values())
    return {"kind": "eval", "model": f"cells/{dataset}__{model}__{size}__s{seed}/model", "ties": "official",
            "subsets": out, "overall": overall, "overall_ci": [overall - 0.03, overall + 0.03]}


def cell_line(dataset: str, model: str, size, seed: int, subsets=("open", "human")) -> dict:
    cell = f"{dataset}__{model}__{size}__s{seed}"
    facts = MODELS[model]
    pairs = (8000 + 13 * seed if size == "all" else size)
    return {"cell": cell, "folder": f"cells/{cell}", "dataset": dataset, "base_model": facts["path"],
            "base_model_name": model, "parameters": facts["parameters"], "variant": facts["variant"],
            "data_size": size, "pairs": pairs, "seed": seed, "fingerprint": f"{zlib.crc32(cell.encode()):08x}",
            "eval": eval_report(dataset, model, size, seed, subsets), "finished_at": "2026-11-26T10:00:00Z"}


def write_experiment(folder: Path, datasets, models=("0.5B",), sizes=(1000,), seeds=(0,), *,
                     subsets=("open", "human"), grid: bool = True, order=None) -> Path:
    """An experiment folder as `cheems experiment run` leaves it: experiment.json (the grid) and one
    results.jsonl line per cell (``order``: the cells' lines in another order than the grid's)."""
    folder.mkdir(parents=True, exist_ok=True)
    if grid:
        doc = {"benchmarks": [f"{s}.jsonl" for s in subsets],
               "base_models": [{"path": MODELS[m]["path"], "name": m, "variant": MODELS[m]["variant"],
                                "parameters": MODELS[m]["parameters"]} for m in models],
               "datasets": [{"name": d} for d in datasets], "data_sizes": list(sizes), "seeds": list(seeds),
               "train": {"epochs": 1, "learning_rate": 5e-6, "max_length": 2048}}
        (folder / "experiment.json").write_text(json.dumps(doc, indent=2), encoding="utf-8")
    lines = [cell_line(d, m, s, seed, subsets) for d in datasets for m in models for s in sizes for seed in seeds]
    if order is not None:
        lines = order(lines)
    with open(folder / "results.jsonl", "w", encoding="utf-8") as f:
        for line in lines:
            f.write(json.dumps(line, ensure_ascii=False) + "\n")
    return folder


def run_table(folder: Path):
    """`cheems experiment table DIR`, in this process (``output``: stdout and stderr together)."""
    r = run_cli_in(folder.parent, "experiment", "table", folder)
    return SimpleNamespace(exit_code=r.returncode, output=r.stdout + r.stderr, stdout=r.stdout, stderr=r.stderr)


def row_of(table: dict, dataset: str, source: str = "experiment") -> dict:
    return next(r for r in table["rows"] if r["dataset"] == dataset and r["source"] == source)


# ----------------------------------------------------------------------------- figures

def test_one_seed_shows_each_figure_alone(tmp_path):
    folder = write_experiment(tmp_path / "exp", ["huozi", "hh-rlhf-cn"], order=lambda lines: lines[::-1])
    study = study_tables(read_experiment(folder))
    (table,) = study["tables"]
    assert [r["dataset"] for r in table["rows"] if r["source"] == "experiment"] == ["huozi", "hh-rlhf-cn"]
    row = row_of(table, "hh-rlhf-cn")
    acc, exact = figures("hh-rlhf-cn", "0.5B", 1000, 0, "open")
    assert row["subsets"]["open"]["accuracy"] == {"mean": acc, "ci95_half_width": None, "n": 1, "values": [acc]}
    assert row["subsets"]["open"]["exact_match"]["mean"] == exact
    assert row["overall"]["mean"] == eval_report("hh-rlhf-cn", "0.5B", 1000, 0)["overall"]
    assert row["seeds"] == [0] and row["pairs"]["mean"] == 1000

    result = run_table(folder)
    assert result.exit_code == 0, result.output
    assert f"{acc:.3f}" in result.output and "±" not in result.output
    md = (folder / "tables" / "table.md").read_text(encoding="utf-8")
    assert f"| hh-rlhf-cn | 1000 | 1 | {acc:.3f} | {exact:.3f} |" in md


def test_three_seeds_show_the_mean_and_the_t_interval(tmp_path):
    folder = write_experiment(tmp_path / "exp", ["ultrafeedback"], seeds=(0, 1, 2))
    study = study_tables(read_experiment(folder))
    row = row_of(study["tables"][0], "ultrafeedback")
    for subset in ("open", "human"):
        for k, metric in enumerate(("accuracy", "exact_match")):
            values = [figures("ultrafeedback", "0.5B", 1000, s, subset)[k] for s in (0, 1, 2)]
            mean = sum(values) / 3
            half = T_975_2 * statistics.stdev(values) / math.sqrt(3)
            got = row["subsets"][subset][metric]
            assert got["n"] == 3 and got["values"] == values
            assert got["mean"] == pytest.approx(mean, abs=1e-12)
            assert got["ci95_half_width"] == pytest.approx(half, rel=1e-9)
    overalls = [eval_report("ultrafeedback", "0.5B", 1000, s)["overall"] for s in (0, 1, 2)]
    assert row["overall"]["ci95_half_width"] == pytest.approx(T_975_2 * statistics.stdev(overalls) / math.sqrt(3))

    result = run_table(folder)
    assert result.exit_code == 0, result.output
    open_acc = row["subsets"]["open"]["accuracy"]
    assert f"{open_acc['mean']:.3f} ± {open_acc['ci95_half_width']:.3f}" in result.output


def test_t_interval_needs_two_values():
    assert t_interval([]) == (None, None)
    assert t_interval([0.7]) == (0.7, None)
    mean, half = t_interval([0.70, 0.72])
    assert mean == pytest.approx(0.71) and half == pytest.approx(12.706204736174707 * 0.01)  # t(0.975, 1) * sd / sqrt(2)


# ----------------------------------------------------------------------------- the paper beside

def test_the_papers_figures_sit_beside_matching_datasets_of_cheemsbench(tmp_path):
    folder = write_experiment(tmp_path / "exp", ["hh-rlhf-cn", "my-prefs", "gpt-subset-debiased"])
    study = study_tables(read_experiment(folder))
    assert [c["header"] for c in study["columns"]] == ["Open Prompt Acc.", "Open Prompt Exact.",
                                                       "Human Instruction Acc.", "Human Instruction Exact.",
                                                       "Overall"]
    rows = study["tables"][0]["rows"]
    assert [(r["dataset"], r["source"]) for r in rows] == [
        ("hh-rlhf-cn", "experiment"), ("hh-rlhf-cn", "paper"), ("my-prefs", "experiment"),
        ("gpt-subset-debiased", "experiment"), ("gpt-subset-debiased", "paper")]
    paper = rows[1]
    assert [paper["subsets"][s][m]["mean"] for s in ("open", "human") for m in ("accuracy", "exact_match")] == \
        [0.704, 0.306, 0.646, 0.212]
    assert paper["overall"]["mean"] is None and paper["paper_table"] == "Table 3"
    assert rows[4]["overall"]["mean"] == 0.571 and rows[4]["paper_table"] == "Table 4"

    result = run_table(folder)
    assert result.exit_code == 0, result.output
    assert "hh-rlhf-cn (paper)" in result.output and "Qwen2.5-72B-Instruct" in result.output
    md = (folder / "tables" / "table.md").read_text(encoding="utf-8")
    assert "| hh-rlhf-cn (paper) | – | – | 0.704 | 0.306 | 0.646 | 0.212 | – |" in md
    assert "| gpt-subset-debiased (paper) | – | – | 0.790 | 0.402 | 0.768 | 0.322 | 0.571 |" in md
    assert "Qwen2.5-72B-Instruct" in md


def test_no_paper_figures_for_other_subset_names(tmp_path):
    folder = write_experiment(tmp_path / "exp", ["hh-rlhf-cn", "huozi"], subsets=("dev", "test"))
    study = study_tables(read_experiment(folder))
    assert study["paper"] is None and not study["cheems_benchmark"]
    assert [c["header"] for c in study["columns"]] == ["dev Acc.", "dev Exact.", "test Acc.", "test Exact.",
                                                       "Overall"]
    assert all(r["source"] == "experiment" for t in study["tables"] for r in t["rows"])
    result = run_table(folder)
    assert result.exit_code == 0, result.output
    assert "(paper)" not in result.output and "Prompt" not in result.output and "Qwen2.5" not in result.output
    md = (folder / "tables" / "table.md").read_text(encoding="utf-8")
    assert "| Dataset | Pairs | Seeds | dev Acc. | dev Exact. | test Acc. | test Exact. | Overall |" in md


def test_the_paper_table_holds_the_published_rows():
    assert len([r for r in PAPER_RESULTS.values() if r.table == "Table 3"]) == 13
    assert len([r for r in PAPER_RESULTS.values() if r.table == "Table 4"]) == 6
    assert (paper_result("UltraFeedback").figure("open", "accuracy"), paper_result("zhihu").human_exact_match) == \
        (0.768, 0.080)
    assert paper_result("cheems-preference").rewardbench == 0.919
    for row in PAPER_RESULTS.values():  # Table 4's Overall is the mean of its four CheemsBench figures
        if row.overall is not None:
            four = (row.open_accuracy, row.open_exact_match, row.human_accuracy, row.human_exact_match)
            assert row.overall == pytest.approx(sum(four) / 4, abs=0.0006)
    assert paper_result("no-such-set") is None


# ----------------------------------------------------------------------------- files

def test_csv_json_and_markdown_hold_the_same_figures(tmp_path):
    folder = write_experiment(tmp_path / "exp", ["huozi", "my-prefs"], seeds=(0, 1, 2))
    result = run_table(folder)
    assert result.exit_code == 0, result.output
    tables = folder / "tables"
    assert sorted(p.name for p in tables.iterdir()) == ["table.csv", "table.json", "table.md"]
    study = json.loads((tables / "table.json").read_text(encoding="utf-8"))
    assert study == json.loads(json.dumps(study_tables(read_experiment(folder))))
    rows = list(csv.DictReader(io.StringIO((tables / "table.csv").read_text(encoding="utf-8"))))
    assert [(r["dataset"], r["source"]) for r in rows] == [("huozi", "experiment"), ("huozi", "paper"),
                                                           ("my-prefs", "experiment")]
    huozi = row_of(study["tables"][0], "huozi")
    first = rows[0]
    assert (first["base_model"], first["data_size"], first["seeds"], first["pairs"]) == ("0.5B", "1000", "3",
                                                                                         "1000.0")
    assert float(first["Human Instruction Exact."]) == huozi["subsets"]["human"]["exact_match"]["mean"]
    assert float(first["Overall ±95%"]) == huozi["overall"]["ci95_half_width"]
    assert (rows[1]["Open Prompt Acc."], rows[1]["Open Prompt Acc. ±95%"], rows[1]["Overall"]) == ("0.728", "", "")
    md = (tables / "table.md").read_text(encoding="utf-8")
    text = f"{huozi['overall']['mean']:.3f} ± {huozi['overall']['ci95_half_width']:.3f}"
    assert f"| huozi | 1000 | 3 |" in md and md.count(text) == 1


def test_several_models_and_sizes_give_one_labelled_table_each(tmp_path):
    folder = write_experiment(tmp_path / "exp", ["hh-rlhf-cn"], models=("1.5B", "0.5B"), sizes=(4000, "all", 1000))
    study = study_tables(read_experiment(folder))
    assert [(t["base_model"], t["data_size"]) for t in study["tables"]] == [
        ("1.5B", 1000), ("1.5B", 4000), ("1.5B", "all"), ("0.5B", 1000), ("0.5B", 4000), ("0.5B", "all")]
    assert study["tables"][0]["parameters"] == 1543714304 and study["tables"][0]["variant"] == "pretrained"
    result = run_table(folder)
    assert result.exit_code == 0, result.output
    assert "Base model 1.5B (pretrained, 1.54B parameters), data size all pairs" in result.output
    assert "Base model 0.5B (pretrained, 494M parameters), data size 1000 pairs" in result.output
    md = (folder / "tables" / "table.md").read_text(encoding="utf-8")
    assert md.count("\n## Base model ") == 6 and "| hh-rlhf-cn | 8000 | 1 |" in md


def test_without_a_grid_the_order_is_the_results_order(tmp_path):
    folder = write_experiment(tmp_path / "exp", ["huozi", "hh-rlhf-cn"], grid=False)
    experiment = read_experiment(folder)
    assert experiment.datasets() == ["huozi", "hh-rlhf-cn"]
    assert any("no experiment.json" in n for n in experiment.notes)


# ----------------------------------------------------------------------------- bad lines

def test_a_bad_line_is_one_error_naming_file_and_line(tmp_path):
    folder = write_experiment(tmp_path / "exp", ["huozi", "hh-rlhf-cn", "ultrafeedback"])
    path = folder / "results.jsonl"
    lines = path.read_text(encoding="utf-8").splitlines()
    path.write_text("\n".join([lines[0], lines[1][:80], lines[2]]) + "\n", encoding="utf-8")
    with pytest.raises(CheemsInputError) as caught:
        read_experiment(folder)
    assert str(caught.value).startswith(f"{path}:2: is not valid JSON")
    result = run_table(folder)
    assert result.exit_code == 2
    assert result.output.strip().splitlines() == [f"error: {path}:2: " + caught.value.message]
    assert not (folder / "tables").exists()


@pytest.mark.parametrize("change, field, expected", [
    (lambda r: r.pop("seed"), "seed", "expected an integer, found missing"),
    (lambda r: r.update(data_size=0), "data_size", 'expected a positive integer or "all", found 0'),
    (lambda r: r.update(parameters="0.5B"), "parameters", "expected a positive integer or null"),
    (lambda r: r["eval"]["subsets"]["open"].update(accuracy="0.7"), "eval.subsets.open.accuracy",
     "expected a number or null"),
    (lambda r: r.update(eval={"overall": 0.5}), "eval.subsets", "expected an object of benchmark subsets"),
])
def test_a_line_missing_what_a_cell_needs_names_the_line_and_the_field(tmp_path, change, field, expected):
    folder = write_experiment(tmp_path / "exp", ["huozi", "hh-rlhf-cn"])
    path = folder / "results.jsonl"
    records = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    change(records[1])
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records), encoding="utf-8")
    with pytest.raises(CheemsInputError) as caught:
        read_results(path)
    assert str(caught.value).startswith(f"{path}:2: {field}: {expected}")


def test_a_cell_listed_twice_counts_once_its_last_line(tmp_path):
    folder = write_experiment(tmp_path / "exp", ["huozi", "hh-rlhf-cn"])
    path = folder / "results.jsonl"
    again = cell_line("huozi", "0.5B", 1000, 0)
    again["eval"]["subsets"]["open"]["accuracy"] = 0.9123
    with open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps(again, ensure_ascii=False) + "\n")
    experiment = read_experiment(folder)
    assert [c.cell for c in experiment.cells] == ["hh-rlhf-cn__0.5B__1000__s0", "huozi__0.5B__1000__s0"]
    assert any("huozi__0.5B__1000__s0 is listed 2 times (lines 1, 3); the last one counts" in n
               for n in experiment.notes)
    study = study_tables(experiment)
    assert [r["dataset"] for r in study["tables"][0]["rows"] if r["source"] == "experiment"] == ["huozi",
                                                                                                  "hh-rlhf-cn"]
    assert row_of(study["tables"][0], "huozi")["subsets"]["open"]["accuracy"]["mean"] == 0.9123
    result = run_table(folder)
    assert result.exit_code == 0 and "note:" in result.output and "0.912" in result.output


def test_a_last_line_still_being_written_is_left_out_with_a_note(tmp_path):
    folder = write_experiment(tmp_path / "exp", ["huozi", "hh-rlhf-cn"], seeds=(0, 1))
    path = folder / "results.jsonl"
    with open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps(cell_line("ultrafeedback", "0.5B", 1000, 0))[:120])
    experiment = read_experiment(folder)
    assert len(experiment.cells) == 4
    assert any(n.startswith(f"{path}:5: the last line is incomplete") for n in experiment.notes)


def test_a_folder_without_results_is_one_error(tmp_path):
    (tmp_path / "exp").mkdir()
    result = run_table(tmp_path / "exp")
    assert result.exit_code == 2
    assert "has no results.jsonl: no cell of this experiment has finished yet" in result.output
    assert len(result.output.strip().splitlines()) == 1


def test_tables_are_written_whole(tmp_path):
    folder = write_experiment(tmp_path / "exp", ["huozi"])
    written = write_tables(study_tables(read_experiment(folder)), folder / "tables")
    assert [p.name for p in written] == ["table.md", "table.csv", "table.json"]
    assert not [p for p in (folder / "tables").iterdir() if p.name.endswith(".tmp")]
