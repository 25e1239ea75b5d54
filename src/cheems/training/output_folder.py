"""What a training run writes to its output folder, and reads back to resume.

- ``checkpoint-STEP/``: the model as a standard checkpoint (the LoRA adapter alone when
  training LoRA; for the dual objective the causal LM with its scalar head beside it in
  ``value_head.safetensors``, the v-head layout ``cheems score`` reads), the tokenizer,
  ``trainer_state.json`` (step, epoch, config: readable) and ``accelerate_state/`` (weights,
  optimizer, scheduler and RNG of every process). Written in a temp folder and renamed; the
  last `KEEP_CHECKPOINTS` stay.
- ``train_log.jsonl``: one JSON line per optimizer step (and TensorBoard under ``runs/`` when
  the ``tensorboard`` package is installed).
- the final model (LoRA adapters merged in) and tokenizer in the folder itself (for the dual
  objective the scalar path, with the causal LM in ``generative/``: see
  :func:`cheems.training.dual.export_dual_model`), and ``train_summary.json``.

A run that cannot write its output (a full disk) leaves the folder as it found it, but for the
whole checkpoints it saved and the log up to the last of them (`undone_on_write_failure`).

Saving and loading are collectives under ``accelerate``: every process calls them. Imports no
torch at the top (the ``[train]`` extra is needed only when these functions run).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import shutil
from pathlib import Path
from typing import Iterator

from cheems.io import storage_failure, writes_into
from cheems.records import CheemsInputError, is_number
from cheems.training.config import TrainConfig

__all__ = ["ACCELERATE_STATE_DIR", "BOARD_DIR", "CHECKPOINT_PREFIX", "FINAL_MODEL_TEMP", "KEEP_CHECKPOINTS",
           "LOG_FILE", "MetricsLog", "OutputBefore", "RESUMABLE_CHANGES", "REWARD_POSITION_KEY", "STATE_FILE",
           "SUMMARY_FILE", "check_resume", "config_record", "finished_summary", "keep_log_until", "list_checkpoints",
           "load_checkpoint", "model_state", "put_back", "read_state", "save_checkpoint", "save_final_model",
           "save_model_whole", "undone_on_write_failure", "write_summary"]

CHECKPOINT_PREFIX = "checkpoint-"
KEEP_CHECKPOINTS = 2
STATE_FILE = "trainer_state.json"  # step, epoch, config: readable
ACCELERATE_STATE_DIR = "accelerate_state"  # weights, optimizer, scheduler, RNG of every process
LOG_FILE = "train_log.jsonl"
BOARD_DIR = "runs"  # TensorBoard's event files, when the tensorboard package is installed
SUMMARY_FILE = "train_summary.json"


# ---------------------------------------------------------------------------- checkpoints

def list_checkpoints(output: Path) -> list[tuple[int, Path]]:
    """``(step, folder)`` of every complete checkpoint in ``output``, oldest first."""
    found = []
    for d in output.glob(CHECKPOINT_PREFIX + "*"):
        step = d.name[len(CHECKPOINT_PREFIX):]
        if step.isdigit() and (d / STATE_FILE).exists():
            found.append((int(step), d))
    return sorted(found)


def model_state(accelerator, reward_model) -> dict:
    """The full weights of the wrapped model (gathered under ZeRO-3 / FSDP), keys as the
    inner model names them. A collective: every process calls it."""
    return _inner_part(accelerator.get_state_dict(reward_model) or {})


def _inner_part(state: dict) -> dict:
    """The wrapped model's weights of ``state`` (the wrapper's whole state), keys as it names them."""
    prefix = "inner."
    return {k[len(prefix):]: v for k, v in state.items() if k.startswith(prefix)}


def save_checkpoint(accelerator, output: Path, step: int, epoch: int, reward_model, tokenizer,
                    config: TrainConfig, *, data_fingerprint: str | None = None,
                    total_steps: int | None = None, token_budget: int | None = None,
                    lowered_token_budget: int | None = None, write_extra=None) -> None:
    """output/checkpoint-STEP, written in a temp folder and renamed; keeps the last two.

    Holds the model as a standard checkpoint (the LoRA adapter alone when training LoRA; a
    dual model's causal LM with its scalar head in ``value_head.safetensors``), the
    tokenizer, ``trainer_state.json`` (with the token budget per process the batches were planned
    with: ``--token-budget auto`` reuses it on resume; and, when running out of memory lowered it
    mid-run, ``lowered_token_budget``, the one the run went on with) and accelerate's state of every process (weights,
    optimizer, scheduler, RNG) for ``resume``. ``write_extra(folder)``, when given, adds the
    objective's own files (a judge's verdict template) on the main process before the folder moves
    into place. Called by every process."""
    is_main = accelerator.is_main_process
    final = output / f"{CHECKPOINT_PREFIX}{step}"
    tmp = output / f".{CHECKPOINT_PREFIX}{step}.tmp"
    if is_main:
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
    accelerator.wait_for_everyone()
    try:
        accelerator.save_state(str(tmp / ACCELERATE_STATE_DIR))
        state = accelerator.get_state_dict(reward_model) or {}
        if is_main:
            inner = accelerator.unwrap_model(reward_model).inner
            inner.save_pretrained(tmp, state_dict=_inner_part(state))
            tokenizer.save_pretrained(tmp)
            if "score.weight" in state:  # a dual model's head, beside its causal LM (the v-head layout)
                from cheems.training.dual import write_value_head

                write_value_head(tmp, state["score.weight"])
            state_record = {"step": step, "epoch": epoch, "total_steps": total_steps, "token_budget": token_budget,
                            "data_fingerprint": data_fingerprint, "config": config_record(config)}
            if (position := _reward_position_of(inner)) is not None:  # a LoRA adapter has no config.json
                state_record[REWARD_POSITION_KEY] = position
            if lowered_token_budget is not None:
                state_record["lowered_token_budget"] = lowered_token_budget
            if write_extra is not None:
                write_extra(tmp)
            (tmp / STATE_FILE).write_text(json.dumps(state_record, ensure_ascii=False, indent=1), encoding="utf-8")
    except BaseException:  # a full disk: no half-written checkpoint left behind to fill it further
        if is_main:
            shutil.rmtree(tmp, ignore_errors=True)
        raise
    # every process has written its own files (its RNG state; under ZeRO its optimizer shard) before
    # the folder moves: with DDP and ZeRO-1/2 nothing in save_state or get_state_dict waits for them
    accelerator.wait_for_everyone()
    if is_main:
        shutil.rmtree(final, ignore_errors=True)
        tmp.rename(final)
        for _, old in list_checkpoints(output)[:-KEEP_CHECKPOINTS]:
            shutil.rmtree(old, ignore_errors=True)
    accelerator.wait_for_everyone()


REWARD_POSITION_KEY = "reward_position"
"""The key of ``trainer_state.json`` that holds where the run reads its rewards
(:mod:`cheems.models.reward_position`), for checkpoints whose model has no config.json of its own."""


def _reward_position_of(inner) -> str | None:
    """The reward-position rule the model's config records (a LoRA model: its base model's), or None."""
    from cheems.models.reward_position import CONFIG_KEY

    base = inner.get_base_model() if hasattr(inner, "get_base_model") else inner
    return getattr(getattr(base, "config", None), CONFIG_KEY, None)


RESUMABLE_CHANGES = frozenset({"resume", "eval", "eval_every", "save_every", "liger_kernels", "compile",
                               "share_prefix"})
"""Settings a resumed run may change: they decide what is watched and kept, or how fast the same
arithmetic runs, not what is learnt."""


def config_record(config: TrainConfig) -> dict:
    """The settings as a checkpoint records them (paths as strings)."""
    return {k: [str(x) for x in v] if isinstance(v, list) else str(v) if isinstance(v, Path) else v
            for k, v in dataclasses.asdict(config).items()}


def read_state(checkpoint: Path) -> dict:
    """A checkpoint's ``trainer_state.json``; a broken one is a one-line error naming it."""
    path = checkpoint / STATE_FILE
    try:
        state = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise CheemsInputError(f"cannot read the checkpoint's state ({e})", file=str(path)) from None
    if not isinstance(state, dict) or not isinstance(state.get("step"), int):
        raise CheemsInputError("not a trainer state (no step)", file=str(path))
    return state


