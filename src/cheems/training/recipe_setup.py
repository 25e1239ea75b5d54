"""Everything a training run does before its first step, and the `TrainingRun` it builds.

`setup_run` starts the ``accelerate.Accelerator`` of this launch, finds
the checkpoint to resume from, loads the starting model (LoRA adapters when asked), records where
it reads rewards (`run_reward_position`), encodes
the training and eval data (:mod:`cheems.training.training_data`), plans the first epoch's
forward batches and prepares the optimizer and scheduler. Each piece is a function of its
own: `load_for_training`, `epoch_batches`, `step_groups` (the token budget:
:mod:`cheems.training.budget_probe`). The
loop that advances the run is :mod:`cheems.training.trainer`.

Imports torch, transformers, accelerate and peft inside the functions that need them.
"""

from __future__ import annotations

import json
import math
import os
from collections import Counter
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable

from cheems.io import files_fingerprint
from cheems.models.checkpoints import (load_classifier, load_tokenizer, quiet_transformers, require_torch,
                                       unwrap_peft)
from cheems.models.packing import use_packed_attention
from cheems.models.reward_position import (CONFIG_KEY, TRAINED, UNRECORDED, record_reward_position,
                                           recorded_reward_position)
from cheems.models.threads import use_available_cores
from cheems.records import CheemsInputError, Notice, Setting
from cheems.training.batching import batch_stats, greedy_prompt_batches
from cheems.training.budget_probe import token_budget_per_process, training_token_budget
from cheems.training.config import TrainConfig
from cheems.training.output_folder import (REWARD_POSITION_KEY, STATE_FILE, MetricsLog, check_resume, list_checkpoints,
                                          load_checkpoint, read_state)
from cheems.training.step_plan import say_few_steps
from cheems.training.training_data import (EvalSet, TrainingData, encode_eval_set, encode_training_data,
                                           read_training_prompts)

__all__ = ["DROPPED_WARNING_SHARE", "MAX_GRAD_NORM", "MISSING_EXTRA", "Notify", "TrainingRun", "epoch_batches",
           "load_for_training", "make_accelerator", "optimizer_update", "prepare_optimisation", "ready_for_training",
           "resume_point", "run_reward_position", "setup_run", "step_groups", "token_budget_per_process",
           "with_lora"]

MAX_GRAD_NORM = 1.0
"""The gradient norm every optimizer step clips to."""

MISSING_EXTRA = "training needs the models extra: pip install 'cheems[models]'"

Notify = Callable[[str], None]


def make_accelerator(config: TrainConfig):
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
                      compile: bool = False, objective: str = "bt"):
    """``(tokenizer, model)``: the starting checkpoint in float32: for ``bt`` through the shared
    loader (:func:`cheems.models.checkpoints.load_classifier`), checked to be a decoder with a
    ``score`` head; for ``dual`` a causal LM (:func:`cheems.training.dual.load_causal_lm`),
    whose scalar head `_reward_module` adds. Gradient checkpointing switched on when
    asked, the packed attention with ``packing`` (:mod:`cheems.models.packing`), Liger's
    kernels and compiled decoder layers when asked (:mod:`cheems.models.kernels`)."""
    with quiet_transformers():
        tokenizer = load_tokenizer(path)
    if objective == "dual":
        from cheems.training.dual import load_causal_lm

        model = load_causal_lm(path, tokenizer)
    else:
        model, _ = load_classifier(path, tokenizer, dtype="float32")
        if not hasattr(model, "score") or not hasattr(model, getattr(model, "base_model_prefix", "") or "-"):
            raise CheemsInputError("expected a decoder *ForSequenceClassification model with a 'score' head",
                                   file=str(path))
    ready_for_training(model, path, gradient_checkpointing=gradient_checkpointing, packing=packing,
                       liger_kernels=liger_kernels, compile=compile)
    return tokenizer, model


