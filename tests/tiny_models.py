"""Tiny real reward-model checkpoints written to disk, built once per test session.

Every folder here is an ordinary Hugging Face checkpoint that the code under test loads with
``from_pretrained``, exactly as it loads a real one: no mocks. The models are
``init_model(size="tiny")`` (hidden 64, 2 layers) with a byte-level BPE tokenizer of about
800 tokens trained on the bundled Chinese sample, so building all of them takes seconds.

tests/conftest.py registers this module's fixtures for every test (``pytest_plugins``): a test
names the fixture it needs (``seq_cls_model``) and imports nothing. Without the models extra
each fixture skips the test that asked for it, saying what to install; the plain helpers
(``sample_prompts``, ``build_seq_cls``, ...) import without torch and need it only when called.
A test module that needs torch at import calls ``require_models_extra()`` first.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import pytest

from cheems.formats import read_prompts
from cheems.records import Prompt
from cheems.training.init_model import CHAT_TEMPLATE, SIZES, init_model, tiny_config

VOCAB_SIZE = 800
HIDDEN = SIZES["tiny"][0]  # 64
MODELS_EXTRA = ("torch", "transformers", "safetensors")


def require_models_extra() -> None:
    """Skip the calling test, fixture or module when a package of the models extra is missing."""
    for name in MODELS_EXTRA:
        pytest.importorskip(name, reason=f"the tiny models need the models extra ({name}): "
                                         "pip install 'cheems[models]'")


# ----------------------------------------------------------------------------- sample text

def sample_annotation_files() -> list[Path]:
    folder = Path(str(resources.files("cheems") / "data" / "sample" / "annotations"))
    return sorted(folder.glob("*.jsonl"))


def sample_prompts() -> list[Prompt]:
    """Every prompt of the bundled sample (open.jsonl and human.jsonl), in file order."""
    return [p for f in sample_annotation_files() for p in read_prompts(f).prompts]


def prompt_as_text(prompt) -> str:
    return prompt if isinstance(prompt, str) else "\n".join(m["content"] for m in prompt)


def sample_texts(prompts: list[Prompt]) -> list[str]:
    """The prompts and responses of ``prompts``: what the tiny tokenizers are trained on."""
    texts = []
    for p in prompts:
        texts.append(prompt_as_text(p.prompt))
        texts.extend(r.content for r in p.responses)
    return texts


# ----------------------------------------------------------------------------- builders

def build_seq_cls(path: Path, texts: list[str], *, seed: int = 0, add_bos: bool = False) -> Path:
    """A Qwen2ForSequenceClassification with one label, as ``cheems init-model`` writes it."""
    return init_model(path, texts, size="tiny", seed=seed, vocab_size=VOCAB_SIZE, add_bos=add_bos)


def build_causal_lm(path: Path, texts: list[str], *, seed: int = 0) -> Path:
    """A plain Qwen2ForCausalLM: the backbone of the official Cheems v-head layout."""
    return init_model(path, texts, size="tiny", seed=seed, vocab_size=VOCAB_SIZE, head="causal-lm")


def random_v_head(seed: int) -> tuple["torch.Tensor", "torch.Tensor"]:
    """Weight (1, hidden) and bias (1,) of a linear value head, large enough to spread scores."""
    import torch

    g = torch.Generator().manual_seed(seed)
    return torch.randn(1, HIDDEN, generator=g), torch.randn(1, generator=g)


def write_value_head_file(model_dir: Path, weight, bias) -> Path:
    """trl style: ``value_head.safetensors`` next to the model, keys ``v_head.summary.*``."""
    from safetensors.torch import save_file

    f = model_dir / "value_head.safetensors"
    save_file({"v_head.summary.weight": weight.contiguous(), "v_head.summary.bias": bias.contiguous()}, str(f),
              metadata={"format": "pt"})
    return f


def add_v_head_to_model_file(model_dir: Path, weight, bias) -> Path:
    """The head inside the model's own ``model.safetensors`` as ``v_head.weight`` / ``v_head.bias``."""
    from safetensors.torch import load_file, save_file

    f = model_dir / "model.safetensors"
    tensors = load_file(str(f))
    assert "v_head.weight" not in tensors
    tensors["v_head.weight"] = weight.contiguous()
    tensors["v_head.bias"] = bias.contiguous()
    save_file(tensors, str(f), metadata={"format": "pt"})
    return f