def check_resume(checkpoint: Path, config: TrainConfig, data_fingerprint: str) -> dict:
    """The checkpoint's state, after refusing to resume it with other training data or with
    settings that change what is learnt (naming each difference); see RESUMABLE_CHANGES."""
    state = read_state(checkpoint)
    old, new = state.get("config") or {}, config_record(config)
    defaults = {f.name: f.default for f in dataclasses.fields(TrainConfig)}
    old = {k: old[k] if k in old else defaults.get(k) for k in set(old) | set(new)}  # settings added since
    changed = [f"{k} {old.get(k)!r} -> {new.get(k)!r}" for k in sorted(set(old) | set(new))
               if k not in RESUMABLE_CHANGES and old.get(k) != new.get(k)]
    if state.get("data_fingerprint") not in (None, data_fingerprint):
        changed.insert(0, "the training data changed")
    if changed:
        raise CheemsInputError(f"cannot resume with other data or settings than the run was started with "
                               f"({'; '.join(changed)}); start a new run in another folder",
                               file=str(checkpoint))
    return state


def load_checkpoint(accelerator, checkpoint: Path) -> None:
    """Restore the weights, optimizer, scheduler and RNG of every process saved in ``checkpoint``
    (after ``accelerator.prepare``). Called by every process."""
    accelerator.load_state(str(checkpoint / ACCELERATE_STATE_DIR))


