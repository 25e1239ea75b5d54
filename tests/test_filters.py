"""cheems.curation.filters: each rule on Chinese samples, false-positive guards, plain
references for the character counts and the repetition / shingle measures, and the
accounting invariant on random prompts."""

from __future__ import annotations

import json
import random
import unicodedata

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cheems.curation import filters, near_duplicates, text_measures
from cheems.curation.filters import (PROMPT_RULE, RULES, FilterConfig, filter_prompt, filter_prompts,
                                     han_count, jaccard, non_chinese_ratio, repeated_ngram_share,
                                     script_counts, shingles, strip_code_and_formulas)
from cheems.records import CheemsInputError, Comparison, Prompt, Response

FAST = settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# ----------------------------------------------------------------------------- samples

NORMAL = ("长城是中国古代的军事防御工程，修筑历史可以追溯到西周时期。秦始皇统一六国以后，把原来"
          "各国的城墙连接起来，形成了万里长城的雏形。明朝又进行了大规模的修缮，我们今天看到的大部分"
          "长城都是明代留下的。长城不仅是建筑上的奇迹，也是中华民族坚韧精神的象征。")

CODE = '''下面是一个用 Python 统计文本词频的例子，主要用到了 collections 模块：

```python
import re
from collections import Counter


def read_lines(path):
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if line:
                yield line


def tokenize(line):
    return re.findall(r"[a-zA-Z]+", line.lower())


def count_words(path, top=10):
    counter = Counter()
    for line in read_lines(path):
        counter.update(tokenize(line))
    return counter.most_common(top)


if __name__ == "__main__":
    print("=" * 20)
    for word, n in count_words("data.txt"):
        print(f"{word}\\t{n}")
    print("=" * 20)
    print("=" * 20)
```

运行以后会输出出现次数最多的十个单词和它们的次数。文件很大时可以逐行读取，内存占用不会太高。'''

MATH = ("设 $f(x) = x^2 + 2x + 1$，求它的最小值。\n\n配方可得 $$f(x) = (x+1)^2 \\geq 0,$$ "
        "当且仅当 $x = -1$ 时取等号，所以最小值是 $0$。\n\n也可以求导：\\[ f'(x) = 2x + 2 \\]，"
        "令 \\(f'(x) = 0\\) 得 $x = -1$，代回去：\n\n\\begin{aligned} f(-1) &= 1 - 2 + 1 \\\\ "
        "&= 0 \\end{aligned}")

TERMS = ("可以使用 Python 的 pandas 库读取表格数据，再调用 groupby 按地区分组汇总，最后用 "
         "matplotlib 画出柱状图。整个流程只需要十几行代码，很适合初学者练习数据分析。")

SECTIONS = "\n\n".join(f"### 方案{n}\n\n**优点：**\n\n- {a}\n\n**缺点：**\n\n- {b}" for n, a, b in [
    ("一", "成本低，部署快", "扩展性一般"), ("二", "性能稳定，社区活跃", "学习曲线较陡"),
    ("三", "文档齐全", "授权费用高"), ("四", "可以离线运行", "需要专门的硬件"),
    ("五", "界面友好，上手容易", "定制能力有限")])

KEEP = {"normal": NORMAL, "code": CODE, "math": MATH, "terms": TERMS,
        "short_terms": "使用 Python 的 pandas 库", "number": "42", "decimal": "3.14",
        "short_answer": "答案是 12。", "ok": "OK", "sections": SECTIONS,
        "price": "这本书原价 $25，打折后只要 $18，比网上便宜。"}

ENGLISH = ("The Great Wall of China is a series of fortifications built across the historical "
           "northern borders of ancient Chinese states. Most of what remains today dates from "
           "the Ming dynasty.")

HAN_POOL = [chr(c) for c in range(0x4E00, 0x4E00 + 3000)]


