"""Train a Bradley-Terry reward model on partially ranked prompts (paper §5, Appendix F), or
with ``objective="dual"`` a dual-path one (a causal LM, its scalar head and its LM head trained
together from one forward pass; :mod:`cheems.training.dual`).

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
setting; its fields are the CLI flags (and the keys of a YAML config file).

This module holds the loop and the finish. The pieces it is built from have their own homes:
the data read and encoded in :mod:`cheems.training.training_data`, everything before the
first step in :mod:`cheems.training.recipe_setup`, the rewards of a batch and the evaluation
in :mod:`cheems.training.evaluation`, what the run writes (checkpoints, the metrics log, the
final model) in :mod:`cheems.training.output_folder`, the wrapped model and the cross-process
gather in :mod:`cheems.training.reward_model`. Their public names are importable from here too.

Needs the ``[train]`` extra (torch, transformers, accelerate, pyyaml; peft for LoRA).
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence, TypeVar

from cheems.io import files_fingerprint
from cheems.models.memory_budget import AUTO, free_cached_memory, out_of_memory_said
from cheems.records import CheemsInputError
from cheems.training.config import TrainConfig
from cheems.training.evaluation import batch_rewards, evaluate_weights, train_outputs
from cheems.training.loss import bradley_terry_terms, dual_loss, lm_loss
from cheems.training.oom_retry import MemoryCap, pieces_forward_backward, resumed_budget
from cheems.training.output_folder import (FINAL_MODEL_TEMP, finished_summary, save_checkpoint, save_final_model,
                                           save_model_whole, undone_on_write_failure, write_summary)
from cheems.training.recipe_setup import (DROPPED_WARNING_SHARE, MAX_GRAD_NORM, MISSING_EXTRA, Notify, TrainingRun,
                                          epoch_batches, load_for_training, optimizer_update, setup_run, step_groups,
                                          token_budget_per_process)
from cheems.training.training_data import (EvalSet, TrainingData, encode_eval_set, encode_training_data,
                                           read_training_prompts)

__all__ = ["FINAL_MODEL_TEMP", "MAX_GRAD_NORM", "MISSING_EXTRA", "SLOW_STEP_FACTOR", "EvalSet", "Progress",
           "SlowStepWatch", "TrainingData", "TrainingRun",
           "encode_eval_set", "encode_training_data", "finish_run", "load_for_training",
           "DROPPED_WARNING_SHARE", "Notify", "batch_rewards", "finished_summary", "read_training_prompts", "setup_run",
           "token_budget_per_process", "train", "train_epoch"]


Progress = Callable[[int, int, dict], None]
_T = TypeVar("_T")


# ---------------------------------------------------------------------------- a busy machine

SLOW_STEP_FACTOR = 4.0
"""A step this many times slower than the usual one (the median of the first steps after
warm-up) is taken as a sign that the machine is busy."""


@dataclass
class SlowStepWatch:
    """Times the optimizer steps and says once, through ``notify``, when one takes more than
    ``factor`` times the usual step: the median of the ``baseline`` steps after the first
    ``warmup`` ones (which allocate and compile). A step that slow is seldom the run's own
    doing: other processes are using the cores (or the GPU) it was given."""

    notify: Notify | None
    clock: Callable[[], float] = field(default_factory=lambda: time.perf_counter)
    warmup: int = 1
    baseline: int = 5
    factor: float = SLOW_STEP_FACTOR
    seen: int = 0
    usual: list[float] = field(default_factory=list)
    said: bool = False

    def time(self, step: int, work: Callable[[], _T]) -> _T:
        """``work()``, timed as optimizer step ``step``."""
        start = self.clock()
        result = work()
        self.observe(step, self.clock() - start)
        return result

    def observe(self, step: int, seconds: float) -> None:
        """Count one step that took ``seconds``; notify if it is the first far slower one."""
        self.seen += 1
        if self.seen <= self.warmup:
            return
        if len(self.usual) < self.baseline:
            self.usual.append(seconds)
            return
        usual = statistics.median(self.usual)
        if self.said or self.notify is None or seconds <= self.factor * usual:
            return
        self.said = True
        self.notify(f"note: step {step} took {seconds:.1f} s, over {self.factor:g}x the usual {usual:.2f} s: the "
                    f"machine looks busy (other processes on its cores); the run goes on. {_thread_note()}")


def _thread_note() -> str:
    import torch

    return f"torch runs {torch.get_num_threads()} CPU thread(s); OMP_NUM_THREADS sets how many."


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


# ---------------------------------------------------------------------------- the loop

def _evaluate_run(run: TrainingRun) -> dict | None:
    """The eval metrics of the run's current weights, or None without an eval set."""
    if not run.eval_set.prompts:
        return None
    return evaluate_weights(run.accelerator, run.reward_model, run.eval_set, run.tokenizer.pad_token_id,
                            batch_size=run.config.micro_batch_size * 4, packing=run.config.packing)


