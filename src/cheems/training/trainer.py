"""Train a Bradley-Terry reward model on partially ranked prompts (paper §5, Appendix F).

`train(config, progress)` is a recipe of three pieces: `setup_run` reads the training files,
encodes every response through the tokenizer's chat template and builds the model, optimizer
and first batches into one `TrainingRun`; `train_epoch` runs one epoch of a plain loop,
readable top to bottom; `finish_run` evaluates, saves the final model and returns the summary:

    for epoch:                                   # batches differ per epoch (seed + epoch)
        for forward batch in greedy_prompt_batches(...):   # a prompt's responses together
            rewards = score head at each sequence's last token (one packed row, no padding)
            loss = bradley_terry_loss(pairs inside the batch) + reg * mean(rewards^2)
            backward; every `gradient_accumulation` batches: clip 1.0, AdamW, cosine LR
            evaluate / checkpoint when due; progress(step, total_steps, stats)

``accelerate.Accelerator`` runs the same code on CPU, one GPU or several processes under
``accelerate launch`` (DDP, FSDP, or DeepSpeed ZeRO-2/3 through the configs in
``configs/accelerate/``). With n processes a forward batch is planned for all of them at once
(n x ``micro_batch_size`` sequences, a prompt's responses together) and dealt out, one part
per process; the rewards are gathered across processes, so a pair whose two responses sit
on different devices still trains. The result is a standard ``*ForSequenceClassification``
checkpoint any tool loads (LoRA adapters are merged into it). `TrainConfig` holds every
setting; its fields are the CLI flags (and the keys of a YAML config file). What the run
writes (checkpoints, the metrics log, the final model) is in
:mod:`cheems.training.output_folder`; the wrapped model and the cross-process gather in
:mod:`cheems.training.reward_model`.

Needs the ``[train]`` extra (torch, transformers, accelerate, pyyaml; peft for LoRA).
"""

from __future__ import annotations

import json
import math
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from cheems.formats import group_by_prompt, read_prompts
from cheems.io import files_fingerprint
from cheems.metrics import evaluate
from cheems.models.checkpoints import load_classifier, load_tokenizer, quiet_transformers, require_torch
from cheems.models.packing import pack_sequences, packed_backend, use_packed_attention
from cheems.models.sequences import (DEFAULT_TOKEN_BUDGET, EncodeStats, default_token_budget, encode_conversations,
                                     pad_right, plan_batches)
from cheems.records import CheemsInputError, Prompt, preference_pairs
from cheems.training.batching import batch_stats, greedy_prompt_batches
from cheems.training.config import TrainConfig
from cheems.training.loss import bradley_terry_loss
from cheems.training.output_folder import (SUMMARY_FILE, MetricsLog, check_resume, list_checkpoints, load_checkpoint,
                                           save_checkpoint, save_final_model, write_summary)

__all__ = ["MAX_GRAD_NORM", "MISSING_EXTRA", "EvalSet", "Progress", "TrainingData", "TrainingRun",
           "encode_eval_set", "encode_training_data", "finish_run", "load_for_training",
           "DROPPED_WARNING_SHARE", "Notify", "batch_rewards", "finished_summary", "read_training_prompts", "setup_run",
           "token_budget_per_process", "train", "train_epoch"]

MISSING_EXTRA = "training needs the models extra: pip install 'cheems[models]'"
MAX_GRAD_NORM = 1.0

Progress = Callable[[int, int, dict], None]
Notify = Callable[[str], None]


# ---------------------------------------------------------------------------- data

@dataclass
class TrainingData:
    """Encoded training responses: batching items, pairs and token ids.

    ``items[i] = (prompt_index, response_index, length)``, ``ids[i]`` its token ids;
    ``pairs_by_prompt[p]`` lists ``(better, worse)`` response indices of prompt p whose
    sequences both survived the length limit.
    """

    items: list[tuple[int, int, int]]
    ids: list[list[int]]
    pairs_by_prompt: dict[int, list[tuple[int, int]]]
    n_pairs: int
    dropped: int  # sequences over max_length left out
    truncated: int  # sequences cut to max_length (truncate=True)
    dropped_pairs: int
    n_sequences: int = 0  # responses of prompts with pairs, encoded (kept + dropped)


