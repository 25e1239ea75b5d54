"""Scoring rows with a reward model: the one home of what ``cheems score --model``, ``cheems
eval --model``, ``cheems bon --model``/``--server`` and ``cheems curate resolve --rm``/``--server`` do.

:func:`score_with_model` loads the model as :class:`~cheems.scoring.model_settings.ModelSettings`
say (transformers or vLLM, optionally on Ray) and scores every response, either into a SCORES
file that survives interruption (rows ``{prompt_id, response_id, score}`` appended batch by
batch; a rerun resumes, and a rerun with another model or other settings is refused before the
model loads) or into memory. A :class:`~cheems.scoring.remote_scorer.RemoteScorer` goes where the
model folder would: the rows are scored by a running ``cheems serve`` instead.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

import orjson

from cheems.io import ResumableJsonl
from cheems.records import CheemsInputError, Prompt
from cheems.scoring.model_settings import ModelSettings
from cheems.scoring.remote_scorer import RemoteScorer
from cheems.scoring.scorer import RewardScorer

__all__ = ["ModelScoring", "load_scorer", "model_scores", "put_in_input_order", "responses_fingerprint",
           "score_to_file", "score_with_model", "scores_meta"]

Progress = Callable[[int, int], None]
Notify = Callable[[str], None]


def responses_fingerprint(prompts: Sequence[Prompt]) -> str:
    """A hash of everything a scores file depends on in its input rows: every prompt's id and
    text and every response's id and content, in order."""
    h = hashlib.sha256()
    for p in prompts:
        h.update(orjson.dumps([p.id, p.prompt, [(r.id, r.content) for r in p.responses]]))
    return h.hexdigest()[:16]


def scores_meta(prompts: Sequence[Prompt], model_path: str | Path, **settings) -> dict:
    """What a scores file of ``model_path`` depends on, recorded in its ``.meta.json``: the
    model folder, the scoring settings, a fingerprint of the rows scored, one of the whole
    model and the sha256 of every byte of each model file that affects scores (one key per
    file, ``"model file NAME_fingerprint"``), so a rerun after any of them changed is refused,
    naming what changed ("the model file model.safetensors changed, the model changed"),
    instead of mixing the scores of two models in one file. Unchanged big files are not read
    again (see :func:`cheems.models.checkpoints.model_file_digests`)."""
    from cheems.models.checkpoints import model_file_digests, model_fingerprint

    digests = model_file_digests(model_path)
    return {"model": str(Path(model_path).resolve()), **settings,
            "responses_fingerprint": responses_fingerprint(prompts),
            "model_fingerprint": model_fingerprint(model_path, digests=digests),
            **{f"model file {name}_fingerprint": digest for name, digest in digests.items()}}


def score_to_file(rm: RewardScorer, prompts: Sequence[Prompt], output: str | Path, *, meta: dict,
                  batch_size: int = 64, overwrite: bool = False,
                  progress: Callable[[int, int], None] | None = None) -> dict:
    """Score every response of ``prompts`` with ``rm`` (any :class:`~cheems.scoring.scorer.RewardScorer`:
    a loaded model, or a running server) and append rows ``{prompt_id, response_id, score}`` to
    ``output`` batch by batch, in forward batches of ``batch_size`` sequences and the token
    budget ``rm`` resolved when it loaded.

    A rerun after a crash skips what the file already holds; ``meta`` (see :func:`scores_meta`)
    must match the first run's, else the run is refused naming what changed (``overwrite``
    starts again; :meth:`cheems.io.ResumableJsonl.check` says so before a model is loaded).
    Returns ``{"scored", "resumed", "total"}``.
    """
    with ResumableJsonl(output, meta, overwrite=overwrite) as out:
        done = {(r["prompt_id"], r["response_id"]) for r in out.rows}
        scored = 0
        for batch in rm.score_prompts(prompts, batch_size=batch_size, done=done, progress=progress):
            out.append({"prompt_id": p, "response_id": r, "score": s} for p, r, s in batch)
            scored += len(batch)
    put_in_input_order(output, prompts)
    total = sum(len(p.responses) for p in prompts)
    return {"scored": scored, "resumed": len(done), "total": total}