def _due(every: int, step: int, end_of_epoch: bool) -> bool:
    """Whether an every-N-steps action runs after ``step``; ``every=0`` means at each epoch's end."""
    return (every and step % every == 0) or (not every and end_of_epoch)


def train_epoch(run: TrainingRun, epoch: int, progress: Progress | None = None,
                watch: SlowStepWatch | None = None, cap: MemoryCap | None = None) -> None:
    """One epoch of optimizer steps (its batches planned with ``seed + epoch``), skipping the
    steps done before the checkpoint the run resumed from. After each step: evaluate and
    checkpoint when due, log, and call ``progress`` (see `train`) on the main process.
    ``watch`` times the steps (not the evaluations and checkpoints between them). ``cap``:
    the batches are planned with ``cap.planned`` and a step that runs out of memory goes on
    at a lower budget when it allows (:mod:`cheems.training.oom_retry`)."""
    config, accelerator = run.config, run.accelerator
    planned = cap.planned if cap is not None else run.token_budget
    batches = run.first_batches if epoch == 0 else epoch_batches(run.data, config, accelerator.num_processes, epoch,
                                                                 planned)
    groups = step_groups(batches, config.gradient_accumulation)
    run.epoch_loss, run.epoch_right, run.epoch_lm_loss = [], [], []
    for g, group in enumerate(groups):
        if epoch * run.steps_per_epoch + g < run.step:
            continue  # done before the checkpoint we resumed from
        position = epoch + (g + 1) / len(groups)
        step = (lambda: _optimizer_step(run, group, epoch_position=position, cap=cap))  # noqa: B023  (called at once)
        stats = watch.time(run.step + 1, step) if watch is not None else step()
        end_of_epoch = g == len(groups) - 1
        if _due(config.eval_every, run.step, end_of_epoch):
            run.last_eval = stats["eval"] = _evaluate_run(run)
            run.eval_step = run.step
        run.log.write(run.step, {k: v for k, v in stats.items() if k != "eval"}
                      | ({f"eval/{k}": v for k, v in stats["eval"].items() if k != "subsets"}
                         if stats.get("eval") else {}))
        if _due(config.save_every, run.step, end_of_epoch):
            save_checkpoint(accelerator, run.output, run.step, epoch, run.reward_model, run.tokenizer, config,
                            data_fingerprint=run.data_fingerprint, total_steps=run.total_steps, token_budget=planned,
                            lowered_token_budget=run.token_budget if cap is not None and cap.lowered else None)
        if progress and accelerator.is_main_process:
            progress(run.step, run.total_steps, stats)


def _optimizer_step(run: TrainingRun, group: list[list[int]], epoch_position: float,
                    cap: MemoryCap | None = None) -> dict:
    """One optimizer step over the forward batches of ``group``: forward and backward each
    (`_step_gradients`), clip, AdamW, scheduler. Returns the step's ``loss``, ``pair_loss``,
    ``reg`` (and for dual ``lm_loss``; means over the batches), ``accuracy``, ``pairs``, ``lr``
    and ``epoch`` (``epoch_position``). The terms stay on the device until the step is queued
    whole: the host reads them once per step, so it never waits for the GPU between forward batches."""
    sums, pairs = _step_gradients(run, group, cap)
    lr = optimizer_update(run.accelerator, run.reward_model, run.optimizer, run.scheduler)
    read = {k: v.item() for k, v in sums.items()}  # the one wait for the device in a step
    means = {k: read[k] / len(group) for k in ("loss", "pair_loss", "reg", "lm_loss") if k in read}
    right = round(read["right"])
    run.step += 1
    run.epoch_loss.append(means["loss"])
    if "lm_loss" in means:
        run.epoch_lm_loss.append(means["lm_loss"])
    if pairs:
        run.epoch_right.append((right, pairs))
    return {**means, "accuracy": right / pairs if pairs else float("nan"), "pairs": pairs, "lr": lr,
            "epoch": epoch_position}


