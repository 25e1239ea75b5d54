"""Train a generative reward model: a causal LM that writes the verdict of a pairwise judge prompt.

``train_generative(config, progress)`` is the recipe of ``cheems train --objective generative``,
built like the Bradley-Terry one (:mod:`cheems.training.trainer`): `setup_generative_run`
builds everything before the first step, `train_generative_epoch` runs one epoch of a plain
loop, `finish_generative_run` evaluates, saves and returns the summary:

    examples = both orders of every ranked pair as judge prompts  (judge_data; ties -> "C")
    for epoch:                                  # batches differ per epoch (seed + epoch)
        for forward batch (judge prompts of similar length, one packed row or right-padded):
            logits = lm_head(hidden state at each prompt's last token)   # (n, V): no other position
            loss = verdict_loss(logits, verdict, letters, label_smoothing)  # generative_loss
            backward; every `gradient_accumulation` batches: clip 1.0, AdamW, cosine LR
            evaluate / checkpoint when due; progress(step, total_steps, stats)

The template is ``config.judge_template`` (a JSON file) or the built-in one of
``config.judge_language``; the verdict letters are its A / B (and C with ``judge_ties``),
each the first token of the model's reply (:func:`cheems.models.judge_sequences.verdict_token_ids`).
The output folder holds a standard causal-LM checkpoint, its tokenizer and the judge template
(``judge_template.json``), so ``--judge-model OUTPUT`` needs nothing else; checkpoints, the
metrics log and the summary are written as the Bradley-Terry recipe writes them
(:mod:`cheems.training.output_folder`).

Evaluation (``config.eval``): every ranked pair of the benchmarks judged in both orders;
P(better wins) = (p_AB(A) + p_BA(B)) / 2, each p normalised over the letters A and B; a pair
is right when P > 0.5. Reported: that ``verdict_accuracy``, ``position_consistency`` and the
CheemsBench accuracy / exact match / overall of those verdicts (:func:`cheems.metrics.evaluate_outcomes`).

Imports torch at the top: import this module where a run starts, not where the CLI parses flags.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable

import torch

from cheems.io import files_fingerprint
from cheems.llm.verdict_template import VerdictTemplate, save_verdict_template
from cheems.models.checkpoints import quiet_transformers, unwrap_peft
from cheems.models.memory_budget import AUTO, out_of_memory_said
from cheems.models.sequences import device_tensor
from cheems.models.threads import use_available_cores
from cheems.records import Notice, Setting
from cheems.training.batching import greedy_prompt_batches
from cheems.training.config import TrainConfig
from cheems.training.evaluation import batch_rewards, score_in_shares
from cheems.training.generative_loss import verdict_terms
from cheems.training.judge_data import (JudgeData, JudgeEvalSet, encode_judge_data, encode_judge_eval_set,
                                        judge_template_of, verdict_ids)
from cheems.training.output_folder import (FINAL_MODEL_TEMP, MetricsLog, check_resume, finished_summary,
                                           load_checkpoint, save_checkpoint, save_final_model, save_model_whole,
                                           undone_on_write_failure, write_summary)
from cheems.training.recipe_setup import (MAX_GRAD_NORM, make_accelerator, optimizer_update, prepare_optimisation,
                                          ready_for_training, resume_point, step_groups, with_lora)
from cheems.training.budget_probe import training_token_budget
from cheems.training.step_plan import say_few_steps
from cheems.training.training_data import read_training_prompts

__all__ = ["FINAL_MODEL_TEMP", "MAX_GRAD_NORM", "GenerativeRun", "Notify", "Progress", "VerdictModel",
           "epoch_judge_batches", "evaluate_verdicts", "finish_generative_run", "load_judge_model", "padding_share",
           "setup_generative_run", "train_generative", "train_generative_epoch", "verdict_logits"]

Progress = Callable[[int, int, dict], None]
Notify = Callable[[str], None]


# ---------------------------------------------------------------------------- the model

class VerdictModel(torch.nn.Module):
    """A causal LM (or a peft model around one) wrapped so that ``forward`` returns the
    next-token logits (n, V) at each sequence's last token only: the LM head runs on those n
    hidden states, never on the other positions. ``forward(input_ids, attention_mask)`` for a
    right-padded batch, ``forward(input_ids, packing=batch)`` for a packed row."""

    def __init__(self, inner):
        super().__init__()
        self.inner = inner

    @property
    def causal_lm(self):  # the *ForCausalLM (LoRA layers inside when peft)
        return unwrap_peft(self.inner)

    def forward(self, input_ids, attention_mask=None, packing=None):
        core = self.causal_lm
        base, head = getattr(core, core.base_model_prefix), core.get_output_embeddings()
        if packing is not None:  # one packed row (1, T)
            hidden = base(input_ids=input_ids, position_ids=packing.position_ids,
                          cheems_packing=packing).last_hidden_state
            last = hidden[0, packing.last]  # (n, h)
        else:
            hidden = base(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
            ends = attention_mask.sum(dim=1) - 1  # right padding: each row's last real token
            last = hidden[torch.arange(len(ends), device=hidden.device), ends]  # (n, h)
        return head(last.to(head.weight.dtype))  # (n, V)


def load_judge_model(path: str, *, gradient_checkpointing: bool, packing: bool, liger_kernels: bool = False,
                     compile: bool = False):
    """``(tokenizer, model)``: the causal LM at ``path`` in float32 with its tokenizer (padding
    with EOS when it has no pad token), loaded and checked as dual's
    (:func:`cheems.training.dual.load_causal_lm`), gradient checkpointing, packed attention,
    Liger's kernels and compiled layers when asked."""
    from cheems.models.checkpoints import load_tokenizer
    from cheems.training.dual import load_causal_lm

    with quiet_transformers():
        tokenizer = load_tokenizer(path)
    model = load_causal_lm(path, tokenizer)
    ready_for_training(model, path, gradient_checkpointing=gradient_checkpointing, packing=packing,
                       liger_kernels=liger_kernels, compile=compile)
    return tokenizer, model


