"""cheems: build and evaluate Chinese reward models the way the Cheems paper describes.

One documented call per job, each what one ``cheems`` command does, less the printing: it
takes the settings objects whose fields are that command's flags (:class:`ReadSettings`,
:class:`StatisticsSettings`, :class:`ScorerSettings`, :class:`OutputSettings`, or a mapping of
their fields), returns data and raises :class:`CheemsInputError` on bad input::

    import cheems

    ranked = cheems.rank(["open.jsonl", "human.jsonl"], "bench.jsonl")
    result = cheems.evaluate("bench.jsonl", scorer=cheems.ScorerSettings(scorer="length"))
    print(result.report["overall"])

The calls and the settings classes load on first use (PEP 562), so ``import cheems`` imports
the core alone (records, formats, graph, metrics: numpy and scipy); torch, transformers,
fastapi, ray and matplotlib load with the call that needs them.
"""

from __future__ import annotations

import importlib
from typing import Any, Callable

from cheems.records import CheemsInputError, Comparison, Prompt, Response

__version__ = "0.1.0"

__all__ = [
    "CheemsInputError", "Comparison", "Prompt", "Response", "__version__",
    # the settings the calls take
    "ReadSettings", "StatisticsSettings", "ScorerSettings", "OutputSettings",
    # data files
    "read", "validate", "stats", "make_tasks", "rank",
    # scoring and evaluation
    "evaluate", "score", "best_of_n", "compare", "correlate", "write_report",
    # models
    "train", "init_model", "convert", "serve",
    # public datasets
    "list_datasets", "dataset_info", "load_dataset",
    # study grids
    "run_experiment", "experiment_status", "experiment_tables",
    # curation
    "curate_sample", "curate_filter", "curate_judge", "curate_resolve", "curate_debias", "curate_merge",
    "analyze_bias",
    # human annotation
    "annotate_init", "annotate_add_user", "annotate_import", "annotate_serve", "annotate_status",
    "annotate_export", "annotate_add_study", "annotate_list_studies",
]

PUBLIC_CALLS = {
    **dict.fromkeys(("read", "validate", "stats", "make_tasks", "rank"), "cheems.api.data_files"),
    **dict.fromkeys(("evaluate", "score", "best_of_n"), "cheems.api.evaluation"),
    **dict.fromkeys(("compare", "correlate", "write_report"), "cheems.api.reports"),
    **dict.fromkeys(("train", "init_model", "convert", "serve"), "cheems.api.models"),
    **dict.fromkeys(("list_datasets", "dataset_info", "load_dataset"), "cheems.api.datasets"),
    **dict.fromkeys(("run_experiment", "experiment_status", "experiment_tables"), "cheems.api.experiments"),
    **dict.fromkeys(("curate_sample", "curate_filter", "curate_judge", "curate_resolve", "curate_debias",
                     "curate_merge", "analyze_bias"), "cheems.api.curation"),
    **dict.fromkeys(("annotate_init", "annotate_add_user", "annotate_import", "annotate_serve", "annotate_status",
                     "annotate_export", "annotate_add_study", "annotate_list_studies"), "cheems.api.annotation"),
}
"""Each public call -> the module of :mod:`cheems.api` that defines it (loaded on first use)."""

PUBLIC_SETTINGS = dict.fromkeys(("ReadSettings", "StatisticsSettings", "ScorerSettings", "OutputSettings"),
                                "cheems.common_settings")
"""The settings classes the calls take, whose fields are the flags of the commands -> their module."""

# The calls and the settings classes, declared here for readers and checkers (a bare annotation
# binds nothing: the first use of each name goes to __getattr__ below, which imports its module).
read: Callable[..., Any]
validate: Callable[..., Any]
stats: Callable[..., Any]
make_tasks: Callable[..., Any]
rank: Callable[..., Any]
evaluate: Callable[..., Any]
score: Callable[..., Any]
best_of_n: Callable[..., Any]
compare: Callable[..., Any]
correlate: Callable[..., Any]
write_report: Callable[..., Any]
train: Callable[..., Any]
init_model: Callable[..., Any]
convert: Callable[..., Any]
serve: Callable[..., Any]
list_datasets: Callable[..., Any]
dataset_info: Callable[..., Any]
load_dataset: Callable[..., Any]
run_experiment: Callable[..., Any]
experiment_status: Callable[..., Any]
experiment_tables: Callable[..., Any]
curate_sample: Callable[..., Any]
curate_filter: Callable[..., Any]
curate_judge: Callable[..., Any]
curate_resolve: Callable[..., Any]
curate_debias: Callable[..., Any]
curate_merge: Callable[..., Any]
analyze_bias: Callable[..., Any]
annotate_init: Callable[..., Any]
annotate_add_user: Callable[..., Any]
annotate_import: Callable[..., Any]
annotate_serve: Callable[..., Any]
annotate_status: Callable[..., Any]
annotate_export: Callable[..., Any]
annotate_add_study: Callable[..., Any]
annotate_list_studies: Callable[..., Any]
ReadSettings: type
StatisticsSettings: type
ScorerSettings: type
OutputSettings: type


def __getattr__(name: str) -> Any:
    """A public call or settings class, imported from its module on first use and kept here (PEP 562)."""
    module = PUBLIC_CALLS.get(name) or PUBLIC_SETTINGS.get(name)
    if module is None:
        raise AttributeError(f"module 'cheems' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