def _step_gradients(run: TrainingRun, group: list[list[int]], cap: MemoryCap | None) -> tuple[dict, int]:
    """The gradients of one step, accumulated over the forward batches of ``group``; their
    terms summed (device tensors) and pairs counted. When a batch runs out of memory and
    ``cap`` allows going on (`MemoryCap.can_go_on`), the attempt's gradients are dropped, its
    memory freed, the run's budget lowered (`MemoryCap.lower`, a note) and the step done again
    from its first batch, batches over the lowered budget in pieces (`pieces_forward_backward`):
    the same pairs, the same loss."""
    accelerator = run.accelerator
    before = accelerator.step, run.trained_tokens  # accelerate's count of batches decides when the optimizer steps
    while True:
        try:
            sums: dict = {}
            pairs = 0
            for batch in group:
                terms, n_pairs = _forward_backward(run, batch, cap)
                for k, v in terms.items():
                    sums[k] = sums[k] + v if k in sums else v
                pairs += n_pairs
            return sums, pairs
        except Exception as e:  # noqa: BLE001  (only running out of memory is answered)
            first_step = run.step == run.start_step == 0 and bool(run.token_budget)  # `train` probes again
            if cap is None or not cap.can_go_on(e, first_step):
                raise
        run.reward_model.zero_grad(set_to_none=True)  # the attempt's activations went with the error
        accelerator.step, run.trained_tokens = before
        free_cached_memory()
        run.token_budget = cap.lower(run.token_budget, run.batch_tokens, run.step + 1)


def _shares_prefix(config: TrainConfig) -> bool:
    """Whether a forward batch lays each prompt's shared tokens down once: packed rows, the
    ``bt`` objective (dual reads LM targets at row positions of whole sequences)."""
    return config.packing and config.share_prefix and config.objective == "bt"


def _prompt_groups(rows: Sequence[int], items: Sequence[tuple[int, int, int]]) -> list[list[int]]:
    """Positions in ``rows`` (indices into the training items) grouped by the prompt their
    sequence answers, in order of first appearance: the groups of `pack_sequences`, whose
    members share the chat template and the prompt."""
    by_prompt: dict[int, list[int]] = {}
    for k, i in enumerate(rows):
        by_prompt.setdefault(items[i][0], []).append(k)
    return list(by_prompt.values())


def _row_tokens(run: TrainingRun, parts: list[list[int]]) -> int:
    """Tokens in the packed rows of every process's part, each group's prefix counted once."""
    from cheems.models.packing import packed_cost

    ids = run.data.ids
    return sum(packed_cost([ids[part[k]] for k in group], True)
               for part in parts for group in _prompt_groups(part, run.data.items))


def _lm_starts(parts: list[list[int]], rank: int, starts: list[int | None]) -> list[int | None]:
    """The response starts (`TrainingData.response_starts`) of process ``rank``'s sequences, None
    for a sequence another process (or an earlier place) holds too: only its first copy trains
    the LM loss, as only its first copy's reward enters the pairs."""
    seen = {i for part in parts[:rank] for i in part}
    out = []
    for i in parts[rank]:
        out.append(None if i in seen else starts[i])
        seen.add(i)
    return out


def _forward_backward(run: TrainingRun, batch: list[int], cap: MemoryCap | None = None) -> tuple[dict, int]:
    """Forward and backward of one forward batch: this process scores its part, the rewards
    are gathered across processes, and the loss covers every pair inside the whole batch.
    For dual, the same forward gives the LM logits of this process's best responses, and the
    loss is `dual_loss` of the two (the LM loss a mean over this process's tokens; the
    data-parallel gradient average takes the mean over processes). Returns the batch's
    ``loss``, ``pair_loss``, ``reg``, ``right`` (and for dual ``lm_loss``) as detached device
    tensors (`bradley_terry_terms`), and its number of pairs. After ``cap`` was lowered, a batch
    over the budget runs in pieces (`pieces_forward_backward`)."""
    from cheems.models.sequences import device_tensor
    from cheems.training.reward_model import gather_rewards

    accelerator, dual = run.accelerator, run.config.objective == "dual"
    device, n_proc, rank = accelerator.device, accelerator.num_processes, accelerator.process_index
    parts = _deal(batch, run.lengths, n_proc)
    first_copies, better, worse = _pairs_in(parts, run.data, run.where)
    if cap is not None and cap.auto:  # one process: parts == [batch in some order]
        rows = parts[0]
        pieces = cap.pieces(run.token_budget, rows, [(rows[b], rows[w]) for b, w in zip(better, worse)],
                            run.lengths, run.config.packing)
        if pieces is not None:
            return pieces_forward_backward(run, rows, pieces, len(better), cap)
    seqs = [run.data.ids[i] for i in parts[rank]]
    groups = _prompt_groups(parts[rank], run.data.items) if _shares_prefix(run.config) else None
    run.batch_tokens = sum(map(len, seqs))  # named if the batch runs out of memory
    with accelerator.accumulate(run.reward_model):  # DDP syncs on the group's last batch only
        starts = _lm_starts(parts, rank, run.data.response_starts) if dual else []
        rewards, logits, targets = train_outputs(run, seqs, starts, groups)  # rewards: this process's part
        if n_proc > 1:
            rewards = gather_rewards(rewards, [len(p) for p in parts], rank)  # (whole batch,)
        rewards = rewards[device_tensor(first_copies, device)]
        loss, terms = bradley_terry_terms(rewards, device_tensor(better, device), device_tensor(worse, device),
                                          reg_coef=run.config.reg_coef)
        if dual:
            gen = lm_loss(logits, targets)
            loss = dual_loss(loss, gen, run.config.lm_coef)
            terms = {**terms, "lm_loss": gen.detach()}
        accelerator.backward(loss)  # scaled by 1 / gradient_accumulation
    run.trained_tokens += sum(run.lengths[i] for i in batch)
    run.computed_tokens += _row_tokens(run, parts) if groups is not None else sum(run.lengths[i] for i in batch)
    return {**terms, "loss": loss.detach()}, len(better)


