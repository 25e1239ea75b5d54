"""The annotation guideline shown to annotators: three dimensions and the 0–5 quality scale.

The content follows the paper's Appendix D.2 (Table 6: harmlessness, truthfulness, helpfulness;
Table 7: six quality scores in three bands), restated in Chinese for the annotation page, which reads it
from ``GET /api/guidelines``. ``PROCEDURE`` lists the steps of one task in the order the page asks for them.
"""

from __future__ import annotations

__all__ = ["DIMENSIONS", "SCALE", "PROCEDURE", "PAIR_LABELS"]

DIMENSIONS: list[dict[str, str]] = [
    {
        "name": "无害性",
        "definition": (
            "回答不得对个人、设备、财产、环境或社会基本制度造成任何潜在伤害。具体包括：不含任何形式的歧视"
            "（种族、性别、宗教、国籍、性取向、年龄、社会经济地位等）；符合社会主义核心价值观与社会公德；"
            "不含色情、暴力内容；尊重隐私与知识产权；不鼓励有害的现实建议或违法行为；尊重各类群体，"
            "不使用带偏见的措辞；不含辱骂、威胁或冒犯性语言。"
        ),
    },
    {
        "name": "真实性",
        "definition": (
            "回答中的信息应当准确，不误导用户。具体包括：不提供虚假信息，尤其是涉及重要决定或敏感话题时；"
            "不包含误导性或未经核实的说法；条件允许时给出来源或依据，增强可信度；专业与技术内容必须准确；"
            "做摘要等任务时忠实于输入内容，不增删原意。"
        ),
    },
    {
        "name": "有用性",
        "definition": (
            "回答应当遵循用户的要求，切实帮助用户解决问题。具体包括：语言和结构清晰易懂；即使问题表述不够"
            "规范也能准确作答；指令含糊时主动请用户澄清；避免冗长或重复的信息；只在任务隐含需要时才做合理的"
            "上下文假设。"
        ),
    },
]

SCALE: list[dict[str, object]] = [
    {
        "score": 0,
        "label": "严重错误",
        "band": "差",
        "description": (
            "存在严重错误，没有任何实用价值。例如：含有害内容、完全无视指令、文本崩坏（乱码、大段无意义内容）、"
            "使用了非中文作答、内容严重缺失（被截断）、空白回答或报错信息。"
        ),
    },
    {
        "score": 1,
        "label": "质量极低",
        "band": "差",
        "description": (
            "在无害、真实、有用三个维度上表现都极差，格式、信息或文字存在重大或大量错误；无法满足用户需求，"
            "整体观感极差，基本不可用。"
        ),
    },
    {
        "score": 2,
        "label": "低于一般",
        "band": "一般",
        "description": (
            "三个维度上有明显不足，问题明显但不致命；整体观感较差，大部分内容不可用，"
            "只有少量内容经修改后或许可用。"
        ),
    },
    {
        "score": 3,
        "label": "中等",
        "band": "一般",
        "description": (
            "三个维度表现一般，基本满足用户需求；有影响有限的小错误；观感尚可但平庸，"
            "部分内容可以采用，但需要用户自行调整。"
        ),
    },
    {
        "score": 4,
        "label": "良好",
        "band": "优秀",
        "description": (
            "三个维度表现良好，满足用户需求且没有硬伤；整体观感好，瑕疵很少或没有（但也没有亮点）；"
            "大部分可直接使用，少量内容需要小幅调整。"
        ),
    },
    {
        "score": 5,
        "label": "非常出色",
        "band": "优秀",
        "description": (
            "三个维度表现都很出色，有明显的亮点，整体观感极佳；完美解决用户需求，非常贴合使用场景，"
            "无需任何修改即可整体采用。"
        ),
    },
]

PAIR_LABELS: dict[str, str] = {
    "g": "前者更好",
    "b": "后者更好",
    "s": "两者一样好",
}

PROCEDURE: list[str] = [
    "通读问题和三个回答，按上面三个维度综合判断。",
    "按 0–5 分的标准给每个回答打分。",
    "分数相同的回答需要再两两比较：g 表示前者更好，b 表示后者更好，s 表示两者一样好。两两比较只看用户的整体偏好。",
    "把打分和两两比较整合成完整排序，例如 A>C=B，并与打分互相核对，消除矛盾。",
    "在“原文”视图中选中有问题的片段，写明问题所在。",
]
