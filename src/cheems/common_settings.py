"""The settings many commands share, declared once: what they write, how they read, the
statistics they report, the scorer they run, how long conversations are cut, how a model runs
and where a server listens.

Each class is a settings dataclass (:mod:`cheems.settings`): one declaration per setting, its
help text and range, checked when an instance is built. The command-line flags of every command
that takes one of these settings are generated from here (:mod:`cheems.cli.flags`), so
``--seed``, ``--skip-invalid`` or ``--format`` mean one thing wherever they appear; a command
may word the help for its own case (what *its* output is) and give its own default (``compare``
resamples 2000 times), never a second range or a second meaning.

Some are parts of a bigger settings class, which takes them by inheritance so that its YAML keys
and flags stay flat: :class:`ModelRunSettings` of
:class:`~cheems.scoring.model_settings.ModelSettings` and :class:`~cheems.training.config.TrainConfig`,
:class:`ListenSettings` of both servers' settings, :class:`ServerToken` of the reward server's and
its clients'. The fields of the first and the last are keyword-only
(``ModelRunSettings(max_length=512)``), so the bigger class keeps its own positional fields.

Core module: the standard library and the core package only (no torch).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from cheems.formats import FORMAT_NAMES
from cheems.records import CheemsInputError
from cheems.settings import check_settings, setting

__all__ = ["BASELINES", "JUDGE_BACKENDS", "MAX_BOOTSTRAP", "TIE_RULES", "TRUNCATIONS", "ConfigFile", "ExtraOutputs",
           "ListenSettings", "ModelRunSettings", "OutputSettings", "ReadSettings", "ScorerSettings", "ServerToken",
           "StatisticsSettings", "TruncationSettings"]

MAX_BOOTSTRAP = 1_000_000
"""The most bootstrap resamples a CI takes (as :data:`cheems.metrics.MAX_BOOTSTRAP`)."""
TIE_RULES = ("official", "strict")
BASELINES = ("length", "random")
JUDGE_BACKENDS = ("api", "vllm")
TRUNCATIONS = ("left", "right", "none")


@dataclass(frozen=True)
class OutputSettings:
    """What a command writes."""

    output: str | os.PathLike = setting(nonempty=True, help="The file (or folder) to write")
    overwrite: bool = setting(False, help="Start again instead of resuming the output")

    def __post_init__(self) -> None:
        check_settings(self)


@dataclass(frozen=True)
class ExtraOutputs:
    """The optional files a command writes beside (or instead of) what it prints."""

    json: str | os.PathLike | None = setting(None, help="Write the results as JSON")
    report: str | os.PathLike | None = setting(None, help="Also write the conflict report as JSON")
    markdown: str | os.PathLike | None = setting(None, help="The same as Markdown with PNG plots")
    plots: str | os.PathLike | None = setting(None, help="Folder for PNG plots")
    raw: str | os.PathLike | None = setting(None, help="Every answer with annotator, time, shown order, scores, "
                                            "pairs, spans and review verdicts")

    def __post_init__(self) -> None:
        check_settings(self)


@dataclass(frozen=True)
class ConfigFile:
    """A YAML file of settings, whose keys are the flags' names."""

    config: str | os.PathLike | None = setting(None, help="YAML file whose keys are these flags' names; flags "
                                               "given on the command line win")

    def __post_init__(self) -> None:
        check_settings(self)


@dataclass(frozen=True)
class ReadSettings:
    """How rows are read."""

    skip_invalid: bool = setting(False, help="Skip bad rows instead of failing")
    format: str | None = setting(None, help="Read every row as this format instead of detecting it row by row: "
                                 + ", ".join(FORMAT_NAMES))
    dedupe: bool = setting(False, help="Count a row that repeats an earlier row exactly once (default: every row "
                           "is an item, as the benchmarks' own evaluators count)")

    def __post_init__(self) -> None:
        check_settings(self)


@dataclass(frozen=True)
class StatisticsSettings:
    """The randomness and the statistics of a report."""

    bootstrap: int = setting(1000, min=0, max=MAX_BOOTSTRAP, help="Bootstrap resamples for the 95% CI (0: none)")
    seed: int | None = setting(0, min=0, help="Seed of every random choice (same seed, same result)")
    ties: str = setting("official", choices=TIE_RULES, choice_name="tie rule",
                        help="official: a tied pair counts wrong for Accuracy but breaks Exact Match only when some "
                        "pair is strictly reversed (the official evaluator); strict: a tie is wrong in both. "
                        "Judges: a C verdict is wrong in both")

    def __post_init__(self) -> None:
        check_settings(self)


