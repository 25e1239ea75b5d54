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
import fnmatch
import hashlib
import json
import os
import time
import warnings
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Iterator, Sequence

from cheems.records import CheemsInputError

__all__ = ["CAUSAL_LM_ARCHITECTURES", "MISSING_EXTRA", "NOT_SCORED", "TOKENIZER_FILES", "WEIGHT_FILES",
           "WEIGHT_INDEXES", "best_attention", "check_model_folder", "detect_layout", "file_digest", "load_classifier",
           "load_tensors", "load_tokenizer", "model_file_digests", "model_fingerprint", "model_kind",
           "quiet_transformers", "require_torch", "resolve_dtype", "tensor_names", "unwrap_peft", "value_head_source",
           "weights_that_fit"]

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
    no or unreadable ``config.json``, one without a ``model_type`` transformers knows, no
    weights, a broken weight index, a missing shard, a truncated or broken safetensors file, a
    ``.bin`` that is no plain weights pickle (never unpickled past that: loading it could run
    code), no tokenizer files (with ``tokenizer``), a tokenizer file that does not parse, a
    classifier with other than one label, or a chat template that does not compile."""
    path = Path(path)
    if not path.exists():
        raise CheemsInputError("no such model folder", file=str(path))
    if not path.is_dir():
        raise CheemsInputError("is a file, expected a model folder (config.json, weights, tokenizer)", file=str(path))
    config = _read_json_object(path / "config.json", missing="not a model folder (no config.json)")
    _check_config(path / "config.json", config)
    _check_weights(path)
    archs = config.get("architectures") or []
    labels = config.get("num_labels", len(config.get("id2label") or {}) or None)
    if isinstance(archs, list) and any(str(a).endswith("ForSequenceClassification") for a in archs) \
            and labels not in (None, 1) and value_head_source(path) is None:
        raise CheemsInputError(f"a reward model has one label; this one has {labels}", file=str(path))
    if tokenizer:
        if not any((path / name).exists() for name in TOKENIZER_FILES):
            raise CheemsInputError(f"no tokenizer files ({', '.join(TOKENIZER_FILES[:2])}, ...)", file=str(path))
        _check_tokenizer_files(path)
        _check_chat_template(path)
    return config


def _check_config(f: Path, config: dict) -> None:
    """A ``model_type`` transformers knows (or model code of its own, ``auto_map``), a whole
    number of labels, and a ``generation_config.json`` beside it that parses."""
    model_type = config.get("model_type")
    if not isinstance(model_type, str) or not model_type:
        raise CheemsInputError("has no model_type: transformers cannot tell which architecture the weights are "
                               "for (e.g. \"model_type\": \"qwen2\")", file=str(f))
    if "auto_map" not in config:
        try:
            from transformers import CONFIG_MAPPING
        except ImportError:
            pass
        else:
            if model_type not in CONFIG_MAPPING:
                import transformers

                raise CheemsInputError(f"model_type {model_type!r} is unknown to transformers "
                                       f"{transformers.__version__} (a newer one may know it)", file=str(f))
    labels = config.get("num_labels")
    if labels is not None and (isinstance(labels, bool) or not isinstance(labels, int)):
        raise CheemsInputError(f"num_labels must be a whole number, got {labels!r}", file=str(f))
    if (f.parent / "generation_config.json").exists():
        _read_json_object(f.parent / "generation_config.json", missing="")


TOKENIZER_JSON = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "added_tokens.json",
                  "chat_template.json")


def _check_tokenizer_files(path: Path) -> None:
    """The tokenizer's JSON files parse as objects, and ``tokenizer.json`` is a tokenizer."""
    for name in TOKENIZER_JSON:
        if (path / name).exists():
            _read_json_object(path / name, missing="")
    if (path / "tokenizer.json").exists():
        try:
            from tokenizers import Tokenizer
        except ImportError:
            return
        try:
            Tokenizer.from_file(str(path / "tokenizer.json"))
        except Exception as e:  # the tokenizers package raises plain Exceptions
            raise CheemsInputError(f"is not a tokenizer: {_first_line(e)}", file=str(path / "tokenizer.json")) from None


