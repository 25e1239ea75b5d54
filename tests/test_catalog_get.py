"""Datasets by name: the spec syntax, `cheems data list/info/get`, and names wherever a command
takes a data file (converted once into the cache, read through the real ``datasets`` path)."""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import pytest

pytest.importorskip("datasets")

from cheems.catalog.get import generic_entry, get_dataset, iter_converted, parse_spec, resolve_data  # noqa: E402
from cheems.catalog.registry import CATALOG, find_entry  # noqa: E402
from cheems.records import CheemsInputError  # noqa: E402
from cheems.catalog.hub import first_line_not_json  # noqa: E402
from cheems.catalog.tables import with_tables  # noqa: E402
from tests.conftest import REPO_ROOT, run_cli_process  # noqa: E402


FIXTURES = Path(__file__).parent / "fixtures" / "catalog"


def _transcript(question: str, answer: str) -> str:
    return f"\n\nHuman: {question}\n\nAssistant: {answer}"


HH_ROWS = [
    {"chosen": _transcript("How do I keep basil alive indoors?", "Give it a sunny window and water when the soil "
                           "is dry."),
     "rejected": _transcript("How do I keep basil alive indoors?", "Basil cannot live indoors.")},
    {"chosen": _transcript("What is 12 times 12?", "144."),
     "rejected": _transcript("What is 12 times 12?", "124.")},
    {"chosen": _transcript("Name a prime number above 20.", "23 is prime."),
     "rejected": _transcript("Name a prime number above 20.", "21 is prime.")},
]


@pytest.fixture
def mirror(tmp_path: Path, monkeypatch) -> Path:
    """A hub mirror folder holding Anthropic/hh-rlhf's harmless-base test file (as gzipped JSONL,
    as the hub repository holds it) and a team/pairs repository of plain pairs."""
    root = tmp_path / "mirror"
    hh = root / "Anthropic" / "hh-rlhf" / "harmless-base"
    hh.mkdir(parents=True)
    with gzip.open(hh / "test.jsonl.gz", "wt", encoding="utf-8") as f:
        for row in HH_ROWS:
            f.write(json.dumps(row) + "\n")
    pairs = root / "team" / "pairs" / "data"
    pairs.mkdir(parents=True)
    rows = [{"prompt": "写一句关于秋天的诗。", "chosen": "秋风起兮白云飞。", "rejected": "秋天。"},
            {"prompt": "一周有几天？", "chosen": "七天。", "rejected": "五天。"}]
    (pairs / "train.jsonl").write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows),
                                       encoding="utf-8")
    monkeypatch.setenv("CHEEMS_HUB_MIRROR", str(root))
    return root


def test_spec_syntax():
    spec = parse_spec("hh-rlhf:harmless-base@test")
    assert (spec.entry.name, spec.config, spec.split, spec.option) == ("hh-rlhf", "harmless-base", "test", None)
    spec = parse_spec("pku-saferlhf@test+safer")
    assert (spec.entry.name, spec.split, spec.option) == ("pku-saferlhf", "test", "safer")
    spec = parse_spec("hf:Anthropic/hh-rlhf@train")
    assert spec.entry is CATALOG["hh-rlhf"] and spec.split == "train"
    spec = parse_spec("hf:someone/else:cfg@dev")
    assert (spec.entry.name, spec.entry.hub_id, spec.config, spec.split) == ("hf:someone/else", "someone/else",
                                                                             "cfg", "dev")
    assert parse_spec("bench.jsonl") is None and parse_spec("data/open.jsonl") is None
    assert parse_spec("not-a-dataset") is None  # a file that is missing: the command says so
    with pytest.raises(CheemsInputError, match="no dataset 'nosuch'"):
        parse_spec("nosuch@train")
    with pytest.raises(CheemsInputError, match="hf:OWNER/NAME"):
        parse_spec("hf:no-owner")


