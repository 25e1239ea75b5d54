"""`TrainConfig`: every setting of a reward-model training run, declared once.

The fields are the ``cheems train`` flags and the keys of a YAML config file; their help texts
and ranges live here and nowhere else (see :mod:`cheems.settings`), but for how the model runs,
which scoring shares (:class:`~cheems.common_settings.ModelRunSettings`). The defaults are the
paper's Appendix F. ``OBJECTIVES`` says which kind of starting model each objective takes, and
``OBJECTIVE_SETTINGS`` which objectives the settings of some objectives only apply to; both are
checked before anything is read.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass

from cheems.common_settings import ModelRunSettings
from cheems.io import check_output_folder, read_yaml_mapping
from cheems.models.checkpoints import check_model_folder, model_kind
from cheems.records import CheemsInputError
from cheems.settings import check_settings, setting, settings_from_mapping

__all__ = ["LORA_SETTINGS", "OBJECTIVES", "OBJECTIVE_SETTINGS", "TrainConfig", "check_model_for_objective",
           "check_objective_settings"]

OBJECTIVES = {"bt": ("seq-cls", "causal-lm"), "dual": ("causal-lm",), "generative": ("causal-lm",)}
"""Each objective and the kinds of starting model it takes (:func:`cheems.models.checkpoints.model_kind`):
bt a reward model, or a causal LM it puts a new score head on; dual and generative a causal LM,
whose LM head they train (a reward model has none: they would train a random one)."""
_KIND_WORDS = {"seq-cls": "a reward model", "causal-lm": "a causal LM"}

OBJECTIVE_SETTINGS = {
    "reg_coef": ("bt", "dual"),
    "lm_coef": ("dual",),
    "label_smoothing": ("generative",),
    "judge_ties": ("generative",),
    "judge_language": ("generative",),
    "judge_template": ("generative",),
}
"""The settings that only some objectives use, and those objectives: declared here once. A
setting given (other than its default) with another objective is refused, not ignored
(:func:`check_objective_settings`); its help text starts with the objectives it applies to."""


LORA_SETTINGS = ("lora_alpha", "lora_dropout", "lora_target")
"""The settings of LoRA adapters, which only a run with ``lora_r`` > 0 trains: given (other than
their default) with ``lora_r`` 0 they are refused, not ignored (:func:`check_objective_settings`)."""


def _only_with(name: str, text: str) -> str:
    """The help text of setting ``name`` of OBJECTIVE_SETTINGS: ``With --objective dual: text``."""
    return f"With --objective {' or '.join(OBJECTIVE_SETTINGS[name])}: {text}"


@dataclass
class TrainConfig(ModelRunSettings):
    """Every setting of a training run; the defaults are the paper's Appendix F.

    Global batch = ``micro_batch_size`` x ``gradient_accumulation`` x processes (8 x 32 x 1 =
    256 sequences). ``token_budget`` also caps a forward batch at that many tokens per
    process: the packed row's (``packing``, the default) or the padded batch's (longest
    sequence x sequences); None caps by ``micro_batch_size`` alone on CPU and at
    ``DEFAULT_TOKEN_BUDGET["cuda"]`` tokens on a GPU, so raise ``micro_batch_size`` there to let
    short sequences travel in bigger batches. ``eval_every`` / ``save_every`` count
    optimizer steps; 0 means at the end of each epoch. ``truncate=False`` drops sequences
    over ``max_length`` (and their pairs); ``True`` keeps their last ``max_length`` tokens.
    ``lora_r`` > 0 trains LoRA adapters of that rank (peft) on ``lora_target`` modules plus
    the score head, and merges them into the saved model.

    ``max_length``, ``packing``, ``share_prefix``, ``liger_kernels`` and ``compile`` are the
    settings scoring shares, :class:`~cheems.common_settings.ModelRunSettings`' (keyword-only);
    ``cheems train`` words their help for training (``TRAIN_HELPS`` of ``cheems.cli.models``).
    """

    model: str | os.PathLike = setting(help="Starting checkpoint: *ForSequenceClassification with one label for "
                                       "bt (e.g. from `cheems init-model` or `cheems convert`), a causal LM for dual "
                                       "and generative")
    train: list[str | os.PathLike] = setting(help="Training data (any cheems format)")
    output: str | os.PathLike = setting(help="Folder for checkpoints and the final model")
    eval: list[str | os.PathLike] = setting(default_factory=list, help="Ranked benchmarks to evaluate on")
    epochs: int = setting(2, min=1, help="Passes over the data")
    learning_rate: float = setting(5e-6, gt=0, help="Peak learning rate")
    micro_batch_size: int = setting(8, min=1, help="Sequences per forward batch")
    gradient_accumulation: int = setting(32, min=1, help="Forward batches per optimizer step")
    reg_coef: float = setting(0.1, min=0, help=_only_with("reg_coef", "the weight of the mean r^2 regulariser"))
    warmup_ratio: float = setting(0.1, min=0, lt=1, help="Share of steps for linear warm-up")
    seed: int = setting(0, min=0, help="Seed of batching and initialisation")
    eval_every: int = setting(0, min=0, default_text="each epoch", help="Evaluate every N steps")
    save_every: int = setting(0, min=0, default_text="each epoch", help="Checkpoint every N steps")
    resume: bool = setting(False, help="Continue from the last checkpoint in --output")
    truncate: bool = setting(False, help="Keep the last max-length tokens of longer sequences instead of "
                             "dropping them")
    skip_invalid: bool = setting(False, help="Skip bad rows of the training and eval files (each named in a "
                                 "warning) instead of failing")
    gradient_checkpointing: bool = setting(False, help="Trade compute for memory")
    bf16: bool = setting(False, help="bfloat16 mixed precision")
    token_budget: int | str | None = setting(None, min=1, words=("auto",), default_text="micro batch size alone",
                                             help="Also cap a forward batch at this many padded tokens per process; "
                                             "auto: the largest batch that fits the GPU, probed before training")
    lora_r: int = setting(0, min=0, default_text="0, train every weight",
                          help="Train LoRA adapters of this rank (needs peft). The saved model has them merged")
    lora_alpha: int = setting(16, min=0, help="With --lora-r > 0: LoRA scaling alpha")
    lora_dropout: float = setting(0.05, min=0, lt=1, help="With --lora-r > 0: LoRA dropout")
    lora_target: str = setting("all-linear", nonempty=True, help="With --lora-r > 0: modules given adapters: "
                               "'all-linear' or comma-separated names such as q_proj,v_proj")
    objective: str = setting("bt", choices=tuple(OBJECTIVES),
                             help="bt: Bradley-Terry on a scalar head (the paper's); dual: a causal LM with a scalar "
                             "head, (1 - lm_coef) * BT + lm_coef * the LM loss of each prompt's best response; "
                             "generative: a causal LM trained to write the verdict token of a pairwise judge prompt")
    lm_coef: float = setting(0.01, min=0, max=1, help=_only_with("lm_coef", "the weight of the LM loss"))
    label_smoothing: float = setting(0.1, min=0, lt=1, help=_only_with("label_smoothing", "the probability mass "
                                                                       "spread evenly over the verdicts"))
    judge_ties: bool = setting(False, help=_only_with("judge_ties", "train tied pairs as a third verdict (C)"))
    judge_language: str = setting("zh", choices=("zh", "en"), help=_only_with("judge_language", "the language of "
                                                                              "the judge prompt"))
    judge_template: str | os.PathLike | None = setting(None, default_text="the built-in template of "
                                                       "--judge-language", help=_only_with(
                                                           "judge_template", "a judge template file (JSON, as the "
                                                           "trained model saves it)"))

    def __post_init__(self) -> None:
        # at construction, whoever builds it (a YAML file, flags, Python): refused naming the setting
        check_settings(self)
        check_objective_settings(self)

    @classmethod
    def from_yaml(cls, path: str | os.PathLike, overrides: dict | None = None) -> "TrainConfig":
        """A config from a YAML mapping whose keys are the field names (needs pyyaml); each value
        is checked as it is read, naming the file. ``overrides`` (flags given on the command
        line) win over the file's values and may supply settings the file leaves out; the
        config is checked as it is built, and its files and folders when the run starts (:meth:`validate`)."""
        return settings_from_mapping(cls, read_yaml_mapping(path), file=str(path), overrides=overrides)

    def validate(self) -> None:
        """Check the config once more where a run starts (it is mutable: a field may have changed since
        it was built), and what only a run can check: the files and folders it names. Raise
        CheemsInputError naming the field. :func:`cheems.training.trainer.train` calls it once a run."""
        check_settings(self)
        if not self.train:
            raise CheemsInputError("give at least one training file", field="train")
        check_objective_settings(self)
        check_output_folder(self.output, [self.model, *self.train, *self.eval])
        check_model_for_objective(self.model, check_model_folder(self.model), self.objective)


def check_objective_settings(config: TrainConfig) -> None:
    """Refuse a setting of OBJECTIVE_SETTINGS given (other than its default) with an objective
    it does not apply to, and one of LORA_SETTINGS with ``lora_r`` 0: one CheemsInputError
    naming the setting (and its objectives). An
    unknown objective is left to the range checks (:func:`cheems.settings.check_settings`)."""
    defaults = {f.name: f.default for f in dataclasses.fields(config)}
    if config.lora_r == 0:
        for name in LORA_SETTINGS:
            if getattr(config, name) != defaults[name]:
                raise CheemsInputError("applies to LoRA adapters only, which lora_r 0 does not train; give "
                                       "lora_r > 0 or leave it out", field=name)
    if not isinstance(config.objective, str) or config.objective not in OBJECTIVES:
        return
    for name, objectives in OBJECTIVE_SETTINGS.items():
        if config.objective not in objectives and getattr(config, name) != defaults[name]:
            raise CheemsInputError(f"applies to objective {' and '.join(objectives)} only, not "
                                   f"{config.objective}; leave it out", field=name)


def check_model_for_objective(path: str | os.PathLike, model_config: dict, objective: str) -> None:
    """Refuse a starting model whose kind (read from its ``config.json``, ``model_config``) the
    objective does not take (OBJECTIVES): one CheemsInputError naming the folder, before any
    data or weights are read. A config that names no known architecture passes (the loader
    checks the weights)."""
    kind, takes = model_kind(model_config), OBJECTIVES[objective]
    if kind is None or kind in takes:
        return
    archs = ", ".join(map(str, model_config.get("architectures") or []))
    lacks = ", which has no LM head to train" if kind == "seq-cls" else ""
    raise CheemsInputError(f"objective {objective} starts from {' or '.join(_KIND_WORDS[k] for k in takes)}; this "
                           f"folder holds {_KIND_WORDS[kind]} ({archs}){lacks}", file=str(path))
