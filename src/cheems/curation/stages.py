"""The file side of each curation stage: read prompt rows, run the stage, write its output
atomically with a report beside it, and account for every input row.

Each ``run_*`` function is what one ``cheems curate STAGE`` command does. Outputs are written
whole or not at all (temp file + rename). The long stages (``sample``, ``judge``, and scoring
in ``resolve``) keep what they have received as they go, in the reply cache or a resumable
scores file, so a rerun after a crash asks only for what is missing and writes the same
output as an uninterrupted run. Next to ``OUT.jsonl`` each stage writes ``OUT.report.json``;
rows or responses a stage removes go to ``OUT.removed.jsonl`` (``filter``) or
``OUT.failed.jsonl`` (``sample``) with the reason, never silently dropped.

A pipeline config (see ``examples/curation/pipeline.yaml``) holds one section per stage whose
keys are that stage's settings; `stage_settings` reads a section.

``resolve`` and ``debias`` read JSONL and JSON-list files straight into arrays
(:func:`cheems.formats.batches_of`, no Prompt made for cheems rows, rows of other formats in
their cheems form) and write each row by patching its parsed values, byte for byte what the
object path (:func:`read_inputs`, ``Prompt.to_dict``) writes; any other input (a row the general
readers refuse or must join with others, a repeated id), and every error, goes through the
object path, the reference.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from itertools import chain, repeat
from typing import Any, Callable, Iterable, Iterator, Sequence

import numpy as np

from cheems.formats import (NotPlain, batches_of, check_unique_ids, columnar_scores, dump_row, read_prompts,
                            row_sources, source_chunks)
from cheems.formats.halves import batch_parts
from cheems.io import (atomic_open, check_outputs, gc_paused, outputs_together, read_yaml_mapping, sidecar,
                       write_json, write_jsonl)
from cheems.records import CheemsInputError, Notice, Prompt, Setting, main_category_of
from cheems.settings import check_settings, setting

__all__ = ["ResolveSettings", "read_inputs", "run_analyze_bias", "run_debias", "run_filter", "run_judge",
           "run_local_judge", "run_merge", "run_resolve", "run_sample", "stage_settings"]

Progress = Callable[[int, int], None]


@dataclass
class ResolveSettings:
    """The ``resolve:`` section of a pipeline config: which judge labels distant supervision
    may drop (see :func:`cheems.curation.distant_supervision.distant_supervision`)."""

    scope: str = setting("cycles", choices=("cycles", "all"),
                         help="cycles: filter only comparisons inside cycles; all: also drop every comparison "
                              "the RM contradicts by more than the margin")
    margin: float = setting(0.0, min=0, help="With scope all: the score difference a contradiction must exceed")

    def __post_init__(self) -> None:
        check_settings(self)


def stage_settings(path: str | os.PathLike | None, stage: str) -> dict:
    """The ``stage:`` section of a pipeline YAML config ({} without a file or section)."""
    if path is None:
        return {}
    data = read_yaml_mapping(path, what="a pipeline config (stage: settings)")
    section = data.get(stage) or {}
    if not isinstance(section, dict):
        raise CheemsInputError(f"the {stage!r} section must be a mapping of setting: value",
                               file=str(path), field=stage)
    return section


def read_inputs(paths: Sequence[str | os.PathLike]) -> list[Prompt]:
    """Prompt rows of several files, ids unique across them (an error names both places)."""
    prompts, locations = _read_located(paths)
    check_unique_ids(prompts, locations)
    return prompts


def _read_located(paths: Sequence[str | os.PathLike]) -> tuple[list[Prompt], list[tuple[str, int]]]:
    prompts, locations = [], []
    for path in paths:
        res = read_prompts(path)
        prompts.extend(res.prompts)
        locations.extend(res.locations())
    return prompts, locations


def stage_outputs(output: str | os.PathLike, *kinds: str) -> list[Path]:
    """Every file a stage writes for ``output``: the output, its report and the named
    sidecars (``failed``, ``removed``, ``scores``...)."""
    return [Path(output), sidecar(output, "report", ".json"), *(sidecar(output, k) for k in kinds)]


def check_stage(inputs: Sequence[str | os.PathLike | None], output: str | os.PathLike, *kinds: str,
                extra: Sequence[str | os.PathLike] = ()) -> None:
    """Before reading anything: refuse an output or sidecar of this stage that is one of its
    inputs (see :func:`cheems.io.check_outputs`)."""
    check_outputs([*stage_outputs(output, *kinds), *extra], inputs)


def encoded(prompts: Iterable[Prompt]) -> Iterator[bytes]:
    """Each prompt as its JSONL line (``Prompt.to_dict``, as :func:`cheems.io.write_jsonl` writes it)."""
    return map(dump_row, map(Prompt.to_dict, prompts))


def _write(output: str | os.PathLike, lines: Iterable[bytes], report: dict, *, set_aside: int | None = None,
           sidecars: dict[str, list] | None = None) -> dict:
    """Write the rows (JSONL lines: :func:`encoded`), the report and the sidecar rows
    (``{kind: rows}``), all together or none; with ``set_aside`` (rows written to a sidecar)
    the report's ``balanced`` says whether input rows = output rows + set aside."""
    sidecars = sidecars or {}
    finals = stage_outputs(output, *sidecars)
    with outputs_together(*finals) as temps:
        n = 0
        with atomic_open(temps[0]) as f:
            for line in lines:
                f.write(line)
                n += 1
        for tmp, rows in zip(temps[2:], sidecars.values()):
            write_jsonl(tmp, rows)
        report = {**report, "output": str(output), "output_rows": n}
        if set_aside is not None:
            report["balanced"] = report["input_rows"] == n + set_aside
        write_json(temps[1], report)
    return report