def test_existing_file_wins(tmp_path: Path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    Path("hh-rlhf").write_text("{}", encoding="utf-8")
    assert resolve_data("hh-rlhf") == Path("hh-rlhf")


def test_options_and_splits_checked():
    with pytest.raises(CheemsInputError, match="takes no option"):
        list(iter_converted("hh-rlhf+x"))
    with pytest.raises(CheemsInputError, match="axis must be one of better, safer"):
        list(iter_converted("pku-saferlhf+kind"))
    with pytest.raises(CheemsInputError, match="no config 'nope'"):
        list(iter_converted("hh-rlhf:nope"))


def test_names_are_unique_and_complete():
    assert len(CATALOG) == len({e.hub_id + str(e.files) + str(e.data_files) + str(e.option) for e in CATALOG.values()})
    for entry in CATALOG.values():
        assert entry.language in ("zh", "en") and entry.licence and entry.size and entry.columns
        assert find_entry(entry.name.upper()) is entry


def test_get_reads_the_mirror(mirror: Path, tmp_path: Path):
    out = tmp_path / "hh.jsonl"
    summary = get_dataset("hh-rlhf:harmless-base@test", out)
    rows = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert summary["rows"] == 3 and len(rows) == 3
    assert rows[1]["prompt"] == "What is 12 times 12?"
    assert [r["content"] for r in rows[1]["responses"]] == ["144.", "124."]
    assert rows[1]["rank"] == {"chosen": 0, "rejected": 1} and rows[1]["subset"] == "harmless-base"


def test_limit_and_generic_rows(mirror: Path, tmp_path: Path):
    prompts = list(iter_converted("hf:team/pairs", limit=1))
    assert len(prompts) == 1 and prompts[0].prompt == "写一句关于秋天的诗。"
    assert generic_entry("team/pairs").name == "hf:team/pairs"


def test_bad_row_is_one_located_error_and_nothing_written(tmp_path: Path):
    folder = tmp_path / "bad"
    folder.mkdir()
    (folder / "train.jsonl").write_text(json.dumps({"prompt": "问", "chosen": "答", "rejected": "答二"}) + "\n" +
                                        json.dumps({"prompt": "问题", "chosen": ""}) + "\n", encoding="utf-8")
    out = tmp_path / "out.jsonl"
    with pytest.raises(CheemsInputError) as e:
        get_dataset("hf:team/bad", out, source=str(folder))
    assert str(e.value).startswith(f"{folder}@train:2: ") and not out.exists()
    errors: list = []
    summary = get_dataset("hf:team/bad", out, source=str(folder), skip_invalid=True, errors=errors)
    assert summary["rows"] == 1 and len(errors) == 1 and out.exists()


def test_missing_source_folder_is_one_line(tmp_path: Path):
    with pytest.raises(CheemsInputError, match="no such folder"):
        list(iter_converted("hh-rlhf", source=str(tmp_path / "nowhere" / "x")))


def test_offline_without_cache_says_so(tmp_path: Path, monkeypatch):
    # a real process: `datasets` reads HF_DATASETS_OFFLINE when it is imported, as a user's run does
    monkeypatch.delenv("CHEEMS_HUB_MIRROR", raising=False)
    r = run_cli_process(tmp_path, "stats", "hh-rlhf:harmless-base@test", env={"HF_DATASETS_OFFLINE": "1"})
    assert r.returncode == 2
    assert "not in the datasets cache and HF_DATASETS_OFFLINE" in r.stderr and "Traceback" not in r.stderr
    # `stats` has no --source: the advice is the mirror variable and the folder to fill
    assert "--source" not in r.stderr and "or set CHEEMS_HUB_MIRROR to a folder with a copy in Anthropic/hh-rlhf/" \
        in r.stderr, r.stderr


def test_commands_take_names_and_convert_once(mirror: Path, run_cli, tmp_path: Path):
    r = run_cli("stats", "hh-rlhf:harmless-base@test")
    assert r.returncode == 0, r.stderr
    assert "hh-rlhf:harmless-base@test" in r.stdout and "3" in r.stdout
    (mirror / "Anthropic" / "hh-rlhf" / "harmless-base" / "test.jsonl.gz").unlink()  # now only the cache has it
    r = run_cli("validate", "hh-rlhf:harmless-base@test")
    assert r.returncode == 0 and "3 valid row(s)" in r.stdout, r.stdout + r.stderr


def test_eval_by_name_equals_eval_of_the_file(run_cli, tmp_path: Path, sample_annotations: Path, monkeypatch):
    bench = tmp_path / "bench.jsonl"
    assert run_cli("rank", sample_annotations / "open.jsonl", "-o", bench).returncode == 0
    repo = tmp_path / "mirror" / "team" / "bench"
    repo.mkdir(parents=True)
    rows = [json.loads(line) for line in bench.read_text(encoding="utf-8").splitlines()]
    (repo / "test.jsonl").write_text("".join(json.dumps({**r, "subset": "open"}, ensure_ascii=False) + "\n"
                                             for r in rows), encoding="utf-8")
    monkeypatch.setenv("CHEEMS_HUB_MIRROR", str(tmp_path / "mirror"))
    by_file = tmp_path / "file.json"
    by_name = tmp_path / "name.json"
    assert run_cli("eval", bench, "--scorer", "length", "--json", by_file, "--bootstrap", "0").returncode == 0
    r = run_cli("eval", "hf:team/bench@test", "--scorer", "length", "--json", by_name, "--bootstrap", "0")
    assert r.returncode == 0, r.stderr
    a, b = json.loads(by_file.read_text()), json.loads(by_name.read_text())
    assert a["subsets"]["open"]["accuracy"] == b["subsets"]["open"]["accuracy"]
    assert a["overall"] == b["overall"]


def test_data_list_and_info(run_cli):
    r = run_cli("data", "list")
    assert r.returncode == 0
    lines = r.stdout.splitlines()
    for entry in CATALOG.values():
        line = next(l for l in lines if l.startswith(entry.name + " "))
        assert entry.hub_id in line and entry.licence.split()[0] in line
    r = run_cli("data", "info", "pku-saferlhf")
    assert r.returncode == 0 and "PKU-Alignment/PKU-SafeRLHF" in r.stdout and "axis" in r.stdout
    r = run_cli("data", "info", "nosuch")
    assert r.returncode == 2 and "no dataset 'nosuch'" in r.stderr


def test_data_get_cli(mirror: Path, run_cli, tmp_path: Path):
    r = run_cli("data", "get", "hh-rlhf", "--config", "harmless-base", "--split", "test", "--limit", "2",
                "-o", "hh.jsonl")
    assert r.returncode == 0, r.stderr
    assert len((tmp_path / "hh.jsonl").read_text(encoding="utf-8").splitlines()) == 2
    r = run_cli("data", "get", "hh-rlhf", "--split", "nope", "--config", "harmless-base", "-o", "x.jsonl")
    assert r.returncode == 2 and "nope" in r.stderr and not (tmp_path / "x.jsonl").exists()


def test_non_commercial_licence_said_once(tmp_path: Path, monkeypatch):
    monkeypatch.setenv("CHEEMS_CACHE_DIR", str(tmp_path / "cache"))
    entry = next(e for e in CATALOG.values() if e.non_commercial)
    said: list[str] = []
    from cheems.catalog.get import licence_notice, remember_licence_shown

    assert licence_notice(entry, said.append) and licence_notice(entry, said.append)  # no read finished yet
    remember_licence_shown(entry)
    assert not licence_notice(entry, said.append)
    assert len(said) == 2 and entry.licence in said[0]


def test_a_read_that_converts_nothing_keeps_the_file_already_there(tmp_path: Path):
    folder = tmp_path / "bad"
    folder.mkdir()
    (folder / "train.jsonl").write_text(json.dumps({"prompt": "问题", "chosen": ""}) + "\n", encoding="utf-8")
    out = tmp_path / "out.jsonl"
    out.write_text("mine\n", encoding="utf-8")
    with pytest.raises(CheemsInputError, match="no rows converted, 1 skipped"):
        get_dataset("hf:team/bad", out, source=str(folder), skip_invalid=True)
    assert out.read_text(encoding="utf-8") == "mine\n"


def test_every_entry_is_documented():
    doc = (Path(__file__).resolve().parents[1] / "docs" / "catalog.md").read_text(encoding="utf-8")
    for entry in CATALOG.values():
        assert f"| `{entry.name}` | {entry.title} | `{entry.hub_id}` |" in doc, entry.name


def test_file_names_with_colons_or_ats_are_files():
    assert parse_spec("runs/data@2024.jsonl") is None and parse_spec("open:v2.jsonl") is None


def test_sizes_fit_the_list():
    assert all(len(e.size) <= 24 for e in CATALOG.values()), [e.size for e in CATALOG.values() if len(e.size) > 24]


def test_train_takes_names_for_its_data(mirror: Path, run_cli, tmp_path: Path, cli_tiny_model: Path):
    r = run_cli("train", "--model", cli_tiny_model, "--train", "hf:team/pairs", "--eval", "hh-rlhf:harmless-base@test",
                "--epochs", "1", "--learning-rate", "1e-3", "--gradient-accumulation", "1", "-o", "rm")
    assert r.returncode == 0, r.stderr
    summary = json.loads((tmp_path / "rm" / "train_summary.json").read_text(encoding="utf-8"))
    assert summary["pairs"] == 2  # the two rows of team/pairs
    assert round(summary["eval"]["accuracy"] * 3, 9) in (0, 1, 2, 3)  # the three HH pairs, each right or wrong


# ----------------------------------------------------------------------------- bad --source folders

PAIR = {"prompt": "一周有几天？", "chosen": "七天。", "rejected": "五天。"}


def jsonl(*rows: dict) -> bytes:
    return "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows).encode("utf-8")


def parquet(*rows: dict) -> bytes:
    import io

    import pyarrow as pa
    import pyarrow.parquet as pq

    sink = io.BytesIO()
    pq.write_table(pa.Table.from_pylist(list(rows)), sink)
    return sink.getvalue()


HUOZI_ROW = {"prompt": "一周有几天？", "chosen": "七天。", "reject": "五天。"}
# (id, the source folder's files, the dataset, what the one error line holds)
BAD_SOURCES = [
    ("a-number-among-texts", {"train.jsonl": jsonl(PAIR, PAIR | {"chosen": 7})}, "hf:team/x",
     ("src@train:2: chosen: missing or not a string", "--skip-invalid leaves such rows out and counts them")),
    ("huozi-chosen-a-number", {"huozi_rlhf_data.json": jsonl(HUOZI_ROW, HUOZI_ROW | {"chosen": 7})}, "huozi",
     ("src@train:2: chosen: must be a string, got int", "--skip-invalid leaves such rows out")),
    ("a-list-among-texts", {"train.jsonl": jsonl(PAIR, PAIR | {"rejected": ["五天。"]})}, "hf:team/x",
     ("src@train:2: ", "--skip-invalid")),
    ("not-utf8", {"train.jsonl": jsonl(PAIR) + '{"prompt": "café", "chosen": "a"}\n'.encode("latin-1")}, "hf:team/x",
     ("src/train.jsonl:2: is not UTF-8 text (byte 0xe9",)),
    ("parquet-beside-jsonl", {"train-a.jsonl": jsonl(PAIR, PAIR), "train-b.parquet": parquet(PAIR, PAIR)}, "hf:team/x",
     ("src: hf:team/x: the folder holds data files of several formats (1 JSON file, 1 Parquet file)",)),
]


@pytest.mark.parametrize("files, name, parts", [c[1:] for c in BAD_SOURCES], ids=[c[0] for c in BAD_SOURCES])
def test_a_bad_source_folder_is_one_line_and_nothing_written(run_cli, tmp_path: Path, files, name, parts):
    (tmp_path / "src").mkdir()
    for file, data in files.items():
        (tmp_path / "src" / file).write_bytes(data)
    r = run_cli("data", "get", name, "--source", "src", "-o", "out.jsonl")
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    lines = [line for line in r.stderr.splitlines() if line.startswith("error: ")]
    assert len(lines) == 1 and all(p in lines[0] for p in parts), r.stderr
    assert not (tmp_path / "out.jsonl").exists()


def test_skip_invalid_leaves_a_row_of_another_type_out_and_keeps_the_others_texts(run_cli, tmp_path: Path):
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "train.jsonl").write_bytes(jsonl(PAIR, PAIR | {"chosen": 7}, PAIR | {"prompt": "一年有几季？"}))
    r = run_cli("data", "get", "hf:team/x", "--source", "src", "-o", "out.jsonl", "--skip-invalid")
    assert r.returncode == 0, r.stderr
    assert "skipped 1 invalid row(s)" in r.stderr and "src@train:2: chosen" in r.stderr
    rows = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text(encoding="utf-8").splitlines()]
    assert [r["responses"][0]["content"] for r in rows] == ["七天。", "七天。"]  # texts, not their JSON
    assert "wrote 2 rows" in r.stdout


