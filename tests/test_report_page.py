"""The report page (cheems.report.page): every kind of result file is recognised and shown, a bad or unknown
file is one error naming it, every number on the page equals the value at its data-path in its source file,
the Markdown holds the same tables, and an output that is one of the inputs is refused.

The sample results below follow the contract of each command's ``--json`` output; `write_sample_results`
is also used by the browser test.
"""

from __future__ import annotations

import json
import math
import re
from decimal import Decimal
from html.parser import HTMLParser
from pathlib import Path

import pytest

from cheems.records import CheemsInputError
from cheems.report.page import build_report, format_number, write_report

CATEGORIES = ("代码", "数学/逻辑", "理解")  # a "/" in a key: data-path escapes it as ~1


def eval_result(model: str, open_acc: float, human_acc: float, *, judge: bool = False) -> dict:
    """An eval report (`cheems eval --json`) with every optional key filled."""
    subsets = {}
    for name, acc in (("open", open_acc), ("human", human_acc)):
        exact = acc / 4
        subsets[name] = {
            "accuracy": acc, "exact_match": exact, "score": (acc + exact) / 2, "n_prompts": 24, "n_comparisons": 215,
            "n_tied": 3, "ci": {"accuracy": [acc - 0.05, acc + 0.05], "exact_match": [exact - 0.1, exact + 0.1],
                                "score": [acc / 2 - 0.04, acc / 2 + 0.04]},
            "categories": {c: {"accuracy": acc - 0.1 * k, "exact_match": exact / (k + 1), "n_prompts": 8,
                               "n_comparisons": 70 + k, "n_tied": k,
                               **({"ci": {"accuracy": [acc - 0.1 * k - 0.07, acc - 0.1 * k + 0.06]}} if k else {})}
                           for k, c in enumerate(CATEGORIES)},
            "ece": None if judge else 0.0625, "kendall_tau_b": None if judge else 0.3125,
            "length": {"better_longer": {"pairs": 120, "accuracy": acc + 0.1},
                       "better_shorter": {"pairs": 95, "accuracy": acc - 0.2}},
        }
    overall = sum(s["accuracy"] + s["exact_match"] for s in subsets.values()) / 4
    result = {"kind": "eval", "model": model, "ties": "official", "subsets": subsets, "overall": overall,
              "overall_ci": [overall - 0.03, overall + 0.03], "scorer": "generative" if judge else "discriminative",
              "benchmark": {"fingerprint": "0123abcd", "prompts": 48}}
    if judge:
        result.update({"position_consistency": 0.8125, "first_position_rate": 0.546875})
    return result


def bon_result(model: str, base: float) -> dict:
    curve = [{"n": n, "prompts": 40, "left_out": 0 if n < 16 else 3, "expected_gold": base + 0.05 * math.log2(n),
              "ci": [base + 0.05 * math.log2(n) - 0.04, base + 0.05 * math.log2(n) + 0.04],
              "win_rate": 0.4 + 0.01 * n} for n in (1, 2, 4, 8, 16)]
    return {"kind": "bon", "model": model, "curve": curve, "categories": {"代码": curve[:3], "创作": curve[1:4]},
            "prompts": 40, "gold_is_win_loss": False}


def compare_result(a: str, b: str) -> dict:
    """A comparison "a vs b" whose b is the weaker model: every difference b - a is negative."""
    def stat(x: float, y: float, p: float) -> dict:
        return {"a": x, "b": y, "difference": y - x, "ci": [y - x - 0.05, y - x + 0.05], "p_value": p}

    return {"kind": "compare", "a": a, "b": b, "difference": "b - a", "n_bootstrap": 2000,
            "overall": stat(0.4174, 0.2903, 0.0),
            "subsets": {s: {"accuracy": stat(0.73, 0.52, 0.0001), "exact_match": stat(0.2, 0.1, 0.0412),
                            "score": stat(0.46, 0.31, 0.25)} for s in ("open", "human")},
            "mcnemar": {"only_a": 61, "only_b": 17, "p_value": 0.0000012},
            "categories": {c: {"only_a": 9 - k, "only_b": 3 + k, "p_value": 0.07 * (k + 1), "p_holm": 0.21}
                           for k, c in enumerate(CATEGORIES)}}