# ----------------------------------------------------------------------------- stages

def run_sample(prompt_files: Sequence[str | os.PathLike], output: str | os.PathLike, config,
               progress: Progress | None = None) -> dict:
    """Sample responses for every prompt (see `cheems.curation.sample`). Prompts whose
    every request failed go to ``OUT.failed.jsonl`` with the reasons."""
    from cheems.curation.sample import read_prompt_rows, sample_responses

    check_stage(prompt_files, output, "failed", extra=[config.cache_path] if config.cache_path else [])
    rows = []
    for path in prompt_files:
        rows.extend(read_prompt_rows(path))
    result = sample_responses(rows, config, progress)
    report = {"stage": "sample", "input_rows": len(rows), "failed_rows": len(result.failed),
              **result.report()}
    return _write(output, encoded(result.prompts), report, set_aside=len(result.failed),
                  sidecars={"failed": result.failed})


def run_filter(inputs: Sequence[str | os.PathLike], output: str | os.PathLike, config,
               progress: Progress | None = None) -> dict:
    """Rule filters (`cheems.curation.filters`); every removed response (and every prompt left
    with too few) goes to ``OUT.removed.jsonl`` with its rule and detail."""
    from cheems.curation.filters import filter_prompts

    check_stage(inputs, output, "removed")
    prompts = read_inputs(inputs)
    result = filter_prompts(prompts, config, progress)
    return _write(output, encoded(result.kept), {"stage": "filter", "input_rows": len(prompts), **result.report()},
                  sidecars={"removed": result.removed})


def run_judge(inputs: Sequence[str | os.PathLike], output: str | os.PathLike, config=None,
              progress: Progress | None = None, *, generate=None, judge_model: str | os.PathLike | None = None,
              judge_settings=None, model_settings=None, seed: int = 0,
              notify: Callable[[str], None] | None = None) -> dict:
    """All-pair judging (`cheems.curation.all_pairs_judge`); every row is written, with the judge's
    comparisons and its ``failed_judgements``. The judge is ``config`` (a JudgeConfig: an API, or
    ``generate``) or ``judge_model`` (a causal LM folder judging by its verdict probabilities as
    ``judge_settings``, a :class:`~cheems.scoring.local_judge.JudgeModelSettings`, say, run as
    ``model_settings`` say, one order per pair drawn with ``seed`` when not both: :func:`run_local_judge`)."""
    from cheems.curation.all_pairs_judge import judge_all_pairs

    if (config is None) == (judge_model is None):
        raise CheemsInputError("give one judge: an API judge (config) or a local model (judge_model)")
    if judge_model is not None:
        return run_local_judge(inputs, output, judge_model, judge_settings, model_settings, progress, notify,
                               seed=seed)
    check_stage(inputs, output, extra=[config.cache_path] if config.cache_path else [])
    prompts = read_inputs(inputs)
    result = judge_all_pairs(prompts, config, progress, generate=generate)
    report = result.report()
    report["balanced"] = report["judgements"] == report["comparisons"] + report["unparseable"] + report["failed"]
    return _write(output, encoded(result.prompts), {"stage": "judge", "input_rows": len(prompts), **report})


