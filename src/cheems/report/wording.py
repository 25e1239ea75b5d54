"""The words of the report page in each of its languages (`LANGUAGES`: English and Chinese), and the choice of
language from the data (`detect_language`: Chinese when any of the data's own text is, else English) with
the page's line saying why and how to switch (`language_note`).

Every heading, column title, caption, note and plot label of the page is one entry of `WORDS`: a key and its
English and Chinese text, with ``{name}`` fields filled by `say`. Names that come from the data (models,
subsets, categories, metrics) are shown as they are.
"""

from __future__ import annotations

import re
from typing import Any, Iterable

__all__ = ["KIND_NAMES", "LANGUAGES", "WORDS", "chinese_text", "detect_language", "language_note", "say"]

LANGUAGES = ("en", "zh")
"""The languages of the page: ``en`` (English) and ``zh`` (Chinese)."""

WORDS: dict[str, tuple[str, str]] = {
    "title": ("Reward model report", "奖励模型评测报告"),
    "html_lang": ("en", "zh-CN"),
    "lang.data": ("This page is in English because the data's names and categories hold no Chinese; "
                  "the language `zh` writes it in Chinese.",
                  "本页为中文，因为数据的名称或类别含有中文（如“{example}”）；选择语言 `en` 可生成英文版。"),
    "lang.asked": ("This page is in English as asked (language `en`); the language `{other}` writes it in "
                   "Chinese.",
                   "本页按要求（语言 `zh`）以中文生成；选择语言 `{other}` 可生成英文版。"),
    # inputs
    "inputs": ("Inputs", "输入文件"),
    "inputs.note": ("The files this page was made from. Hover over a number to see the file and the field it "
                    "comes from.", "本页依据的文件。鼠标停在任一数字上，可看到它出自哪个文件的哪个字段。"),
    "inputs.header": ("#|File|Content|Name", "#|文件|内容|名称"),
    # leaderboard
    "leaderboard": ("Leaderboard", "排行榜"),
    "leaderboard.note": ("Acc.: share of ranked pairs in which the better response gets the higher score. "
                         "Exact: share of prompts whose whole ranking the model gets right. Overall: the mean of "
                         "Acc. and Exact over the subsets (as in Table 2 of the Cheems paper). Click a column "
                         "title to sort.",
                         "准确率：在有优劣之分的回答对中，较好的回答得分更高的比例。完全匹配：整组排序全部判对的题目比例。"
                         "总分：各子集准确率与完全匹配的平均（同 Cheems 论文表 2）。点击列名可排序。"),
    "model": ("Model", "模型"),
    "acc": ("Acc.", "准确率"),
    "exact": ("Exact", "完全匹配"),
    "overall": ("Overall", "总分"),
    "ci95": ("95% CI", "95% 置信区间"),
    "with_ci": ("{what} 95% CI", "{what} 95% 置信区间"),
    "discriminative": ("Discriminative reward models", "判别式奖励模型"),
    "generative": ("Generative reward models (LLM judges)", "生成式奖励模型（大模型评审）"),
    "leaderboard.generative_note": ("A generative judge gets a pair right when its verdict names the better "
                                    "response; a tie verdict counts wrong. API judges reply in text; local judge "
                                    "models give the verdict of the highest next-token probability, averaged over "
                                    "both presentation orders unless one order was asked for.",
                                    "生成式评审的判断指向较好的回答即为判对，判平局算错。API 评审以文字回复作答；"
                                    "本地评审模型取下一个词元概率最高的判决，默认对两种呈现顺序取平均。"),
    # subsets
    "subsets": ("Subsets in detail", "各子集详情"),
    "subsets.note": ("Pairs: ranked pairs compared; Tied: pairs the model scored equal; Score: mean of Acc. and "
                     "Exact; ECE: expected calibration error (lower is better); Kendall τb: rank correlation "
                     "between the scores and the reference ranking.",
                     "回答对：参与比较的有序回答对数；打平：模型给出相同分数的回答对数；得分：准确率与完全匹配的平均；"
                     "ECE：期望校准误差（越低越好）；Kendall τb：模型分数与参考排序的秩相关。"),
    "subset": ("Subset", "子集"),
    "prompts": ("Prompts", "题目数"),
    "pairs": ("Pairs", "回答对"),
    "tied": ("Tied", "打平"),
    "score": ("Score", "得分"),
    # categories
    "categories": ("Accuracy by category", "各类别准确率"),
    "categories.of": ("Accuracy by category: {subset}", "各类别准确率：{subset}"),
    "category": ("Category", "类别"),
    "subset.caption": ("Subset {subset}", "子集 {subset}"),
    # judges
    "judges": ("LLM judges: position bias", "大模型评审：位置偏差"),
    "judges.note": ("Position consistency: share of pairs judged the same way when the two responses swap "
                    "places. First-position rate: share of verdicts for the response shown first (0.5 means no "
                    "preference for either position). Tie verdicts: judgements answered with a tie, each wrong on "
                    "a ranked pair.",
                    "位置一致性：两个回答交换位置后判断不变的比例。首位偏好率：判给先出现回答的比例（0.5 表示不偏向任何位置）。"
                    "平局判决：判为平局的次数，在有优劣之分的回答对上均算错。"),
    "judge": ("Judge", "评审模型"),
    "position_consistency": ("Position consistency", "位置一致性"),
    "first_position_rate": ("First-position rate", "首位偏好率"),
    "judged_by": ("Verdicts from", "判决来源"),
    "api_judge": ("API replies", "API 回复"),
    "local_judge": ("local model ({backend}): verdict probabilities", "本地模型（{backend}）：判决概率"),
    "judgements": ("Judgements", "判断次数"),
    "tie_verdicts": ("Tie verdicts", "平局判决"),
    # length
    "length": ("Length", "长度"),
    "length.note": ("Accuracy on the pairs whose better response is the longer one, and on those whose better "
                    "response is the shorter one. A model that simply prefers long answers does well on the first "
                    "and badly on the second.",
                    "较好回答更长的回答对上的准确率，与较好回答更短的回答对上的准确率。只偏爱长回答的模型前者高、后者低。"),
    "longer_pairs": ("Better is longer: pairs", "较好者更长：回答对"),
    "longer_acc": ("Better is longer: Acc.", "较好者更长：准确率"),
    "shorter_pairs": ("Better is shorter: pairs", "较好者更短：回答对"),
    "shorter_acc": ("Better is shorter: Acc.", "较好者更短：准确率"),
    # comparisons
    "compare": ("Paired comparisons", "配对比较"),
    "compare.note": ("Each comparison \"A vs B\" gives the difference B − A: positive when B scores higher. Its "
                     "95% CI and p-value come from a paired bootstrap over prompts; a p-value below the "
                     "bootstrap's resolution is written \"< 1/(resamples + 1)\". In the matrix every cell is the "
                     "Overall difference of its row's model minus its column's model, so the row of a weaker "
                     "model shows negative numbers.",
                     "每个比较“A vs B”给出差值 B − A：B 得分更高时为正。95% 置信区间和 p 值来自按题目的配对自助法；"
                     "低于自助法分辨率的 p 值写作“< 1/(重采样次数 + 1)”。矩阵中每格是行模型减列模型的总分差值，"
                     "因此较弱模型所在的行是负数。"),
    "matrix.corner": ("row − column", "行 − 列"),
    "matrix.caption": ("Overall: row model − column model (p-value)", "总分：行模型 − 列模型（p 值）"),
    "vs": ("{a} vs {b}", "{a} vs {b}"),
    "metric": ("Metric", "指标"),
    "side_a": ("A: {name}", "A：{name}"),
    "side_b": ("B: {name}", "B：{name}"),
    "b_minus_a": ("B − A", "B − A"),
    "b_minus_a_ci": ("B − A 95% CI", "B − A 95% 置信区间"),
    "p": ("p", "p 值"),
    "only_a": ("Pairs only A got right", "仅 A 判对的回答对"),
    "only_b": ("Pairs only B got right", "仅 B 判对的回答对"),
    "mcnemar_p": ("McNemar p", "McNemar p 值"),
    "mcnemar.caption": ("{a} vs {b}: McNemar's exact test", "{a} vs {b}：McNemar 精确检验"),
    "holm_p": ("p (Holm)", "p 值（Holm 校正）"),
    "by_category.caption": ("{a} vs {b}: by category (McNemar, Holm-corrected)",
                            "{a} vs {b}：分类别（McNemar 检验，Holm 校正）"),
    # best-of-n
    "bon": ("Best-of-n", "Best-of-n"),
    "bon.note": ("The expected reference quality of the response each reward model picks out of n candidates "
                 "(exact over all sets of n), with bootstrap 95% CIs.",
                 "奖励模型从 n 个候选回答中选出的回答的期望参考质量（对所有 n 个候选的组合精确计算），附自助法 95% 置信区间。"),
    "n_axis": ("n (responses to pick from)", "n（候选回答数）"),
    "gold_axis": ("expected quality of the pick", "所选回答的期望质量"),
    "left_out": ("Left out", "未计入"),
    "expected_gold": ("Expected quality", "期望质量"),
    "win_rate": ("Win rate", "胜率"),
    "bon.category.caption": ("{model}: expected quality by category", "{model}：各类别期望质量"),
    # correlation
    "correlation": ("Correlation with downstream results", "与下游结果的相关性"),
    "correlation.note": ("How well each benchmark metric orders the reward models the way downstream results "
                         "do (Figure 5 of the Cheems paper).",
                         "各项评测指标对奖励模型的排序与下游结果的一致程度（同 Cheems 论文图 5）。"),
    "pearson": ("Pearson r", "Pearson r"),
    "spearman": ("Spearman ρ", "Spearman ρ"),
    "kendall": ("Kendall τ", "Kendall τ"),
    "benchmark_metric": ("Benchmark metric", "评测指标"),
    "downstream_metric": ("Downstream metric", "下游指标"),
    "models": ("Models", "模型数"),
    "models.caption": ("{label} (models: {models})", "{label}（模型：{models}）"),
    # bias
    "bias": ("Annotator bias", "标注者偏差"),
    "bias.note": ("P(A chosen) by the length difference len(A) − len(B) in characters, with 95% Wilson "
                  "intervals (Figure 15 of the Cheems paper): a flat line at 0.5 is an annotator who ignores length "
                  "and position.",
                  "按字符长度差 len(A) − len(B) 分组的 P(选 A)，附 95% Wilson 区间（同 Cheems 论文图 15）："
                  "0.5 处的水平线表示标注者不受长度和位置影响。"),
    "bias.figure": ("Annotator length bias", "标注者长度偏差"),
    "bias.x": ("length difference len(A) − len(B) (characters)", "长度差 len(A) − len(B)（字符）"),
    "bias.y": ("P(A chosen)", "P(选 A)"),
    "group": ("Group", "标注来源"),
    "length_difference": ("Length difference", "长度差"),
    "comparisons": ("Comparisons", "比较次数"),
    "p_a_strict": ("P(A | no tie)", "P(A | 非平局)"),
    "position.caption": ("Position: binomial test of P(A | no tie) = 0.5", "位置：P(A | 非平局) = 0.5 的二项检验"),
    "unequal_pairs": ("Decided pairs of unequal length", "长度不同且分出胜负的回答对"),
    "longer_won": ("Longer won", "较长者胜"),
    "share": ("Share", "比例"),
    "longer.caption": ("How often the longer response won", "较长回答获胜的频率"),
    "bias.no_position": ("Groups of ranked responses record no presentation order, so they have no position row.",
                         "排序形式的标注不记录呈现顺序，因此没有位置一行。"),
    # curation
    "curation": ("Curation stages", "数据构建阶段"),
    "count": ("Count", "计数项"),
    "value": ("Value", "数值"),
    "stage.caption": ("Stage {stage} ({file})", "阶段 {stage}（{file}）"),
    "stage.part": ("Stage {stage}: {part}", "阶段 {stage}：{part}"),
    "yes": ("yes", "是"),
    "no": ("no", "否"),
    # training
    "training": ("Training", "训练"),
    "training.of": ("Training: {label}", "训练：{label}"),
    "step": ("Step", "步数"),
    "loss": ("loss", "损失"),
    "evaluation": ("evaluation", "评测"),
    "last_step.caption": ("{label}: last step ({steps} steps logged)", "{label}：最后一步（共记录 {steps} 步）"),
    "evaluations.caption": ("{label}: evaluations during training", "{label}：训练中的评测"),
    # study (an experiment folder)
    "study": ("Study: datasets, data size and model size", "训练实验：数据集、数据量与模型规模"),
    "study.note": ("Reward models trained on each dataset of the experiment {label} and evaluated on the "
                   "benchmark (the paper's Tables 3 and 4): one table per base model and data size. With several "
                   "seeds a figure is the mean over the seeds ± the half-width of its 95% t-interval. Overall: the "
                   "mean over the subsets of (Acc. + Exact) / 2.",
                   "在实验 {label} 的各数据集上训练奖励模型并在评测集上评测（同论文表 3、表 4）：每个基座模型与数据量一张表。"
                   "有多个随机种子时，数值为各种子的平均 ± 95% t 区间的半宽。总分：各子集 (准确率 + 完全匹配) / 2 的平均。"),
    "study.paper_note": ("Rows marked (paper) hold the figures published in the Cheems paper (Tables 3 and 4: reward "
                         "models trained from {model} on the whole dataset), for comparison.",
                         "标为（论文）的行是 Cheems 论文发表的结果（表 3、表 4：以 {model} 为基座、用完整数据集训练的奖励模型），"
                         "供对照。"),
    "study.notes": ("About these results: {notes}", "关于这些结果：{notes}"),
    "study.dataset": ("Dataset", "数据集"),
    "study.pairs": ("Training pairs", "训练回答对"),
    "study.seeds": ("Seeds", "随机种子数"),
    "study.paper_row": ("{name} (paper)", "{name}（论文）"),
    "study.table": ("Base model {model}, data size {size}", "基座模型 {model}，数据量 {size}"),
    "study.size": ("{n} pairs", "{n} 对"),
    "study.model": ("{model} ({facts})", "{model}（{facts}）"),
    "study.and": (", ", "，"),
    "study.all": ("all pairs", "全部回答对"),
    "study.open": ("Open Prompt", "开放提示"),
    "study.human": ("Human Instruction", "人工指令"),
    "study.pretrained": ("pretrained", "预训练"),
    "study.instruct": ("instruct", "指令微调"),
    "study.line": ("{subset} ({variant})", "{subset}（{variant}）"),
    "study.data_scaling": ("Fig. 6: accuracy by training pairs: {dataset}, {model}",
                           "图 6：准确率与训练回答对数：{dataset}，{model}"),
    "study.model_scaling": ("Fig. 7: accuracy by model size: {dataset}, {size}", "图 7：准确率与模型规模：{dataset}，{size}"),
    "study.pairs_axis": ("training pairs (log scale)", "训练回答对数（对数坐标）"),
    "study.params_axis": ("base model parameters (log scale)", "基座模型参数量（对数坐标）"),
    "study.models_axis": ("base model", "基座模型"),
    "study.unplaced": ("{models}: no parameter count, so the base models of this figure stand on an evenly spaced "
                       "axis: those with a count by size, then the others by name.",
                       "{models}：没有参数量，因此本图的基座模型按等间距排列：有参数量的按大小，其余按名称。"),
}
"""Key -> (English, Chinese)."""