def correlate_result() -> dict:
    bench = ["open/accuracy", "human/accuracy", "overall"]
    down = ["人工胜率", "MT-bench-zh", "MT-bench"]
    correlations = {b: {d: {"n": 6, "pearson": {"r": 0.9 - 0.3 * i - 0.1 * j, "ci": [0.1 - 0.2 * i, 0.97]},
                            "spearman": {"r": 0.8 - 0.25 * i, "ci": None},
                            "kendall": {"r": 0.6 - 0.2 * j, "ci": [-0.3, 0.9]}}
                        for j, d in enumerate(down)} for i, b in enumerate(bench)}
    return {"kind": "correlate", "models": ["m-a", "m-b", "m-c", "m-d", "m-e", "m-f"], "benchmark_metrics": bench,
            "downstream_metrics": down, "correlations": correlations}


def curate_result() -> dict:
    return {"stage": "debias", "input_rows": 24, "before": {"chosen_longer": 238, "chosen_shorter": 108,
                                                            "chosen_longer_share": 0.6878612716763006},
            "after": {"chosen_longer": 108, "chosen_shorter": 108, "chosen_longer_share": 0.5}, "dropped": 130,
            "downsampled": "chosen_longer", "seed": 0, "balanced": True,
            "by_category": {"代码": {"before": {"chosen_longer": 36}, "after": {"chosen_longer": 15}, "dropped": 21},
                            "创作": {"before": {"chosen_longer": 20}, "after": {"chosen_longer": 11}, "dropped": 9}}}


def bias_result() -> dict:
    def table(shift: float, judged: bool) -> dict:
        bins = [("(-inf, -50]", 40, 0.3 + shift), ("(-50, 50)", 0, None), ("[50, inf)", 44, 0.7 + shift)]
        rows = [{"bin": b, "n": n, "a": round(n * p) if p else 0, "b": n - round(n * p) if p else 0, "tie": 0,
                 "p_a": p, "p_b": 1 - p if p is not None else None, "p_tie": 0.0 if n else None,
                 "p_a_ci": [p - 0.12, p + 0.12] if p is not None else None} for b, n, p in bins]
        position = {"n": 84 if judged else 0, "a": 40, "b": 44, "tie": 0, "p_a": 0.4762, "p_b": 0.5238,
                    "p_tie": 0.0, "p_a_ci": [0.37, 0.58], "n_strict": 84, "p_a_strict": 0.4762,
                    "p_a_strict_ci": [0.37, 0.58], "p_value": 0.7433}
        return {"n": 84 if judged else 0, "n_prompts": 12, "bins": [50],
                "pairs": "comparisons" if judged else "rankings",
                "n_ranked_pairs": 0 if judged else 84, "ranked_prompts_left_out": 0,
                "position": {"available": judged, "reason": None if judged else "rows carry no presentation order"},
                "by_length": rows, "by_position": position,
                "longer_won": {"n": 84, "longer": 55, "share": 0.6547619047619048, "share_ci": [0.55, 0.75],
                               "p_value": 0.0058, "equal_length": 2}}

    return {"人工": table(0.0, True), "judge": table(0.1, False)}


def train_log_lines() -> list[str]:
    lines = []
    for step in range(1, 31):
        record = {"step": step, "loss": 0.7 * math.exp(-step / 15), "pair_loss": 0.69 * math.exp(-step / 15),
                  "reg": 0.0125, "accuracy": float("nan") if step == 2 else 0.5 + step / 100, "pairs": 32,
                  "lr": 1e-5 * step, "epoch": step / 10}
        if step % 10 == 0:
            record.update({"eval/accuracy": 0.55 + step / 300, "eval/exact_match": 0.125, "eval/overall": 0.4})
        lines.append(json.dumps(record))
    return lines


def write_sample_results(folder: Path) -> dict[str, Path]:
    """Every hand-written kind of result in ``folder``: name -> path."""
    folder.mkdir(parents=True, exist_ok=True)
    docs = {"eval_a.json": eval_result("奖励模型", 0.7296705534401701, 0.6621780044327283),
            "eval_b.json": eval_result("baseline", 0.5625, 0.6),
            "judge.json": eval_result("gpt-judge", 0.81, 0.77, judge=True),
            "bon_a.json": bon_result("奖励模型", 0.3), "bon_b.json": bon_result("baseline", 0.25),
            "compare.json": compare_result("奖励模型", "baseline"), "correlate.json": correlate_result(),
            "debias.report.json": curate_result(), "bias.json": bias_result()}
    paths = {}
    for name, doc in docs.items():
        paths[name] = folder / name
        paths[name].write_text(json.dumps(doc, ensure_ascii=False, indent=1), encoding="utf-8")
    paths["train_log.jsonl"] = folder / "train_log.jsonl"
    paths["train_log.jsonl"].write_text("\n".join(train_log_lines()) + "\n", encoding="utf-8")
    return paths