def test_an_output_in_the_mirrors_copy_of_the_dataset_is_refused(mirror: Path, run_cli):
    source = mirror / "team" / "pairs" / "data" / "train.jsonl"
    before = source.read_bytes()
    r = run_cli("data", "get", "hf:team/pairs", "-o", source)
    assert r.returncode == 2 and "is also an input" in r.stderr and r.stderr.count("\n") == 1, r.stderr
    assert source.read_bytes() == before


def helpsteer_row(prompt: str, response: str, rating: int) -> dict:
    return {"prompt": prompt, "response": response, "helpfulness": rating, "correctness": rating, "coherence": 3,
            "complexity": 1, "verbosity": 1}


def test_what_a_conversion_leaves_out_or_keeps_twice_is_said(run_cli, tmp_path: Path):
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "train.jsonl.gz").write_bytes(gzip.compress(jsonl(
        helpsteer_row("一周有几天？", "七天。", 4), helpsteer_row("一周有几天？", "五天。", 0),
        helpsteer_row("一年有几季？", "四季。", 4),  # a prompt with one response: nothing to rank
        helpsteer_row("月亮会发光吗？", "不会，它反射阳光。", 3), helpsteer_row("月亮会发光吗？", "不会，它反射阳光。", 2))))
    (tmp_path / "src" / "validation.jsonl.gz").write_bytes(gzip.compress(jsonl(helpsteer_row("你好", "你好！", 3))))
    r = run_cli("data", "get", "helpsteer2", "--source", "src", "-o", "out.jsonl")
    assert r.returncode == 0, r.stderr
    assert "wrote 2 rows" in r.stdout
    assert "note: helpsteer2@train: left out 1 prompts with a single response (nothing to rank)" in r.stderr
    assert "warning: helpsteer2@train: 1 row(s) hold two responses of identical text (chosen equals rejected)" \
        in r.stderr


