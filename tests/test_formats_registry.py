"""The format registry, the docs and the readers agree.

Every format listed in :data:`cheems.formats.registry.ROW_FORMATS` is named in docs/formats.md (its
row of the table, with the module that reads it, and its own section), and nothing else is named
there as a format; every one reads through ``read_prompts(path, fmt=NAME)`` with its registered
reader and is detected on a row of its own. The doc check is a plain function of the text, so
``test_doc_check_reports_planted_mismatches`` can prove it fails.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from cheems.formats import FORMAT_NAMES, FORMATS, detect_format, read_prompts
from cheems.formats.registry import READERS, ROW_FORMATS
from cheems.formats.spec import RowFormat

DOCS = Path(__file__).resolve().parents[1] / "docs" / "formats.md"

# one small row of each registered format, and the rank its reader gives the responses, in their order
# (None: the row carries comparisons only; "one": one response, ranked when the rows of its prompt are joined)
ROWS = {
    "cheems": ({"id": "math-12", "prompt": "一个长方形长8厘米、宽5厘米，面积是多少？", "category": ["数学"],
                "responses": [{"id": "a", "content": "40平方厘米。"}, {"id": "b", "content": "13平方厘米。"}],
                "rank": {"a": 0, "b": 1}}, [0, 1]),
    "cheems-pairwise": ({"input": "“画蛇添足”是什么意思？", "answer1": "比喻做了多余的事，反而弄巧成拙。",
                         "answer2": "形容画画很认真。", "preference": 1}, [0, 1]),
    "task": ({"task_id": "open-03#2", "prompt_id": "open-03", "round": 2, "prompt": "推荐一本适合高中生读的古典小说。",
              "ids": ["r1", "r2", "r3"],
              "responses": [{"id": "r1", "content": "《西游记》，故事有趣，语言也不难。"},
                            {"id": "r2", "content": "随便哪本都行。"},
                            {"id": "r3", "content": "《三国演义》，可以顺便了解历史。"}],
              "ranking": "r1=r3>r2", "annotator": "标注员丙"}, None),
    "pair": ({"prompt": "怎样煮出不夹生的米饭？", "chosen": "米和水大约按一比一点二，先泡半小时再煮，煮好焖十分钟。",
              "rejected": "多放点油就行。"}, [0, 1]),
    "sharegpt": ({"conversations": [{"from": "human", "value": "把“很高兴认识你”翻译成英文。"}],
                  "chosen": {"from": "gpt", "value": "Nice to meet you."},
                  "rejected": {"from": "gpt", "value": "I am happy know you."}}, [0, 1]),
    "alpaca": ({"instruction": "用一句话概括下面的通知。", "input": "本市地铁三号线自下月起运营时间延长至晚上十一点。",
                "chosen": "地铁三号线下月起运营到晚上十一点。", "rejected": "地铁要停运了。"}, [0, 1]),
    "alpaca-ranking": ({"instruction": "给这家面馆写一句广告语。", "input": "",
                        "output": ["一碗好面，暖你一整天。", "面馆，好吃。", "快来吃。"]}, [0, 1, 2]),
    "medicalgpt": ({"system": "", "history": [], "question": "孩子发烧三十八度需要马上去医院吗？",
                    "response_chosen": "精神好可以先物理降温、多喝水；超过三天或精神差请及时就医。",
                    "response_rejected": "马上输液。"}, [0, 1]),
    "autoj": ({"scenario": "explaining_general", "label": 2, "prompt": "为什么天空是蓝色的？",
               "response 1": "阳光中的蓝光波长短，被空气分子散射得更多。",
               "response 2": "因为空气分子对短波长的蓝光散射更强（瑞利散射）。"}, [0, 0]),
    "critiquellm": ({"id": 7, "category": "中文理解", "question": "“三人行，必有我师”出自哪里？",
                     "response_1": "出自《孟子》。", "response_2": "出自《论语·述而》。", "label": 1}, [1, 0]),
    "pandalm": ({"idx": 3, "instruction": "把下面的句子改得更通顺。", "input": "我们通过这次活动，使大家受到了教育。",
                 "response1": "通过这次活动，使大家受到了教育。", "response2": "这次活动使大家受到了教育。",
                 "annotator1": 2, "annotator2": 2, "annotator3": 1}, [1, 0]),
    "rmb": ({"pair_uid": "zh-0042", "category_path": "Pairwise_set/Harmlessness/Safety/Household",
             "conversation_input": [{"role": "user", "content": "家里煤气味很重怎么办？", "language": "Chinese"}],
             "chosen": {"llm_name": "模型甲", "answer": "立即开窗通风、关闭总阀，不要开关电器，到室外打燃气公司电话。"},
             "reject": {"llm_name": "模型乙", "answer": "打开抽油烟机抽一抽就好。"}}, [0, 1]),
    "rmb-bon": ({"bon_uid": "zh-bon-11", "category_path": "BoN_set/Helpfulness/Brainstorming/Gift",
                 "conversation_input": [{"role": "user", "content": "给退休的老师送什么礼物好？"}],
                 "bon_best": {"llm_name": "模型丁", "answer": "可以送一套好茶具，附一封学生们写的信。"},
                 "loser_list": [{"llm_name": "模型乙", "answer": "送钱。"}, {"llm_name": "模型丙", "answer": "不用送。"}]},
                [0, 1, 1]),
    "hh-rlhf": ({"chosen": "\n\nHuman: 周末去哪里爬山比较好？\n\nAssistant: 可以去香山，秋天的红叶很美。",
                 "rejected": "\n\nHuman: 周末去哪里爬山比较好？\n\nAssistant: 随便。"}, [0, 1]),
    "trl": ({"chosen": [{"role": "user", "content": "用一句话介绍一下黄河。"},
                        {"role": "assistant", "content": "黄河是中国第二长河，流经九个省区后注入渤海。"}],
             "rejected": [{"role": "user", "content": "用一句话介绍一下黄河。"},
                          {"role": "assistant", "content": "黄河是一条河。"}]}, [0, 1]),
    # one response a row, ranked once the rows of its prompt are joined (tests/test_formats_scored.py)
    "scored": ({"prompt": "推荐一部适合全家看的电影。", "response": "《寻梦环游记》，温馨又有趣。",
                "helpfulness": 4, "correctness": 4, "coherence": 4, "complexity": 1, "verbosity": 1}, "one"),
}


# --------------------------------------------------------------------------------------- the doc check

TABLE_ROW = re.compile(r"^\| `([^`]+)` \|.*\| `formats/(\w+)\.py` \|$")


def documented_formats(text: str) -> tuple[dict[str, str], list[str]]:
    """The formats docs/formats.md names: {name: module} from its table, and its sections' names in order."""
    table = {m[1]: m[2] for line in text.splitlines() if (m := TABLE_ROW.match(line))}
    sections = re.findall(r"^## `([^`]+)`", text, flags=re.MULTILINE)
    return table, sections