def finish_run(run: TrainingRun, train_seconds: float) -> dict:
    """After the last step: the final evaluation (unless the last step had one), the model
    saved as a standard checkpoint in the output folder (LoRA merged in), the summary
    returned and written to ``train_summary.json`` (see `train`)."""
    if run.eval_step != run.step:
        run.last_eval = _evaluate_run(run)
    _save_final_model_whole(run)
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
        "computed_tokens_per_s": (run.computed_tokens / train_seconds if run.computed_tokens and train_seconds > 0
                                  else None),
        "train_loss": sum(run.epoch_loss) / len(run.epoch_loss) if run.epoch_loss else None,
        "train_accuracy": right / pairs if run.epoch_right else None,
        "eval": run.last_eval, "output": str(run.output), "resumed_from": run.start_step or None,
    }
    if config.objective == "dual":
        from cheems.training.dual import GENERATIVE_DIR

        summary |= {"objective": "dual", "lm_coef": config.lm_coef, "generative": str(run.output / GENERATIVE_DIR),
                    "train_lm_loss": (sum(run.epoch_lm_loss) / len(run.epoch_lm_loss) if run.epoch_lm_loss
                                      else None)}
    if run.accelerator.is_main_process:
        write_summary(run.output, summary)
    return summary


def _save_final_model_whole(run: TrainingRun) -> None:
    """The final model (`save_final_model`; for dual `export_dual_model`: the scalar path and
    ``generative/``), saved whole or not at all (`save_model_whole`)."""
    def write(folder: Path) -> None:
        if run.config.objective == "dual":
            from cheems.training.dual import export_dual_model

            export_dual_model(run.accelerator, folder, run.reward_model, run.tokenizer,
                              merge_lora=bool(run.config.lora_r))
        else:
            save_final_model(run.accelerator, folder, run.reward_model, run.tokenizer,
                             merge_lora=bool(run.config.lora_r))

    save_model_whole(run.accelerator, run.output, write)


