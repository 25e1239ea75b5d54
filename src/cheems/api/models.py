"""The public calls that make and serve reward-model checkpoints: train, init_model, convert, serve.

Each loads torch and transformers (the ``models`` / ``train`` extras) only when called; ``serve``
also needs the ``serve`` extra (fastapi, uvicorn)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Mapping, Sequence

from cheems.common_settings import ReadSettings, StatisticsSettings
from cheems.records import CheemsInputError, is_integer
from cheems.settings import as_settings

if TYPE_CHECKING:  # annotations only: the settings modules load with the call that needs them
    from cheems.scoring.model_settings import ModelSettings
    from cheems.serving.engine import EngineSettings
    from cheems.serving.settings import ServeSettings
    from cheems.training.config import TrainConfig

__all__ = ["Conversion", "InitModel", "convert", "init_model", "serve", "train"]


def train(config: TrainConfig, *, progress: Callable[[int, int, dict], None] | None = None,
          notify: Callable[[str], None] | None = None) -> dict:
    """Train a reward model on ranked or compared responses, as ``config`` says; checkpoints resume.

    The objective ``bt`` is Bradley-Terry over every ranked pair of a prompt, in prompt-grouped
    batches, plus the r^2 regulariser; ``dual`` adds a language-modelling loss, ``generative``
    trains a judge (:func:`cheems.training.trainer.train`).

    Args:
        config: Every setting of the run (a :class:`~cheems.training.config.TrainConfig`: its
            fields are the flags of ``cheems train``; ``model``, ``train`` and ``output`` are required).
        progress: ``progress(step, total_steps, stats)`` after every optimizer step (``loss``,
            ``accuracy``, ``lr``, ``epoch``, and ``eval`` when an evaluation ran).
        notify: Gets the warnings found before training (sequences over ``max_length``) and notes
            on the run (a slow step, a lowered token budget).

    Returns:
        The run's summary: ``steps``, ``pairs``, ``pair_coverage``, ``padding_share``,
        ``tokens_per_s``, ``eval`` (the final metrics or None), ``output``, ...; with
        ``already_finished`` when ``resume`` found the run done.

    Raises:
        CheemsInputError: A bad setting, a data file that cannot be read, a model folder that
            cannot be loaded, or an output that cannot be written.

    Paper: §5 (Chinese Reward Model: the loss over partial rankings, greedy prompt batches, r^2
    regulariser) and Appendix F (the settings).
    """
    from cheems.training.trainer import train as run_training

    return run_training(config, progress=progress, notify=notify)


@dataclass
class InitModel:
    """What :func:`init_model` wrote."""

    output: Path
    texts: int  # the texts the tokenizer was trained on
    errors: list[CheemsInputError] = field(default_factory=list)  # data rows skipped


def init_model(output: str | os.PathLike, tokenizer_from: Sequence[str | os.PathLike], *, size: str = "tiny",
               head: str = "seq-cls", vocab_size: int = 3000, statistics: StatisticsSettings | Mapping | None = None,
               read: ReadSettings | Mapping | None = None) -> InitModel:
    """Build a small randomly initialised model and a tokenizer trained on your texts.

    Args:
        output: The folder to write the model and tokenizer to (new, or empty).
        tokenizer_from: Texts to train the tokenizer on: ``.txt`` files (one text per line) or any
            cheems data file (its prompts and responses).
        size: ``tiny`` (2 layers, 64 wide) or ``small`` (4 layers, 256 wide).
        head: ``seq-cls``: a one-label reward model; ``causal-lm``: a causal LM (for the ``dual``
            and ``generative`` objectives, or a local judge).
        vocab_size: The tokenizer's vocabulary size.
        statistics: The randomness (a :class:`~cheems.common_settings.StatisticsSettings`, or a
            mapping of its fields): ``seed`` of the random weights.
        read: How rows are read (a :class:`~cheems.common_settings.ReadSettings`, or a mapping of
            its fields): ``skip_invalid`` skips bad rows of data files instead of raising at the first.

    Returns:
        An :class:`InitModel`: the folder, how many texts trained the tokenizer, the rows skipped.

    Raises:
        CheemsInputError: An unknown size or head, a bad ``statistics`` or ``read`` setting, an
            output folder that holds files or is an input, a file that cannot be read, or no text at all.
    """
    from cheems.io import check_output_folder
    from cheems.metrics import check_seed
    from cheems.training.init_model import SIZES, init_model as write_model, tokenizer_texts

    check_output_folder(output, tokenizer_from)
    if size not in SIZES:
        raise CheemsInputError(f"unknown size {size!r}; choose from {', '.join(SIZES)}", field="size")
    if head not in ("seq-cls", "causal-lm"):
        raise CheemsInputError(f"unknown head {head!r}; choose seq-cls or causal-lm", field="head")
    if not is_integer(vocab_size) or vocab_size < 1:
        raise CheemsInputError(f"must be a positive integer, got {vocab_size!r}", field="vocab_size")
    seed = as_settings(StatisticsSettings, statistics, "statistics", uses=("seed",)).seed
    skip_invalid = as_settings(ReadSettings, read, "read", uses=("skip_invalid",)).skip_invalid
    check_seed(seed)
    skipped: list[CheemsInputError] = []
    texts = tokenizer_texts(tokenizer_from, skip_invalid=skip_invalid, errors=skipped)
    write_model(output, texts, size=size, seed=seed, vocab_size=vocab_size, head=head)
    return InitModel(Path(output), len(texts), skipped)


@dataclass
class Conversion:
    """What :func:`convert` wrote."""

    output: Path
    dropped_bias: float | None = None  # the v_head bias the score head has no place for (a constant shift)


def convert(source: str | os.PathLike, output: str | os.PathLike, *, dtype: str | None = None) -> Conversion:
    """Turn a causal LM + v_head checkpoint into a standard one-label sequence-classification checkpoint.

    The backbone's weights are kept as they are; ``score.weight`` is the v_head's
    (:func:`cheems.models.convert.convert_v_head_checkpoint`). The result loads in transformers,
    vLLM and :func:`cheems.score`.

    Args:
        source: An official Cheems checkpoint folder: a causal LM with a v_head.
        output: The folder for the ``*ForSequenceClassification`` checkpoint (new, or empty).
        dtype: ``float32``, ``bfloat16`` or ``float16`` (default: keep the source's).

    Returns:
        A :class:`Conversion`: the folder, and the v_head bias that was dropped (None without one).

    Raises:
        CheemsInputError: A source without a v_head, an output folder that holds files, or an
            unknown dtype.
    """
    import json

    from cheems.models.convert import BIAS_CONFIG_KEY, convert_v_head_checkpoint

    dst = convert_v_head_checkpoint(source, output, dtype=dtype)
    bias = json.loads((dst / "config.json").read_text(encoding="utf-8")).get(BIAS_CONFIG_KEY)
    return Conversion(Path(dst), bias)


def serve(model: str | os.PathLike, *, model_settings: ModelSettings | None = None,
          engine_settings: EngineSettings | None = None, settings: ServeSettings | None = None,
          on_ready: Callable[[str, list], None] | None = None, notify: Callable[[str], None] | None = None,
          setting_names: Mapping[str, str] | None = None) -> int:
    """Serve a reward model over HTTP until SIGTERM or Ctrl+C, concurrent requests batched together.

    The routes are OpenRLHF's ``/get_reward``, vLLM's and SGLang's ``/classify``, ``/pooling``,
    ``/v1/embeddings``, LLaMA-Factory's ``/v1/score/evaluation`` and cheems' ``/v1/score``, with
    ``/health`` and ``/metrics`` (:mod:`cheems.serving`). With ``settings.replicas`` > 1, that many
    copies of the model run, each in its own process, behind the one address.

    Args:
        model: The reward model folder (what :func:`cheems.score` takes).
        model_settings: How to run the model (back-end, device, dtype, max length, ...).
        engine_settings: How requests are gathered into batches (a :class:`~cheems.serving.engine.EngineSettings`).
        settings: Where and how to serve (a :class:`~cheems.serving.settings.ServeSettings`: host,
            port, token file, replicas, shutdown timeout).
        on_ready: ``on_ready(url, served)`` once the server listens (``served``: one
            :class:`~cheems.serving.server.ServedModel` per replica).
        notify: Gets the lines of the model loading.
        setting_names: How the server's refusals and log lines name its settings (setting -> name),
            e.g. ``{"max_body_bytes": "--max-body-bytes"}`` as ``cheems serve`` gives its flags;
            by default each setting's own name (``larger than 16777216 bytes (max_body_bytes)``).

    Returns:
        The exit status: 0 once stopped, 1 when a replica crashed at start or ended badly.

    Raises:
        CheemsInputError: A broken model folder, an unreadable token file, or a bad setting (all
            before the model loads).
        ModuleNotFoundError: The ``serve`` extra (fastapi, uvicorn) is not installed.
    """
    from cheems.scoring.model_settings import ModelSettings
    from cheems.serving.engine import EngineSettings
    from cheems.serving.settings import ServeSettings

    from cheems.serving.naming import setting_names as names_in_use
    from cheems.serving.naming import use_setting_names

    model_settings, engine_settings = model_settings or ModelSettings(), engine_settings or EngineSettings()
    settings, ready = settings or ServeSettings(), on_ready or (lambda url, served: None)
    before = names_in_use()
    use_setting_names(setting_names)
    try:
        if settings.replicas > 1:
            from cheems.serving.replicas import serve_replicas

            return serve_replicas(model, model_settings, engine_settings, settings, ready)
        from cheems.serving.server import build_reward_app, run_server

        built = build_reward_app(model, model_settings, engine_settings, settings, notify=notify)
        run_server(built, settings, lambda url: ready(url, [built.served]))
        return 0
    finally:
        use_setting_names(before)