def run_local_judge(inputs: Sequence[str | os.PathLike], output: str | os.PathLike, judge_model: str | os.PathLike,
                    judge_settings=None, model_settings=None, progress: Progress | None = None,
                    notify: Callable[[str], None] | None = None, *, seed: int = 0) -> dict:
    """All-pair judging with a local causal LM (:func:`cheems.curation.all_pairs_judge.judge_all_pairs_locally`).
    The verdict probabilities go to ``OUT.verdicts.jsonl`` as they come, so a rerun judges only
    the pairs it lacks; a verdicts file of other inputs, another model or other settings is
    started again (its ``.meta.json`` says what it was made from). The model is loaded only when
    some pair is left to judge."""
    from cheems.curation.all_pairs_judge import judge_all_pairs_locally
    from cheems.io import ResumableJsonl
    from cheems.scoring.local_judge import JudgeModelSettings, check_causal_lm_folder, judge_template_of
    from cheems.scoring.model_settings import ModelSettings
    from cheems.scoring.run import scores_meta

    js, ms = judge_settings or JudgeModelSettings(), model_settings or ModelSettings()
    verdicts = sidecar(output, "verdicts")
    check_stage(inputs, output, extra=[verdicts, ResumableJsonl.meta_path_of(verdicts)])
    check_causal_lm_folder(judge_model)
    prompts = read_inputs(inputs)
    meta = scores_meta(prompts, judge_model, template=judge_template_of(judge_model, js.language).version,
                       ties=js.ties, both_orders=js.both_orders, seed=seed, max_length=ms.max_length, dtype=ms.dtype)
    try:
        ResumableJsonl.check(verdicts, meta)
        stale = False
    except CheemsInputError:  # deterministic verdicts of something else: judged again, not mixed in
        stale = True
        if notify is not None:
            notify(f"{verdicts.name} holds verdicts of other inputs, model or settings: judging every pair again")
    name = Path(judge_model).resolve().name
    with ResumableJsonl(verdicts, meta, overwrite=stale) as store:
        judge = _LazyJudge(judge_model, ms, js.language, notify)
        result = judge_all_pairs_locally(prompts, judge, name=name, ties=js.ties, both_orders=js.both_orders,
                                         seed=seed, batch_size=ms.batch_size,
                                         done=store.rows, record=store.append, progress=progress)
    report = {**result.report(), "judge_backend": ms.backend, "verdicts": str(verdicts)}
    report["balanced"] = report["comparisons"] == report["pairs"]
    return _write(output, encoded(result.prompts), {"stage": "judge", "input_rows": len(prompts), **report})


@dataclass
class _LazyJudge:
    """A local judge loaded on its first use: a rerun whose verdicts are all on file loads no model."""

    path: str | os.PathLike
    settings: Any
    language: str | None
    notify: Callable[[str], None] | None
    judge: Any = None

    def verdict_probabilities(self, items, ties: bool, **kwargs):
        if self.judge is None:
            from cheems.scoring.local_judge import load_judge_model

            if self.notify is not None:
                self.notify(f"loading the judge {self.path} ...")
            self.judge = load_judge_model(self.path, self.settings, language=self.language)
        return self.judge.verdict_probabilities(items, ties, **kwargs)


