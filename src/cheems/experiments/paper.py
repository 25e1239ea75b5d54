"""The Cheems paper's published results of reward models trained on preference datasets, to show beside a
study's own (`cheems experiment table`, `cheems report DIR`).

Table 3 ("Performance results of various datasets"): reward models trained from Qwen2.5-72B-Instruct on each
public preference dataset, evaluated on CheemsBench's two subsets, Open Prompt and Human Instruction, as
Acc. and Exact. Table 4: the same for the parts of CheemsPreference and its construction ablation (length
debiasing, distant supervision, both), with RewardBench accuracy and Overall. Each row is keyed by its
catalogue name (`cheems data list`), so a study whose dataset carries that name finds it.

The figures are copied from the paper's tables as printed (three decimals). Table 3 gives no Overall; none
is made up here.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["CHEEMS_SUBSETS", "PAPER_BASE_MODEL", "PAPER_RESULTS", "PaperResult", "paper_result"]

CHEEMS_SUBSETS = {"open": "Open Prompt", "human": "Human Instruction"}
"""CheemsBench's subsets (the stems of its files) and their names in the paper's tables, in the paper's order."""

PAPER_BASE_MODEL = "Qwen2.5-72B-Instruct"
"""The base model of every reward model of Tables 3 and 4."""


@dataclass(frozen=True)
class PaperResult:
    """One row of the paper's Table 3 or 4: CheemsBench Acc. and Exact. per subset (``open``, ``human``);
    ``overall`` and ``rewardbench`` where the table gives them (Table 4 only)."""

    name: str
    title: str
    table: str
    group: str
    open_accuracy: float
    open_exact_match: float
    human_accuracy: float
    human_exact_match: float
    overall: float | None = None
    rewardbench: float | None = None

    def figure(self, subset: str, metric: str) -> float | None:
        """The published ``metric`` (``accuracy`` or ``exact_match``) of ``subset`` (``open`` or ``human``)."""
        if subset not in CHEEMS_SUBSETS or metric not in ("accuracy", "exact_match"):
            return None
        return getattr(self, f"{subset}_{metric}")


def _table3(name: str, title: str, group: str, *figures: float) -> PaperResult:
    return PaperResult(name, title, "Table 3", group, *figures)


def _table4(name: str, title: str, rewardbench: float, *figures: float) -> PaperResult:
    *subsets, overall = figures
    return PaperResult(name, title, "Table 4", "CheemsPreference", *subsets, overall=overall,
                       rewardbench=rewardbench)


_ROWS = (
    # Table 3: name, title, group, Open Prompt Acc., Exact., Human Instruction Acc., Exact.
    _table3("hh-rlhf-cn", "HH-RLHF-cn", "Chinese", 0.704, 0.306, 0.646, 0.212),
    _table3("huozi", "Huozi", "Chinese", 0.728, 0.302, 0.682, 0.237),
    _table3("kyara", "Kyara", "Chinese", 0.705, 0.258, 0.664, 0.198),
    _table3("zhihu", "Zhihu", "Chinese", 0.463, 0.105, 0.487, 0.080),
    _table3("chatbot-arena", "ChatbotArena", "English", 0.745, 0.342, 0.718, 0.288),
    _table3("hh-rlhf", "HH-RLHF", "English", 0.753, 0.351, 0.740, 0.299),
    _table3("math-preference", "MathPreference", "English", 0.566, 0.179, 0.502, 0.103),
    _table3("nectar", "Nectar", "English", 0.716, 0.288, 0.664, 0.222),
    _table3("pku-saferlhf", "PKU-SafeRLHF", "English", 0.737, 0.311, 0.678, 0.240),
    _table3("skywork", "Skywork", "English", 0.757, 0.343, 0.749, 0.271),
    _table3("math-stack-exchange", "MathStackExchange", "English", 0.749, 0.340, 0.719, 0.256),
    _table3("ultrafeedback", "UltraFeedback", "English", 0.768, 0.356, 0.748, 0.303),
    _table3("helpsteer2", "HelpSteer2", "English", 0.713, 0.279, 0.736, 0.292),
    # Table 4: name, title, RewardBench, Open Prompt Acc., Exact., Human Instruction Acc., Exact., Overall
    _table4("human-subset", "Human subset", 0.897, 0.852, 0.502, 0.823, 0.412, 0.647),
    _table4("gpt-subset", "GPT subset", 0.822, 0.778, 0.373, 0.743, 0.303, 0.549),
    _table4("gpt-subset-debiased", "GPT subset w/ Length debiasing", 0.865, 0.790, 0.402, 0.768, 0.322, 0.571),
    _table4("gpt-subset-distant", "GPT subset w/ Distant supervision", 0.909, 0.837, 0.464, 0.821, 0.404, 0.632),
    _table4("gpt-subset-all", "GPT subset w/ All strategies", 0.917, 0.837, 0.458, 0.826, 0.416, 0.634),
    _table4("cheems-preference", "CheemsPreference", 0.919, 0.857, 0.508, 0.832, 0.431, 0.657),
)

PAPER_RESULTS: dict[str, PaperResult] = {row.name: row for row in _ROWS}
"""The published rows by catalogue name: Table 3's thirteen datasets, then Table 4's six."""


def paper_result(dataset: str) -> PaperResult | None:
    """The paper's row for the dataset called ``dataset`` (its catalogue name, any case), or None."""
    return PAPER_RESULTS.get(dataset.strip().lower())
