"""Reward-model checkpoints on disk: which layout a folder holds, where a v_head's weights
are, and one loader for tokenizer + one-label classifier that scoring, training and
conversion all use (the ``[models]`` extra).

Two layouts are recognised from the files themselves:

- ``seq-cls``: any ``*ForSequenceClassification`` checkpoint with one label, the form most
  open reward models (and `cheems train`) use.
- ``v-head``: the official Cheems layout, a causal LM whose reward is a linear ``v_head``
  applied to the hidden state of the last non-padding token; the head's weights sit either in
  the model's own weight files (``v_head.weight`` / ``v_head.bias``) or in a separate
  ``value_head.safetensors`` / ``value_head.bin`` (``v_head.weight`` or ``v_head.summary.weight``).

Pad-token policy (one, everywhere): a tokenizer without a pad token pads with its EOS token,
and the model config's ``pad_token_id`` is set to the tokenizer's.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import warnings
from pathlib import Path
from typing import Iterator, Sequence

from cheems.records import CheemsInputError

__all__ = ["MISSING_EXTRA", "TOKENIZER_FILES", "WEIGHT_FILES", "WEIGHT_INDEXES", "best_attention",
           "check_model_folder", "detect_layout", "load_classifier", "load_tensors", "load_tokenizer",
           "model_fingerprint", "quiet_transformers", "require_torch", "resolve_dtype", "tensor_names", "unwrap_peft",
           "value_head_source"]

MISSING_EXTRA = "scoring with transformers models needs the models extra: pip install 'cheems[models]'"


def require_torch(message: str = MISSING_EXTRA):
    """The torch module, or one clear CheemsInputError when torch or transformers is missing."""
    try:
        import torch
        import transformers  # noqa: F401
    except ImportError:
        raise CheemsInputError(message) from None
    return torch


def unwrap_peft(model):
    """The transformers model inside a peft wrapper, or ``model`` itself."""
    get = getattr(model, "get_base_model", None)
    return get() if get is not None else model


TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json", "vocab.txt")


def check_model_folder(path: str | Path, *, tokenizer: bool = True) -> dict:
    """Check a model folder before any work and return its ``config.json``; one
    CheemsInputError naming the folder (or file) for: a path that is missing or not a folder,
    no or unreadable ``config.json``, no weights, a missing shard, a truncated safetensors file,
    no tokenizer files (with ``tokenizer``), a classifier with other than one label, or a chat
    template that does not compile."""
    path = Path(path)
    if not path.exists():
        raise CheemsInputError("no such model folder", file=str(path))
    if not path.is_dir():
        raise CheemsInputError("is a file, expected a model folder (config.json, weights, tokenizer)", file=str(path))
    config = _read_json_object(path / "config.json", missing="not a model folder (no config.json)")
    _check_weights(path)
    archs = config.get("architectures") or []
    labels = config.get("num_labels", len(config.get("id2label") or {}) or None)
    if isinstance(archs, list) and any(str(a).endswith("ForSequenceClassification") for a in archs) \
            and labels not in (None, 1) and value_head_source(path) is None:
        raise CheemsInputError(f"a reward model has one label; this one has {labels}", file=str(path))
    if tokenizer:
        if not any((path / name).exists() for name in TOKENIZER_FILES):
            raise CheemsInputError(f"no tokenizer files ({', '.join(TOKENIZER_FILES[:2])}, ...)", file=str(path))
        _check_chat_template(path)
    return config


def _read_json_object(f: Path, *, missing: str) -> dict:
    if not f.is_file():
        raise CheemsInputError(missing, file=str(f.parent))
    try:
        data = json.loads(f.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise CheemsInputError(f"is not valid JSON: {e}", file=str(f)) from None
    if not isinstance(data, dict):
        raise CheemsInputError(f"must hold a JSON object, got {type(data).__name__}", file=str(f))
    return data


WEIGHT_INDEXES = ("model.safetensors.index.json", "pytorch_model.bin.index.json")
WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin")


def _check_weights(path: Path) -> None:
    """Weights present, every shard of an index present, safetensors files whole."""
    for name in WEIGHT_INDEXES:
        if (path / name).exists():
            index = _read_json_object(path / name, missing="")
            shards = sorted(set((index.get("weight_map") or {}).values()))
            for shard in shards:
                if not (path / shard).is_file():
                    raise CheemsInputError(f"shard {shard} named by {name} is missing", file=str(path))
                if shard.endswith(".safetensors"):
                    _check_safetensors(path / shard)
            return
    for name in WEIGHT_FILES:
        if (path / name).is_file():
            if name.endswith(".safetensors"):
                _check_safetensors(path / name)
            return
    raise CheemsInputError(f"no weights ({' or '.join(WEIGHT_FILES)})", file=str(path))


def _check_safetensors(f: Path) -> None:
    """A safetensors file whose header parses and whose tensors all lie inside the file (a copy
    cut short fails here, not deep inside transformers)."""
    size = f.stat().st_size
    with open(f, "rb") as h:
        head = h.read(8)
        n = int.from_bytes(head, "little") if len(head) == 8 else -1
        if n < 2 or 8 + n > size:
            raise CheemsInputError("is truncated or not a safetensors file", file=str(f))
        try:
            header = json.loads(h.read(n))
        except (UnicodeDecodeError, json.JSONDecodeError):
            raise CheemsInputError("has a broken header: not a safetensors file", file=str(f)) from None
    ends = [t["data_offsets"][1] for k, t in header.items() if k != "__metadata__" and isinstance(t, dict)
            and isinstance(t.get("data_offsets"), list) and len(t["data_offsets"]) == 2]
    if ends and 8 + n + max(ends) > size:
        raise CheemsInputError(f"is truncated ({size:,} bytes of {8 + n + max(ends):,})", file=str(f))


def _check_chat_template(path: Path) -> None:
    """The tokenizer's chat template (``tokenizer_config.json`` or ``chat_template.jinja``)
    compiles, as transformers will compile it."""
    templates = []
    cfg_file = path / "tokenizer_config.json"
    if cfg_file.is_file():
        cfg = _read_json_object(cfg_file, missing="")
        t = cfg.get("chat_template")
        if isinstance(t, list):  # named templates
            templates += [x.get("template") for x in t if isinstance(x, dict)]
        elif t is not None:
            templates.append(t)
    if (path / "chat_template.jinja").is_file():
        templates.append((path / "chat_template.jinja").read_text(encoding="utf-8", errors="replace"))
    for t in templates:
        if not isinstance(t, str):
            raise CheemsInputError("chat_template must be text", file=str(cfg_file))
        try:
            import jinja2
            from jinja2.sandbox import ImmutableSandboxedEnvironment

            ImmutableSandboxedEnvironment(extensions=["jinja2.ext.loopcontrols"]).from_string(t)
        except ImportError:
            return
        except jinja2.TemplateSyntaxError as e:
            raise CheemsInputError(f"the chat template does not compile: {e.message} (line {e.lineno})",
                                   file=str(path)) from None


def detect_layout(path: str | Path) -> str:
    """``seq-cls`` or ``v-head``, read from the checkpoint folder (see module docs), after
    :func:`check_model_folder` has checked it whole."""
    path = Path(path)
    config = check_model_folder(path)
    if value_head_source(path) is not None:
        return "v-head"
    archs = config.get("architectures") or []
    if any(a.endswith("ForSequenceClassification") for a in archs):
        return "seq-cls"
    raise CheemsInputError(
        f"cannot tell how to score with this checkpoint (architectures {archs}); expected a "
        "*ForSequenceClassification model with one label or a causal LM with a v_head",
        file=str(path))


def value_head_source(path: Path) -> tuple[Path, dict[str, str]] | None:
    """Where the v_head weights are: (file, {'weight': key, 'bias': key?}) or None."""
    for name in ("value_head.safetensors", "value_head.bin"):
        f = path / name
        if f.exists():
            keys = tensor_names(f)
            for prefix in ("v_head.summary.", "v_head.", "summary.", ""):
                if prefix + "weight" in keys:
                    found = {"weight": prefix + "weight"}
                    if prefix + "bias" in keys:
                        found["bias"] = prefix + "bias"
                    return f, found
    index = path / "model.safetensors.index.json"
    if index.exists():
        weight_map = json.loads(index.read_text(encoding="utf-8")).get("weight_map", {})
        if "v_head.weight" in weight_map:
            found = {"weight": "v_head.weight"}
            if "v_head.bias" in weight_map:
                found["bias"] = "v_head.bias"
            return path / weight_map["v_head.weight"], found
    single = path / "model.safetensors"
    if single.exists():
        keys = tensor_names(single)
        if "v_head.weight" in keys:
            return single, {"weight": "v_head.weight", **({"bias": "v_head.bias"} if "v_head.bias" in keys else {})}
    return None


def model_fingerprint(path: str | Path, *, sample: int = 1 << 20) -> str:
    """A hash that changes when a model folder's files change: each file's name and size and
    the first and last ``sample`` bytes of it (weights are too big to hash whole on every run)."""
    h = hashlib.sha256()
    for f in sorted(Path(path).iterdir()):
        if not f.is_file():
            continue
        size = f.stat().st_size
        h.update(f"{f.name}\0{size}\0".encode())
        with open(f, "rb") as fh:
            h.update(fh.read(sample))
            if size > 2 * sample:
                fh.seek(size - sample)
                h.update(fh.read(sample))
    return h.hexdigest()[:16]


def tensor_names(f: Path) -> set[str]:
    """Names of the tensors in a safetensors or torch ``.bin`` file."""
    if f.suffix == ".safetensors":
        from safetensors import safe_open

        with safe_open(str(f), framework="pt") as h:
            return set(h.keys())
    torch = require_torch()
    return set(torch.load(f, map_location="cpu", weights_only=True).keys())


def load_tensors(f: Path, keys: Sequence[str]) -> dict:
    """The named tensors of a safetensors or torch ``.bin`` file, on the CPU."""
    if f.suffix == ".safetensors":
        from safetensors import safe_open

        with safe_open(str(f), framework="pt") as h:
            return {k: h.get_tensor(k) for k in keys}
    torch = require_torch()
    state = torch.load(f, map_location="cpu", weights_only=True)
    return {k: state[k] for k in keys}


def best_attention() -> str:
    """The attention implementation to ask transformers for on CUDA: flash-attention 2 when
    installed, else SDPA."""
    try:
        import flash_attn  # noqa: F401

        return "flash_attention_2"
    except ImportError:
        return "sdpa"


def resolve_dtype(dtype: str | None, device: str = "cpu"):
    """A torch dtype from its name; ``auto`` is bfloat16 on CUDA and float32 on CPU; None
    stays ``"auto"`` (keep the checkpoint's). Unknown or non-float names are refused."""
    torch = require_torch()
    if dtype is None:
        return "auto"
    if dtype == "auto":
        return torch.bfloat16 if device.startswith("cuda") else torch.float32
    torch_dtype = getattr(torch, dtype, None)
    if not isinstance(torch_dtype, torch.dtype) or not torch_dtype.is_floating_point:
        raise CheemsInputError(f"unknown dtype {dtype!r} (try bfloat16, float16, float32)", field="dtype")
    return torch_dtype


@contextlib.contextmanager
def quiet_transformers() -> Iterator[None]:
    """Load without transformers' progress bars and load reports: the CLI draws its own bars,
    and the keys a v_head or causal-LM checkpoint leaves unused are expected, not news."""
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        hf_logging.set_verbosity(verbosity)


def load_tokenizer(path: str | Path, *, trust_remote_code: bool = False):
    """The checkpoint's tokenizer, padding with its EOS token when it has no pad token."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(path, trust_remote_code=trust_remote_code)
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def load_classifier(path: str | Path, tokenizer, **kwargs):
    """``(model, loading_info)``: the ``AutoModelForSequenceClassification`` at ``path`` with
    one label and ``config.pad_token_id`` set to the tokenizer's.

    ``kwargs`` go to ``from_pretrained`` (``dtype``, ``trust_remote_code``,
    ``attn_implementation``, ``num_labels=1`` to put a new head on a causal LM). A checkpoint
    with another number of labels is refused, naming the folder."""
    from transformers import AutoModelForSequenceClassification

    with quiet_transformers():
        model, info = AutoModelForSequenceClassification.from_pretrained(path, output_loading_info=True, **kwargs)
    if model.config.num_labels != 1:
        raise CheemsInputError(f"a reward model has one label; this one has {model.config.num_labels}",
                               file=str(path))
    model.config.pad_token_id = tokenizer.pad_token_id
    return model, info