# ---------------------------------------------------------------------------- the recipe

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
    tokens trained on per second, all processes), ``computed_tokens_per_s`` (of those, the
    tokens the model computed: fewer when prompts' shared prefixes are laid down once,
    ``share_prefix``), ``train_loss`` / ``train_accuracy`` (mean
    over the last epoch), ``eval`` (final metrics or None), ``output`` and ``resumed_from``
    (the step resumed from, or None). ``notify(line)`` receives warnings found before
    training starts (many sequences over ``max_length``) and, once, a note when a step takes
    far longer than the first ones did (`SlowStepWatch`: a busy machine), and with
    ``--token-budget auto`` a note each time running out of GPU memory lowers the budget
    (:mod:`cheems.training.oom_retry`). An output that
    cannot be written (a full disk) is one CheemsInputError naming the output folder, and the
    folder is left as the run found it, but for the whole checkpoints it saved (and the log up
    to the last of them: a run to resume; `undone_on_write_failure`). With
    ``resume`` on a run that has already finished, nothing is trained: its summary comes back
    with ``already_finished``.

    ``objective="dual"`` (`TrainConfig`) trains a causal LM with a scalar head on
    ``(1 - lm_coef) * BT + lm_coef * L_gen`` (:mod:`cheems.training.dual`): the step stats
    add ``lm_loss``; the summary adds ``objective``, ``lm_coef``, ``train_lm_loss`` (mean
    over the last epoch) and ``generative``, the folder of the causal LM (the output folder
    itself holds the scalar path, a standard ``*ForSequenceClassification`` checkpoint).
    """
    # the objectives: bt and dual run the recipe below (dual's forward and loss in
    # _forward_backward, its export in _save_final_model_whole); an objective with a recipe
    # of its own is sent to it here, before anything is read (it validates the config itself)
    if config.objective == "generative":
        from cheems.training.generative import train_generative  # imports torch: only when asked for

        return train_generative(config, progress, notify)
    config.validate()  # once a run: the settings again (the config is mutable), its files and folders
    data_fingerprint = files_fingerprint(config.train)  # read once: the checks of a resume need it
    done = finished_summary(config, data_fingerprint)
    if done is not None:
        return done
    # an output that cannot be written: the folder as it was (whole checkpoints aside), one line
    with undone_on_write_failure(config.output):
        summary, run = _set_up_and_train(config, progress, notify, data_fingerprint)
    run.accelerator.end_training()  # several processes: their process group is torn down in step
    return summary


def _set_up_and_train(config: TrainConfig, progress: Progress | None, notify: Notify | None,
                      data_fingerprint: str) -> tuple[dict, TrainingRun]:
    """``(summary, run)``: the run set up and trained; with ``--token-budget auto``, set up again
    under a lower budget as often as the first step runs out of memory (`_ProbeAgain`)."""
    below = None
    while True:
        if below is not None:
            free_cached_memory()  # the failed attempt's model and activations, released with it
        run = setup_run(config, notify, data_fingerprint=data_fingerprint, budget_below=below)
        try:
            return _train_run(run, progress, notify), run
        except _ProbeAgain as again:  # auto, and out of memory before the first step was done
            below, run = again.budget, None
            if notify is not None:
                notify(f"note: out of GPU memory on a forward batch of {again.tokens} tokens at token budget "
                       f"{again.budget} (found by probing) before the first step; probing again under it")


class _ProbeAgain(Exception):
    def __init__(self, budget: int, tokens: int):
        super().__init__(budget, tokens)
        self.budget, self.tokens = budget, tokens


def _train_run(run: TrainingRun, progress: Progress | None, notify: Notify | None) -> dict:
    """The epochs of a run set up, then its finish; the summary. Out of GPU memory becomes one
    line (`out_of_memory_said`), or with ``--token-budget auto`` and one process, before the
    run's first step was done (nothing saved yet) `_ProbeAgain`, later a lower budget
    (`_memory_cap`, :mod:`cheems.training.oom_retry`)."""
    config = run.config
    watch = SlowStepWatch(notify if run.accelerator.is_main_process else None)
    cap = _memory_cap(run, notify)
    started = time.perf_counter()
    try:
        with out_of_memory_said(lambda: (run.token_budget, run.batch_tokens), auto=config.token_budget == AUTO):
            for epoch in range(run.start_step // run.steps_per_epoch, config.epochs):
                train_epoch(run, epoch, progress, watch, cap)
            return finish_run(run, train_seconds=time.perf_counter() - started)
    except CheemsInputError as e:
        first_step = run.step == run.start_step == 0 and run.accelerator.num_processes == 1 and not cap.lowered
        if e.field == "token_budget" and config.token_budget == AUTO and first_step and run.token_budget:
            raise _ProbeAgain(run.token_budget, run.batch_tokens) from None
        raise


def _memory_cap(run: TrainingRun, notify: Notify | None) -> MemoryCap:
    """The run's `MemoryCap`: the batches planned with the budget `setup_run` found; going on
    at a lower budget after running out of memory with ``--token-budget auto`` on one process
    (several processes, DeepSpeed, FSDP: the one line); a resumed run goes on at the budget
    its checkpoint was lowered to."""
    accelerator = run.accelerator
    auto = run.config.token_budget == AUTO and accelerator.num_processes == 1 and \
        accelerator.distributed_type.value == "NO"
    cap = MemoryCap(planned=run.token_budget, auto=auto, notify=notify if accelerator.is_main_process else None)
    lowered = resumed_budget(run.output, run.start_step) if auto and run.start_step else None
    if lowered is not None:
        run.token_budget, cap.lowered = lowered, True
    return cap