KIND_NAMES = {"eval": ("evaluation", "评测结果"), "bon": ("best-of-n", "best-of-n 结果"),
              "compare": ("paired comparison", "配对比较"), "correlate": ("correlation", "相关性"),
              "curate": ("curation stage", "数据构建阶段"), "bias": ("annotator bias", "标注者偏差"),
              "train_log": ("training log", "训练日志"),
              "experiment": ("experiment folder", "实验文件夹")}
"""What each kind of input holds, in words: kind -> (English, Chinese)."""

_CJK = re.compile(r"[\u3400-\u9fff\uf900-\ufaff]")


def say(lang: str, key: str, **fields: Any) -> str:
    """The text of ``key`` in ``lang`` (one of `LANGUAGES`), its ``{name}`` fields filled from ``fields``."""
    text = WORDS[key][LANGUAGES.index(lang)]
    return text.format(**fields) if fields else text


def chinese_text(texts: Iterable[str]) -> str | None:
    """The first of ``texts`` that holds a Chinese character (a CJK ideograph), or None."""
    return next((str(t) for t in texts if _CJK.search(str(t))), None)


def detect_language(texts: Iterable[str]) -> str:
    """``zh`` when any of ``texts`` (the data's own text: names, subsets, categories, groups, metric names)
    holds a Chinese character, else ``en``."""
    return "zh" if chinese_text(texts) is not None else "en"


def language_note(lang: str, asked: bool, example: str | None = None) -> str:
    """The page's line on its language and how to switch: as ``asked`` with ``lang``, or else chosen from the
    data (``example``: a Chinese text of the data, for a Chinese page)."""
    if asked:
        return say(lang, "lang.asked", other=LANGUAGES[1 - LANGUAGES.index(lang)])
    return say(lang, "lang.data", example=_short(example or ""))


def _short(text: str, limit: int = 24) -> str:
    return text if len(text) <= limit else text[:limit - 1] + "…"