def run_resolve(inputs: Sequence[str | os.PathLike], output: str | os.PathLike, *,
                scores: str | os.PathLike | None = None, rm: str | os.PathLike | None = None, server=None,
                scope: str = "cycles", margin: float = 0.0, model_settings=None,
                progress: Progress | None = None, notify: Callable[[str], None] | None = None) -> dict:
    """Distant supervision (`cheems.curation.distant_supervision`) with the scores of a
    reward model: read from ``scores``, or computed with ``rm`` into ``OUT.scores.jsonl`` as
    ``cheems score`` computes them (:func:`cheems.scoring.run.score_with_model`, run as
    ``model_settings``, a :class:`~cheems.scoring.model_settings.ModelSettings`, say;
    resumable: a rerun scores only what is missing), or with ``server`` (a
    :class:`~cheems.scoring.remote_scorer.RemoteScorer`: a running ``cheems serve`` scores them,
    into the same file)."""
    from cheems.curation.distant_supervision import distant_supervision
    from cheems.formats import read_scores

    if sum(x is not None for x in (scores, rm, server)) != 1:
        raise CheemsInputError(Notice("give the reward model's scores (", Setting("scores"), "), the model (",
                                      Setting("rm"), ") or a server of it (", Setting("server"), "), one of them"))
    scored = sidecar(output, "scores")
    computed = rm is not None or server is not None
    meta = scored.with_name(scored.name + ".meta.json")
    check_stage([*inputs, scores], output, extra=[scored, meta] if computed else [])
    if rm is not None:
        from cheems.models.checkpoints import check_model_folder

        check_model_folder(rm)
    elif not computed:
        report = _resolve_columns(inputs, output, scores, scope, margin)
        if report is not None:
            return report
    prompts = read_inputs(inputs)
    if computed:
        from cheems.scoring.run import score_with_model

        scores = scored
        score_with_model(server or rm, prompts, model_settings, output=scores, progress=progress, notify=notify)
        report = _resolve_columns(inputs, output, scores, scope, margin)  # written as given scores write it
        if report is not None:
            return report
    result = distant_supervision(prompts, read_scores(scores), scope=scope, margin=margin)
    return _write(output, encoded(result.prompts), _resolve_report(len(prompts), scores, result.report()))


def _resolve_report(n_rows: int, scores: str | os.PathLike, report: dict) -> dict:
    """The report of ``resolve``: the distant-supervision ``report`` with the stage's counts."""
    total = report["total"]
    return {"stage": "resolve", "input_rows": n_rows, "scores": str(scores), **report,
            "balanced": total["comparisons"] == total["kept"] + total["dropped"]}


def _resolve_columns(inputs: Sequence[str | os.PathLike], output: str | os.PathLike, scores: str | os.PathLike,
                     scope: str, margin: float) -> dict | None:
    """:func:`run_resolve` with a scores file, for files of columnar rows
    (:class:`cheems.formats.ColumnarBatch`) with distinct ids and a scores file that
    :func:`cheems.formats.columnar_scores` reads: a batch of rows at a time, the comparisons
    filtered by :func:`~cheems.curation.distant_supervision.supervise_arrays` and each row
    written with its kept comparisons and the dropped ones among its extra keys; the same
    bytes and report as the object path. None, having written nothing, for any other input
    or settings (the object path reads them, or names the fault). O(bytes + V + E)."""
    from cheems.curation.distant_supervision import check_scope, supervision_report

    try:
        margin = check_scope(scope, margin)
    except CheemsInputError:
        return None
    score_of = columnar_scores(scores)
    if score_of is None:
        return None
    with gc_paused():  # hundreds of thousands of small long-lived objects, no cycles
        try:
            lines, arrays, categories = _resolved_rows(inputs, score_of, scope, margin)
        except (NotPlain, CheemsInputError):
            return None
    if not categories:
        return None
    report = supervision_report(scope, margin, categories, *(np.concatenate(arrays[k]) for k in _SUPERVISION_ARRAYS))
    return _write(output, lines, _resolve_report(len(categories), scores, report))


_SUPERVISION_ARRAYS = ("reason", "owner", "strict", "rm_agrees", "conflicted_before", "conflicted_after")


def _resolved_rows(inputs: Sequence[str | os.PathLike], score_of: dict, scope: str,
                   margin: float) -> tuple[list[bytes], dict[str, list[np.ndarray]], list[str]]:
    """:func:`_resolved_batches` of the rows of ``inputs``; a big input's two halves in two
    processes (:func:`cheems.formats.halves.batch_parts`), joined in order. NotPlain for input
    the object path reads (a prompt id in both halves included)."""
    parts = batch_parts(row_sources(inputs, default_subsets=False),
                        lambda batches: _resolved_batches(batches, score_of, scope, margin), keep_comparisons=True)
    lines, arrays, categories, seen = parts[0]
    for more_lines, more_arrays, more_categories, more_seen in parts[1:]:
        if not seen.isdisjoint(more_seen):
            raise NotPlain("a prompt id repeats: the object path names both rows")
        for k, more in more_arrays.items():
            arrays[k] += [x + len(categories) for x in more] if k == "owner" else more
        lines, categories = lines + more_lines, categories + more_categories
    return lines, arrays, categories


