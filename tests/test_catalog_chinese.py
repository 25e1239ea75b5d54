"""The Chinese catalogue entries, each read from a fixture laid out like its hub repository
through the real ``datasets.load_dataset`` path (:func:`cheems.catalog.get.iter_converted`
with ``source=``) and compared with the rows written out by hand below.

The fixtures are written by ``tests/fixtures/catalog/make_chinese.py``. Derived ids are
:func:`cheems.records.prompt_id` of the prompt and both texts, spelled out here so that a
change of the id rule shows as a failure.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from cheems.catalog.entry import Conversion
from cheems.catalog.get import iter_converted
from cheems.catalog.registry import find_entry
from cheems.records import CheemsInputError

FIXTURES = Path(__file__).parent / "fixtures" / "catalog"


@pytest.fixture(autouse=True)
def fresh_datasets_cache(tmp_path, monkeypatch):
    """A ``datasets`` cache of this test's own: ``datasets`` keys a local folder's cache by the
    folder's name, not its contents, so an edited copy (or a regenerated fixture) would
    otherwise be read from an older cache."""
    import datasets.config

    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", str(tmp_path / "datasets-cache"))


def converted(name: str, split: str | None = None, source: Path | None = None) -> tuple[list[dict], list]:
    """The rows of entry ``name`` read from its fixture (or ``source``), and the errors of the
    rows left out."""
    errors: list = []
    rows = [p.to_dict() for p in iter_converted(name, source=str(source or FIXTURES / name), split=split,
                                                skip_invalid=True, errors=errors)]
    return rows, errors


def pair(pid, prompt, chosen, rejected, subset, *, category=None, tie=False, **extra) -> dict:
    ids = ("a", "b") if tie else ("chosen", "rejected")
    row = {"id": pid, "prompt": prompt,
           "responses": [{"id": ids[0], "content": chosen}, {"id": ids[1], "content": rejected}],
           "rank": {ids[0]: 0, ids[1]: 0 if tie else 1}}
    if category:
        row["category"] = category
    row["subset"] = subset
    row.update(extra)
    return row


def only_error(errors: list, field: str, line: int) -> None:
    assert len(errors) == 1
    assert errors[0].field == field and errors[0].line == line


# ----------------------------------------------------------------------------- hh-rlhf-cn

HH_TRAIN = [
    pair("7c3bdd917aa5f934", "今年我想在室内种一些水果，有什么适合新手的吗？",
         "草莓和柠檬都比较适合室内种植。草莓需要充足的光照，放在朝南的窗台最好；柠檬树可以选矮生品种，记得不要浇水过多。",
         "你说的室内是指哪里？", "hh-rlhf-cn"),
    pair("e1b955a1c84f7245", "怎样才能让米饭煮得更香？",
         "淘米时不要用力搓，浸泡二十分钟再煮，水和米的比例大约是一点二比一，煮好后焖十分钟再开盖。",
         "多放点水就行。", "hh-rlhf-cn"),
    pair("691acc0f6eb88968", "我邻居的狗每天晚上都叫，我该怎么办？",
         "可以先礼貌地和邻居沟通，说明狗叫影响了你的休息；如果沟通无效，可以联系物业或社区居委会协调。",
         "你可以往他家门口扔点东西，让狗闭嘴。", "hh-rlhf-cn"),
]
HH_TEST = [
    pair("dfd76b8f2412193d", "推荐一本适合初学者的编程书。",
         "《Python编程：从入门到实践》比较适合初学者，前半部分讲基础语法，后半部分带你做几个完整的小项目。",
         "编程书都差不多，随便买一本吧。", "hh-rlhf-cn"),
]


def test_hh_rlhf_cn_train_split():
    rows, errors = converted("hh-rlhf-cn")
    assert rows == HH_TRAIN and errors == []


def test_hh_rlhf_cn_test_split_skips_the_pair_with_an_empty_response():
    rows, errors = converted("hh-rlhf-cn", split="test")
    assert rows == HH_TEST
    only_error(errors, "chosen", 2)
    assert "is empty" in str(errors[0])


# ----------------------------------------------------------------------------- huozi

HUOZI = [
    pair("30e63351dc004652", "请用一句话介绍哈尔滨。", "哈尔滨是黑龙江省省会，以冰雪文化和欧式建筑闻名，被称为“冰城”。",
         "哈尔滨是一个城市。", "huozi"),
    pair("7be8d09ae8ea7648", "写一首关于秋天的五言绝句。", "霜叶染山红，\n归雁过长空。\n稻香千里外，\n人在晚晴中。",
         "秋天到了，树叶黄了，天气凉了，大雁飞走了。", "huozi"),
    pair("cbc2a843c87c9acf", "一个数加上5等于12，这个数是多少？", "设这个数为x，则x + 5 = 12，所以x = 7。",
         "这个数是17。", "huozi"),
]


def test_huozi_reads_the_reject_column_as_the_rejected_response():
    rows, errors = converted("huozi")
    assert rows == HUOZI and errors == []


def test_huozi_keeps_an_id_and_a_category_where_a_row_has_them():
    row = {"id": 17, "prompt": "你好", "chosen": "你好！有什么可以帮你？", "reject": "嗯。", "category": "闲聊"}
    [p] = find_entry("huozi").convert(row, 0, Conversion("huozi", "train"))
    assert p.to_dict() == pair("17", "你好", "你好！有什么可以帮你？", "嗯。", "huozi", category=["闲聊"])


# ----------------------------------------------------------------------------- kyara

KYARA = [
    pair("2e97e2db2e3aeb89", "解释一下什么是光合作用。",
         "光合作用是绿色植物利用光能，把二氧化碳和水转化为葡萄糖并释放氧气的过程，主要在叶绿体中进行。",
         "光合作用就是植物晒太阳。", "kyara"),
    pair("d6d0629c943dfcb6", "用Python写一个函数，判断一个整数是否为质数。",
         "```python\ndef is_prime(n: int) -> bool:\n    if n < 2:\n        return False\n    i = 2\n"
         "    while i * i <= n:\n        if n % i == 0:\n            return False\n        i += 1\n"
         "    return True\n```",
         "```python\ndef is_prime(n):\n    return n % 2 == 1\n```", "kyara"),
    pair("dd469be6deb8c8ff", "台北有哪些适合带小孩去的景点？",
         "可以去台北市立动物园、儿童新乐园和国立台湾科学教育馆，交通都很方便，适合亲子同游。", "台北101。", "kyara"),
]


def test_kyara_pairs_of_texts():
    rows, errors = converted("kyara")
    assert rows == KYARA and errors == []


def test_kyara_pairs_given_as_message_lists():
    user = {"role": "user", "content": "北京的简称是什么？"}
    good, bad = {"role": "assistant", "content": "北京的简称是“京”。"}, {"role": "assistant", "content": "沪。"}
    convert, conv = find_entry("kyara").convert, Conversion("kyara", "train")
    implicit = {"chosen": [user, good], "rejected": [user, bad]}
    explicit = {"prompt": [user], "chosen": [good], "rejected": [bad]}
    for row in (implicit, explicit):
        [p] = convert(row, 0, conv)
        assert (p.prompt, [r.content for r in p.responses], p.rank) == (
            "北京的简称是什么？", ["北京的简称是“京”。", "沪。"], {"chosen": 0, "rejected": 1})


# ----------------------------------------------------------------------------- zhihu

DEEP_NIGHT = "为什么很多人喜欢在深夜思考人生？"
DEEP_NIGHT_BEST = ("深夜环境安静，外界干扰少，白天压下去的情绪和念头会浮上来；再加上疲劳时理性控制减弱，"
                   "人更容易陷入对过去和未来的反思。")
ZHIHU = [
    pair("06aa475226566009", DEEP_NIGHT, DEEP_NIGHT_BEST, "因为睡不着。", "zhihu",
         question_id=31245, upvotes_chosen=1291, upvotes_rejected=91),
    pair("83b3be15495ca823", DEEP_NIGHT, DEEP_NIGHT_BEST, "夜里人容易多愁善感，\n第二天醒来就好了。", "zhihu",
         question_id=31245, upvotes_chosen=1291, upvotes_rejected=12),
    pair("e3c40115bf0e596d", "如何评价《三体》的电视剧改编？", "整体还原度很高，尤其是前几集对科学边界的铺陈很扎实。",
         "节奏偏慢，但演员的表演可圈可点。", "zhihu", tie=True,
         question_id=58810, upvotes_chosen=40, upvotes_rejected=40),
]


def test_zhihu_reads_the_3k_tsv_only_and_keeps_equal_votes_as_a_tie():
    rows, errors = converted("zhihu")
    assert rows == ZHIHU  # the 26k CSV beside it is not read
    only_error(errors, "chosen", 4)  # an empty answer cell


# ----------------------------------------------------------------------------- dpo-en-zh

DPO_ZH = [
    pair("20567b0e840ddd2e", "把“欲速则不达”翻译成英文。", "\"More haste, less speed.\"", "Want fast then not reach.", "zh"),
    pair("09c956850397da99",
         [{"role": "user", "content": "我想学做红烧肉，需要准备哪些材料？"},
          {"role": "assistant", "content": "需要五花肉、冰糖、生抽、老抽、料酒、姜和八角。"},
          {"role": "user", "content": "冰糖可以用白砂糖代替吗？"}],
         "可以，但白砂糖炒出的糖色不如冰糖透亮，用量稍减一些，火候也要更小，避免炒糊发苦。", "不可以，必须用冰糖。", "zh"),
]


def test_dpo_en_zh_reads_the_zh_config_with_multi_turn_prompts():
    rows, errors = converted("dpo-en-zh")
    assert rows == DPO_ZH  # no row of dpo_en.json
    only_error(errors, "conversations", 3)  # a blank question


def test_dpo_en_zh_is_only_the_chinese_config():
    with pytest.raises(CheemsInputError, match="no config 'en'"):
        list(iter_converted("dpo-en-zh", source=str(FIXTURES / "dpo-en-zh"), config="en"))


# ----------------------------------------------------------------------------- coig-p

COIG_P = [
    pair("47f976604333d1b9", "小明有5个苹果，吃掉2个后又买了3个，现在有几个？", "5 - 2 + 3 = 6，现在有6个苹果。",
         "现在有10个苹果。", "coig-p", category=["Math"]),
    pair("4123a81d2fb6b1e1",
         [{"role": "system", "content": "你是一位武侠小说作者。"},
          {"role": "user", "content": "写一段两位剑客在雪夜对决的开头。"}],
         "雪落无声，长街尽头的灯笼被风吹得摇晃。两道人影相隔十丈，谁也没有先动。", "两个人开始打架了。", "coig-p",
         category=["Novel"]),
]


def test_coig_p_takes_its_domain_as_the_category():
    rows, errors = converted("coig-p")
    assert rows == COIG_P
    only_error(errors, "rejected", 3)  # a blank response


# ----------------------------------------------------------------------------- missing columns

def _drop_declared_features(card: Path) -> None:
    """Remove ``dataset_info`` from a card's YAML, so ``datasets`` reads the columns the files
    hold (declared features would bring a missing column back as empty cells)."""
    _, front, body = card.read_text(encoding="utf-8").split("---\n", 2)
    meta = yaml.safe_load(front)
    meta.pop("dataset_info", None)
    card.write_text(f"---\n{yaml.safe_dump(meta, allow_unicode=True)}---\n{body}", encoding="utf-8")


def _write_like(rows: list[dict], path: Path) -> None:
    """``rows`` in the file format of ``path`` (the fixture file it replaces)."""
    if path.suffix == ".parquet":
        pq.write_table(pa.Table.from_pylist(rows), path)
    elif path.suffix == ".json":
        path.write_text(json.dumps(rows, ensure_ascii=False), encoding="utf-8")
    else:
        pd.DataFrame(rows).to_csv(path, sep="\t", index=False)


def _read_like(path: Path) -> list[dict]:
    if path.suffix == ".parquet":
        return pq.read_table(path).to_pylist()
    if path.suffix == ".json":
        return json.loads(path.read_text(encoding="utf-8"))
    return pd.read_csv(path, sep="\t").to_dict("records")


@pytest.mark.parametrize("name, data_files, column", [
    ("hh-rlhf-cn", ".parquet", "rejected"),
    ("huozi", ".json", "reject"),
    ("kyara", ".parquet", "chosen"),
    ("zhihu", ".tsv", "prompt"),
    ("dpo-en-zh", ".json", "conversations"),
    ("coig-p", ".parquet", "chosen"),
])
def test_a_missing_column_is_one_error_naming_it(tmp_path, name, data_files, column):
    folder = tmp_path / name
    shutil.copytree(FIXTURES / name, folder)
    for path in folder.rglob(f"*{data_files}"):  # every split's file loses the column
        _write_like([{k: v for k, v in r.items() if k != column} for r in _read_like(path)], path)
    _drop_declared_features(folder / "README.md")
    with pytest.raises(CheemsInputError, match=f"no column\\(s\\) {column} ") as caught:
        list(iter_converted(name, source=str(folder)))
    assert caught.value.field == column and caught.value.line == 1


def test_kyara_without_a_prompt_column_names_it():
    row = {"chosen": "好的答案", "rejected": "差的答案"}
    with pytest.raises(CheemsInputError, match=r"no column\(s\) prompt"):
        list(find_entry("kyara").convert(row, 0, Conversion("kyara", "train")))


# ----------------------------------------------------------------------------- the entries

def test_the_entries_say_where_and_how_they_are_read():
    names = ["hh-rlhf-cn", "huozi", "kyara", "zhihu", "dpo-en-zh", "coig-p"]
    entries = {n: find_entry(n) for n in names}
    assert all(e.language == "zh" and e.licence and e.size for e in entries.values())
    assert entries["hh-rlhf-cn"].splits == ("train", "test") and entries["hh-rlhf-cn"].alternatives == ()
    assert entries["kyara"].gated and not entries["huozi"].gated
    assert entries["zhihu"].data_files == {"train": "zhihu_3k_rlfh.tsv"}
    assert (entries["dpo-en-zh"].configs, entries["dpo-en-zh"].config) == (("zh",), "zh")
    assert entries["huozi"].columns == ("prompt", "chosen", "reject")