# ----------------------------------------------------------------------------- reading the page back

class PageParser(HTMLParser):
    """The span.num elements (attributes and text) and every table's cells (text) of an HTML page."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.nums: list[dict] = []
        self.tables: list[list[list[str]]] = []
        self._num: dict | None = None
        self._cell: list[str] | None = None
        self.outside_num: list[tuple[str, str]] = []  # (cell text outside spans, the cell's column header)
        self._outside: list[str] = []

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "table":
            self.tables.append([])
        elif tag == "tr" and self.tables:
            self.tables[-1].append([])
        elif tag in ("td", "th"):
            self._cell, self._outside = [], []
        elif tag == "span" and "num" in (attrs.get("class") or "").split():
            self._num = {**attrs, "text": ""}

    def handle_endtag(self, tag):
        if tag in ("td", "th") and self._cell is not None:
            self.tables[-1][-1].append("".join(self._cell))
            if tag == "td":
                header = self.tables[-1][0][len(self.tables[-1][-1]) - 1]
                self.outside_num.append(("".join(self._outside), header))
            self._cell = None
        elif tag == "span" and self._num is not None:
            self.nums.append(self._num)
            self._num = None

    def handle_data(self, data):
        if self._num is not None:
            self._num["text"] += data
        if self._cell is not None:
            self._cell.append(data)
            if self._num is None:
                self._outside.append(data)


def parse_page(text: str) -> PageParser:
    parser = PageParser()
    parser.feed(text)
    parser.close()
    return parser


def load_source(path: Path):
    """A result file as the page reads it: one JSON document, or a JSON Lines file's records."""
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".jsonl":
        return [json.loads(line) for line in text.splitlines() if line.strip()]
    return json.loads(text)


def value_at(doc, data_path: str):
    node = doc
    for segment in data_path.split("/"):
        key = segment.replace("~1", "/").replace("~0", "~")
        node = node[int(key)] if isinstance(node, list) else node[key]
    return node


def shown_right(text: str, value, fmt: str) -> bool:
    """Whether ``text`` writes ``value`` in format ``fmt``, checked without the page's own formatter."""
    if fmt == "d":
        return text == str(int(value)) and value == int(value)
    if fmt == "p" and text == "<0.001":
        return value < 0.001
    if fmt.startswith("pb"):  # a bootstrap p-value: 4 decimals, or "< 1/(n+1)" below the resolution
        floor = 1 / (int(fmt[2:]) + 1)
        if text.startswith("< "):
            return value < floor and abs(float(text[2:]) - floor) <= 0.5e-4
        fmt = "f4"
    if fmt == "e3":
        mantissa, exponent = text.split("e")
        return re.fullmatch(r"-?\d\.\d{3}", mantissa) is not None and re.fullmatch(r"[+-]\d+", exponent) is not None \
            and abs(float(text) - value) <= 0.5e-3 * 10 ** int(exponent) * 1.0000001
    digits = 3 if fmt == "p" else int(fmt[1:])
    return re.fullmatch(rf"-?\d+\.\d{{{digits}}}", text) is not None and \
        abs(Decimal(text) - Decimal(value)) <= Decimal(5) * Decimal(10) ** (-digits - 1)


def check_numbers(page: PageParser, sources: list[Path]) -> None:
    docs = [load_source(p) for p in sources]
    assert page.nums, "no numbers on the page"
    for num in page.nums:
        doc = docs[int(num["data-src"])]
        value = value_at(doc, num["data-path"])
        shown = json.loads(num["data-value"])
        assert (-shown if num.get("data-negated") == "true" else shown) == value, num
        assert num["title"] == f"{sources[int(num['data-src'])].name}: {num['data-path']}" + \
            (" (×−1)" if num.get("data-negated") == "true" else ""), num
        value = shown
        assert isinstance(value, (int, float)) and not isinstance(value, bool), num
        assert shown_right(num["text"], value, num["data-fmt"]), num


# ----------------------------------------------------------------------------- tests

