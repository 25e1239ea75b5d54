"""Convert an official Cheems v-head reward model into a standard sequence-classification checkpoint.

The official Cheems checkpoints are a causal LM plus a linear ``v_head`` read at the last
non-padding token (see :mod:`cheems.models.checkpoints`); neither transformers'
``AutoModelForSequenceClassification`` nor vLLM can load them as reward models. The same
computation is a ``*ForSequenceClassification`` model with one label: the backbone reads the
conversation, and its ``score`` head (a bias-free linear layer of shape (1, hidden)) is applied
to the last real token. So conversion copies the backbone weights unchanged and writes the
v_head weight as ``score.weight``.

The bias. transformers' ``score`` head has no bias, so a v_head bias ``b`` cannot be carried
over. It adds the same constant to every score, so it changes no comparison, ranking, accuracy
or correlation: converted scores are the original scores minus ``b``. It is dropped and
recorded in the output ``config.json`` as ``cheems_v_head_bias`` (absent when the head had
none), so anyone who needs the original absolute values can add it back.

Padding. ``config.pad_token_id`` is the tokenizer's pad token, or its EOS token when it has
none (then the saved tokenizer gets ``pad_token = eos_token`` too, so both agree).
transformers' own pooling finds the last token that is not the pad token; with a pad token
that also ends every conversation (the EOS fallback) that pooling stops one token early,
while ``cheems score`` and vLLM read the true last token either way.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

from cheems.models.checkpoints import (load_classifier, load_tensors, load_tokenizer, quiet_transformers,
                                       require_torch, resolve_dtype, value_head_source)
from cheems.records import CheemsInputError

__all__ = ["BIAS_CONFIG_KEY", "MISSING_EXTRA", "convert_v_head_checkpoint"]

MISSING_EXTRA = "converting checkpoints needs the models extra: pip install 'cheems[models]'"

BIAS_CONFIG_KEY = "cheems_v_head_bias"


def convert_v_head_checkpoint(src: str | Path, dst: str | Path, *, dtype: str | None = None) -> Path:
    """Write the v-head reward model ``src`` as a one-label ``*ForSequenceClassification``
    checkpoint in ``dst`` (safetensors, config, tokenizer) and return ``dst``.

    The class follows the source config's ``model_type`` (Qwen2 -> Qwen2ForSequenceClassification,
    Llama -> LlamaForSequenceClassification, ...). Backbone weights are the source's, unchanged;
    ``score.weight`` is the v_head weight. A v_head bias is dropped (a constant shift of every
    score) and kept in ``config.json`` as ``cheems_v_head_bias``. ``dtype`` (``float32``,
    ``bfloat16``, ``float16``) casts the output; None keeps the source checkpoint's dtype.

    Raises CheemsInputError naming the folder when ``src`` has no v_head (including a source
    that is already sequence-classification) or ``dst`` exists and is not empty. The output is
    written into a temporary sibling folder and renamed into place when complete.
    """
    src, dst = Path(src), Path(dst)
    torch = require_torch(MISSING_EXTRA)
    head_file, head_keys = _v_head_source(src, dst)  # validate at the boundary
    torch_dtype = resolve_dtype(dtype) if dtype is not None else "auto"  # None: keep the source's
    weight, bias = _read_v_head(head_file, head_keys)

    # ---- backbone: the source's weights under the seq-cls class of its model_type
    with quiet_transformers():
        tokenizer = load_tokenizer(src)
    model, info = load_classifier(src, tokenizer, num_labels=1, dtype=torch_dtype)
    missing = sorted(set(info["missing_keys"]) - {"score.weight"})
    if missing:
        raise CheemsInputError(f"{type(model).__name__} found no source weights for {len(missing)} tensors "
                               f"(e.g. {', '.join(missing[:3])}); is this a causal LM with a v_head?",
                               file=str(src))
    hidden = model.config.hidden_size
    if weight.shape[1] != hidden:
        raise CheemsInputError(f"v_head weight has {weight.numel()} values; expected one row of hidden "
                               f"size {hidden}", file=str(head_file))
    score = getattr(model, "score", None)
    if not isinstance(score, torch.nn.Linear) or score.out_features != 1 or score.bias is not None:
        raise CheemsInputError(f"{type(model).__name__} has no bias-free one-output score head to hold the "
                               "v_head", file=str(src))
    with torch.no_grad():
        score.weight.copy_(weight.to(score.weight.dtype))

    # ---- config (the tokenizer's pad token is already the config's)
    config = model.config
    config.num_labels = 1
    config.architectures = [type(model).__name__]
    if bias is not None:
        setattr(config, BIAS_CONFIG_KEY, bias)
    _save_into_place(model, tokenizer, dst)
    return dst


def _v_head_source(src: Path, dst: Path) -> tuple[Path, dict[str, str]]:
    """The file holding ``src``'s v_head and its tensor names (``weight``, maybe ``bias``),
    after checking ``src`` is a model folder with a v_head and ``dst`` is new or empty."""
    cfg_file = src / "config.json"
    if not cfg_file.is_file():
        raise CheemsInputError("not a model folder (no config.json)", file=str(src))
    found = value_head_source(src)
    if found is None:
        try:
            archs = json.loads(cfg_file.read_text(encoding="utf-8")).get("architectures") or []
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise CheemsInputError(f"config.json is not valid JSON: {e}", file=str(cfg_file)) from None
        if any(a.endswith("ForSequenceClassification") for a in archs):
            raise CheemsInputError("already a sequence-classification checkpoint (no v_head to convert); "
                                   "transformers and vLLM load it as it is", file=str(src))
        raise CheemsInputError("no v_head found (looked for value_head.safetensors, value_head.bin and "
                               "v_head.weight in the model's safetensors); nothing to convert", file=str(src))
    if dst.exists() and (not dst.is_dir() or any(dst.iterdir())):
        raise CheemsInputError("output folder exists and is not empty; choose a new folder", file=str(dst))
    return found


def _read_v_head(head_file: Path, head_keys: dict[str, str]):
    """``(weight, bias)``: the v_head weight as one row (1, hidden), its bias as a float or None."""
    head = load_tensors(head_file, list(head_keys.values()))
    weight = head[head_keys["weight"]].reshape(1, -1)  # (1, hidden)
    if "bias" in head_keys and head[head_keys["bias"]].numel() != 1:
        raise CheemsInputError(f"v_head bias has {head[head_keys['bias']].numel()} values; a reward head has one",
                               file=str(head_file))
    bias = float(head[head_keys["bias"]].reshape(-1)[0]) if "bias" in head_keys else None
    return weight, bias


def _save_into_place(model, tokenizer, dst: Path) -> None:
    """Save ``model`` (safetensors) and ``tokenizer`` into a temporary sibling of ``dst`` and
    rename it to ``dst`` when complete; ``dst`` is absent or an empty folder."""
    dst.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{dst.name}.", suffix=".tmp", dir=dst.parent))
    try:
        model.save_pretrained(tmp, safe_serialization=True)
        tokenizer.save_pretrained(tmp)
        if dst.exists():
            dst.rmdir()  # checked empty before anything loaded
        os.replace(tmp, dst)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