def han_text(n: int, seed: int = 0) -> str:
    """``n`` characters of random Han characters with a comma or full stop now and then: long,
    and free of repeated 10-grams."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        out.append("，。"[rng.random() < 0.5] if i % 17 == 16 else rng.choice(HAN_POOL))
    return "".join(out)


def prompt_of(*contents, prompt: str = "请回答下面的问题。", extra=None, **kw) -> Prompt:
    responses = []
    for j, c in enumerate(contents):
        responses.append(c if isinstance(c, Response) else
                         Response(f"r{j}", c, model=f"m{j % 3}", extra=dict(extra or {})))
    return Prompt("p", prompt, responses, **kw)


def verdict(content, *, config: FilterConfig | None = None, prompt: str = "请回答下面的问题。",
            extra=None) -> str | None:
    """The rule that removes ``content`` (None when kept), next to two ordinary responses."""
    r = Response("x", content, model="m", extra=dict(extra or {}))
    p = prompt_of(han_text(300, 1), han_text(300, 2), r, prompt=prompt)
    config = config or FilterConfig(min_responses=1)
    kept, records = filter_prompt(p, config)
    rules = [rec["rule"] for rec in records if rec["response_id"] == "x"]
    assert len(rules) <= 1
    return rules[0] if rules else None


# ----------------------------------------------------------------------------- false-positive guards

@pytest.mark.parametrize("name", sorted(KEEP))
def test_ordinary_answers_are_kept(name):
    assert verdict(KEEP[name]) is None, name


def test_ordinary_answers_kept_together_in_one_prompt():
    p = prompt_of(*KEEP.values())
    kept, records = filter_prompt(p)
    assert records == []
    assert kept.response_ids() == p.response_ids()


def test_english_terms_ratio_below_threshold():
    assert non_chinese_ratio(TERMS) < 0.5
    assert non_chinese_ratio("使用 Python 的 pandas 库") == pytest.approx(12 / 16)
    assert non_chinese_ratio(CODE) < 0.3  # the code block does not count
    assert non_chinese_ratio(CODE, exempt_code=False) > 0.5
    assert non_chinese_ratio(MATH) == 0.0
    assert non_chinese_ratio(MATH, exempt_formulas=False) > 0.0


# ----------------------------------------------------------------------------- each rule

@pytest.mark.parametrize("content", ["", "   \n\t", "\u200b\n", "\u3000"])
def test_empty(content):
    assert verdict(content) == "empty"


def test_min_chars():
    assert verdict("好", config=FilterConfig(min_responses=1, min_chars=2)) == "empty"
    assert verdict("好的") is None


@pytest.mark.parametrize("content", [
    "今天天气很好�我们去公园散步吧。",
    "文件的内容如下\x00\x01，读取时出现了错误。",
    "我们明天早上八点在学校门口集合，记得带上水和午饭。".encode("utf-8").decode("cp1252", errors="ignore"),
    "说明\ue000\ue001书第三页有详细的安装步骤。",
])
def test_garbled(content):
    assert verdict(content) == "garbled"


def test_garbled_details_and_prompt_awareness():
    moji = "这是一段正常的中文句子，但是编码出了问题。".encode("utf-8").decode("cp1252", errors="ignore")
    p = prompt_of(NORMAL, moji)
    _, records = filter_prompt(p, FilterConfig(min_responses=1))
    assert records[0]["rule"] == "garbled" and "mojibake" in records[0]["detail"]
    answer = "� 是 Unicode 的替换字符，解码失败的字节会显示成它，说明文件的编码和读取时用的编码不一致。"
    question = "为什么网页上会显示 � 这样的符号？"
    assert verdict(answer, prompt=question) is None
    assert verdict(answer, prompt=question,
                   config=FilterConfig(min_responses=1, prompt_aware=False)) == "garbled"


def test_repetition_ngram_share():
    loop = "我是一个人工智能助手，很高兴为你服务。" * 30
    assert verdict(loop) == "repetition"
    half = han_text(600, 5) + "这个问题我已经回答过了。" * 30
    p = prompt_of(NORMAL, half)
    _, records = filter_prompt(p, FilterConfig(min_responses=1))
    assert records[0]["rule"] == "repetition" and "20-grams" in records[0]["detail"]
    assert verdict(loop, config=FilterConfig(min_responses=1, rules=("empty",))) is None


def test_repetition_single_line():
    line = "请注意，以上内容仅供参考，具体情况请咨询专业人士"
    parts = []
    for k in range(5):
        parts += [han_text(300, 10 + k), line]
    text = "\n".join(parts)
    assert repeated_ngram_share(normalise(text)) < 0.3  # not enough for the n-gram rule
    _, records = filter_prompt(prompt_of(NORMAL, text), FilterConfig(min_responses=1))
    assert records[0]["rule"] == "repetition" and "line repeated 5 times" in records[0]["detail"]
    fewer = "\n".join(parts[:-2])  # the line 4 times
    assert verdict(fewer) is None


def normalise(text: str) -> str:
    return "".join(text.split())


def test_non_chinese():
    assert verdict(ENGLISH) == "non_chinese"
    japanese = "これは日本語で書かれた文章です。ひらがなとカタカナがたくさん含まれていますので、中国語ではありません。"
    assert verdict(japanese) == "non_chinese"
    russian = "Великая Китайская стена — древнее оборонительное сооружение на севере Китая."
    assert verdict(russian) == "non_chinese"


def test_non_chinese_prompt_aware():
    english_prompt = "What is the Great Wall of China? Please answer briefly."
    assert verdict(ENGLISH, prompt=english_prompt) is None
    translate = "请把这段话翻译成英文：春天来了，公园里的花都开了，很多人带着孩子出来散步。"
    answer = ("Spring has come, and the flowers in the park are all in bloom. Many people are "
              "taking a walk with their children.")
    assert verdict(answer, prompt=translate) is None
    strict = FilterConfig(min_responses=1, prompt_aware=False)
    assert verdict(answer, prompt=translate, config=strict) == "non_chinese"
    assert verdict(ENGLISH, prompt=english_prompt, config=strict) == "non_chinese"


def test_non_chinese_short_answers_not_judged():
    assert verdict("Yes, exactly.") is None  # 12 letters < min_chars_for_ratio
    lenient = FilterConfig(min_responses=1, min_chars_for_ratio=5)
    assert verdict("Yes, exactly.", config=lenient) == "non_chinese"


def test_truncated():
    assert verdict(NORMAL, extra={"finish_reason": "length"}) == "truncated"
    assert verdict(NORMAL, extra={"finish_reason": "stop"}) is None
    open_fence = "示例代码如下：\n\n```python\ndef add(a, b):\n    return a +"
    assert verdict(open_fence) == "truncated"
    open_formula = "根据质能方程 $$ E = mc^2 可知，质量和能量可以相互转化，所以"
    assert verdict(open_formula) == "truncated"
    no_heuristics = FilterConfig(min_responses=1, detect_truncation_heuristics=False)
    assert verdict(open_fence, config=no_heuristics) is None
    assert verdict(NORMAL, extra={"finish_reason": "length"}, config=no_heuristics) == "truncated"
    inline = "在命令行里用 ```ls -l``` 可以列出文件的详细信息，包括权限、大小和修改时间。"
    assert verdict(inline) is None
    tildes = "配置文件示例：\n~~~~\n[server]\nport = 8080\n~~~~\n修改端口后重启服务即可生效。"
    assert verdict(tildes) is None


def test_too_long():
    assert verdict(han_text(9000, 3)) == "too_long"
    no_outliers = FilterConfig(min_responses=1, length_outlier_ratio=100)
    assert verdict(han_text(7000, 3), config=no_outliers) is None


def test_length_outlier():
    cfg = FilterConfig(min_responses=1)
    long = han_text(2000, 4)
    _, records = filter_prompt(prompt_of(han_text(300, 1), han_text(320, 2), long), cfg)
    assert [(r["response_id"], r["rule"]) for r in records] == [("r2", "length_outlier")]
    # only two responses: no median of others to compare with
    assert filter_prompt(prompt_of(han_text(300, 1), long), cfg)[1] == []
    # blank others do not count towards the median
    assert filter_prompt(prompt_of("", han_text(300, 1), long), cfg)[1][0]["rule"] == "empty"
    assert len(filter_prompt(prompt_of("", han_text(300, 1), long), cfg)[1]) == 1
    # 2000 < 4 x 600, and short responses are never outliers
    assert filter_prompt(prompt_of(han_text(600, 1), han_text(600, 2), long), cfg)[1] == []
    assert filter_prompt(prompt_of("好", "是", han_text(1000, 5)), cfg)[1] == []


def test_duplicates_keep_the_first():
    near = NORMAL.replace("西周", "春秋")
    p = prompt_of(NORMAL, TERMS, "  " + NORMAL.replace("。", "。 \n ") + "\n", near, MATH)
    kept, records = filter_prompt(p)
    assert kept.response_ids() == ["r0", "r1", "r4"]
    assert [(r["response_id"], r["rule"]) for r in records] == [
        ("r2", "duplicate"), ("r3", "near_duplicate")]
    assert "'r0'" in records[0]["detail"] and "'r0'" in records[1]["detail"]
    assert jaccard(shingles(normalise(NORMAL)), shingles(normalise(near))) >= 0.9


def test_exact_duplicates_caught_as_near_when_exact_rule_off():
    cfg = FilterConfig(rules=tuple(r for r in RULES if r != "duplicate"))
    kept, records = filter_prompt(prompt_of(NORMAL, NORMAL, "42", "42", TERMS), cfg)
    assert [(r["response_id"], r["rule"]) for r in records] == [
        ("r1", "near_duplicate"), ("r3", "near_duplicate")]
    cfg = FilterConfig(rules=tuple(r for r in RULES if r not in ("duplicate", "near_duplicate")))
    assert filter_prompt(prompt_of(NORMAL, NORMAL), cfg)[1] == []


def test_duplicates_only_among_survivors():
    # r0 is removed as truncated, so its copy r1 is the first kept one
    p = prompt_of(Response("r0", NORMAL, extra={"finish_reason": "length"}), Response("r1", NORMAL),
                  TERMS)
    kept, records = filter_prompt(p)
    assert kept.response_ids() == ["r1", "r2"]
    assert [(r["response_id"], r["rule"]) for r in records] == [("r0", "truncated")]


def test_first_rule_wins():
    loop = "好的好的好的，没问题没问题。" * 40
    assert verdict(loop, extra={"finish_reason": "length"}) == "repetition"
    assert verdict(ENGLISH * 60) == "repetition"
    rng = random.Random(7)
    english_long = " ".join("".join(rng.choice("etaoinshrdlucmfw") for _ in range(rng.randint(2, 9)))
                            for _ in range(2000))
    assert len(english_long) > 8000 and verdict(english_long) == "non_chinese"
    assert verdict("\x00" + ENGLISH) == "garbled"


def test_too_few_responses_removes_the_prompt():
    p = prompt_of("", NORMAL, rank={"r0": 0, "r1": 1})
    kept, records = filter_prompt(p)
    assert kept is None
    assert [(r["response_id"], r["rule"]) for r in records] == [
        ("r0", "empty"), ("r1", PROMPT_RULE), (None, PROMPT_RULE)]
    assert records[-1]["model"] is None and "1 response(s) left" in records[-1]["detail"]
    kept, records = filter_prompt(p, FilterConfig(min_responses=1))
    assert kept.response_ids() == ["r1"] and kept.rank == {"r1": 1}


def test_rank_and_comparisons_restricted():
    p = prompt_of(NORMAL, "", TERMS, MATH, rank={"r0": 0, "r1": 2, "r2": 1, "r3": 1},
                  comparisons=[Comparison("r0", "r1", "g"), Comparison("r2", "r3", "s"),
                               Comparison("r1", "r3", "b")], category=["知识"])
    kept, records = filter_prompt(p)
    assert kept.response_ids() == ["r0", "r2", "r3"]
    assert kept.rank == {"r0": 0, "r2": 1, "r3": 1}
    assert [(c.a, c.b) for c in kept.comparisons] == [("r2", "r3")]
    assert kept.category == ["知识"] and kept.id == "p"
    assert len(p.responses) == 4 and len(p.comparisons) == 3  # the input is left alone


def test_rules_subset():
    cfg = FilterConfig(min_responses=1, rules=("empty",))
    assert verdict(ENGLISH, config=cfg) is None
    assert verdict("", config=cfg) == "empty"
    assert verdict("", config=FilterConfig(min_responses=1, rules=())) is None


# ----------------------------------------------------------------------------- config errors

@pytest.mark.parametrize("field,value", [
    ("max_chars", 0), ("max_chars", 1.5), ("min_chars", 0), ("min_responses", 0),
    ("length_outlier_ratio", 1.0), ("length_outlier_ratio", "4"), ("outlier_min_chars", -1),
    ("max_non_chinese_ratio", 1.5), ("max_non_chinese_ratio", -0.1), ("min_chars_for_ratio", -2),
    ("max_repeated_ngram_share", 0.0), ("max_repeated_ngram_share", float("nan")),
    ("ngram_size", 1), ("min_repeats", True), ("max_line_repeats", 0), ("repeated_line_min_chars", 0),
    ("near_duplicate_threshold", 0), ("near_duplicate_threshold", 1.01), ("shingle_size", 0),
    ("max_replacement_chars", -1), ("max_control_chars", None), ("max_mojibake_sequences", 0.5),
    ("exempt_code", "yes"), ("exempt_formulas", 1), ("prompt_aware", None),
    ("detect_truncation_heuristics", "no"), ("rules", ("empty", "bogus")), ("rules", "empty"),
    ("foreign_language_markers", ("英文", "")), ("foreign_language_markers", "英文"),
])
def test_bad_config_names_the_field(field, value):
    cfg = FilterConfig(**{field: value})
    with pytest.raises(CheemsInputError) as err:
        cfg.validate()
    assert err.value.field == field
    assert str(err.value).startswith(f"{field}: ")
    with pytest.raises(CheemsInputError):
        filter_prompts([prompt_of(NORMAL, TERMS)], cfg)


def test_unknown_rule_message_lists_known_rules():
    with pytest.raises(CheemsInputError, match="unknown rule.*'typo'.*known: empty"):
        FilterConfig(rules=["empty", "typo"]).validate()
    assert FilterConfig().validate().rules == RULES


# ----------------------------------------------------------------------------- plain references

HAN_REF_RANGES = [(0x3400, 0x4DBF), (0x4E00, 0x9FFF), (0xF900, 0xFAFF), (0x20000, 0x3FFFF)]
NEUTRAL_REF_RANGES = [(0x3000, 0x303F), (0x3100, 0x312F), (0x31A0, 0x31BF), (0xFF00, 0xFFEF)]


def in_ranges(ch: str, ranges) -> bool:
    return any(a <= ord(ch) <= b for a, b in ranges)


def script_counts_plain(text: str) -> tuple[int, int]:
    han = other = 0
    for ch in text:
        if in_ranges(ch, HAN_REF_RANGES):
            han += 1
        elif ch.isalpha() and not in_ranges(ch, NEUTRAL_REF_RANGES):
            other += 1
    return han, other


def test_han_ranges_match_unicode_names():
    """Every assigned code point named a CJK (compatibility) ideograph is Han, nothing else."""
    chars = [chr(c) for c in range(0x40000) if not 0xD800 <= c <= 0xDFFF]
    named = [ch for ch in chars if unicodedata.name(ch, "").startswith(
        ("CJK UNIFIED IDEOGRAPH", "CJK COMPATIBILITY IDEOGRAPH"))]
    assigned = [ch for ch in chars if unicodedata.category(ch) != "Cn"]
    assert han_count("".join(assigned)) == len(named)
    assert han_count("".join(named)) == len(named)


MIXED = st.sampled_from(list("长城是中国古代的军事工程𠀀𪚥丽豈AbcXyzé ßΩжДあカ한글0123456789²①Ⅻ，。！？、（）《》"
                             "ＡＢ１２々〇ㄅ.,!?;:'\"()[]{}<>-_=+*/\\|@#$%^&`~ \n\t\u0301\u200b😀"))


@FAST
@given(st.lists(MIXED, max_size=120).map("".join))
def test_script_counts_against_plain_loop(text):
    assert script_counts(text) == script_counts_plain(text)
    assert han_count(text) == script_counts_plain(text)[0]
    han, other = script_counts_plain(text)
    expected = other / (han + other) if han + other else 0.0
    assert non_chinese_ratio(text, exempt_code=False, exempt_formulas=False) == pytest.approx(expected)


def test_strip_code_and_formulas():
    assert strip_code_and_formulas("先看代码\n```py\nx = 1\n```\n再看结果") == "先看代码\n\n\n再看结果"
    assert strip_code_and_formulas("变量 `count` 表示次数") == "变量   表示次数"
    assert strip_code_and_formulas("当 $x>0$ 时") == "当   时"
    assert strip_code_and_formulas("原价 $25，现价 $18") == "原价 $25，现价 $18"
    assert strip_code_and_formulas("代码 `echo $HOME` 和公式 $$a+b$$", formulas=False) == "代码   和公式 $$a+b$$"
    assert strip_code_and_formulas("未闭合\n```\nprint(1)") == "未闭合\n\n"
    assert strip_code_and_formulas("`a` $b$", code=False, formulas=False) == "`a` $b$"


def repeated_share_plain(text: str, n: int, m: int) -> float:
    """Brute force: a position is covered when a window over it holds an n-gram that occurs
    at least m times (overlapping occurrences counted one by one)."""
    if not text:
        return 0.0
    starts = range(len(text) - n + 1)
    occurrences = {i: sum(text[j:j + n] == text[i:i + n] for j in starts) for i in starts}
    covered = [any(i <= pos < i + n and occurrences[i] >= m for i in starts) for pos in range(len(text))]
    return sum(covered) / len(text)


SMALL_TEXT = st.lists(st.sampled_from("你我他a "), max_size=40).map("".join)


@FAST
@given(SMALL_TEXT, st.integers(1, 5), st.integers(2, 4))
def test_repeated_ngram_share_against_brute_force(text, n, m):
    assert repeated_ngram_share(text, n, m) == pytest.approx(repeated_share_plain(text, n, m))


@FAST
@given(st.lists(SMALL_TEXT, max_size=6), st.integers(2, 5), st.integers(2, 4))
def test_repetition_screen_matches_exact_per_text(texts, n, m):
    share, most = text_measures.repetition_screen(texts, n, m)
    for t, s, c in zip(texts, share, most):
        assert s == pytest.approx(repeated_ngram_share(t, n, m))
        grams = [t[i:i + n] for i in range(len(t) - n + 1)]
        assert c == max((grams.count(g) for g in grams), default=0)


@FAST
@given(st.lists(st.lists(SMALL_TEXT, max_size=5), max_size=4), st.integers(1, 5))
def test_shingle_overlaps_against_sets(groups, k):
    for g in groups:  # the overlaps the near-duplicate rule counts, from the shingle ids it uses
        text, shingle = near_duplicates.window_ids(g, k)
        ids = [set(shingle[text == a].tolist()) for a in range(len(g))]
        sets = [{t[i:i + k] for i in range(len(t) - k + 1)} for t in g]
        for a in range(len(g)):
            for b in range(len(g)):
                assert len(ids[a] & ids[b]) == len(sets[a] & sets[b])


@FAST
@given(st.lists(SMALL_TEXT, min_size=2, max_size=6), st.floats(0.3, 1.0))
def test_near_duplicates_against_plain_greedy(texts, threshold):
    cfg = FilterConfig(min_responses=1, rules=("near_duplicate",), near_duplicate_threshold=threshold)
    p = prompt_of(*texts)
    kept, records = filter_prompt(p, cfg)
    flats = [normalise(t) for t in texts]
    sets = [shingles(f, 5) for f in flats]
    keep: list[int] = []
    for i in range(len(texts)):
        if not any(jaccard(sets[i], sets[j]) >= threshold for j in keep):
            keep.append(i)
    assert kept.response_ids() == [f"r{i}" for i in keep]


# ----------------------------------------------------------------------------- accounting

POOL = [NORMAL, TERMS, MATH, CODE, ENGLISH, "", "  ", "42", "好的。" * 40, NORMAL + "�",
        "示例：\n```python\nprint(1)", han_text(2500, 8), NORMAL.replace("长城", "运河")]


@st.composite
def random_prompt(draw, index: int) -> Prompt:
    n = draw(st.integers(0, 6))
    responses = []
    for j in range(n):
        content = draw(st.one_of(
            st.sampled_from(POOL),
            st.lists(MIXED, max_size=60).map("".join),
            st.builds(lambda piece, times: piece * times,
                      st.sampled_from(["重复的内容，", "abc ", "再说一遍。"]), st.integers(1, 30))))
        extra = {"finish_reason": "length"} if draw(st.integers(0, 9)) == 0 else {}
        model = draw(st.sampled_from(["qwen", "glm", "yi", None]))
        responses.append(Response(f"r{j}", content, model=model, extra=extra))
    ids = [r.id for r in responses]
    rank = None
    if ids and draw(st.booleans()):
        rank = {rid: draw(st.integers(0, 3)) for rid in ids}
    comparisons = []
    if len(ids) >= 2:
        pairs = st.tuples(st.sampled_from(ids), st.sampled_from(ids)).filter(lambda t: t[0] != t[1])
        comparisons = [Comparison(a, b, lab) for (a, b), lab in
                       draw(st.lists(st.tuples(pairs, st.sampled_from("gbs")), max_size=6))]
    prompt = draw(st.sampled_from(["请介绍一下长城。", "Translate into English: 你好", "写一段代码。"]))
    return Prompt(f"p{index}", prompt, responses, rank=rank, comparisons=comparisons)


@st.composite
def prompt_lists(draw):
    n = draw(st.integers(0, 6))
    return [draw(random_prompt(i)) for i in range(n)]


@FAST
@given(prompt_lists(), st.integers(1, 3), st.sampled_from([10, 65536]))
def test_accounting_invariant(prompts, min_responses, batch_chars):
    cfg = FilterConfig(min_responses=min_responses)
    calls = []
    saved = filters.BATCH_CHARS
    filters.BATCH_CHARS = batch_chars  # small batches must give the same result as one
    try:
        result = filter_prompts(prompts, cfg, progress=lambda done, total: calls.append((done, total)))
    finally:
        filters.BATCH_CHARS = saved
    report = result.report()
    n_in = sum(len(p.responses) for p in prompts)
    assert report["input_responses"] == n_in and report["input_prompts"] == len(prompts)
    assert report["balanced"] is True
    assert report["kept_responses"] + report["removed_responses"] == n_in
    assert sum(report["removed_by_rule"].values()) == report["removed_responses"]
    assert report["kept_prompts"] + report["prompts_removed"] == len(prompts)
    for row in report["by_model"].values():
        assert row["input"] == row["kept"] + row["removed"]
        assert sum(row["removed_by_rule"].values()) == row["removed"]
    if prompts:
        assert calls[-1] == (len(prompts), len(prompts))

    kept_by_id = {p.id: p for p in result.kept}
    for p in prompts:
        single_kept, single_records = filter_prompt(p, cfg)
        mine = [r for r in result.removed if r["prompt_id"] == p.id]
        assert mine == single_records
        removed_ids = [r["response_id"] for r in mine if r["response_id"] is not None]
        assert len(removed_ids) == len(set(removed_ids))
        if p.id in kept_by_id:
            k = kept_by_id[p.id]
            assert single_kept == k
            ids = k.response_ids()
            assert len(ids) >= min_responses
            assert sorted(ids + removed_ids, key=p.response_ids().index) == p.response_ids()
            assert ids == [rid for rid in p.response_ids() if rid not in removed_ids]  # order kept
            assert all(r in p.responses for r in k.responses)
            if p.rank is not None:
                assert k.rank == {rid: p.rank[rid] for rid in ids}
            assert k.comparisons == [c for c in p.comparisons if c.a in ids and c.b in ids]
            assert not any(r["response_id"] is None for r in mine)
        else:
            assert single_kept is None
            assert sorted(removed_ids) == sorted(p.response_ids())
            assert sum(r["response_id"] is None for r in mine) == 1
            assert mine[-1]["rule"] == PROMPT_RULE
        for r in mine:
            assert set(r) == {"prompt_id", "response_id", "model", "rule", "detail"}
            assert r["rule"] in RULES or r["rule"] == PROMPT_RULE


def test_report_counts_by_rule_and_model():
    prompts = [
        Prompt("a", "问题一", [Response("1", NORMAL, "qwen"), Response("2", "", "glm"),
                            Response("3", TERMS, "glm")]),
        Prompt("b", "问题二", [Response("1", ENGLISH, "qwen"), Response("2", MATH, None)]),
    ]
    report = filter_prompts(prompts).report()
    assert report["input_responses"] == 5 and report["kept_responses"] == 2
    assert report["removed_by_rule"]["empty"] == 1
    assert report["removed_by_rule"]["non_chinese"] == 1
    assert report["removed_by_rule"][PROMPT_RULE] == 1
    assert report["prompts_removed"] == 1 and report["kept_prompts"] == 1
    assert report["by_model"]["glm"] == {"input": 2, "kept": 1, "removed": 1,
                                         "removed_by_rule": {"empty": 1}}
    assert report["by_model"]["unknown"] == {"input": 1, "kept": 0, "removed": 1,
                                             "removed_by_rule": {PROMPT_RULE: 1}}
    assert report["balanced"] is True and "==" in report["invariant"]


# ----------------------------------------------------------------------------- helpers and prompts

def test_chat_prompt_judged_by_user_messages():
    chat = [{"role": "system", "content": "You are a helpful assistant. Answer the user's question."},
            {"role": "user", "content": "请简单介绍一下长城的历史。"}]
    p = Prompt("c", chat, [Response("a", NORMAL), Response("b", ENGLISH)])
    kept, records = filter_prompt(p, FilterConfig(min_responses=1))
    assert [(r["response_id"], r["rule"]) for r in records] == [("b", "non_chinese")]
    chat[1] = {"role": "user", "content": "Please describe the history of the Great Wall briefly."}
    assert filter_prompt(p, FilterConfig(min_responses=1))[1] == []


def test_repetition_text_and_lines():
    assert filters.repetition_text("### 方案一\n\n**优点：** 成本低\n\n| 是 | 否 |") == "方案一优点：成本低是否"
    assert filters.repetition_text("说明\n```\nx = 1\n```\n结束") == "说明结束"
    text = "第一行内容比较长一些\n- 第一行内容比较长一些\n**第一行内容 比较长一些**。短句。短句。短句。"
    assert filters.most_repeated_line(text, 10) == ("第一行内容比较长一些", 3)
    assert filters.most_repeated_line(text, 2) == ("第一行内容比较长一些", 3)
    assert filters.most_repeated_line("短句。短句。", 10) == ("", 0)


def test_boilerplate_code_is_not_repetition():
    fields = ["name", "age", "city", "email", "phone", "address"]
    java = "\n".join(f"    public String get{f.title()}() {{ return {f}; }}\n"
                     f"    public void set{f.title()}(String {f}) {{ this.{f} = {f}; }}" for f in fields)
    answer = (f"下面是一个简单的 Java 实体类，包含常用字段的读写方法：\n\n```java\n"
              f"public class User {{\n{java}\n}}\n```\n\n字段较多时可以用 Lombok 自动生成这些方法。")
    assert verdict(answer) is None


def test_visible_chars_and_whitespace():
    assert filters.visible_chars(" 你 好\n\u200b\t") == 2
    assert filters.without_whitespace(" 你 好\n世界 ") == "你好世界"


def test_web_addresses_do_not_count_as_english():
    links = ("推荐几个学习资源：\n1. 官方文档 https://docs.python.org/zh-cn/3/tutorial/index.html\n"
             "2. 廖雪峰的教程 www.liaoxuefeng.com/wiki/1016959663602400\n3. 中文社区 pythonchina.org/forum\n"
             "有问题可以发邮件到 helper.team@example.com 咨询。")
    assert non_chinese_ratio(links) == 0.0
    assert non_chinese_ratio(links, exempt_urls=False) > 0.7
    assert verdict(links) is None
    strict = FilterConfig(min_responses=1, exempt_urls=False)
    assert verdict(links, config=strict) == "non_chinese"
    assert strip_code_and_formulas("网址https://x.com/a是一个例子") == "网址 是一个例子"


def test_real_public_sample(shared_data):
    """The optional real preference pairs: few removals, and the counts add up."""
    rows = [json.loads(line) for line in (shared_data / "dpo_zh_500.jsonl").open(encoding="utf-8")]
    rows += json.loads((shared_data / "dpo_zh_demo.json").read_text(encoding="utf-8"))
    roles = {"human": "user", "system": "system", "gpt": "assistant"}

    def text(v):
        return v["value"] if isinstance(v, dict) else v

    prompts = [Prompt(f"p{k}", [{"role": roles[m["from"]], "content": m["value"]}
                                for m in r["conversations"]],
                      [Response("chosen", text(r["chosen"]), "chosen"),
                       Response("rejected", text(r["rejected"]), "rejected")])
               for k, r in enumerate(rows)]
    report = filter_prompts(prompts, FilterConfig(min_responses=1)).report()
    assert report["balanced"] and report["input_responses"] == 2 * len(rows)
    assert report["removed_responses"] < 0.03 * report["input_responses"]