def test_a_pair_whose_chosen_equals_its_rejected_is_kept_with_a_warning(run_cli, tmp_path: Path):
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "huozi_rlhf_data.json").write_bytes(jsonl(HUOZI_ROW, HUOZI_ROW | {"reject": "七天。"}))
    r = run_cli("data", "get", "huozi", "--source", "src", "-o", "out.jsonl")
    assert r.returncode == 0, r.stderr
    assert "wrote 2 rows" in r.stdout and r.stderr.count("identical text") == 1
    assert "warning: huozi@train: 1 row(s) hold two responses of identical text" in r.stderr


# ----------------------------------------------------------------------------- lines that do not parse

UNPARSED = "--skip-invalid leaves out rows that do not convert, not lines that do not parse"


def test_a_line_that_is_not_json_names_its_file_and_line_and_what_skip_invalid_does(run_cli, tmp_path: Path):
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "train.jsonl").write_bytes(jsonl(PAIR) + b'{"prompt": "cut short\n' + jsonl(PAIR))
    for flags in ((), ("--skip-invalid",)):  # datasets reads the file whole: the flag cannot skip the line
        r = run_cli("data", "get", "hf:team/x", "--source", "src", "-o", "out.jsonl", *flags)
        lines = [line for line in r.stderr.splitlines() if "examples/s]" not in line and line.strip()]  # datasets' bar
        assert r.returncode == 2 and len(lines) == 1 and "Traceback" not in r.stderr, r.stderr
        assert lines[0].startswith("error: src/train.jsonl:2: is not JSON") and UNPARSED in lines[0], r.stderr
        assert not (tmp_path / "out.jsonl").exists()