def put_in_input_order(output: str | Path, prompts: Sequence[Prompt]) -> None:
    """Rewrite the finished SCORES file ``output`` with its rows in the order of the input's
    responses (batches are planned by length, so rows arrive out of order). Atomic: a crash in
    between leaves the appended file, which a rerun resumes; a file already in order is left alone."""
    from cheems.io import write_jsonl

    place = {key: i for i, key in enumerate((p.id, r.id) for p in prompts for r in p.responses)}
    path = Path(output)
    if not path.is_file():  # nothing written, nothing to order
        return
    rows = [orjson.loads(line) for line in path.read_bytes().splitlines() if line.strip()]
    keys = [place.get((row.get("prompt_id"), row.get("response_id")), len(place)) for row in rows]
    if all(a <= b for a, b in zip(keys, keys[1:])):
        return
    write_jsonl(path, (row for _, row in sorted(zip(keys, rows), key=lambda kr: kr[0])))


def load_scorer(path: str | os.PathLike, settings: ModelSettings, prompts: Sequence[Prompt],
                notify: Notify | None = None) -> RewardScorer:
    """A loaded reward model (transformers or vLLM, as ``settings.backend`` says), its token
    budget resolved as it loads (``settings.token_budget``: a number, None for the default, or
    ``auto``); with ``settings.check``, its scores are first checked not to depend on batching
    (an error otherwise). ``notify`` receives the status lines ("loading ...", the check's result)."""
    from cheems.scoring.batching import check_batch_invariance
    from cheems.scoring.transformers_rm import load_reward_model

    say = notify or (lambda line: None)
    s = settings
    say(f"loading {path} ...")
    if s.backend == "vllm":
        from cheems.scoring.vllm_backend import load_vllm_reward_model

        rm = load_vllm_reward_model(str(path), max_length=s.max_length, truncation=s.truncation, dtype=s.dtype,
                                    tensor_parallel_size=s.tensor_parallel_size,
                                    trust_remote_code=s.trust_remote_code, prefix_caching=s.share_prefix,
                                    reward_position=s.reward_position, token_budget=s.token_budget)
    else:
        rm = load_reward_model(path, device=s.device, dtype=s.dtype, max_length=s.max_length,
                               truncation=s.truncation, trust_remote_code=s.trust_remote_code, packing=s.packing,
                               share_prefix=s.share_prefix, liger_kernels=s.liger_kernels, compile=s.compile,
                               fixed_shapes=s.fixed_shapes, reward_position=s.reward_position,
                               token_budget=s.token_budget)
    if s.check:
        exact = s.backend == "transformers" and str(rm.model.dtype) == "torch.float32"
        tolerance = 1e-3 if exact else 5e-2  # bf16/fp16 kernels round more
        result = check_batch_invariance(rm, prompts, batch_size=s.batch_size, tolerance=tolerance)
        line = (f"batch invariance: {result['n']} responses alone vs in batches, max |diff| "
                f"{result['max_abs_diff']:.2e} (relative above 1; tolerance {result['tolerance']:.0e})")
        if not result["ok"]:
            raise CheemsInputError(line + ": scores depend on batching; check padding side and position ids")
        say(line + ": ok")
    return rm


@dataclass
class ModelScoring:
    """What :func:`score_with_model` did: the scores (in memory runs; None when they went to a
    file), how many responses were scored now and found already in the file, the model's layout,
    its encoding counts (:class:`cheems.models.sequences.EncodeStats`, None when unknown) and,
    on Ray, the replicas that ran."""

    scores: dict | None
    scored: int
    resumed: int
    total: int
    layout: str | None = None
    encoding: object = None
    replicas: int | None = None