def encode_training_data(prompts: list[Prompt], tokenizer, *, max_length: int, truncate: bool) -> TrainingData:
    """Encode the responses of every prompt that has training pairs (see `TrainingData`).

    Raises CheemsInputError when nothing is left to train on: no rankings or comparisons,
    only ties, or every sequence over ``max_length``.
    """
    with_judgements = sum(1 for p in prompts if p.rank is not None or p.comparisons)
    if not with_judgements:
        raise CheemsInputError("no training pairs: no prompt has a 'rank' or 'comparisons'", field="rank")
    encode_stats = EncodeStats()
    items, ids, pairs_by_prompt = [], [], {}
    n_pairs = dropped = dropped_pairs = n_sequences = 0
    judged = [(pi, p, pairs) for pi, p in enumerate(prompts) for pairs in [preference_pairs(p)] if pairs]
    encoded = iter(encode_conversations(tokenizer, [(p.prompt, r.content) for _, p, _ in judged for r in p.responses],
                                        stats=encode_stats, truncation="left",
                                        max_length=max_length if truncate else 1 << 62))
    for pi, p, pairs in judged:
        index = {r.id: k for k, r in enumerate(p.responses)}
        kept: set[int] = set()
        for k, r in enumerate(p.responses):
            n_sequences += 1
            seq = next(encoded)
            if len(seq) > max_length:
                dropped += 1
                continue
            kept.add(k)
            items.append((pi, k, len(seq)))
            ids.append(seq)
        usable = [(index[a], index[b]) for a, b in pairs if index[a] in kept and index[b] in kept]
        dropped_pairs += len(pairs) - len(usable)
        if usable:
            pairs_by_prompt[pi] = usable
            n_pairs += len(usable)
    if n_sequences == 0:
        raise CheemsInputError(f"no training pairs: every ranking or comparison of the {with_judgements} "
                               "judged prompt(s) is a tie", field="rank")
    if dropped == n_sequences:
        raise CheemsInputError(f"every sequence is longer than max_length {max_length} tokens "
                               "(raise max_length or truncate)", field="max_length")
    if n_pairs == 0:
        raise CheemsInputError(f"no training pairs left: {dropped} sequence(s) over max_length {max_length} "
                               "took every pair with them", field="max_length")
    # sequences of prompts whose pairs all went with dropped responses would train only the regulariser
    keep = [i for i, (pi, _, _) in enumerate(items) if pi in pairs_by_prompt]
    return TrainingData([items[i] for i in keep], [ids[i] for i in keep], pairs_by_prompt, n_pairs,
                        dropped, encode_stats.truncated, dropped_pairs, n_sequences)


def read_training_prompts(paths: list[str]) -> list[Prompt]:
    """Every prompt of the training files, rows of one prompt joined into one (responses
    deduplicated by content, each row's pairs kept; :func:`cheems.formats.group_by_prompt`),
    as the official loader does, so a prompt's responses share forward batches."""
    prompts = []
    for path in paths:
        prompts.extend(read_prompts(path).prompts)
    return group_by_prompt(prompts)


@dataclass
class EvalSet:
    """Ranked eval prompts with every response encoded: ``ids[i]`` is the sequence of
    ``keys[i] = (prompt id, response id)``."""

    prompts: list[Prompt]
    ids: list[list[int]]
    keys: list[tuple[str, str]]


def encode_eval_set(paths: list[str], tokenizer, *, max_length: int) -> EvalSet:
    """The ranked benchmarks at ``paths`` (each file its own subset unless rows name one),
    every response encoded; sequences over ``max_length`` keep their last tokens."""
    prompts = []
    for path in paths:
        prompts.extend(read_prompts(path, require_rank=True, default_subset=Path(path).stem).prompts)
    encode_stats = EncodeStats()
    # scores are needed for every response: over-long ones keep their end
    ids = encode_conversations(tokenizer, [(p.prompt, r.content) for p in prompts for r in p.responses],
                               max_length=max_length, truncation="left", stats=encode_stats)
    keys = [(p.id, r.id) for p in prompts for r in p.responses]
    return EvalSet(prompts, ids, keys)


# ---------------------------------------------------------------------------- setup pieces