EXPECTED_KINDS = {"eval_a.json": "eval", "eval_b.json": "eval", "judge.json": "eval", "bon_a.json": "bon",
                  "bon_b.json": "bon", "compare.json": "compare", "correlate.json": "correlate",
                  "debias.report.json": "curate", "bias.json": "bias", "train_log.jsonl": "train_log"}
TEXT_COLUMNS = {"#", "File", "Content", "Name", "Model", "Subset", "Category", "Judge", "Group", "Length difference",
                "Benchmark metric", "Downstream metric", "Metric", "Count", "by_category", "row − column"}


@pytest.fixture
def samples(tmp_path: Path) -> dict[str, Path]:
    return write_sample_results(tmp_path / "results")


def test_every_kind_is_recognised_and_shown(samples, tmp_path):
    report = build_report(list(samples.values()), lang="en")
    assert {s.path.name: s.kind for s in report.sources} == EXPECTED_KINDS
    assert [s.anchor for s in report.sections] == ["inputs", "leaderboard", "subsets", "categories", "judges",
                                                   "length", "compare", "best-of-n", "correlation", "bias",
                                                   "curation", "training"]
    html_path = tmp_path / "out" / "report.html"
    assert write_report(report, html_path)[0] == html_path
    page = parse_page(html_path.read_text(encoding="utf-8"))
    assert {int(n["data-src"]) for n in page.nums} == set(range(len(samples))), "an input shows no number"
    text = html_path.read_text(encoding="utf-8")
    for label in ("Discriminative reward models", "Generative reward models", "gpt-judge", "Position consistency",
                  "Better is shorter: Acc.", "McNemar p", "Best-of-n", "Pearson r", "人工", "Stage debias",
                  "eval/accuracy", "B − A"):
        assert label in text, label


def test_kinds_told_by_shape_without_a_kind_key(tmp_path):
    docs = {"old_eval.json": {k: v for k, v in eval_result("m", 0.6, 0.7).items()
                              if k not in ("kind", "scorer", "benchmark")},
            "bon.json": {k: v for k, v in bon_result("m", 0.2).items() if k != "kind"},
            "cmp.json": {k: v for k, v in compare_result("x", "y").items() if k != "kind"},
            "cor.json": {k: v for k, v in correlate_result().items() if k != "kind"}}
    for name, doc in docs.items():
        (tmp_path / name).write_text(json.dumps(doc, ensure_ascii=False), encoding="utf-8")
    report = build_report([tmp_path / n for n in docs])
    assert [s.kind for s in report.sources] == ["eval", "bon", "compare", "correlate"]


BAD_INPUTS = {
    "unknown_kind.json": json.dumps({"kind": "leaderboard", "rows": []}),
    "not_json.json": "{'model': 'x'",
    "empty.json": "",
    "numbers.json": "[1, 2, 3]",
    "string.json": '"eval"',
    "eval_without_subsets.json": json.dumps({"kind": "eval", "model": "m", "overall": 0.5}),
    "eval_text_accuracy.json": json.dumps({"kind": "eval", "subsets": {"open": {"accuracy": "high"}}}),
    "bon_without_n.json": json.dumps({"kind": "bon", "curve": [{"expected_gold": 0.3}]}),
    "compare_without_overall.json": json.dumps({"kind": "compare", "a": "x", "b": "y"}),
    "eval_text_overall.json": json.dumps({"kind": "eval", "model": "m", "subsets": {}, "overall": "0.61"}),
    "eval_object_overall.json": json.dumps({"kind": "eval", "model": "m", "subsets": {}, "overall": {"x": 1}}),
    "compare_text_difference.json": json.dumps({"kind": "compare", "a": "x", "b": "y",
                                                "overall": {"difference": "+0.1", "p_value": 0.2}}),
    "bon_text_gold.json": json.dumps({"kind": "bon", "curve": [{"n": 1, "expected_gold": "high"}]}),
    "stranger.json": json.dumps({"hello": "world"}),
    "eval_text_pairs.json": json.dumps({"kind": "eval", "model": "m", "overall": 0.5, "subsets": {"open": {
        "accuracy": 0.5, "length": {"better_longer": {"pairs": "x", "accuracy": 0.5}}}}}),
    "eval_text_n_comparisons.json": json.dumps({"kind": "eval", "model": "m", "overall": 0.5,
                                                "subsets": {"open": {"accuracy": 0.5, "n_comparisons": "12"}}}),
    "curate_text_pairs.json": json.dumps({"stage": "debias", "pairs": "x", "comparisons": 4}),
    "broken_log.jsonl": '{"step": 1, "loss": 0.5}\n{"step": 2, "lo\n{"step": 3, "loss": 0.4}\n',
    "binary.json": b"\xff\xfe\x00garbage",
}