def verdict_logits(model, seqs: list[list[int]], *, packing: bool, pad_id: int, device):
    """The next-token logits (n, V) at the last token of each sequence of ``seqs``: the
    `VerdictModel`'s forward on one packed row or one padded batch, as the reward model's."""
    return batch_rewards(model, seqs, packing=packing, pad_id=pad_id, device=device)


# ---------------------------------------------------------------------------- evaluation

def _letter_probabilities(accelerator, model, eval_set: JudgeEvalSet, letters: list[int], pad_id: int,
                          batch_size: int, packing: bool) -> list[float]:
    """p(A) normalised over the letters A and B, for every eval sequence (all processes
    score their share; the results are gathered on every process)."""
    pair_ids = torch.tensor(letters[:2], dtype=torch.long, device=accelerator.device)

    def p_first(batch: list[int]):
        logits = verdict_logits(model, [eval_set.ids[i] for i in batch], packing=packing, pad_id=pad_id,
                                device=accelerator.device)
        return logits.float()[:, pair_ids].softmax(dim=-1)[:, 0].tolist()

    p = score_in_shares(accelerator, model, eval_set.ids, p_first, batch_size=batch_size, packing=packing)
    return [p[i] for i in range(len(eval_set.ids))]


def evaluate_verdicts(accelerator, model, eval_set: JudgeEvalSet, letters: list[int], pad_id: int, *,
                      batch_size: int, packing: bool) -> dict:
    """Held-out verdicts of the current weights: ``verdict_accuracy`` (pairs whose averaged
    P(better wins) = (p_AB(A) + p_BA(B)) / 2 is over 0.5), ``order_accuracy`` (the verdicts of
    each order on its own, 2 per pair, that pick the better response: what the judge scores
    read in one order; a judge that learnt a position and little else has 0.5 here and may still
    have a high averaged accuracy), ``position_consistency`` (pairs whose two orders pick the
    same response), and CheemsBench ``overall``, ``accuracy``, ``exact_match`` (means over
    subsets) and ``subsets`` of the averaged verdicts."""
    import numpy as np

    from cheems.metrics import Outcomes, evaluate_outcomes

    p_a = _letter_probabilities(accelerator, model, eval_set, letters, pad_id, batch_size, packing)
    n_comp = np.zeros(len(eval_set.prompts), np.int64)
    n_right = np.zeros(len(eval_set.prompts), np.int64)
    right = consistent = order_right = 0
    for k, pair in enumerate(eval_set.pairs):
        ab, ba = p_a[2 * k], p_a[2 * k + 1]  # p(A) with the better response first, then second
        won = (ab + (1.0 - ba)) / 2 > 0.5
        right += won
        consistent += (ab > 0.5) == (ba <= 0.5)
        order_right += (ab > 0.5) + (ba < 0.5)
        n_comp[pair.prompt_index] += 1
        n_right[pair.prompt_index] += won
    report = evaluate_outcomes(eval_set.prompts, Outcomes(n_comp, n_right), n_bootstrap=0)
    subsets = {name: {"accuracy": e["accuracy"], "exact_match": e["exact_match"], "score": e["score"]}
               for name, e in report["subsets"].items() if e["score"] is not None}
    means = {k: sum(s[k] for s in subsets.values()) / len(subsets) if subsets else None
             for k in ("accuracy", "exact_match")}
    pairs = len(eval_set.pairs)
    return {"verdict_accuracy": right / pairs if pairs else None,
            "order_accuracy": order_right / (2 * pairs) if pairs else None,
            "position_consistency": consistent / pairs if pairs else None, "pairs": pairs,
            "overall": report["overall"], **means, "subsets": subsets}