def _accelerator(config: TrainConfig):
    """The ``accelerate.Accelerator`` of this launch (CPU, one GPU, or the processes of
    ``accelerate launch``), DeepSpeed's micro batch set to ours. Refuses FSDP on CPU, several
    processes without a distributed backend, and LoRA under ZeRO-3."""
    import torch
    from accelerate import Accelerator
    from accelerate.utils import InitProcessGroupKwargs

    handlers, cpu = [], False
    if not torch.cuda.is_available() and int(os.environ.get("WORLD_SIZE", "1")) > 1:
        # several processes on CPU (tests, laptops), started by `accelerate launch`: DDP needs
        # accelerate's CPU mode; DeepSpeed runs outside it and needs gloo named explicitly;
        # accelerate runs FSDP on GPUs only
        if os.environ.get("ACCELERATE_USE_FSDP", "false").lower() == "true":
            raise CheemsInputError("FSDP runs on GPUs only; on CPU launch with DDP or DeepSpeed "
                                   "(configs/accelerate/)")
        if os.environ.get("ACCELERATE_USE_DEEPSPEED", "false").lower() == "true":
            handlers.append(InitProcessGroupKwargs(backend="gloo"))
        else:
            cpu = True
    accelerator = Accelerator(mixed_precision="bf16" if config.bf16 else "no", cpu=cpu,
                              gradient_accumulation_steps=config.gradient_accumulation, kwargs_handlers=handlers)
    if accelerator.num_processes > 1 and accelerator.distributed_type.value == "NO":
        raise CheemsInputError(f"{accelerator.num_processes} processes but no distributed backend: launch with "
                               "one of the configs in configs/accelerate/")
    plugin = accelerator.state.deepspeed_plugin
    if plugin is not None:
        # batches come from our planner, not a DataLoader: DeepSpeed's "auto" sizes are ours
        plugin.deepspeed_config["train_micro_batch_size_per_gpu"] = config.micro_batch_size
        if config.lora_r and plugin.deepspeed_config.get("zero_optimization", {}).get("stage") == 3:
            raise CheemsInputError("LoRA is not supported with ZeRO-3 here; use ZeRO-2, FSDP or DDP",
                                   field="lora_r")
    return accelerator


def load_for_training(path: str, *, gradient_checkpointing: bool, packing: bool = False, liger_kernels: bool = False,
                      compile: bool = False):
    """``(tokenizer, model)``: the starting checkpoint in float32 through the shared loader
    (:func:`cheems.models.checkpoints.load_classifier`), checked to be a decoder with a
    ``score`` head, with gradient checkpointing switched on when asked, the packed attention
    with ``packing`` (:mod:`cheems.models.packing`), Liger's kernels and compiled decoder
    layers when asked (:mod:`cheems.models.kernels`)."""
    with quiet_transformers():
        tokenizer = load_tokenizer(path)
    model, _ = load_classifier(path, tokenizer, dtype="float32")
    if not hasattr(model, "score") or not hasattr(model, getattr(model, "base_model_prefix", "") or "-"):
        raise CheemsInputError("expected a decoder *ForSequenceClassification model with a 'score' head",
                               file=str(path))
    if gradient_checkpointing:
        model.config.use_cache = False
        # transformers 5 renamed it; older releases only have the first name
        enable = getattr(model, "activation_checkpointing_enable", None) or model.gradient_checkpointing_enable
        enable()
    if packing and not use_packed_attention(model):
        raise CheemsInputError(f"{type(model).__name__} cannot run packed batches; train with --no-packing",
                               file=str(path))
    if liger_kernels:
        from cheems.models.kernels import use_liger_kernels

        use_liger_kernels(model)
    if compile:
        from cheems.models.kernels import compile_layers

        compile_layers(model)
    return tokenizer, model


def _with_lora(model, config: TrainConfig):
    """``model`` with LoRA adapters (peft) on ``config.lora_target``; the score head trains fully."""
    try:
        from peft import LoraConfig, TaskType, get_peft_model
    except ImportError:
        raise CheemsInputError("LoRA needs peft: pip install peft", field="lora_r") from None
    target = config.lora_target if config.lora_target == "all-linear" else \
        [t.strip() for t in config.lora_target.split(",") if t.strip()]
    lora = LoraConfig(task_type=TaskType.SEQ_CLS, r=config.lora_r, lora_alpha=config.lora_alpha,
                      lora_dropout=config.lora_dropout, target_modules=target, modules_to_save=["score"])
    try:
        return get_peft_model(model, lora)
    except ValueError as e:
        raise CheemsInputError(str(e), field="lora_target") from None