def _resolved_batches(batches: Iterable, score_of: dict, scope: str, margin: float
                      ) -> tuple[list[bytes], dict[str, list[np.ndarray]], list[str], set[str]]:
    """The lines :func:`_resolve_columns` writes, one per row of the
    :class:`~cheems.formats.ColumnarBatch` es; the arrays of :data:`_SUPERVISION_ARRAYS` per
    batch (``owner``: the row's index among all of them); each row's main category; the rows'
    ids. A batch is filtered and written while its parsed rows are in the CPU cache (prompts are
    independent). NotPlain for input the object path reads."""
    from cheems.curation.distant_supervision import filtered_comparison_rows, supervise_arrays

    lines: list[bytes] = []
    arrays: dict[str, list[np.ndarray]] = {k: [] for k in _SUPERVISION_ARRAYS}
    categories: list[str] = []
    seen: set[str] = set()
    for batch in batches:
        _refuse_others(batch)
        first_row = len(categories)
        seen.update(batch.ids)
        categories += map(main_category_of, batch.categories)
        if len(seen) != len(categories):
            raise NotPlain("a prompt id repeats: the object path names both rows")
        offsets, a, b, lab, owner = batch.arrays()
        score = _response_scores(batch, score_of)
        if np.isnan(score[a]).any() or np.isnan(score[b]).any():
            raise NotPlain("a compared response without a score: the object path names it")
        reason, strict, rm_agrees, before, after = supervise_arrays(offsets, a, b, lab, owner, score, scope=scope,
                                                                    margin=margin)
        kept, extras = filtered_comparison_rows(batch.ids, batch.comparisons, batch.extras, owner, reason)
        lines += map(dump_row, batch.written_rows(batch.ranks, kept, extras))
        for k, x in zip(_SUPERVISION_ARRAYS, (reason, owner + first_row, strict, rm_agrees, before, after)):
            arrays[k].append(x)
    return lines, arrays, categories, seen


def _refuse_others(batch) -> None:
    """NotPlain when the batch left a row to the general readers: one they refuse, or one they
    join with others (a scored row); the object path reads them all."""
    if len(batch.refused):
        raise NotPlain("a row for the general readers: the object path reads them all")


def _response_scores(batch, score_of: dict) -> np.ndarray:
    """The score of every response of a batch, NaN where ``score_of`` has none."""
    keys = zip(chain.from_iterable(map(repeat, batch.ids, batch.sizes)), batch.response_ids)
    return np.fromiter(map(score_of.get, keys, repeat(np.nan)), np.float64, len(batch.response_ids))


def _rows_of(batches: list, *names: str) -> list[list]:
    """Per-row lists of the batches (``ids``, ``comparisons``...), each over all their rows."""
    return [list(chain.from_iterable(getattr(b, name) for b in batches)) for name in names]


def _written_lines(batches: list, ranks: list, comparisons: list, extras: list) -> list[bytes]:
    """The JSONL line of every row of the batches with the given rank, comparisons and extra
    keys (one of each per row, over all the batches' rows)."""
    lines: list[bytes] = []
    lo = 0
    for batch in batches:
        hi = lo + len(batch)
        lines += map(dump_row, batch.written_rows(ranks[lo:hi], comparisons[lo:hi], extras[lo:hi]))
        lo = hi
    return lines


def run_debias(inputs: Sequence[str | os.PathLike], output: str | os.PathLike, *, seed: int,
               tolerance: int = 0) -> dict:
    """Length debiasing (`cheems.curation.debias`); dropped pairs stay in their rows."""
    from cheems.curation.debias import length_debias

    check_stage(inputs, output)
    written = _debias_columns(inputs, seed, tolerance)
    if written is not None:
        lines, report = written
        return _write(output, lines, _debias_report(report))
    prompts = read_inputs(inputs)
    kept, report = length_debias(prompts, seed=seed, tolerance=tolerance)
    return _write(output, encoded(kept), _debias_report(report))


def _debias_report(report: dict) -> dict:
    """The report of ``debias``: the length-debias ``report`` with the stage's counts."""
    from cheems.curation.debias import KINDS

    before = sum(report["before"][k] for k in KINDS)
    after = sum(report["after"][k] for k in KINDS)
    return {"stage": "debias", "input_rows": report["prompts"], **report,
            "balanced": before == after + report["dropped"]}