def _first_line(e: Exception, limit: int = 200) -> str:
    lines = str(e).strip().splitlines()
    text = lines[0] if lines else type(e).__name__
    return text if len(text) <= limit else text[:limit] + "..."


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
    """Weights present; an index with a weight map and metadata, naming shards that are all
    there; each weights file whole (:func:`_check_weights_file`)."""
    for name in WEIGHT_INDEXES:
        if (path / name).exists():
            for shard in _index_shards(path / name):
                if not (path / shard).is_file():
                    raise CheemsInputError(f"shard {shard} named by {name} is missing", file=str(path))
                _check_weights_file(path / shard)
            return
    for name in WEIGHT_FILES:
        if (path / name).is_file():
            _check_weights_file(path / name)
            return
    raise CheemsInputError(f"no weights ({' or '.join(WEIGHT_FILES)})", file=str(path))


def _index_shards(f: Path) -> list[str]:
    """The shard files a weight index names, after checking the shape transformers reads."""
    index = _read_json_object(f, missing="")
    weight_map = index.get("weight_map")
    if not isinstance(weight_map, dict) or not weight_map:
        raise CheemsInputError("has no weight_map object naming the shard of each tensor", file=str(f))
    if not isinstance(index.get("metadata"), dict):
        raise CheemsInputError("has no metadata object, which transformers needs ({} will do)", file=str(f))
    shards = sorted(set(weight_map.values()), key=str)
    for shard in shards:
        if not isinstance(shard, str) or not shard or Path(shard).name != shard:
            raise CheemsInputError(f"names {shard!r} as a shard; expected a file name in the folder", file=str(f))
    return shards


def _check_weights_file(f: Path) -> None:
    if f.suffix == ".safetensors":
        _check_safetensors(f)
    elif f.suffix == ".bin":
        _torch_weights(f, mmap=True)


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
    if not isinstance(header, dict):
        raise CheemsInputError("has a broken header (not a JSON object): not a safetensors file", file=str(f))
    ends = [t["data_offsets"][1] for k, t in header.items() if k != "__metadata__" and isinstance(t, dict)
            and isinstance(t.get("data_offsets"), list) and len(t["data_offsets"]) == 2
            and isinstance(t["data_offsets"][1], int)]
    if ends and 8 + n + max(ends) > size:
        raise CheemsInputError(f"is truncated ({size:,} bytes of {8 + n + max(ends):,})", file=str(f))
    try:
        from safetensors import safe_open
    except ImportError:
        return
    try:  # the reader's own check of the header (dtypes, shapes, offsets); no tensor is read
        with safe_open(str(f), framework="numpy"):
            pass
    except Exception as e:  # SafetensorError, which the package does not export
        raise CheemsInputError(f"is not a valid safetensors file: {_first_line(e)}", file=str(f)) from None


def _torch_weights(f: Path, *, mmap: bool = False) -> dict:
    """A torch ``.bin`` weights file loaded as plain tensors (``weights_only``: a pickle that
    holds anything else is refused, never run), as one CheemsInputError naming the file when
    it is not one; ``mmap`` maps a zip-format file instead of reading its tensors."""
    import pickle
    import re
    import zipfile

    torch = require_torch()
    try:
        with warnings.catch_warnings():  # torch warns about odd pickle protocols before it fails
            warnings.simplefilter("ignore")
            return torch.load(f, map_location="cpu", weights_only=True, mmap=mmap and zipfile.is_zipfile(f))
    except pickle.UnpicklingError as e:
        found = re.search(r"Unsupported global: GLOBAL (\S+)", str(e))
        if found:
            raise CheemsInputError(f"is a pickle holding more than tensors ({found.group(1)}); it is not loaded, "
                                   "since loading it could run code: convert it to safetensors from a copy you "
                                   "trust", file=str(f)) from None
        why = str(e).partition("WeightsUnpickler error:")[2].strip() or str(e)
        raise CheemsInputError(f"is not a PyTorch weights file ({_first_line(Exception(why))})", file=str(f)) from None
    except Exception as e:  # garbage makes the unpickler fail in any way (IndexError, KeyError, ...)
        raise CheemsInputError(f"is not a PyTorch weights file ({type(e).__name__}: {_first_line(e)})",
                               file=str(f)) from None


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


CAUSAL_LM_ARCHITECTURES = ("ForCausalLM", "ForConditionalGeneration", "LMHeadModel")
"""How the ``architectures`` of a model with an LM head end in its ``config.json``."""