# ---------------------------------------------------------------------------- set-up

def epoch_judge_batches(lengths: list[int], config: TrainConfig, n_proc: int, epoch: int,
                        budget: int | None) -> list[list[int]]:
    """The epoch's forward batches (for all processes together): examples of similar length,
    in random order (``seed + epoch``), each within n x ``micro_batch_size`` sequences and n x
    ``budget`` tokens. Each example is a group of one for the prompt batcher."""
    items = [(i, 0, n) for i, n in enumerate(lengths)]
    return greedy_prompt_batches(items, batch_size=config.micro_batch_size * n_proc,
                                 token_budget=budget * n_proc if budget else None, seed=config.seed + epoch,
                                 packed=config.packing)


def padding_share(batches: list[list[int]], lengths: list[int], *, packed: bool) -> float:
    """Share of the forwarded tokens that are padding: 0 for packed rows; for right-padded
    batches 1 - real tokens / (longest x size), summed over the batches."""
    if packed or not batches:
        return 0.0
    real = sum(lengths[i] for b in batches for i in b)
    return 1.0 - real / sum(max(lengths[i] for i in b) * len(b) for b in batches)


@dataclass
class GenerativeRun:
    """One run as `setup_generative_run` builds it and the loop advances it."""

    config: TrainConfig
    output: Path
    accelerator: Any
    tokenizer: Any
    model: Any  # VerdictModel, prepared by accelerate
    optimizer: Any
    scheduler: Any
    template: VerdictTemplate
    letters: list[int]  # the verdict tokens: A, B (and C with ties)
    data: JudgeData
    eval_set: JudgeEvalSet
    log: MetricsLog
    token_budget: int | None
    first_batches: list[list[int]]
    padding_share: float  # of first_batches
    steps_per_epoch: int
    total_steps: int
    trainable: int
    start_step: int
    data_fingerprint: str
    step: int = 0
    trained_tokens: int = 0
    batch_tokens: int = 0  # of the forward batch last started: named if it runs out of GPU memory
    last_eval: dict | None = None
    eval_step: int = -1
    epoch_loss: list[float] = field(default_factory=list)
    epoch_right: list[tuple[int, int]] = field(default_factory=list)