def test_the_first_line_not_json_is_found_in_lines_and_documents(tmp_path: Path):
    (tmp_path / "a.json").write_text(json.dumps({"data": [PAIR, PAIR]}, indent=2), encoding="utf-8")  # a document
    (tmp_path / "b.jsonl").write_bytes(jsonl(PAIR, PAIR))
    assert first_line_not_json(tmp_path) is None
    (tmp_path / "c.json").write_text('[\n{"prompt": "x"},\n{"prompt": }\n]\n', encoding="utf-8")
    found = first_line_not_json(tmp_path)
    assert (found.file, found.line) == (str(tmp_path / "c.json"), 3) and "is not JSON" in str(found)
    (tmp_path / "c.json").unlink()
    with gzip.open(tmp_path / "d.jsonl.gz", "wb") as f:
        f.write(jsonl(PAIR, PAIR) + b"{oops}\n")
    found = first_line_not_json(tmp_path)
    assert (found.file, found.line) == (str(tmp_path / "d.jsonl.gz"), 3)
    assert first_line_not_json(tmp_path / "nowhere") is None


def test_a_tsv_row_with_more_fields_than_its_header_is_one_line(run_cli, tmp_path: Path):
    shutil.copytree(FIXTURES / "zhihu", tmp_path / "src")
    with open(tmp_path / "src" / "zhihu_3k_rlfh.tsv", "a", encoding="utf-8") as f:
        f.write("问\t答\t" + "\t".join(["多"] * 12) + "\n")
    r = run_cli("data", "get", "zhihu", "--source", "src", "-o", "out.jsonl")
    lines = [line for line in r.stderr.splitlines() if "examples/s]" not in line and line.strip()]  # datasets' bar
    assert r.returncode == 2 and len(lines) == 1 and "Traceback" not in r.stderr, r.stderr
    assert "fields in line" in lines[0] and UNPARSED in lines[0], r.stderr