def _resume_point(config: TrainConfig, output: Path) -> tuple[int, Path | None]:
    """``(step, checkpoint folder)`` to continue from: the last checkpoint in ``output`` when
    ``config.resume`` is set and one exists, else ``(0, None)``."""
    found = list_checkpoints(output) if config.resume else []
    return found[-1] if found else (0, None)


def token_budget_per_process(config: TrainConfig, device) -> int | None:
    """A forward batch's token cap on one process: ``config.token_budget``, else on a GPU
    ``DEFAULT_TOKEN_BUDGET["cuda"]``, else none (the micro batch size alone)."""
    if config.token_budget:
        return config.token_budget
    return DEFAULT_TOKEN_BUDGET["cuda"] if str(device).startswith("cuda") else None


def _epoch_batches(data: TrainingData, config: TrainConfig, n_proc: int, epoch: int,
                   budget: int | None) -> list[list[int]]:
    """The epoch's forward batches for all processes together (n x micro batch, n x ``budget``)."""
    return greedy_prompt_batches(data.items, batch_size=config.micro_batch_size * n_proc,
                                 token_budget=budget * n_proc if budget else None, seed=config.seed + epoch,
                                 pairs_by_prompt=data.pairs_by_prompt, packed=config.packing)


def _step_groups(batches: list[list[int]], gradient_accumulation: int) -> list[list[list[int]]]:
    """Optimizer steps of an epoch: ``gradient_accumulation`` batches each, the list
    extended from its start to fill the last step."""
    ga = gradient_accumulation
    extended = [batches[k % len(batches)] for k in range(math.ceil(len(batches) / ga) * ga)]
    return [extended[i:i + ga] for i in range(0, len(extended), ga)]


def _prepare_optimisation(accelerator, model, config: TrainConfig, total_steps: int):
    """``(reward_model, optimizer, scheduler, trainable parameters)``: ``model`` wrapped as a
    `RewardModel`, AdamW over its trainable weights and a cosine schedule with linear
    warm-up, prepared by accelerate (the scheduler registered for checkpointing)."""
    import torch
    from transformers import get_cosine_schedule_with_warmup

    from cheems.training.reward_model import RewardModel

    reward_model = RewardModel(model)
    params = [p for p in reward_model.parameters() if p.requires_grad]
    trainable = sum(p.numel() for p in params)  # counted before ZeRO-3 partitions them
    optimizer = torch.optim.AdamW(params, lr=config.learning_rate)
    # stepped by us once per optimizer step (accelerate would step it once per process)
    scheduler = get_cosine_schedule_with_warmup(optimizer, math.ceil(config.warmup_ratio * total_steps), total_steps)
    reward_model, optimizer = accelerator.prepare(reward_model, optimizer)
    accelerator.register_for_checkpointing(scheduler)
    return reward_model, optimizer, scheduler, trainable


# ---------------------------------------------------------------------------- a batch across processes

def _deal(batch: list[int], lengths, n: int) -> list[list[int]]:
    """One forward batch split into ``n`` parts of similar size and length (longest first,
    dealt round-robin). With fewer sequences than parts, parts repeat a sequence so that no
    process idles in a collective; `_pairs_in` uses only the first copy."""
    ordered = sorted(batch, key=lambda i: -lengths[i])
    if len(ordered) < n:
        ordered = [ordered[k % len(ordered)] for k in range(n)]
    return [ordered[k::n] for k in range(n)]


def _pairs_in(parts: list[list[int]], data: TrainingData, where: dict) -> tuple[list[int], list[int], list[int]]:
    """For the sequences of one micro-step (``parts``: one list per process, concatenated in
    this order as the gathered rewards are): the row of each sequence's first copy, and the
    (better, worse) rows of every training pair whose two responses are both present."""
    row: dict[int, int] = {}
    first_copies: list[int] = []
    at = 0
    for part in parts:
        for i in part:
            if i not in row:
                row[i] = at
                first_copies.append(at)
            at += 1
    better, worse = [], []
    for pi in dict.fromkeys(data.items[i][0] for i in row):
        for a, b in data.pairs_by_prompt[pi]:
            ia, ib = where[(pi, a)], where[(pi, b)]
            if ia in row and ib in row:
                better.append(row[ia])
                worse.append(row[ib])
    return first_copies, better, worse