def setup_generative_run(config: TrainConfig, notify: Notify | None = None, *,
                         data_fingerprint: str | None = None) -> GenerativeRun:
    """Everything before the first step: the accelerator, the resume point (checked against
    the checkpoint's settings and data), the causal LM (seeded; LoRA when asked), the
    template and its verdict tokens, the examples and eval pairs encoded, the first epoch's
    batches, the optimizer and scheduler (restored when resuming), the metrics log. ``config``
    is validated by the caller (:func:`train_generative`)."""
    output = Path(config.output)
    accelerator = make_accelerator(config)
    if accelerator.device.type == "cpu":
        use_available_cores()
    start_step, resume_from = resume_point(config, output)
    data_fingerprint = data_fingerprint or files_fingerprint(config.train)
    resumed = check_resume(resume_from, config, data_fingerprint) if resume_from is not None else {}
    torch.manual_seed(config.seed)
    template = judge_template_of(config)
    tokenizer, model = load_judge_model(str(config.model), gradient_checkpointing=config.gradient_checkpointing,
                                        packing=config.packing, liger_kernels=config.liger_kernels,
                                        compile=config.compile)
    letters = verdict_ids(tokenizer, template, ties=config.judge_ties)
    if config.lora_r:
        model = with_lora(model, config)
    prompts = read_training_prompts(config.train, skip_invalid=config.skip_invalid, notify=notify)
    data = encode_judge_data(prompts, tokenizer, template, ties=config.judge_ties, max_length=config.max_length,
                             truncate=config.truncate)
    if notify is not None and data.dropped:
        notify(Notice(f"warning: {data.dropped} judge prompt(s) are longer than ", Setting("max_length"),
                      f" {config.max_length} tokens and are left out (raise ", Setting("max_length"), ", or turn on ",
                      Setting("truncate"), " to keep their last tokens)"))
    eval_set = encode_judge_eval_set(config.eval, tokenizer, template, ties=config.judge_ties,
                                     max_length=config.max_length, skip_invalid=config.skip_invalid, notify=notify)
    lengths = [len(x) for x in data.ids]
    module = VerdictModel(model)
    budget = training_token_budget(config, accelerator, module, lengths, step_loss=_probe_loss(config, tokenizer),
                                   recorded=resumed.get("token_budget"), notify=notify)
    first_batches = epoch_judge_batches(lengths, config, accelerator.num_processes, 0, budget)
    steps_per_epoch = len(step_groups(first_batches, config.gradient_accumulation))
    total_steps = steps_per_epoch * config.epochs
    if not start_step and accelerator.is_main_process:
        say_few_steps(config, len(first_batches), lambda m: len(epoch_judge_batches(
            lengths, replace(config, micro_batch_size=m), accelerator.num_processes, 0, budget)), notify)
    wrapped, optimizer, scheduler, trainable = prepare_optimisation(accelerator, module, config, total_steps)
    if resume_from is not None:
        load_checkpoint(accelerator, resume_from)
    if accelerator.is_main_process:
        output.mkdir(parents=True, exist_ok=True)
    wrapped.train()
    return GenerativeRun(
        config=config, output=output, accelerator=accelerator, tokenizer=tokenizer, model=wrapped,
        optimizer=optimizer, scheduler=scheduler, template=template, letters=letters, data=data, eval_set=eval_set,
        log=MetricsLog(output, enabled=accelerator.is_main_process, start_step=start_step), token_budget=budget,
        first_batches=first_batches, padding_share=padding_share(first_batches, lengths, packed=config.packing),
        steps_per_epoch=steps_per_epoch, total_steps=total_steps, trainable=trainable,
        start_step=start_step, data_fingerprint=data_fingerprint, step=start_step)


def _probe_loss(config: TrainConfig, tokenizer):
    """A batch's loss as the token-budget probe runs it: every verdict logit of each sequence."""
    def loss(module, seqs):
        device = next(module.parameters()).device
        return verdict_logits(module, seqs, packing=config.packing, pad_id=tokenizer.pad_token_id,
                              device=device).float().logsumexp(-1).mean()

    return loss


# ---------------------------------------------------------------------------- the loop

def _evaluate_run(run: GenerativeRun) -> dict | None:
    if not run.eval_set.pairs:
        return None
    return evaluate_verdicts(run.accelerator, run.model, run.eval_set, run.letters, run.tokenizer.pad_token_id,
                             batch_size=run.config.micro_batch_size * 4, packing=run.config.packing)


def _due(every: int, step: int, end_of_epoch: bool) -> bool:
    return bool((every and step % every == 0) or (not every and end_of_epoch))