def ready_for_training(model, path, *, gradient_checkpointing: bool, packing: bool, liger_kernels: bool = False,
                       compile: bool = False) -> None:
    """Turn on what the run asks of a loaded model (every objective's): gradient checkpointing,
    Liger's kernels, compiled layers; refuse packing for a model that cannot run packed rows."""
    if gradient_checkpointing:
        model.config.use_cache = False
        # transformers 5 renamed it; older releases only have the first name
        enable = getattr(model, "activation_checkpointing_enable", None) or model.gradient_checkpointing_enable
        enable()
    if packing and not use_packed_attention(model):
        raise CheemsInputError(f"{type(model).__name__} cannot run packed batches; train without packing",
                               file=str(path))
    if liger_kernels:
        from cheems.models.kernels import use_liger_kernels

        use_liger_kernels(model)
    if compile:
        from cheems.models.kernels import compile_layers

        compile_layers(model)


def with_lora(model, config: TrainConfig):
    """``model`` with LoRA adapters (peft) on ``config.lora_target``. For ``bt`` the score head
    trains fully; ``dual`` and ``generative`` adapt a causal LM (dual's score head sits outside
    the peft model, beside it in `DualModel`; the LM head stays frozen, as every weight without
    an adapter does)."""
    try:
        from peft import LoraConfig, TaskType, get_peft_model
    except ImportError:
        raise CheemsInputError("LoRA needs peft: pip install 'cheems[train]'", field="lora_r") from None
    target = config.lora_target if config.lora_target == "all-linear" else \
        [t.strip() for t in config.lora_target.split(",") if t.strip()]
    causal = config.objective in ("dual", "generative")
    lora = LoraConfig(task_type=TaskType.CAUSAL_LM if causal else TaskType.SEQ_CLS, r=config.lora_r,
                      lora_alpha=config.lora_alpha, lora_dropout=config.lora_dropout, target_modules=target,
                      modules_to_save=None if causal else ["score"])
    try:
        return get_peft_model(model, lora)
    except ValueError as e:
        raise CheemsInputError(str(e), field="lora_target") from None


def resume_point(config: TrainConfig, output: Path) -> tuple[int, Path | None]:
    """``(step, checkpoint folder)`` to continue from: the last checkpoint in ``output`` when
    ``config.resume`` is set and one exists, else ``(0, None)``."""
    found = list_checkpoints(output) if config.resume else []
    return found[-1] if found else (0, None)