def model_kind(config: dict) -> str | None:
    """What a checkpoint's ``config.json`` (``config``) says the folder holds, from its
    ``architectures`` alone (nothing loaded): ``causal-lm`` (an LM head, CAUSAL_LM_ARCHITECTURES;
    a v-head checkpoint too), ``seq-cls`` (a ``*ForSequenceClassification``), or None when it
    names neither."""
    archs = config.get("architectures")
    archs = [str(a) for a in archs] if isinstance(archs, list) else []
    if any(a.endswith(CAUSAL_LM_ARCHITECTURES) for a in archs):
        return "causal-lm"
    if any(a.endswith("ForSequenceClassification") for a in archs):
        return "seq-cls"
    return None


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


# ----------------------------------------------------------------------------- fingerprints

NOT_SCORED = ("optimizer.*", "scheduler.*", "rng_state*", "trainer_state.json", "training_args.bin",
              "train_log.jsonl", "train_summary.json", "README*", "*.md", ".*", "*.jsonl", "*.meta.json",
              "*.lock", "*.log", "events.out.tfevents.*")
"""Files of a model folder that cannot change its scores (training state and logs, model
cards, hidden files, score files someone keeps beside the model): left out of fingerprints.
Every other file of the folder counts: weights and their index, config, tokenizer files, the
chat template, v_head files, custom model code."""
FINGERPRINT_CACHE = "fingerprints.json"
CHUNK = 1 << 20
RACY_NS = 2_000_000_000  # a file changed this recently may change again within its mtime's tick


def model_fingerprint(path: str | Path, *, digests: dict[str, str] | None = None) -> str:
    """One hash of every byte of every file of a model folder that affects scores: of its
    :func:`model_file_digests` (or of ``digests``, those of ``path`` already computed)."""
    h = hashlib.sha256()
    for name, digest in (digests if digests is not None else model_file_digests(path)).items():
        h.update(f"{name}\0{digest}\0".encode())
    return h.hexdigest()[:16]


def model_file_digests(path: str | Path, *, cache: str | Path | None = None) -> dict[str, str]:
    """``{file name: sha256}`` of every file of the model folder ``path`` that affects scores
    (all but :data:`NOT_SCORED`), each hashed whole, in name order.

    Digests are remembered in ``cache`` (default ``fingerprints.json`` in the user cache folder,
    :func:`cheems.llm.cache.cache_folder`) under the file's absolute path with its size, mtime,
    ctime, device and inode, so a rerun on an unchanged folder reads no weights again; a file
    changed less than two seconds ago is not remembered (its mtime may not move on a second
    change within the same clock tick). A cache that cannot be read or written is ignored."""
    folder = Path(path).resolve()
    files = sorted((f for f in folder.iterdir() if f.is_file() and not _not_scored(f.name)), key=lambda f: f.name)
    cache_path = Path(cache) if cache is not None else _default_fingerprint_cache()
    known = _read_fingerprint_cache(cache_path)
    stamps = {str(f): _stamp(f) for f in files}
    missing = [f for f in files if str(f) not in known or known[str(f)][:-1] != stamps[str(f)]]
    if missing:
        with ThreadPoolExecutor(max_workers=min(4, len(missing), os.cpu_count() or 1)) as pool:
            for f, digest in zip(missing, pool.map(file_digest, missing)):
                known[str(f)] = [*stamps[str(f)], digest]
        now = time.time_ns()
        fresh = {str(f): known[str(f)] for f in missing if now - stamps[str(f)][1] >= RACY_NS}
        if fresh:
            _write_fingerprint_cache(cache_path, fresh)
    return {f.name: known[str(f)][-1] for f in files}


def file_digest(f: str | Path) -> str:
    """sha256 (hex) of every byte of ``f``, read 1 MiB at a time into one buffer."""
    h = hashlib.sha256()
    buffer = bytearray(CHUNK)
    view = memoryview(buffer)
    with open(f, "rb", buffering=0) as fh:
        while n := fh.readinto(buffer):
            h.update(view[:n])
    return h.hexdigest()


def _not_scored(name: str) -> bool:
    return any(fnmatch.fnmatchcase(name, pattern) for pattern in NOT_SCORED)