# ---------------------------------------------------------------------------- evaluation

def batch_rewards(reward_model, seqs: list[list[int]], *, packing: bool, pad_id: int, device):
    """The rewards (n,) of token sequences ``seqs``: one packed row, or one right-padded batch."""
    if packing:
        batch = pack_sequences(seqs, device, backend=packed_backend(device))
        return reward_model(batch.input_ids, packing=batch)
    return reward_model(*pad_right(seqs, pad_id, device))


def _evaluate_weights(accelerator, reward_model, eval_set: EvalSet, pad_id: int, batch_size: int,
                      packing: bool) -> dict:
    """CheemsBench Accuracy / Exact Match / Overall of the current weights on the eval set.

    Every process scores every n-th batch (padded to the same number of batches, since
    ZeRO-3 gathers weights collectively) and the scores are gathered on all of them."""
    import torch
    from accelerate.utils import gather_object

    device = accelerator.device
    budget = default_token_budget(device.type)
    batches = plan_batches([len(x) for x in eval_set.ids], token_budget=budget, max_batch_size=batch_size,
                           packed=packing)
    n = accelerator.num_processes
    mine = batches[accelerator.process_index::n]
    rounds = math.ceil(len(batches) / n)
    mine = mine + [batches[0]] * (rounds - len(mine))  # repeats score again; the dict keeps one
    scored = []
    was_training = reward_model.training
    reward_model.eval()
    with torch.no_grad():
        for batch in mine:
            values = batch_rewards(reward_model, [eval_set.ids[i] for i in batch], packing=packing, pad_id=pad_id,
                                   device=device)
            scored.extend(zip(batch, values.tolist()))
    reward_model.train(was_training)
    if n > 1:
        scored = gather_object(scored)
    scores = {eval_set.keys[i]: v for i, v in scored}
    report = evaluate(eval_set.prompts, scores, n_bootstrap=0)
    subsets = {name: {"accuracy": e["accuracy"], "exact_match": e["exact_match"], "score": e["score"]}
               for name, e in report["subsets"].items() if e["score"] is not None}
    means = {k: sum(s[k] for s in subsets.values()) / len(subsets) if subsets else None
             for k in ("accuracy", "exact_match")}
    return {"overall": report["overall"], **means, "subsets": subsets}


# ---------------------------------------------------------------------------- the run

@dataclass
class TrainingRun:
    """One run as `setup_run` builds it, `train_epoch` advances it and `finish_run` ends it."""

    config: TrainConfig
    output: Path
    accelerator: Any  # accelerate.Accelerator
    tokenizer: Any
    reward_model: Any  # RewardModel, prepared by accelerate (DDP / DeepSpeed / FSDP wrapped)
    optimizer: Any  # AdamW, prepared by accelerate
    scheduler: Any  # cosine with warm-up, stepped once per optimizer step
    data: TrainingData
    where: dict[tuple[int, int], int]  # (prompt index, response index) -> position in data.items
    lengths: list[int]  # tokens of each sequence in data.items
    eval_set: EvalSet
    log: MetricsLog
    token_budget: int | None  # a forward batch's token cap per process (token_budget_per_process)
    first_batches: list[list[int]]  # epoch 0's forward batches, planned once for the shape too
    first_shape: dict  # batch_stats of first_batches (pair coverage, padding share)
    steps_per_epoch: int
    total_steps: int
    trainable: int  # trainable parameters
    start_step: int  # 0, or the step of the checkpoint resumed from
    data_fingerprint: str  # of the training files' bytes, recorded in checkpoints
    # advanced by the loop
    step: int = 0
    trained_tokens: int = 0  # real tokens forwarded, all processes
    last_eval: dict | None = None
    eval_step: int = -1  # the step last_eval is of
    epoch_loss: list[float] = field(default_factory=list)  # each step's loss, the last epoch run
    epoch_right: list[tuple[int, int]] = field(default_factory=list)  # (pairs right, pairs) per step, idem


DROPPED_WARNING_SHARE = 0.05
"""Warn before training when more than this share of sequences is over ``max_length``."""