@pytest.mark.parametrize("name", sorted(BAD_INPUTS))
def test_a_bad_or_unknown_file_is_one_error_naming_it(samples, tmp_path, name):
    bad = tmp_path / name
    content = BAD_INPUTS[name]
    bad.write_bytes(content if isinstance(content, bytes) else content.encode("utf-8"))
    with pytest.raises(CheemsInputError) as caught:
        build_report([samples["eval_a.json"], bad])
    message = str(caught.value)
    assert caught.value.file == str(bad)
    assert message.startswith(str(bad)) and "\n" not in message, message
    if name == "broken_log.jsonl":
        assert message.startswith(f"{bad}:2:"), message
    if name == "unknown_kind.json":
        assert "unknown report kind 'leaderboard'" in message
    fields = {"eval_text_overall.json": "overall", "eval_object_overall.json": "overall",
              "compare_text_difference.json": "overall.difference", "bon_text_gold.json": "curve.0.expected_gold"}
    if name in fields:
        assert caught.value.field == fields[name] and "expected a number or null" in message, message
    counts = {"eval_text_pairs.json": "subsets.open.length.better_longer.pairs",
              "eval_text_n_comparisons.json": "subsets.open.n_comparisons", "curate_text_pairs.json": "pairs"}
    if name in counts:
        assert caught.value.field == counts[name] and "expected an integer or null (a count)" in message, message


def test_a_folder_or_missing_file_is_one_error(tmp_path):
    for path in (tmp_path, tmp_path / "missing.json"):
        with pytest.raises(CheemsInputError) as caught:
            build_report([path])
        assert caught.value.file == str(path) and "\n" not in str(caught.value)
    with pytest.raises(CheemsInputError):
        build_report([])


def test_a_log_cut_short_by_a_kill_keeps_its_whole_lines(tmp_path):
    log = tmp_path / "train_log.jsonl"
    log.write_text("\n".join(train_log_lines()[:5]) + '\n{"step": 6, "lo', encoding="utf-8")
    report = build_report([log])
    assert report.sources[0].kind == "train_log" and len(report.sources[0].data) == 5


def test_every_number_equals_its_source_and_every_number_is_linked(samples, tmp_path):
    report = build_report(list(samples.values()), lang="en")
    write_report(report, tmp_path / "report.html")
    page = parse_page((tmp_path / "report.html").read_text(encoding="utf-8"))
    check_numbers(page, [s.path for s in report.sources])
    assert len(page.nums) > 400
    paths = {n["data-path"] for n in page.nums}
    assert "subsets/open/categories/数学~1逻辑/accuracy" in paths  # a "/" inside a key
    assert "subsets/open/categories/理解/ci/accuracy/1" in paths  # a category CI
    assert "overall_ci/0" in paths and "position_consistency" in paths and "9/eval~1accuracy" in paths
    for outside, header in page.outside_num:  # digits outside a span.num only in columns of names
        if header not in TEXT_COLUMNS:
            assert not re.search(r"\d", outside.replace("n=", "")), (header, outside)


def test_missing_values_show_a_dash_and_no_number(samples, tmp_path):
    report = build_report([samples["judge.json"]], lang="en")  # ece and kendall_tau_b are null
    write_report(report, tmp_path / "report.html")
    page = parse_page((tmp_path / "report.html").read_text(encoding="utf-8"))
    assert not any(n["data-path"].endswith(("/ece", "/kendall_tau_b")) for n in page.nums)
    subsets = next(t for t in page.tables if "ECE" in t[0])
    assert {row[subsets[0].index("ECE")] for row in subsets[1:]} == {"–"}