def _debias_columns(inputs: Sequence[str | os.PathLike], seed: int,
                    tolerance: int) -> tuple[list[bytes], dict] | None:
    """:func:`run_debias`'s lines and length-debias report for files of columnar rows
    (:class:`cheems.formats.ColumnarBatch`) with distinct ids: every comparison's kind from
    arrays (:func:`~cheems.curation.debias.length_kinds`), the draw over all of them, each row
    written with its kept comparisons and the dropped ones among its extra keys; the same
    bytes and report as the object path. None for any other input or settings (the object
    path reads them, or names the fault). O(bytes + responses + comparisons + ranked pairs)."""
    from cheems.curation.debias import check_debias_settings, debias_arrays, debiased_rows, length_kinds

    try:
        check_debias_settings(seed, tolerance)
    except CheemsInputError:
        return None
    with gc_paused():  # hundreds of thousands of small long-lived objects, no cycles
        try:
            batches, columns = _debias_batches(inputs)
            if not batches:
                return None
            lengths = (np.concatenate(columns[k]) for k in ("len_a", "len_b", "sign"))
            counts = np.concatenate(columns["counts"])
            starts = np.zeros(len(counts) + 1, np.int64)
            np.cumsum(counts, out=starts[1:])
            ids = _rows_of(batches, "ids")[0]
            drop, report = debias_arrays(length_kinds(*lengths, tolerance), starts, columns["categories"], seed=seed,
                                         tolerance=tolerance, ranked=int(sum(map(sum, (b.has_rank for b in batches)))))
            comparisons, extras = debiased_rows(ids, columns["comparisons"], columns["extras"], drop)
        except (NotPlain, CheemsInputError):
            return None
        lines = _written_lines(batches, [None] * len(ids), comparisons, extras)
    return lines, report


def _debias_batches(inputs: Sequence[str | os.PathLike]) -> tuple[list, dict[str, list]]:
    """The batches of columnar rows of the files and, over all of them, per comparison (a
    ranked row's pairs in place of its comparisons) the lengths of its ``a`` and ``b``
    responses and the sign of its label (``len_a``, ``len_b``, ``sign``: arrays per batch),
    per row its comparison dicts and extra keys as length debiasing sees them, its number of
    comparisons (``counts``) and its main category. NotPlain for input the object path reads."""
    from cheems.curation.filters import text_length

    batches: list = []
    columns: dict[str, list] = {k: [] for k in ("len_a", "len_b", "sign", "counts", "comparisons", "extras",
                                                "categories")}
    seen: set[str] = set()
    chunks = source_chunks(row_sources(inputs, default_subsets=False))
    for batch in batches_of(chunks, keep_rows=True, keep_comparisons=True):
        _refuse_others(batch)
        batches.append(batch)
        seen.update(batch.ids)
        columns["categories"] += map(main_category_of, batch.categories)
        if len(seen) != len(columns["categories"]):
            raise NotPlain("a prompt id repeats: the object path names both rows")
        offsets, a, b, lab, _ = batch.arrays()
        contents = map(dict.__getitem__, chain.from_iterable(batch.responses), repeat("content"))
        length = np.fromiter(map(text_length, contents), np.int64, len(batch.response_ids))
        pairs = (length[a], length[b], _label_signs()[lab])
        counts = np.frombuffer(batch.counts, np.int64).copy()
        comparisons, extras = list(batch.comparisons), list(batch.extras)
        if any(batch.has_rank):
            pairs = _rankings_as_pairs(batch, offsets, length, pairs, counts, comparisons, extras)
        for k, x in zip(("len_a", "len_b", "sign", "counts"), (*pairs, counts)):
            columns[k].append(x)
        columns["comparisons"] += comparisons
        columns["extras"] += extras
    return batches, columns


def _label_signs() -> np.ndarray:
    """The sign of each label code (:data:`cheems.graph.LABEL_CODE`): 1 when ``a`` is chosen,
    -1 when ``b`` is, 0 for a tie."""
    from cheems.curation.debias import LABEL_SIGN
    from cheems.graph import LABEL_CODE

    return np.array([LABEL_SIGN[k] for k in sorted(LABEL_CODE, key=LABEL_CODE.get)], np.int64)