def copy_checkpoint(src: Path, dst: Path) -> Path:
    """A copy of the checkpoint folder ``src`` at ``dst``, to change without touching ``src``."""
    shutil.copytree(src, dst)
    return dst


def ranked_folder_with_model(folder: Path, annotations: Path, model: Path) -> Path:
    """``folder`` holding ``bench.jsonl`` (the annotations ranked by `cheems rank`) and, as ``tiny``,
    a copy of the checkpoint ``model``: where the CLI tests of a model run."""
    from tests.conftest import run_cli_in

    r = run_cli_in(folder, "rank", annotations, "-o", "bench.jsonl")
    assert r.returncode == 0, r.stderr
    copy_checkpoint(model, folder / "tiny")
    return folder


def set_chat_template(model_dir: Path, template: str | None) -> None:
    """Rewrite the tokenizer files of ``model_dir`` with another chat template (None: none)."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model_dir)
    for name in ("chat_template.jinja", "chat_template.json"):
        (model_dir / name).unlink(missing_ok=True)
    tok.chat_template = template
    tok.save_pretrained(model_dir)
    assert AutoTokenizer.from_pretrained(model_dir).chat_template == template


def build_classifier(path: Path, tokenizer_dir: Path, num_labels: int) -> Path:
    """A tiny Qwen2ForSequenceClassification with ``num_labels`` labels (not a reward model if > 1)."""
    import torch
    from transformers import AutoTokenizer, Qwen2ForSequenceClassification

    tok = AutoTokenizer.from_pretrained(tokenizer_dir)
    config = tiny_config(tok)
    config.num_labels = num_labels
    torch.manual_seed(0)
    Qwen2ForSequenceClassification(config).save_pretrained(path)
    tok.save_pretrained(path)
    return path


# Llama-3's turns: BOS written by the template (and added by the tokenizer too), the reply trimmed,
# each turn closed by <|eot_id|> with nothing after it (no newline, unlike ChatML).
EOT_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}<|start_header_id|>{{ m['role'] }}<|end_header_id|>\n\n"
    "{{ m['content'] | trim }}<|eot_id|>{% endfor %}"
    "{% if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>\n\n{% endif %}"
)


def build_eot_template_model(path: Path, texts: list[str], *, seed: int = 0) -> Path:
    """A tiny Qwen2ForSequenceClassification whose tokenizer is Llama-3 shaped: it adds ``<s>``
    itself, its template writes it too (`EOT_TEMPLATE`), and EOS is the end-of-turn token
    ``<|eot_id|>`` (as Llama-3.1-Instruct's tokenizer_config.json says)."""
    import torch
    from transformers import Qwen2ForSequenceClassification
    from transformers.utils import logging as hf_logging

    from cheems.training.init_model import train_tokenizer

    hf_logging.disable_progress_bar()
    tok = train_tokenizer(texts, vocab_size=VOCAB_SIZE, add_bos=True, chat_template=EOT_TEMPLATE)
    tok.add_special_tokens({"additional_special_tokens": ["<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"]})
    tok.eos_token = "<|eot_id|>"
    torch.manual_seed(seed)
    Qwen2ForSequenceClassification(tiny_config(tok)).save_pretrained(path)
    tok.save_pretrained(path)
    return path


@dataclass(frozen=True)
class VHeadModel:
    """A v-head checkpoint and the head weights the test wrote into it."""

    dir: Path
    weight: "torch.Tensor"  # (1, hidden)
    bias: "torch.Tensor"  # (1,)
    where: str  # "value_head.safetensors" or "model.safetensors"


# ----------------------------------------------------------------------------- fixtures

# Models this small run several times faster on one CPU thread than on two: torch's intra-op
# pool only adds hand-off cost to 64-wide matrices, and on a shared machine its threads spin.
ONE_THREAD_ENV = {"OMP_NUM_THREADS": "1"}  # for subprocesses (the CLI) running tiny models


@pytest.fixture(scope="module")
def single_torch_thread():
    """torch on one intra-op thread for a module's tests, restored afterwards."""
    require_models_extra()
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="session")
def tiny_prompts() -> list[Prompt]:
    return sample_prompts()