def score_with_model(model: str | os.PathLike | RemoteScorer, prompts: Sequence[Prompt],
                     settings: ModelSettings | None = None, *,
                     output: str | os.PathLike | None = None, overwrite: bool = False, ray: bool = False,
                     replicas: int | None = None, progress: Progress | None = None,
                     notify: Notify | None = None) -> ModelScoring:
    """Score every response of ``prompts`` with the reward model folder ``model``.

    With ``output``, rows ``{prompt_id, response_id, score}`` are appended to that SCORES file
    batch by batch and a rerun resumes (:func:`score_to_file`; its ``.meta.json`` is checked
    against these settings before the model loads, ``overwrite`` starts again); ``ray`` runs
    the transformers back-end on a Ray cluster (:func:`cheems.scoring.ray_scoring.score_with_ray`,
    ``replicas`` of it). Without ``output`` the scores are returned, keyed
    ``(prompt_id, response_id)``. ``progress(done, total)`` follows the responses scored.

    ``model`` may be a :class:`~cheems.scoring.remote_scorer.RemoteScorer`: the server's model
    scores, in memory or into ``output`` as above (``settings`` and ``ray`` do not apply)."""
    if isinstance(model, RemoteScorer):
        return _score_remotely(model, prompts, output, overwrite, progress)
    s = settings or ModelSettings()
    if ray and output is None:
        raise CheemsInputError("scoring on Ray writes a scores file; give an output file")
    if ray and s.backend != "transformers":
        raise CheemsInputError("Ray runs the transformers backend", field="backend",
                               remedy=("backend", "leave out {} vllm"))
    layout = None
    if s.backend == "transformers" or output is not None:
        from cheems.models.checkpoints import detect_layout

        layout = detect_layout(model)  # checks the folder before anything else loads
    total = sum(len(p.responses) for p in prompts)
    if output is None:
        return _score_in_memory(model, prompts, s, total, progress, notify)
    chosen = {"reward_position": s.reward_position} if s.reward_position else {}  # else config.json's, fingerprinted
    meta = scores_meta(prompts, model, max_length=s.max_length, truncation=s.truncation, dtype=s.dtype,
                       layout=layout, backend=s.backend, **chosen)
    ResumableJsonl.check(output, meta, overwrite=overwrite)  # before the model loads
    if ray:
        return _score_on_ray(model, prompts, s, output, meta, layout, replicas, overwrite, progress)
    rm = load_scorer(model, s, prompts, notify)
    summary = score_to_file(rm, prompts, output, meta=meta, batch_size=s.batch_size, overwrite=overwrite,
                            progress=progress)
    return ModelScoring(None, summary["scored"], summary["resumed"], total, rm.layout, rm.stats)


def _score_remotely(server: RemoteScorer, prompts, output, overwrite: bool, progress) -> ModelScoring:
    total = sum(len(p.responses) for p in prompts)
    if output is None:
        scores = server.scores(prompts, progress=progress)
        return ModelScoring(scores, len(scores), 0, total)
    meta = {**server.meta(), "responses_fingerprint": responses_fingerprint(prompts)}
    summary = score_to_file(server, prompts, output, meta=meta, overwrite=overwrite, progress=progress)
    return ModelScoring(None, summary["scored"], summary["resumed"], total)


def _score_in_memory(model, prompts, s: ModelSettings, total: int, progress, notify) -> ModelScoring:
    rm = load_scorer(model, s, prompts, notify)
    scores = {}
    for batch in rm.score_prompts(prompts, batch_size=s.batch_size, progress=progress):
        scores.update(((pid, rid), v) for pid, rid, v in batch)
    return ModelScoring(scores, len(scores), 0, total, rm.layout, rm.stats)


def _score_on_ray(model, prompts, s: ModelSettings, output, meta, layout, replicas, overwrite,
                  progress) -> ModelScoring:
    from cheems.scoring.ray_scoring import score_with_ray

    load_kwargs = dict(dtype=s.dtype, max_length=s.max_length, truncation=s.truncation,
                       trust_remote_code=s.trust_remote_code, packing=s.packing, share_prefix=s.share_prefix,
                       liger_kernels=s.liger_kernels, compile=s.compile, fixed_shapes=s.fixed_shapes,
                       reward_position=s.reward_position, token_budget=s.token_budget)  # resolved by each replica
    summary = score_with_ray(prompts, model, output, meta=meta, load_kwargs=load_kwargs, batch_size=s.batch_size,
                             replicas=replicas, overwrite=overwrite, progress=progress)
    put_in_input_order(output, prompts)  # blocks were appended as they finished
    return ModelScoring(None, summary["scored"], summary["resumed"], sum(len(p.responses) for p in prompts),
                        layout, summary.get("stats"), summary["replicas"])


def model_scores(model, settings: ModelSettings, prompts: list[Prompt], progress: Progress | None,
                 notify: Notify | None) -> tuple[dict, object]:
    """Every response's score by the reward model, in memory, and the model's encoding counts."""
    run = score_with_model(model, prompts, settings, progress=progress, notify=notify)
    return run.scores, run.encoding