def train_generative_epoch(run: GenerativeRun, epoch: int, progress: Progress | None = None) -> None:
    """One epoch of optimizer steps, skipping those done before the checkpoint resumed from;
    after each step: evaluate and checkpoint when due, log, ``progress`` on the main process."""
    config, accelerator = run.config, run.accelerator
    batches = run.first_batches if epoch == 0 else epoch_judge_batches(
        [len(x) for x in run.data.ids], config, accelerator.num_processes, epoch, run.token_budget)
    groups = step_groups(batches, config.gradient_accumulation)
    run.epoch_loss, run.epoch_right = [], []
    for g, group in enumerate(groups):
        if epoch * run.steps_per_epoch + g < run.step:
            continue  # done before the checkpoint we resumed from
        stats = _optimizer_step(run, group, epoch_position=epoch + (g + 1) / len(groups))
        end_of_epoch = g == len(groups) - 1
        if _due(config.eval_every, run.step, end_of_epoch):
            run.last_eval = stats["eval"] = _evaluate_run(run)
            run.eval_step = run.step
        evaluated = stats.get("eval") or {}
        run.log.write(run.step, {k: v for k, v in stats.items() if k != "eval"}
                      | {f"eval/{k}": v for k, v in evaluated.items() if k != "subsets"})
        if _due(config.save_every, run.step, end_of_epoch):
            template = replace(run.template, ties=run.config.judge_ties)  # a checkpoint is a judge of its own
            save_checkpoint(accelerator, run.output, run.step, epoch, run.model, run.tokenizer, config,
                            data_fingerprint=run.data_fingerprint, total_steps=run.total_steps,
                            token_budget=run.token_budget,
                            write_extra=lambda folder: save_verdict_template(template, folder))
        if progress and accelerator.is_main_process:
            progress(run.step, run.total_steps, stats)


def _optimizer_step(run: GenerativeRun, group: list[list[int]], epoch_position: float) -> dict:
    """One optimizer step over the forward batches of ``group``; returns the step's ``loss``
    (mean over the batches), ``accuracy`` (examples whose likeliest verdict is right),
    ``examples``, ``lr`` and ``epoch``. The batches' losses and right counts stay on the
    device until the step is done: one read per step, not one per forward batch."""
    import torch

    losses, rights, examples = [], [], 0
    for batch in group:
        loss, right, counted = _forward_backward(run, batch)
        losses.append(loss)
        rights.append(right)
        examples += counted
    lr = optimizer_update(run.accelerator, run.model, run.optimizer, run.scheduler)
    loss_sum = sum(losses[1:], losses[0]) / len(group)
    loss_sum, right = torch.stack([loss_sum.float(), sum(rights[1:], rights[0]).float()]).tolist()
    right = round(right)
    run.step += 1
    run.epoch_loss.append(loss_sum)
    if examples:
        run.epoch_right.append((right, examples))
    return {"loss": loss_sum, "accuracy": right / examples if examples else float("nan"), "examples": examples,
            "lr": lr, "epoch": epoch_position}


def _my_part(batch: list[int], ids: list[list[int]], n: int, rank: int) -> tuple[list[int], int]:
    """This process's share of a forward batch (longest first, dealt round-robin) and how many
    of them count: a process left without an example runs the first one with weight 0, so
    that no process idles in a collective."""
    ordered = sorted(batch, key=lambda i: -len(ids[i]))
    part = ordered[rank::n]
    return (part, len(part)) if part else (ordered[:1], 0)


def _forward_backward(run: GenerativeRun, batch: list[int]):
    """Forward and backward of this process's part of one forward batch: ``(loss, right,
    counted)``, the part's loss and its right verdicts as detached device tensors, and how many
    of its examples count. The loss is scaled by (its examples x processes / the batch's
    examples), so the data-parallel mean of the gradients is the gradient of the mean loss
    over the whole batch."""
    accelerator, data = run.accelerator, run.data
    device, n_proc = accelerator.device, accelerator.num_processes
    mine, counted = _my_part(batch, data.ids, n_proc, accelerator.process_index)
    run.batch_tokens = sum(len(data.ids[i]) for i in mine)
    with accelerator.accumulate(run.model):
        with accelerator.autocast():
            logits = verdict_logits(run.model, [data.ids[i] for i in mine], packing=run.config.packing,
                                    pad_id=run.tokenizer.pad_token_id, device=device)  # (part, V)
        targets = device_tensor([data.targets[i] for i in mine], device)
        loss, right = verdict_terms(logits, targets, device_tensor(run.letters, device), run.config.label_smoothing)
        accelerator.backward(loss * (counted * n_proc / len(batch)))  # scaled by 1 / gradient_accumulation
    run.trained_tokens += sum(len(data.ids[i]) for i in batch)
    return loss.detach(), right if counted else right * 0, counted