def _stamp(f: Path) -> list[int]:
    """What says a file is unchanged since it was hashed: size, mtime, ctime, device, inode."""
    st = f.stat()
    return [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_dev, st.st_ino]


def _default_fingerprint_cache() -> Path:
    from cheems.llm.cache import cache_folder

    return cache_folder() / FINGERPRINT_CACHE


def _read_fingerprint_cache(path: Path) -> dict[str, list]:
    """The cache's entries ``{absolute path: [*stamp, digest]}``; {} when missing or unusable."""
    try:
        data = json.loads(path.read_bytes())
    except (OSError, ValueError):
        return {}
    files = data.get("files") if isinstance(data, dict) and data.get("version") == 1 else None
    if not isinstance(files, dict):
        return {}
    return {k: v for k, v in files.items() if isinstance(v, list) and len(v) == 6
            and all(isinstance(x, int) for x in v[:5]) and isinstance(v[5], str)}


def _write_fingerprint_cache(path: Path, new: dict[str, list]) -> None:
    """Add ``new`` to the cache file, read again just before (another run may have added
    entries), dropping entries of files that are gone; written atomically, errors ignored."""
    from cheems.io import atomic_open

    entries = {k: v for k, v in _read_fingerprint_cache(path).items() if os.path.exists(k)}
    entries.update(new)
    try:
        with atomic_open(path) as fh:
            fh.write(json.dumps({"version": 1, "files": entries}).encode())
    except (CheemsInputError, OSError):
        pass  # a cache we cannot write only costs the next run a re-read


def tensor_names(f: Path) -> set[str]:
    """Names of the tensors in a safetensors or torch ``.bin`` file (one CheemsInputError
    naming the file when it is neither)."""
    if f.suffix == ".safetensors":
        _check_safetensors(f)
        from safetensors import safe_open

        with safe_open(str(f), framework="pt") as h:
            return set(h.keys())
    return set(_weights_dict(f, mmap=True))


def load_tensors(f: Path, keys: Sequence[str]) -> dict:
    """The named tensors of a safetensors or torch ``.bin`` file, on the CPU."""
    if f.suffix == ".safetensors":
        _check_safetensors(f)
        from safetensors import safe_open

        with safe_open(str(f), framework="pt") as h:
            return {k: h.get_tensor(k) for k in keys}
    state = _weights_dict(f)
    return {k: state[k] for k in keys}


def _weights_dict(f: Path, *, mmap: bool = False) -> dict:
    state = _torch_weights(f, mmap=mmap)
    if not isinstance(state, dict):
        raise CheemsInputError(f"holds {type(state).__name__}, not a name -> tensor mapping", file=str(f))
    return state


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


@contextlib.contextmanager
def weights_that_fit(path: str | Path) -> Iterator[None]:
    """Around a ``from_pretrained`` of the folder ``path``: weights whose tensor shapes differ from
    what its config.json describes are one CheemsInputError naming config.json, not a traceback."""
    try:
        yield
    except RuntimeError as e:  # transformers reports shapes that do not fit the config so
        if "mismatched_sizes" not in str(e) and "size mismatch" not in str(e):
            raise
        raise CheemsInputError("the weights do not fit it: their tensor shapes differ from what it "
                               "describes (hidden_size, vocab_size, heads, ...)",
                               file=str(Path(path) / "config.json")) from None


def load_classifier(path: str | Path, tokenizer, **kwargs):
    """``(model, loading_info)``: the ``AutoModelForSequenceClassification`` at ``path`` with
    one label and ``config.pad_token_id`` set to the tokenizer's.

    ``kwargs`` go to ``from_pretrained`` (``dtype``, ``trust_remote_code``,
    ``attn_implementation``, ``num_labels=1`` to put a new head on a causal LM). A checkpoint
    with another number of labels is refused, naming the folder."""
    from transformers import AutoModelForSequenceClassification

    with quiet_transformers(), weights_that_fit(path):
        model, info = AutoModelForSequenceClassification.from_pretrained(path, output_loading_info=True, **kwargs)
    if model.config.num_labels != 1:
        raise CheemsInputError(f"a reward model has one label; this one has {model.config.num_labels}",
                               file=str(path))
    model.config.pad_token_id = tokenizer.pad_token_id
    return model, info