def setup_run(config: TrainConfig, notify: Notify | None = None, *,
              data_fingerprint: str | None = None) -> TrainingRun:
    """Everything before the first step: validate ``config``; the accelerator; the resume
    point; the model (seeded, LoRA adapters when asked); the training and eval data encoded;
    the first epoch's batches; the optimizer and scheduler, prepared by accelerate and
    restored from the checkpoint when resuming; the metrics log."""
    torch = require_torch(MISSING_EXTRA)
    config.validate()
    output = Path(config.output)
    accelerator = _accelerator(config)
    start_step, resume_from = _resume_point(config, output)
    data_fingerprint = data_fingerprint or files_fingerprint(config.train)
    if resume_from is not None:
        check_resume(resume_from, config, data_fingerprint)  # before anything loads
    torch.manual_seed(config.seed)
    tokenizer, model = load_for_training(str(config.model), gradient_checkpointing=config.gradient_checkpointing,
                                         packing=config.packing, liger_kernels=config.liger_kernels,
                                         compile=config.compile)
    if config.lora_r:
        model = _with_lora(model, config)
    data = encode_training_data(read_training_prompts(config.train), tokenizer, max_length=config.max_length,
                                truncate=config.truncate)
    if notify is not None and data.dropped > DROPPED_WARNING_SHARE * data.n_sequences:
        notify(f"warning: {data.dropped} of {data.n_sequences} sequence(s) "
               f"({data.dropped / data.n_sequences:.1%}) are longer than max_length {config.max_length} tokens and "
               f"are left out with their pairs (raise --max-length, or --truncate to keep their last tokens)")
    eval_set = encode_eval_set(config.eval, tokenizer, max_length=config.max_length)
    budget = token_budget_per_process(config, accelerator.device)
    first_batches = _epoch_batches(data, config, accelerator.num_processes, 0, budget)
    steps_per_epoch = len(_step_groups(first_batches, config.gradient_accumulation))
    total_steps = steps_per_epoch * config.epochs
    reward_model, optimizer, scheduler, trainable = _prepare_optimisation(accelerator, model, config, total_steps)
    if resume_from is not None:
        load_checkpoint(accelerator, resume_from)
    if accelerator.is_main_process:
        output.mkdir(parents=True, exist_ok=True)
    reward_model.train()
    return TrainingRun(
        config=config, output=output, accelerator=accelerator, tokenizer=tokenizer, reward_model=reward_model,
        optimizer=optimizer, scheduler=scheduler, data=data,
        where={(pi, ri): i for i, (pi, ri, _) in enumerate(data.items)}, lengths=[n for _, _, n in data.items],
        eval_set=eval_set, log=MetricsLog(output, enabled=accelerator.is_main_process, start_step=start_step),
        token_budget=budget, first_batches=first_batches,
        first_shape=batch_stats(first_batches, data.items, data.pairs_by_prompt, packed=config.packing),
        steps_per_epoch=steps_per_epoch, total_steps=total_steps, trainable=trainable, start_step=start_step,
        data_fingerprint=data_fingerprint, step=start_step)


def _evaluate_run(run: TrainingRun) -> dict | None:
    """The eval metrics of the run's current weights, or None without an eval set."""
    if not run.eval_set.prompts:
        return None
    return _evaluate_weights(run.accelerator, run.reward_model, run.eval_set, run.tokenizer.pad_token_id,
                             batch_size=run.config.micro_batch_size * 4, packing=run.config.packing)


def _due(every: int, step: int, end_of_epoch: bool) -> bool:
    """Whether an every-N-steps action runs after ``step``; ``every=0`` means at each epoch's end."""
    return (every and step % every == 0) or (not every and end_of_epoch)