@dataclass(frozen=True)
class ScorerSettings:
    """Which scorer a command runs: a scores file, a baseline, a reward model or a local judge."""

    scores: str | os.PathLike | None = setting(None, help="SCORES file: rows {prompt_id, response_id, score}")
    scorer: str | None = setting(None, choices=BASELINES, choice_name="baseline scorer",
                                 help="A baseline scorer (length or random) instead of a scores file or a model")
    model: str | os.PathLike | None = setting(None, help="Score with this reward model folder (a transformers "
                                              "checkpoint)")
    judge_model: str | os.PathLike | None = setting(None, help="Judge every pair with this local causal LM folder, "
                                                    "by its next-token verdict probabilities (no sampling)")
    judge_backend: str = setting("api", choices=JUDGE_BACKENDS, choice_name="judge backend",
                                 help="With --judge: api (an endpoint at --api-base) or vllm (--judge is a local "
                                 "model folder, run offline on the GPU)")
    name: str | None = setting(None, help="The model's name in the report (default: its source)")

    def __post_init__(self) -> None:
        check_settings(self)


@dataclass(frozen=True)
class TruncationSettings:
    """What happens to a conversation longer than the model's max length.

    One setting for every command: ``left`` keeps its end (where the reward is read), ``right``
    its start, ``none`` cuts nothing (the server refuses it, training leaves it out with its
    pairs). Left out (None), each command does what it always did: scoring keeps the end,
    the server refuses, training leaves out."""

    truncation: str | None = setting(None, choices=TRUNCATIONS, choice_name="truncation",
                                     default_text="left when scoring; none for serve and train",
                                     help="A conversation longer than the max length: left keeps its end (where "
                                     "the reward is read), right its start, none cuts nothing (serve refuses it "
                                     "with 422, train leaves it out with its pairs)")

    def __post_init__(self) -> None:
        check_settings(self)

    def scoring_side(self) -> dict:
        """The scoring back-ends' ``truncation`` (the side cut; they always cut): {} when left out."""
        if self.truncation == "none":
            raise CheemsInputError("scoring cuts every long conversation: give left or right", field="truncation")
        return {} if self.truncation is None else {"truncation": self.truncation}

    def server_cut(self) -> tuple[dict, bool]:
        """(the model's ``truncation`` side, whether the server cuts at all) for `serve`."""
        if self.truncation in ("left", "right"):
            return {"truncation": self.truncation}, True
        return {}, False

    def training_cut(self) -> dict:
        """:class:`~cheems.training.config.TrainConfig`'s ``truncate`` ({} when left out): training
        keeps a long sequence's end (left) or leaves it out (none)."""
        if self.truncation == "right":
            raise CheemsInputError("training cuts a long sequence on the left only (it keeps the end, where the "
                                   "reward is read): give left or none", field="truncation")
        return {} if self.truncation is None else {"truncate": self.truncation == "left"}


@dataclass(kw_only=True)
class ModelRunSettings:
    """How a model runs, scoring or training: the longest sequence, how a forward batch is laid
    out and which kernels compute it.

    :class:`~cheems.scoring.model_settings.ModelSettings` and
    :class:`~cheems.training.config.TrainConfig` extend it (mutable, as they are). The help texts
    word the commands that run a reward model; ``cheems train`` words its own
    (``TRAIN_HELPS`` of ``cheems.cli.models``). ``token_budget`` is not here: left out, it means
    1024 tokens on a CPU when scoring and the micro batch size alone when training."""

    max_length: int = setting(2048, min=1, help="Most tokens in one conversation; longer ones are truncated (and "
                              "counted), except that `cheems serve` refuses them (422) unless --truncation left or "
                              "right is given")
    packing: bool = setting(True, help="Pack a batch's sequences into one row instead of padding them")
    share_prefix: bool = setting(True, help="With packing: lay each prompt's common prefix down once "
                                            "(vllm: its prefix caching)")
    liger_kernels: bool = setting(False, help="Liger's fused RMSNorm, SwiGLU and RoPE kernels (CUDA; the gpu extra)")
    compile: bool = setting(False, help="torch.compile each decoder layer (dynamic shapes; the first batches "
                            "compile, which pays over long runs)")

    def __post_init__(self) -> None:
        check_settings(self)


@dataclass(frozen=True)
class ListenSettings:
    """Where a server listens: the reward server's
    (:class:`~cheems.serving.settings.ServeSettings`) and the annotation server's
    (:class:`~cheems.annotate.settings.ServerSettings`) alike."""

    host: str = setting("127.0.0.1", nonempty=True, help="Address to listen on (the loopback only, unless "
                        "you name another address)")
    port: int = setting(8000, min=0, lt=65536, help="Port to listen on (0: any free port, shown when ready)")

    def __post_init__(self) -> None:
        check_settings(self)


@dataclass(frozen=True, kw_only=True)
class ServerToken:
    """The bearer token of a ``cheems serve``, kept in a file: the server asks every request for it
    (:class:`~cheems.serving.settings.ServeSettings`), a client sends it
    (:class:`~cheems.scoring.remote_scorer.RemoteScorerSettings`); both read it with
    :func:`cheems.serving.settings.read_api_key`. The help text words the server's side; the
    clients' commands word their own (``SERVER_CLIENT_HELPS`` of ``cheems.cli.app``)."""

    api_key_file: str | os.PathLike | None = setting(None, default_text="none: no token",
                                                     help="File holding the token every request must send "
                                                          "as 'Authorization: Bearer TOKEN' (/health aside)")

    def __post_init__(self) -> None:
        check_settings(self)