def _rankings_as_pairs(batch, offsets: np.ndarray, length: np.ndarray, pairs: tuple[np.ndarray, ...],
                       counts: np.ndarray, comparisons: list, extras: list) -> tuple[np.ndarray, ...]:
    """Each ranked row of ``batch`` as length debiasing converts it, its ranking's pairs in
    place of its comparisons (:func:`~cheems.curation.debias.ranked_comparison_rows`): its
    ``comparisons``, ``extras`` and ``counts`` entries replaced, and the per-comparison
    ``pairs`` (lengths of ``a`` and ``b``, label sign) returned with its segment replaced.
    O(k^2) for a row of k ranked responses."""
    from cheems.curation.debias import LABEL_SIGN, ranked_comparison_rows

    ends = np.cumsum(counts).tolist()
    segments = [tuple(x[e - n:e] for x in pairs) for e, n in zip(ends, counts.tolist())]
    for i in np.flatnonzero(batch.has_rank).tolist():
        comparisons[i], extras[i] = ranked_comparison_rows(batch.ids[i], batch.ranks[i], comparisons[i], extras[i])
        lo, hi = int(offsets[i]), int(offsets[i + 1])
        length_of = dict(zip(batch.response_ids[lo:hi], length[lo:hi].tolist()))
        segments[i] = ([length_of[c["a"]] for c in comparisons[i]], [length_of[c["b"]] for c in comparisons[i]],
                       [LABEL_SIGN[c["label"]] for c in comparisons[i]])
        counts[i] = len(comparisons[i])
    return tuple(np.concatenate([np.asarray(seg[k], np.int64) for seg in segments]) for k in range(3))


def run_merge(human: Sequence[str | os.PathLike], judged: Sequence[str | os.PathLike],
              output: str | os.PathLike, *, resolve_human: bool = True) -> dict:
    """The final dataset: human rows (``source: human``) then judge rows (``source: judge``).

    Human rows that carry annotations but no ranking are ranked by conflict resolution first
    (``resolve_human``), so contradicting human labels do not both train. A prompt id present
    in both parts is an error."""
    from cheems.graph import resolve_conflicts

    check_stage([*human, *judged], output)
    human_rows, human_at = _read_located(human)
    judge_rows, judge_at = _read_located(judged)
    check_unique_ids(human_rows + judge_rows, human_at + judge_at)
    ranked_now = 0
    if resolve_human:
        todo = [p for p in human_rows if p.rank is None and p.comparisons]
        if todo:
            for p, rank in zip(todo, resolve_conflicts(todo).ranks):
                p.rank = rank
            ranked_now = len(todo)
    merged = []
    for source, rows in (("human", human_rows), ("judge", judge_rows)):
        for p in rows:
            p.extra = {**p.extra, "source": source}
            merged.append(p)
    report = {"stage": "merge", "input_rows": len(human_rows) + len(judge_rows), "human_rows": len(human_rows),
              "judge_rows": len(judge_rows), "human_ranked_by_resolution": ranked_now}
    return _write(output, encoded(merged), report, set_aside=0)


def run_analyze_bias(groups: dict[str, Sequence[str | os.PathLike]], *, bins: Sequence[float] | None = None,
                     plots: str | os.PathLike | None = None, skip_invalid: bool = False) -> dict[str, Any]:
    """Annotator bias tables (`cheems.curation.bias`) per group of files; PNG plots into
    ``plots`` when given. Every row counts (a prompt id may repeat: no score is keyed by it);
    ``skip_invalid`` leaves bad rows out instead of raising. Returns ``{"tables", "plots",
    "skipped"}`` (the skipped rows' errors) and ``"identical"``: how many rows hold two
    responses of identical text (analysed like any other: a choice between them shows position
    bias alone)."""
    from cheems.curation.bias import analyze_bias, plot_bias
    from cheems.records import identical_responses

    read: dict[str, list[Prompt]] = {}
    skipped: list[CheemsInputError] = []
    for name, paths in groups.items():
        read[name] = []
        for path in paths:
            res = read_prompts(path, skip_invalid=skip_invalid)
            read[name].extend(res.prompts)
            skipped.extend(res.errors)
    tables = analyze_bias(read, bins=bins)
    files = plot_bias(tables, plots) if plots is not None else []
    identical = sum(identical_responses(p) > 0 for prompts in read.values() for p in prompts)
    return {"tables": tables, "plots": [str(f) for f in files], "skipped": skipped, "identical": identical}