def train_epoch(run: TrainingRun, epoch: int, progress: Progress | None = None) -> None:
    """One epoch of optimizer steps (its batches planned with ``seed + epoch``), skipping the
    steps done before the checkpoint the run resumed from. After each step: evaluate and
    checkpoint when due, log, and call ``progress`` (see `train`) on the main process."""
    config, accelerator = run.config, run.accelerator
    batches = run.first_batches if epoch == 0 else _epoch_batches(run.data, config, accelerator.num_processes, epoch,
                                                                  run.token_budget)
    groups = _step_groups(batches, config.gradient_accumulation)
    run.epoch_loss, run.epoch_right = [], []
    for g, group in enumerate(groups):
        if epoch * run.steps_per_epoch + g < run.step:
            continue  # done before the checkpoint we resumed from
        stats = _optimizer_step(run, group, epoch_position=epoch + (g + 1) / len(groups))
        end_of_epoch = g == len(groups) - 1
        if _due(config.eval_every, run.step, end_of_epoch):
            run.last_eval = stats["eval"] = _evaluate_run(run)
            run.eval_step = run.step
        run.log.write(run.step, {k: v for k, v in stats.items() if k != "eval"}
                      | ({f"eval/{k}": v for k, v in stats["eval"].items() if k != "subsets"}
                         if stats.get("eval") else {}))
        if _due(config.save_every, run.step, end_of_epoch):
            save_checkpoint(accelerator, run.output, run.step, epoch, run.reward_model, run.tokenizer, config,
                            data_fingerprint=run.data_fingerprint, total_steps=run.total_steps)
        if progress and accelerator.is_main_process:
            progress(run.step, run.total_steps, stats)


def _optimizer_step(run: TrainingRun, group: list[list[int]], epoch_position: float) -> dict:
    """One optimizer step over the forward batches of ``group``: forward and backward each,
    clip, AdamW, scheduler. Returns the step's ``loss``, ``pair_loss``, ``reg`` (means over
    the batches), ``accuracy``, ``pairs``, ``lr`` and ``epoch`` (``epoch_position``)."""
    sums = {"loss": 0.0, "pair_loss": 0.0, "reg": 0.0}
    right = pairs = 0
    for batch in group:
        loss, terms = _forward_backward(run, batch)
        sums["loss"] += loss / len(group)
        sums["pair_loss"] += terms["pair_loss"] / len(group)
        sums["reg"] += terms["reg"] / len(group)
        if terms["pairs"]:
            right += round(terms["accuracy"] * terms["pairs"])
            pairs += terms["pairs"]
    run.accelerator.clip_grad_norm_(run.reward_model.parameters(), MAX_GRAD_NORM)
    lr = run.scheduler.get_last_lr()[0]
    run.optimizer.step()
    run.scheduler.step()
    run.optimizer.zero_grad(set_to_none=True)
    run.step += 1
    run.epoch_loss.append(sums["loss"])
    if pairs:
        run.epoch_right.append((right, pairs))
    return {**sums, "accuracy": right / pairs if pairs else float("nan"), "pairs": pairs, "lr": lr,
            "epoch": epoch_position}


def _forward_backward(run: TrainingRun, batch: list[int]) -> tuple[float, dict]:
    """Forward and backward of one forward batch: this process scores its part, the rewards
    are gathered across processes, and the loss covers every pair inside the whole batch.
    Returns the loss and `bradley_terry_loss`'s terms."""
    import torch

    from cheems.training.reward_model import gather_rewards

    accelerator = run.accelerator
    device, n_proc, rank = accelerator.device, accelerator.num_processes, accelerator.process_index
    parts = _deal(batch, run.lengths, n_proc)
    first_copies, better, worse = _pairs_in(parts, run.data, run.where)
    with accelerator.accumulate(run.reward_model):  # DDP syncs on the group's last batch only
        with accelerator.autocast():
            rewards = batch_rewards(run.reward_model, [run.data.ids[i] for i in parts[rank]],
                                    packing=run.config.packing, pad_id=run.tokenizer.pad_token_id,
                                    device=device)  # (this process's part,)
        if n_proc > 1:
            rewards = gather_rewards(rewards, [len(p) for p in parts], rank)  # (whole batch,)
        rewards = rewards[torch.tensor(first_copies, dtype=torch.long, device=device)]
        loss, terms = bradley_terry_loss(rewards, torch.tensor(better, dtype=torch.long, device=device),
                                         torch.tensor(worse, dtype=torch.long, device=device),
                                         reg_coef=run.config.reg_coef)
        accelerator.backward(loss)  # scaled by 1 / gradient_accumulation
    run.trained_tokens += sum(run.lengths[i] for i in batch)
    return loss.item(), terms