def test_the_markdown_holds_the_same_tables_and_the_plots(samples, tmp_path):
    report = build_report(list(samples.values()), lang="en")
    md_path = tmp_path / "out" / "report.md"
    written = write_report(report, tmp_path / "out" / "report.html", md_path)
    page = parse_page((tmp_path / "out" / "report.html").read_text(encoding="utf-8"))
    markdown = md_path.read_text(encoding="utf-8")
    md_tables, current = [], None
    for line in markdown.splitlines():
        if line.startswith("|"):
            cells = [c.strip().replace("\\|", "|").replace("\\\\", "\\")
                     for c in re.split(r"(?<!\\)\|", line.strip()[1:-1])]
            if current is None:
                current = []
                md_tables.append(current)
            if not all(re.fullmatch(r":?-+:?", c) for c in cells):
                current.append(cells)
        else:
            current = None
    assert md_tables == page.tables  # the same cells, so the same numbers written the same way
    pngs = [p for p in written if p.suffix == ".png"]
    assert len(pngs) == 6 and all(p.read_bytes().startswith(b"\x89PNG") for p in pngs)
    for p in pngs:
        assert f"](report_files/{p.name})" in markdown


def test_the_page_is_self_contained_and_draws_chinese(samples, tmp_path):
    from cheems.curation.bias import cjk_font

    report = build_report(list(samples.values()), lang="en")
    write_report(report, tmp_path / "report.html")
    text = (tmp_path / "report.html").read_text(encoding="utf-8")
    assert text.count("<svg") == 6 and "<?xml" not in text
    urls = set(re.findall(r"https?://[^\s\"'<>)]+", text))
    assert urls <= {"http://www.w3.org/2000/svg", "http://www.w3.org/1999/xlink"}, urls
    assert not re.search(r"<(img|link|iframe|object|embed)\b", text)
    assert not re.search(r"\s(src|href)=\"(?!#)", text)
    if cjk_font() is not None:  # Chinese labels drawn with the CJK font's glyphs, not boxes
        fonts = set(re.findall(r'<path id="([A-Za-z-]+)-[0-9a-f]+"', text))
        assert fonts - {"DejaVuSans", "DejaVuSans-Oblique", "DejaVuSans-Bold"}, fonts


def test_names_are_escaped(tmp_path):
    doc = eval_result("<script>window.x=1</script>", 0.6, 0.7)
    doc["subsets"]["open"]["categories"] = {"<img src=x onerror=alert(1)>": {"accuracy": 0.5}}
    path = tmp_path / "xss.json"
    path.write_text(json.dumps(doc), encoding="utf-8")
    write_report(build_report([path]), tmp_path / "report.html")
    text = (tmp_path / "report.html").read_text(encoding="utf-8")
    assert "<script>window.x" not in text and "<img src=x" not in text
    assert "&lt;script&gt;window.x=1&lt;/script&gt;" in text


@pytest.mark.parametrize("which", ["html", "markdown"])
def test_an_output_that_is_an_input_is_refused(samples, which):
    report = build_report(list(samples.values()), lang="en")
    target = samples["eval_a.json"]
    before = target.read_bytes()
    html_path = target if which == "html" else target.with_name("report.html")
    with pytest.raises(CheemsInputError) as caught:
        write_report(report, html_path, target if which == "markdown" else None)
    assert caught.value.file == str(target) and "is also an input" in str(caught.value)
    assert target.read_bytes() == before
    assert not target.with_name("report.html").exists()


def test_format_number_rounds_half_away_from_zero_as_a_browser_does():
    assert format_number(0.0625, "f3") == "0.063"  # exactly half: Python's format() would give 0.062
    assert format_number(-0.0625, "f3") == "-0.063"
    assert format_number(0.7296705534401701, "f3") == "0.730"
    assert format_number(0.0004, "p") == "<0.001" and format_number(0.0412, "p") == "0.041"
    assert format_number(1e-5, "e3") == "1.000e-5" and format_number(123456.0, "e3") == "1.235e+5"
    assert format_number(24, "d") == "24" and format_number(0.5, "f2") == "0.50"


def test_leaderboard_rows_follow_table_2(samples, tmp_path):
    report = build_report([samples["eval_a.json"], samples["eval_b.json"], samples["judge.json"]], lang="en")
    write_report(report, tmp_path / "report.html")
    page = parse_page((tmp_path / "report.html").read_text(encoding="utf-8"))
    boards = [t for t in page.tables if t[0][0] == "Model" and "Overall" in t[0]]
    assert [t[0] for t in boards][0] == ["Model", "open Acc.", "open Exact", "human Acc.", "human Exact", "Overall",
                                         "Overall 95% CI"]
    assert [[row[0] for row in t[1:]] for t in boards] == [["奖励模型", "baseline"], ["gpt-judge"]]
    assert boards[0][1][1] == "0.730"


