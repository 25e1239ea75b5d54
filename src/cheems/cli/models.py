"""`cheems train`, `init-model` and `convert`: the commands that make reward-model checkpoints."""

from __future__ import annotations

import contextlib
import functools
import os
from pathlib import Path
from typing import List, Optional

import typer

import cheems
from cheems.cli.app import app
from cheems.cli.console import (data_paths, err, fmt, out, print_skipped, progress, refuse_no_rows,
                                reports_input_errors, say)
from cheems.cli.flags import build_settings, settings_flags
from cheems.common_settings import ConfigFile, OutputSettings, ReadSettings, StatisticsSettings, TruncationSettings
from cheems.training.config import TrainConfig

__all__ = ["TRAIN_HELPS", "convert", "init_model_cmd", "train"]

TRAIN_HELPS = {
    "max_length": "Longest sequence in tokens",
    "packing": "Concatenate each forward batch into one row with no padding (--no-packing pads to the longest "
               "sequence)",
    "share_prefix": "With packing and the bt objective, lay the tokens a prompt's responses share (chat template "
                    "and prompt) down once in the row; the same rewards and gradients, fewer tokens computed",
    "compile": "torch.compile each decoder layer",
}
"""How `cheems train` words the settings it shares with scoring
(:class:`~cheems.common_settings.ModelRunSettings`, whose help texts word scoring)."""


@app.command()
@reports_input_errors
@settings_flags(TrainConfig, into="train_flags", short={"output": "-o"}, exclude=("truncate",),
                helps=TRAIN_HELPS)
@settings_flags(TruncationSettings, into="cut_flags", aliases={"--truncate": ("truncation", "left")})
@settings_flags(ConfigFile, into="config_flags")
def train(train_flags: dict = None, cut_flags: dict = None, config_flags: dict = None):
    """Train a reward model on ranked or compared responses (Bradley-Terry over every ranked
    pair, prompt-grouped batches, r^2 regulariser; paper §5)."""
    from cheems.io import read_yaml_mapping

    config = config_flags.get("config")
    section = read_yaml_mapping(config) if config is not None else None
    train_flags = {**train_flags, **build_settings(TruncationSettings, cut_flags).training_cut()}
    cfg = build_settings(TrainConfig, train_flags, config=config, section=section, config_flag=True)
    cfg.train, cfg.eval = data_paths(cfg.train), data_paths(cfg.eval)
    # under `accelerate launch` every process runs this command: the first one speaks
    main_process = os.environ.get("RANK", "0") == "0"
    with (progress("training") if main_process else contextlib.nullcontext(None)) as bar:
        warn = functools.partial(say, style="yellow") if main_process else None
        summary = cheems.train(cfg, progress=_training_progress(bar) if main_process else None, notify=warn)
    if main_process:
        _print_training(summary)


def _print_training(summary: dict) -> None:
    if summary.get("already_finished"):
        out.print(f"the run in {summary['output']} already finished ({summary['steps']} steps); nothing to train")
        return
    out.print(f"trained {summary['steps']} steps over {summary['pairs']} pairs "
              f"(pair coverage {summary['pair_coverage']:.1%}, padding {summary['padding_share']:.1%}, "
              f"{summary['tokens_per_s']:.0f} tokens/s) -> {summary['output']}")
    if summary.get("dropped_sequences") or summary.get("truncated_sequences"):
        err.print(f"note: {summary.get('dropped_sequences', 0)} sequence(s) over max length dropped, "
                  f"{summary.get('truncated_sequences', 0)} truncated")
    held = summary.get("eval")
    if held:
        out.print(f"final eval: Overall {fmt(held['overall'])}, accuracy {fmt(held['accuracy'])}, exact match "
                  f"{fmt(held['exact_match'])}")
    if held and held.get("order_accuracy") is not None:  # a judge: what averaging both orders can hide
        out.print(f"judge: each order alone {fmt(held['order_accuracy'])} right, position consistency "
                  f"{fmt(held['position_consistency'])} (a judge that picks one position has 0.5 and 0)")


def _training_progress(bar):
    """The trainer's progress callback: the bar on a terminal; in a pipe or a CI log (where a
    bar shows nothing), a plain line at each evaluation and at the end of each epoch."""
    def report(step: int, total: int, stats: dict) -> None:
        bar(step, total)
        if out.is_terminal:
            return
        epoch_end = abs(stats["epoch"] - round(stats["epoch"])) < 1e-9
        if not epoch_end and not stats.get("eval"):
            return
        line = (f"step {step}/{total}, epoch {stats['epoch']:.2f}: loss {stats['loss']:.4f}, "
                f"accuracy {fmt(stats['accuracy'])}")
        if stats.get("eval"):
            line += f"; eval Overall {fmt(stats['eval']['overall'])}"
        out.print(line)

    return report


@app.command("init-model")
@reports_input_errors
@settings_flags(OutputSettings, into="out_flags", only=("output",), short={"output": "-o"}, required=("output",),
                helps={"output": "Folder to write the model and tokenizer to"})
@settings_flags(StatisticsSettings, into="stats_flags", only=("seed",), helps={"seed": "Seed of the random weights"})
@settings_flags(ReadSettings, into="read_flags", only=("skip_invalid",),
                helps={"skip_invalid": "Skip bad rows of data files instead of failing"})
def init_model_cmd(
    tokenizer_from: List[Path] = typer.Option(..., "--tokenizer-from", help="Texts to train the tokenizer on: "
                                              ".txt files (one text per line) or any cheems data file."),
    size: str = typer.Option("tiny", help="tiny (2 layers, 64 wide) or small (4 layers, 256 wide)."),
    head: str = typer.Option("seq-cls", help="seq-cls: a one-label reward model (--objective bt); causal-lm: a "
                             "causal LM (--objective dual or generative, --judge-model)."),
    vocab_size: int = typer.Option(3000, help="Tokenizer vocabulary size."),
    out_flags: dict = None, stats_flags: dict = None, read_flags: dict = None,
):
    """Build a small randomly initialised reward model and a tokenizer trained on your texts."""
    output, stats = build_settings(OutputSettings, out_flags).output, build_settings(StatisticsSettings, stats_flags)
    read = build_settings(ReadSettings, read_flags)
    for path in tokenizer_from:
        refuse_no_rows(path)
    made = cheems.init_model(output, tokenizer_from, size=size, head=head, vocab_size=vocab_size, statistics=stats,
                             read=read)
    print_skipped(made.errors)
    what = "reward model" if head == "seq-cls" else "causal LM"
    out.print(f"wrote a {size} {what} (random weights) and a tokenizer trained on {made.texts} texts -> {output}")


@app.command()
@reports_input_errors
@settings_flags(OutputSettings, into="out_flags", only=("output",), short={"output": "-o"}, required=("output",),
                helps={"output": "Folder for the *ForSequenceClassification checkpoint"})
def convert(
    source: Path = typer.Argument(..., help="An official Cheems checkpoint: causal LM + v_head."),
    dtype: Optional[str] = typer.Option(None, help="float32, bfloat16 or float16 (default: keep the source's)."),
    out_flags: dict = None,
):
    """Turn a causal LM + v_head checkpoint into a standard one-label sequence-classification
    checkpoint that transformers, vLLM and `cheems score` load."""
    done = cheems.convert(source, build_settings(OutputSettings, out_flags).output, dtype=dtype)
    if done.dropped_bias is not None:
        err.print(f"note: the v_head bias {done.dropped_bias:+.6g} was dropped (the score head has none): every score "
                  "shifts by the same constant, no comparison changes")
    out.print(f"wrote a sequence-classification checkpoint -> {done.output}")