def finish_run(run: TrainingRun, train_seconds: float) -> dict:
    """After the last step: the final evaluation (unless the last step had one), the model
    saved as a standard checkpoint in the output folder (LoRA merged in), the summary
    returned and written to ``train_summary.json`` (see `train`)."""
    if run.eval_step != run.step:
        run.last_eval = _evaluate_run(run)
    save_final_model(run.accelerator, run.output, run.reward_model, run.tokenizer, merge_lora=bool(run.config.lora_r))
    run.log.close()
    config, data = run.config, run.data
    right, pairs = sum(r for r, _ in run.epoch_right), sum(n for _, n in run.epoch_right)
    summary = {
        "steps": run.step, "total_steps": run.total_steps, "epochs": config.epochs, "pairs": data.n_pairs,
        "pair_coverage": run.first_shape["pair_coverage"], "padding_share": run.first_shape["padding_share"],
        "sequences": len(data.items), "dropped_sequences": data.dropped, "dropped_pairs": data.dropped_pairs,
        "truncated_sequences": data.truncated, "processes": run.accelerator.num_processes,
        "trainable_parameters": run.trainable,
        "tokens_per_s": run.trained_tokens / train_seconds if run.trained_tokens and train_seconds > 0 else None,
        "train_loss": sum(run.epoch_loss) / len(run.epoch_loss) if run.epoch_loss else None,
        "train_accuracy": right / pairs if run.epoch_right else None,
        "eval": run.last_eval, "output": str(run.output), "resumed_from": run.start_step or None,
    }
    if run.accelerator.is_main_process:
        write_summary(run.output, summary)
    return summary


# ---------------------------------------------------------------------------- the recipe

def finished_summary(config: TrainConfig, data_fingerprint: str) -> dict | None:
    """With ``resume``: the summary of a run in ``config.output`` that already trained all its
    steps (``already_finished`` set), after checking it was run with the same data and
    settings; None when there is something left to train."""
    output = Path(config.output)
    summary_file = output / SUMMARY_FILE
    if not config.resume or not summary_file.exists():
        return None
    try:
        summary = json.loads(summary_file.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return None  # no usable summary: resume from the checkpoints as usual
    found = list_checkpoints(output)
    if found:
        check_resume(found[-1][1], config, data_fingerprint)
    if not isinstance(summary, dict) or summary.get("steps") != summary.get("total_steps"):
        return None
    return {**summary, "already_finished": True}


def train(config: TrainConfig, progress: Progress | None = None, notify: Notify | None = None) -> dict:
    """Train a reward model as ``config`` says; return a summary of the run.

    ``progress(step, total_steps, stats)`` is called after every optimizer step with the
    step's ``loss``, ``pair_loss``, ``reg``, ``accuracy`` (pairs ranked right), ``lr``,
    ``epoch`` and, when an evaluation ran at that step, ``eval`` (on the main process only
    when several run). An exception raised from it stops the run (checkpoints written so far
    stay; ``resume=True`` continues from the last).

    Each epoch's forward batches are extended from their start to a multiple of
    ``gradient_accumulation`` (as a distributed sampler evens out its shards), so every
    optimizer step sums the same number of batches.

    The summary: ``steps``, ``total_steps``, ``epochs``, ``pairs`` (training pairs after the length limit),
    ``pair_coverage`` and ``padding_share`` (of the first epoch's batches, see
    `batch_stats`), ``sequences``, ``dropped_sequences``, ``dropped_pairs``,
    ``truncated_sequences``, ``processes``, ``trainable_parameters``, ``tokens_per_s`` (real
    tokens trained on per second, all processes), ``train_loss`` / ``train_accuracy`` (mean
    over the last epoch), ``eval`` (final metrics or None), ``output`` and ``resumed_from``
    (the step resumed from, or None). ``notify(line)`` receives warnings found before
    training starts (many sequences over ``max_length``). With ``resume`` on a run that has
    already finished, nothing is trained: its summary comes back with ``already_finished``.
    """
    config.validate()
    data_fingerprint = files_fingerprint(config.train)  # read once: the checks of a resume need it
    done = finished_summary(config, data_fingerprint)
    if done is not None:
        return done
    run = setup_run(config, notify, data_fingerprint=data_fingerprint)
    started = time.perf_counter()
    for epoch in range(run.start_step // run.steps_per_epoch, config.epochs):
        train_epoch(run, epoch, progress)
    summary = finish_run(run, train_seconds=time.perf_counter() - started)
    run.accelerator.end_training()  # several processes: their process group is torn down in step
    return summary