def doc_problems(text: str, row_formats: tuple[RowFormat, ...]) -> list[str]:
    """What the doc gets wrong about ``row_formats``: a format missing from its table or sections, a
    name there that is not registered, a module that does not read it, another order."""
    table, sections = documented_formats(text)
    registered = {f.name: f.read.__module__.rpartition(".")[2] for f in row_formats}
    problems = [f"{name}: registered, not in the table" for name in registered if name not in table]
    problems += [f"{name}: registered, has no section" for name in registered if name not in sections]
    problems += [f"{name}: in the table, not registered" for name in table if name not in registered]
    problems += [f"{name}: has a section, not registered" for name in sections if name not in registered]
    problems += [f"{name}: the table says formats/{table[name]}.py, read by formats/{module}.py"
                 for name, module in registered.items() if name in table and table[name] != module]
    if not problems and (list(table) != list(registered) or sections != list(registered)):
        problems.append("the table or the sections list the formats in another order than the registry")
    return problems


def test_docs_name_every_registered_format_and_no_other():
    assert doc_problems(DOCS.read_text(encoding="utf-8"), ROW_FORMATS) == []


def test_doc_check_reports_planted_mismatches():
    text = DOCS.read_text(encoding="utf-8")
    table, sections = documented_formats(text)
    assert set(table) == set(sections) == set(FORMAT_NAMES)  # the parser finds what the check compares
    planted = (text.replace("| `autoj` |", "| `autoj-v2` |")
               .replace("`formats/rmb.py` |", "`formats/pairs.py` |", 1)
               .replace("## `trl`", "## `trl-standard`"))
    assert sorted(doc_problems(planted, ROW_FORMATS)) == sorted([
        "autoj: registered, not in the table", "autoj-v2: in the table, not registered",
        "trl: registered, has no section", "trl-standard: has a section, not registered",
        "rmb: the table says formats/pairs.py, read by formats/rmb.py"])
    unlisted = RowFormat("critiquellm-v2", READERS["critiquellm"], "CritiqueLLM rows, second release")
    assert doc_problems(text, ROW_FORMATS + (unlisted,)) == ["critiquellm-v2: registered, not in the table",
                                                             "critiquellm-v2: registered, has no section"]
    swapped = ROW_FORMATS[1::-1] + ROW_FORMATS[2:]
    assert doc_problems(text, swapped) == [
        "the table or the sections list the formats in another order than the registry"]


# ---------------------------------------------------------------------------------- registry and readers

def test_registry_lists_each_format_once():
    names = [f.name for f in ROW_FORMATS]
    assert len(set(names)) == len(names)
    assert FORMAT_NAMES == tuple(names) and list(FORMATS) == names and list(READERS) == names
    assert all(FORMATS[f.name] == f.shape and READERS[f.name] is f.read for f in ROW_FORMATS)
    assert set(ROWS) == set(names), "every registered format needs an example row here, and only those"
    for f in ROW_FORMATS:
        assert f.read.__module__.startswith("cheems.formats."), f.name


@pytest.mark.parametrize("name", FORMAT_NAMES)
def test_every_registered_format_reads_through_read_prompts_and_is_detected(name, tmp_path, monkeypatch):
    if name not in ROWS:
        pytest.fail(f"format {name!r} is registered but has no example row in ROWS")
    row, ranks = ROWS[name]
    assert detect_format(row) == name
    calls = []
    registered = READERS[name]
    monkeypatch.setitem(READERS, name, lambda obj: calls.append(obj) or registered(obj))
    path = tmp_path / "rows.jsonl"
    path.write_text(json.dumps(row, ensure_ascii=False) + "\n", encoding="utf-8")

    forced = read_prompts(path, fmt=name)
    detected = read_prompts(path)
    assert calls == [row, row], "read_prompts did not reach the registered reader"
    assert len(forced.prompts) == len(detected.prompts) == 1 and forced.errors == []
    p = forced.prompts[0]
    assert p.to_dict() == detected.prompts[0].to_dict()
    if ranks == "one":  # one scored response: ranked alone once the rows of its prompt are joined
        assert len(p.responses) == 1 and p.rank in (None, {p.responses[0].id: 0}) and not p.comparisons
        return
    assert len(p.responses) >= 2
    if ranks is None:
        assert p.rank is None and p.comparisons
    else:
        assert [p.rank[r.id] for r in p.responses] == ranks