# ---------------------------------------------------------------------------- the finish

def _save_judge_whole(run: GenerativeRun) -> None:
    """The final causal LM (LoRA merged in), its tokenizer and the judge template, saved whole
    or not at all (`save_model_whole`)."""
    def write(folder: Path) -> None:
        save_final_model(run.accelerator, folder, run.model, run.tokenizer, merge_lora=bool(run.config.lora_r))
        if run.accelerator.is_main_process:
            save_verdict_template(replace(run.template, ties=run.config.judge_ties), folder)

    save_model_whole(run.accelerator, run.output, write)


def finish_generative_run(run: GenerativeRun, train_seconds: float) -> dict:
    """The final evaluation (unless the last step had one), the judge saved, the summary
    written to ``train_summary.json`` and returned (see `train_generative`)."""
    if run.eval_step != run.step:
        run.last_eval = _evaluate_run(run)
    _save_judge_whole(run)
    run.log.close()
    data = run.data
    right, examples = sum(r for r, _ in run.epoch_right), sum(n for _, n in run.epoch_right)
    summary = {
        "objective": "generative", "steps": run.step, "total_steps": run.total_steps, "epochs": run.config.epochs,
        "pairs": data.pairs, "examples": len(data.ids), "sequences": len(data.ids),
        "pair_coverage": 1.0, "padding_share": run.padding_share,
        "dropped_sequences": data.dropped, "truncated_sequences": data.truncated,
        "processes": run.accelerator.num_processes, "trainable_parameters": run.trainable,
        "verdicts": list(run.template.letters(run.config.judge_ties)), "template": run.template.version,
        "tokens_per_s": run.trained_tokens / train_seconds if run.trained_tokens and train_seconds > 0 else None,
        "train_loss": sum(run.epoch_loss) / len(run.epoch_loss) if run.epoch_loss else None,
        "train_accuracy": right / examples if examples else None,
        "eval": run.last_eval, "output": str(run.output), "resumed_from": run.start_step or None,
    }
    if run.accelerator.is_main_process:
        write_summary(run.output, summary)
    return summary


def train_generative(config: TrainConfig, progress: Progress | None = None, notify: Notify | None = None) -> dict:
    """Train a generative reward model as ``config`` says (``objective="generative"``); return
    a summary of the run.

    ``progress(step, total_steps, stats)`` is called after every optimizer step with the
    step's ``loss`` (`verdict_loss`, label smoothing ``config.label_smoothing``), ``accuracy``
    (training examples whose likeliest verdict letter is right), ``examples``, ``lr``,
    ``epoch`` and, when an evaluation ran, ``eval`` (see `evaluate_verdicts`).

    The summary: ``objective``, ``steps``, ``total_steps``, ``epochs``, ``pairs`` (judge pairs,
    tied ones included with ``judge_ties``), ``examples`` (= ``sequences``: two orders per
    pair, after the length limit), ``dropped_sequences``, ``truncated_sequences``,
    ``processes``, ``trainable_parameters``, ``verdicts``, ``template`` (its version),
    ``tokens_per_s``, ``train_loss`` / ``train_accuracy`` (the last epoch), ``eval``,
    ``output`` and ``resumed_from``. With ``resume`` on a finished run nothing is trained: its
    summary comes back with ``already_finished``. An output that cannot be written (a full
    disk) is one CheemsInputError naming the output folder, the folder left as the run found
    it but for the whole checkpoints it saved (`undone_on_write_failure`).
    """
    config.validate()
    data_fingerprint = files_fingerprint(config.train)
    done = finished_summary(config, data_fingerprint)
    if done is not None:
        return done
    # an output that cannot be written: the folder as it was (whole checkpoints aside), one line
    with undone_on_write_failure(config.output):
        run = setup_generative_run(config, notify, data_fingerprint=data_fingerprint)
        started = time.perf_counter()
        with out_of_memory_said(lambda: (run.token_budget, run.batch_tokens), auto=config.token_budget == AUTO):
            for epoch in range(run.start_step // run.steps_per_epoch, config.epochs):
                train_generative_epoch(run, epoch, progress)
            summary = finish_generative_run(run, train_seconds=time.perf_counter() - started)
    run.accelerator.end_training()
    return summary