def run_reward_position(resume_from: Path | None) -> str:
    """Where a run reads its rewards (:mod:`cheems.models.reward_position`): ``TRAINED`` for a new
    run; a resumed run goes on with the rule its checkpoint records (``trainer_state.json``, else
    the model's config.json), ``template_end`` when it records none (a run an earlier cheems
    started, LoRA adapters included), so that no model is trained at two positions."""
    if resume_from is None:
        return TRAINED
    state = read_state(resume_from)
    if REWARD_POSITION_KEY in state:
        return recorded_reward_position({CONFIG_KEY: state[REWARD_POSITION_KEY]}, file=str(resume_from / STATE_FILE))
    f = resume_from / "config.json"
    if not f.is_file():
        return UNRECORDED
    try:
        config = json.loads(f.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise CheemsInputError(f"cannot read the checkpoint's config ({e})", file=str(f)) from None
    return recorded_reward_position(config if isinstance(config, dict) else {}, file=str(f))


def epoch_batches(data: TrainingData, config: TrainConfig, n_proc: int, epoch: int,
                  budget: int | None) -> list[list[int]]:
    """The epoch's forward batches for all processes together (n x micro batch, n x ``budget``)."""
    return greedy_prompt_batches(data.items, batch_size=config.micro_batch_size * n_proc,
                                 token_budget=budget * n_proc if budget else None, seed=config.seed + epoch,
                                 pairs_by_prompt=data.pairs_by_prompt, packed=config.packing)


def step_groups(batches: list[list[int]], gradient_accumulation: int) -> list[list[list[int]]]:
    """Optimizer steps of an epoch: ``gradient_accumulation`` batches each, the list
    extended from its start to fill the last step."""
    ga = gradient_accumulation
    extended = [batches[k % len(batches)] for k in range(math.ceil(len(batches) / ga) * ga)]
    return [extended[i:i + ga] for i in range(0, len(extended), ga)]


def _reward_module(model, config: TrainConfig):
    """``model`` as the trainer runs it: a `RewardModel`, or for ``dual`` a `DualModel` with a
    new scalar head (seeded)."""
    from cheems.training.reward_model import RewardModel

    if config.objective == "dual":
        from cheems.training.dual import DualModel, new_score_head

        return DualModel(model, new_score_head(unwrap_peft(model).config, seed=config.seed))
    return RewardModel(model)


def prepare_optimisation(accelerator, module, config: TrainConfig, total_steps: int):
    """``(module, optimizer, scheduler, trainable parameters)``: AdamW over the module's
    trainable weights (fused into one kernel per step on one GPU or under DDP) and a cosine
    schedule with linear warm-up, prepared by accelerate (the scheduler registered for
    checkpointing): the same for every objective's module."""
    import torch
    from transformers import get_cosine_schedule_with_warmup

    params = [p for p in module.parameters() if p.requires_grad]
    trainable = sum(p.numel() for p in params)  # counted before ZeRO-3 partitions them
    fused = accelerator.device.type == "cuda" and accelerator.distributed_type.value in ("NO", "MULTI_GPU")
    if fused:  # one kernel per step for all weights, instead of a few per tensor; needs them on the GPU already
        module.to(accelerator.device)
    optimizer = torch.optim.AdamW(params, lr=config.learning_rate, fused=fused or None)
    # stepped by us once per optimizer step (accelerate would step it once per process)
    scheduler = get_cosine_schedule_with_warmup(optimizer, math.ceil(config.warmup_ratio * total_steps), total_steps)
    module, optimizer = accelerator.prepare(module, optimizer)
    accelerator.register_for_checkpointing(scheduler)
    return module, optimizer, scheduler, trainable


@dataclass
class TrainingRun:
    """One run as `setup_run` builds it, :func:`cheems.training.trainer.train_epoch` advances
    it and :func:`cheems.training.trainer.finish_run` ends it."""

    config: TrainConfig
    output: Path
    accelerator: Any  # accelerate.Accelerator
    tokenizer: Any
    reward_model: Any  # RewardModel (DualModel for dual), prepared by accelerate (DDP / DeepSpeed / FSDP)
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
    computed_tokens: int = 0  # of those, the tokens the model computed (a shared prefix counted once)
    batch_tokens: int = 0  # tokens of this process's latest forward batch (named when it runs out of memory)
    last_eval: dict | None = None
    eval_step: int = -1  # the step last_eval is of
    epoch_loss: list[float] = field(default_factory=list)  # each step's loss, the last epoch run
    epoch_right: list[tuple[int, int]] = field(default_factory=list)  # (pairs right, pairs) per step, idem
    epoch_lm_loss: list[float] = field(default_factory=list)  # dual: each step's LM loss, idem


DROPPED_WARNING_SHARE = 0.05
"""Warn before training when more than this share of sequences is over ``max_length``."""


def setup_run(config: TrainConfig, notify: Notify | None = None, *,
              data_fingerprint: str | None = None, budget_below: int | None = None) -> TrainingRun:
    """Everything before the first step (``config`` validated by the caller): the accelerator; the resume
    point; the model (seeded, LoRA adapters when asked); the training and eval data encoded;
    the first epoch's batches; the optimizer and scheduler, prepared by accelerate and
    restored from the checkpoint when resuming; the metrics log. ``budget_below``: with
    ``--token-budget auto``, a budget that ran out of memory (the probe stays under it)."""
    torch = require_torch(MISSING_EXTRA)
    output = Path(config.output)
    accelerator = make_accelerator(config)
    if accelerator.device.type == "cpu":
        use_available_cores()  # torch's default is every core of the machine, busy or not
    start_step, resume_from = resume_point(config, output)
    data_fingerprint = data_fingerprint or files_fingerprint(config.train)
    resumed = check_resume(resume_from, config, data_fingerprint) if resume_from is not None else {}  # first
    torch.manual_seed(config.seed)
    tokenizer, model = load_for_training(str(config.model), gradient_checkpointing=config.gradient_checkpointing,
                                         packing=config.packing, liger_kernels=config.liger_kernels,
                                         compile=config.compile, objective=config.objective)
    position = run_reward_position(resume_from)
    record_reward_position(model.config, position)  # in config.json of every checkpoint and the final model
    if config.lora_r:
        model = with_lora(model, config)
    prompts = read_training_prompts(config.train, skip_invalid=config.skip_invalid, notify=notify)
    data = encode_training_data(prompts, tokenizer, max_length=config.max_length, truncate=config.truncate,
                                lm_targets=config.objective == "dual", reward_position=position)
    if notify is not None and data.dropped > DROPPED_WARNING_SHARE * data.n_sequences:
        notify(Notice(f"warning: {data.dropped} of {data.n_sequences} sequence(s) "
                      f"({data.dropped / data.n_sequences:.1%}) are longer than ", Setting("max_length"),
                      f" {config.max_length} tokens and are left out with their pairs (raise ", Setting("max_length"),
                      ", or turn on ", Setting("truncate"), " to keep their last tokens)"))
    eval_set = encode_eval_set(config.eval, tokenizer, max_length=config.max_length, skip_invalid=config.skip_invalid,
                               notify=notify, reward_position=position)
    module = _reward_module(model, config)
    budget = training_token_budget(config, accelerator, module, [n for _, _, n in data.items],
                                   step_loss=_probe_loss(config, tokenizer.pad_token_id), notify=notify,
                                   recorded=resumed.get("token_budget"), below=budget_below)
    first_batches = epoch_batches(data, config, accelerator.num_processes, 0, budget)
    steps_per_epoch = len(step_groups(first_batches, config.gradient_accumulation))
    total_steps = steps_per_epoch * config.epochs
    if not start_step and accelerator.is_main_process:
        say_few_steps(config, len(first_batches), lambda m: len(epoch_batches(
            data, replace(config, micro_batch_size=m), accelerator.num_processes, 0, budget)), notify,
            smallest_micro_batch=max(Counter(p for p, _, _ in data.items).values(), default=1))
    reward_model, optimizer, scheduler, trainable = prepare_optimisation(accelerator, module, config, total_steps)
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


def _probe_loss(config: TrainConfig, pad_id: int):
    """The objective's loss of a batch of token sequences, as the budget probe runs it: the
    rewards' squares for bt; for dual also the LM loss at every position (its worst case)."""
    def bt(module, seqs):
        from cheems.training.evaluation import batch_rewards

        device = next(module.parameters()).device
        return batch_rewards(module, seqs, packing=config.packing, pad_id=pad_id, device=device).float().square().mean()

    def dual(module, seqs):
        from cheems.training.dual import dual_outputs
        from cheems.training.loss import lm_loss

        device = next(module.parameters()).device
        rewards, logits, targets = dual_outputs(module, seqs, [1] * len(seqs), packing=config.packing, pad_id=pad_id,
                                                device=device)
        return rewards.float().square().mean() + lm_loss(logits, targets)

    return dual if config.objective == "dual" else bt


def optimizer_update(accelerator, model, optimizer, scheduler) -> float:
    """The end of an optimizer step, the same for every objective: clip the gradient norm to
    ``MAX_GRAD_NORM``, one optimizer step, one scheduler step, gradients cleared. Returns the
    learning rate the step used."""
    accelerator.clip_grad_norm_(model.parameters(), MAX_GRAD_NORM)
    lr = scheduler.get_last_lr()[0]
    optimizer.step()
    scheduler.step()
    optimizer.zero_grad(set_to_none=True)
    return lr