# ---------------------------------------------------------------------------- the final model

def save_final_model(accelerator, output: Path, reward_model, tokenizer, *, merge_lora: bool) -> None:
    """The trained model as a standard checkpoint in ``output`` (LoRA adapters merged in when
    ``merge_lora``), with its tokenizer. Called by every process."""
    accelerator.wait_for_everyone()
    # LoRA is refused under ZeRO-3, so its weights are whole on every process: merge them
    state = None if merge_lora else model_state(accelerator, reward_model)
    if accelerator.is_main_process:
        inner = accelerator.unwrap_model(reward_model).inner
        if merge_lora:
            inner = inner.merge_and_unload()
        inner.save_pretrained(output, state_dict=state)
        tokenizer.save_pretrained(output)
    accelerator.wait_for_everyone()


def write_summary(output: Path, summary: dict) -> None:
    """output/train_summary.json: the run's summary as `train` returns it."""
    (output / SUMMARY_FILE).write_text(json.dumps(summary, ensure_ascii=False, indent=1), encoding="utf-8")


# ---------------------------------------------------------------------------- the metrics log

class MetricsLog:
    """Appends one JSON line per record to output/train_log.jsonl, and to TensorBoard when
    the ``tensorboard`` package is installed."""

    def __init__(self, output: Path, enabled: bool, *, start_step: int = 0):
        self.enabled = enabled
        self.path = output / LOG_FILE
        self.tb = None
        if enabled and self.path.exists():
            self._keep_until(start_step)
        if enabled:
            try:
                import tensorboard  # noqa: F401
                from torch.utils.tensorboard import SummaryWriter

                self.tb = SummaryWriter(str(output / BOARD_DIR))
            except ImportError:
                pass

    def _keep_until(self, step: int) -> None:
        """Drop the records after ``step`` (the steps a resumed run trains again), so no step is
        logged twice; a fresh run (step 0) starts an empty log."""
        keep_log_until(self.path, step)

    def write(self, step: int, record: dict) -> None:
        if not self.enabled:
            return
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(json.dumps({"step": step, **record}, ensure_ascii=False) + "\n")
        if self.tb is not None:
            for k, v in record.items():
                if is_number(v):
                    self.tb.add_scalar(k, v, step)

    def close(self) -> None:
        if self.tb is not None:
            self.tb.close()


def keep_log_until(path: Path, step: int) -> None:
    """Keep the records of the metrics log ``path`` up to ``step``, and no line cut short."""
    kept = []
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue  # a line cut short by a kill
        if isinstance(record, dict) and isinstance(record.get("step"), int) and record["step"] <= step:
            kept.append(line + "\n")
    path.write_text("".join(kept), encoding="utf-8")


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