@pytest.fixture(scope="session")
def tiny_texts(tiny_prompts) -> list[str]:
    return sample_texts(tiny_prompts)


@pytest.fixture(scope="session")
def tiny_models_root(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("tiny_models")


@pytest.fixture(scope="session")
def seq_cls_model(tiny_models_root, tiny_texts) -> Path:
    require_models_extra()
    return build_seq_cls(tiny_models_root / "seq-cls", tiny_texts)


@pytest.fixture(scope="session")
def causal_lm_model(tiny_models_root, tiny_texts) -> Path:
    """The bare causal LM (no head); copy it before adding one."""
    require_models_extra()
    return build_causal_lm(tiny_models_root / "causal-lm", tiny_texts, seed=1)


@pytest.fixture(scope="session")
def v_head_file_model(tiny_models_root, causal_lm_model) -> VHeadModel:
    d = copy_checkpoint(causal_lm_model, tiny_models_root / "v-head-file")
    weight, bias = random_v_head(seed=11)
    write_value_head_file(d, weight, bias)
    return VHeadModel(d, weight, bias, "value_head.safetensors")


@pytest.fixture(scope="session")
def v_head_inline_model(tiny_models_root, causal_lm_model) -> VHeadModel:
    d = copy_checkpoint(causal_lm_model, tiny_models_root / "v-head-inline")
    weight, bias = random_v_head(seed=12)
    add_v_head_to_model_file(d, weight, bias)
    return VHeadModel(d, weight, bias, "model.safetensors")


@pytest.fixture(scope="session")
def bos_template_model(tiny_models_root, tiny_texts) -> Path:
    """Tokenizer adds ``<s>`` itself AND the chat template starts with ``{{ bos_token }}``."""
    require_models_extra()
    d = build_seq_cls(tiny_models_root / "bos-template", tiny_texts, add_bos=True)
    set_chat_template(d, "{{ bos_token }}" + CHAT_TEMPLATE)
    return d


@pytest.fixture(scope="session")
def eot_template_model(tiny_models_root, tiny_texts) -> Path:
    """Llama-3 shaped turns: each closed by ``<|eot_id|>`` with no newline after it (`EOT_TEMPLATE`)."""
    require_models_extra()
    return build_eot_template_model(tiny_models_root / "eot-template", tiny_texts, seed=3)


@pytest.fixture(scope="session")
def no_template_model(tiny_models_root, seq_cls_model) -> Path:
    d = copy_checkpoint(seq_cls_model, tiny_models_root / "no-template")
    set_chat_template(d, None)
    return d


@pytest.fixture(scope="session")
def three_label_model(tiny_models_root, seq_cls_model) -> Path:
    return build_classifier(tiny_models_root / "three-labels", seq_cls_model, num_labels=3)


@pytest.fixture(scope="session")
def cli_tiny_model(tmp_path_factory, sample_annotations) -> Path:
    """What ``cheems init-model -o tiny --tokenizer-from bench.jsonl --vocab-size 400`` writes, where
    bench.jsonl is the sample's open.jsonl ranked by ``cheems rank``: built once per session through
    the command line, for the tests that score, evaluate or train with the model a user would make.
    Copy it into the test's own folder (``copy_checkpoint``) and change only the copy."""
    require_models_extra()
    from tests.conftest import run_cli_in

    folder = tmp_path_factory.mktemp("cli_tiny_model")
    ranked = run_cli_in(folder, "rank", sample_annotations / "open.jsonl", "-o", "bench.jsonl")
    assert ranked.returncode == 0, ranked.stderr
    built = run_cli_in(folder, "init-model", "-o", "tiny", "--tokenizer-from", "bench.jsonl", "--vocab-size", "400")
    assert built.returncode == 0, built.stderr
    return folder / "tiny"