# ----------------------------------------------------------------------------- the files of a local copy


def test_data_info_names_the_files_a_local_copy_holds(run_cli):
    r = run_cli("data", "info", "zhihu")
    assert r.returncode == 0, r.stderr
    assert "mirror folder: $CHEEMS_HUB_MIRROR/liyucheng/zhihu_rlhf_3k" in r.stdout
    assert "files read: zhihu_3k_rlfh.tsv (train)" in r.stdout
    r = run_cli("data", "info", "helpsteer2-preference")
    assert "files read: preference/preference.jsonl.gz (train, validation)" in r.stdout
    r = run_cli("data", "info", "cheemsbench")
    assert "files read: data/cheems_bench/open.jsonl (open), data/cheems_bench/human.jsonl (human)" in r.stdout


@pytest.mark.parametrize("command", [("data", "get", "zhihu", "-o", "out.jsonl"), ("stats", "zhihu")],
                         ids=["data-get", "stats"])
def test_a_mirror_file_of_another_name_is_one_line_naming_the_file(run_cli, tmp_path: Path, monkeypatch, command):
    copy = tmp_path / "mirror" / "liyucheng" / "zhihu_rlhf_3k"
    copy.mkdir(parents=True)
    shutil.copy(FIXTURES / "zhihu" / "zhihu_3k_rlfh.tsv", copy / "zhihu.tsv")  # renamed on the way
    monkeypatch.setenv("CHEEMS_HUB_MIRROR", str(tmp_path / "mirror"))
    r = run_cli(*command)
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2 and len(lines) == 1, r.stderr
    assert lines[0] == f"error: zhihu: {copy} has no zhihu_3k_rlfh.tsv; zhihu reads zhihu_3k_rlfh.tsv (train)", r.stderr


def test_the_docs_tables_are_the_catalogue():
    """docs/catalog.md's tables (the entries, the files of a local copy) are made from the entries:
    `python -m cheems.catalog.tables docs/catalog.md` writes them afresh."""
    page = (REPO_ROOT / "docs" / "catalog.md").read_text(encoding="utf-8")
    assert page == with_tables(page), "run `python -m cheems.catalog.tables docs/catalog.md`"
    assert "| `zhihu` | `liyucheng/zhihu_rlhf_3k/` | `zhihu_3k_rlfh.tsv` (train) |" in page