FINAL_MODEL_TEMP = ".final-model.tmp"
"""The folder inside the output folder the final model is written to before it moves up."""


def save_model_whole(accelerator, output: Path, write) -> None:
    """``write(folder)`` (on every process: a ZeRO-3 save gathers the weights collectively) into
    a temp folder inside ``output``, whose files then move up, the weights last: a save that
    fails half-way (a full disk) leaves no model in ``output`` that looks whole, and no temp
    folder. A subfolder (dual's ``generative/``) replaces one of an earlier run. No process writes
    into the temp folder before the main process has made it, nor is still writing when it moves."""
    tmp, main = Path(output) / FINAL_MODEL_TEMP, accelerator.is_main_process
    if main:
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
    accelerator.wait_for_everyone()
    try:
        write(tmp)
        accelerator.wait_for_everyone()
        if main:
            for f in sorted(tmp.iterdir(), key=lambda f: f.suffix == ".safetensors"):
                if f.is_dir():
                    shutil.rmtree(Path(output) / f.name, ignore_errors=True)
                os.replace(f, Path(output) / f.name)
    finally:
        if main:
            shutil.rmtree(tmp, ignore_errors=True)


# ---------------------------------------------------------------------------- a run that cannot write

@dataclasses.dataclass(frozen=True)
class OutputBefore:
    """What an output folder held before a run wrote into it: whether it existed, the names in
    it, the metrics log's bytes (None: no log) and the files under ``runs/``."""

    existed: bool
    names: frozenset[str]
    log: bytes | None
    board: frozenset[str]

    @classmethod
    def of(cls, output: str | os.PathLike) -> "OutputBefore":
        output = Path(output)
        if not output.is_dir():
            return cls(False, frozenset(), None, frozenset())
        log, board = output / LOG_FILE, output / BOARD_DIR
        return cls(True, frozenset(p.name for p in output.iterdir()), log.read_bytes() if log.is_file() else None,
                   frozenset(str(p.relative_to(board)) for p in board.rglob("*")) if board.is_dir() else frozenset())


@contextlib.contextmanager
def undone_on_write_failure(output: str | os.PathLike) -> Iterator[None]:
    """Around a run writing into ``output``: when writing fails for lack of room or permission
    (:func:`cheems.io.storage_failure`: a full disk, however the writer says it), the folder is
    put back as it was before (`put_back`, by the main process, ``RANK`` 0, alone), keeping only
    the whole checkpoints the run saved, and the failure is one CheemsInputError naming
    ``output`` (:func:`cheems.io.writes_into`)."""
    output = Path(output)
    before = OutputBefore.of(output) if os.environ.get("RANK", "0") == "0" else None
    with writes_into(output):
        try:
            yield
        except BaseException as e:
            if before is not None and storage_failure(e) is not None:
                with contextlib.suppress(OSError):  # the failure itself is what the user needs to hear of
                    put_back(output, before)
            raise


def put_back(output: Path, before: OutputBefore) -> None:
    """``output`` as ``before`` found it, but for the whole checkpoints saved since: what is new
    in it removed (a metrics log of steps no checkpoint kept, TensorBoard files, temp folders;
    the folder itself when it is new and left empty), the log's bytes as they were. When the
    run saved whole checkpoints, they stay, with the log up to the last of them: a resumable
    run, as a kill after that checkpoint leaves it."""
    if not output.is_dir():
        return
    saved = [(step, d) for step, d in list_checkpoints(output) if d.name not in before.names]
    keep = before.names | {d.name for _, d in saved} | ({LOG_FILE, BOARD_DIR} if saved else set())
    for p in output.iterdir():
        if p.name not in keep:
            _remove(p)
    if saved:
        if (output / LOG_FILE).is_file():
            keep_log_until(output / LOG_FILE, saved[-1][0])
    else:
        if before.log is not None:
            (output / LOG_FILE).write_bytes(before.log)
        board = output / BOARD_DIR
        for p in sorted(board.rglob("*"), reverse=True) if board.is_dir() else []:  # files before their folders
            if str(p.relative_to(board)) not in before.board:
                _remove(p)
    if not before.existed and not any(output.iterdir()):
        output.rmdir()


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        path.unlink()