def test_the_report_command_refuses_a_garbage_overall_in_one_line(tmp_path):
    from tests.conftest import run_cli_in

    (tmp_path / "bad.json").write_text(json.dumps({"kind": "eval", "model": "m", "subsets": {}, "overall": "high"}),
                                       encoding="utf-8")
    done = run_cli_in(tmp_path, "report", "bad.json", "-o", "report.html")
    assert done.returncode == 2 and not (tmp_path / "report.html").exists()
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "bad.json" in lines[0] and "overall" in lines[0], done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize("name", ["eval_text_pairs.json", "curate_text_pairs.json"])
def test_the_report_command_refuses_a_count_that_is_text_in_one_line(tmp_path, name):
    from tests.conftest import run_cli_in

    (tmp_path / name).write_text(BAD_INPUTS[name], encoding="utf-8")
    done = run_cli_in(tmp_path, "report", name, "-o", "report.html")
    assert done.returncode == 2 and not (tmp_path / "report.html").exists()
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {name}: ") and "pairs: expected an integer" in lines[0]


def matrix_of(page: PageParser) -> dict[tuple[str, str], str]:
    """The significance matrix as {(row model, column model): cell text}."""
    table = next(t for t in page.tables if t[0][0] in ("row − column", "行 − 列"))
    return {(row[0], col): cell for row in table[1:] for col, cell in zip(table[0][1:], row[1:])}


def test_the_matrix_shows_row_minus_column_in_both_cells(samples, tmp_path):
    report = build_report([samples["compare.json"]], lang="en")  # "奖励模型 vs baseline", baseline weaker
    write_report(report, tmp_path / "report.html")
    text = (tmp_path / "report.html").read_text(encoding="utf-8")
    page = parse_page(text)
    check_numbers(page, [samples["compare.json"]])
    cells = matrix_of(page)
    assert cells["baseline", "奖励模型"] == "-0.1271 (p < 0.0005)"  # the weaker row: negative
    assert cells["奖励模型", "baseline"] == "0.1271 (p < 0.0005)"
    details = next(t for t in page.tables if t[0][0] == "Metric")
    assert details[0][1:4] == ["A: 奖励模型", "B: baseline", "B − A"]
    assert details[1][:4] == ["Overall", "0.417", "0.290", "-0.1271"]
    assert "a − b" not in text and "data-src is" not in text


def test_the_language_follows_the_data_or_the_flag(samples, tmp_path):
    report = build_report(list(samples.values()))  # Chinese categories and groups: Chinese words
    assert report.lang == "zh" and report.title == "奖励模型评测报告"
    assert [s.title for s in report.sections][:3] == ["输入文件", "排行榜", "各子集详情"]
    write_report(report, tmp_path / "zh.html", tmp_path / "zh.md")
    text = (tmp_path / "zh.html").read_text(encoding="utf-8")
    assert '<html lang="zh-CN">' in text and "判别式奖励模型" in text and "行 − 列" in text
    page = parse_page(text)
    check_numbers(page, [s.path for s in report.sources])
    assert {h for t in page.tables for h in t[0]} >= {"模型", "总分", "B − A", "p 值", "位置一致性"}
    english = build_report([samples["eval_b.json"]], lang="en")
    assert english.lang == "en" and english.sections[1].title == "Leaderboard"
    doc = eval_result("m", 0.6, 0.7)
    for sub in doc["subsets"].values():
        sub["categories"] = {"coding": sub["categories"]["代码"], "math": sub["categories"]["理解"]}
    (tmp_path / "en.json").write_text(json.dumps(doc), encoding="utf-8")
    assert build_report([tmp_path / "en.json"]).lang == "en"  # English labels: English words
    written = write_report(build_report([tmp_path / "en.json"]), tmp_path / "en.html")
    assert '<html lang="en">' in written[0].read_text(encoding="utf-8")
    with pytest.raises(CheemsInputError, match="^lang: must be one of en, zh"):
        build_report([tmp_path / "en.json"], lang="fr")


def test_bootstrap_p_values_below_the_resolution_are_written_as_a_bound():
    from cheems.report.page_content import p_value_text

    assert p_value_text(0.0, 999) == "< 0.0010"
    assert p_value_text(0.0, 2000) == "< 0.0005"
    assert p_value_text(0.0, 100_000) == "< 1.000e-5"
    assert p_value_text(0.002, 999) == "0.0020" and p_value_text(1.0, 10) == "1.0000"
    assert format_number(0.0, "pb999") == "< 0.0010"
