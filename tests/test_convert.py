"""Converting v-head reward models to sequence classification (cheems.models.convert).

Tiny real v-head checkpoints (tests/tiny_models.py: a Qwen2 causal LM plus a random v_head with
a non-zero bias, the head in ``value_head.safetensors`` or inside ``model.safetensors``) are
converted once per module; the converted folders are then loaded the way users and other tools
load them (``detect_layout``, plain ``AutoModelForSequenceClassification.from_pretrained`` and
its own pooling, ``load_reward_model``) and their scores compared with the source's, minus the
dropped bias, on every conversation of the bundled sample. All fp32 on CPU.
"""

from __future__ import annotations

import json
from itertools import combinations
from pathlib import Path

import pytest

from tests.tiny_models import HIDDEN, VHeadModel, copy_checkpoint, require_models_extra

require_models_extra()
import torch  # noqa: E402

from cheems.records import CheemsInputError  # noqa: E402
from cheems.models.checkpoints import detect_layout  # noqa: E402
from cheems.scoring.transformers_rm import load_reward_model  # noqa: E402
from cheems.models.convert import BIAS_CONFIG_KEY, convert_v_head_checkpoint  # noqa: E402

pytestmark = pytest.mark.usefixtures("single_torch_thread")

ATOL = 1e-5  # converted vs source minus bias, fp32
LAYOUTS = ["v_head_file_model", "v_head_inline_model"]


# ----------------------------------------------------------------------------- built once per module

@pytest.fixture(scope="module")
def v_head_bin_model(tmp_path_factory, causal_lm_model) -> VHeadModel:
    """A third variant: ``value_head.bin`` (torch.save) with ``v_head.weight`` and no bias. In a
    folder of its own each time: in a random order the module's fixtures may be set up twice."""
    d = copy_checkpoint(causal_lm_model, tmp_path_factory.mktemp("v-head-bin-convert") / "model")
    weight = torch.randn(1, HIDDEN, generator=torch.Generator().manual_seed(13))
    torch.save({"v_head.weight": weight}, d / "value_head.bin")
    return VHeadModel(d, weight, torch.zeros(1), "value_head.bin")


@pytest.fixture(scope="module")
def converted(tmp_path_factory, v_head_file_model, v_head_inline_model, v_head_bin_model) -> dict:
    """{fixture name: (source VHeadModel, converted folder)} for every v-head variant."""
    root = tmp_path_factory.mktemp("converted")
    sources = {"v_head_file_model": v_head_file_model, "v_head_inline_model": v_head_inline_model,
               "v_head_bin_model": v_head_bin_model}
    return {name: (src, convert_v_head_checkpoint(src.dir, root / name)) for name, src in sources.items()}


@pytest.fixture(scope="module")
def sample_items(tiny_prompts) -> list[tuple]:
    return [(p.prompt, r.content) for p in tiny_prompts for r in p.responses]


@pytest.fixture(scope="module")
def scores(converted, sample_items) -> dict:
    """{name: (source scores, converted scores)} on every sample conversation."""
    return {name: (load_reward_model(src.dir).score(sample_items), load_reward_model(dst).score(sample_items))
            for name, (src, dst) in converted.items()}


# ----------------------------------------------------------------------------- what gets written

@pytest.mark.parametrize("which", LAYOUTS)
def test_converted_folder_is_a_one_label_seq_cls_checkpoint(converted, which):
    src, dst = converted[which]
    assert float(src.bias) != 0.0  # else the bias checks below could not fail
    assert detect_layout(dst) == "seq-cls"
    config = json.loads((dst / "config.json").read_text(encoding="utf-8"))
    assert config["architectures"] == ["Qwen2ForSequenceClassification"]
    assert len(config["id2label"]) == 1
    from transformers import AutoTokenizer

    assert config["pad_token_id"] == AutoTokenizer.from_pretrained(src.dir).pad_token_id
    assert config[BIAS_CONFIG_KEY] == pytest.approx(float(src.bias), abs=1e-7)
    names = {p.name for p in dst.iterdir()}
    assert "model.safetensors" in names and "tokenizer.json" in names
    assert not names & {"value_head.safetensors", "value_head.bin"}
    assert not [p for p in dst.parent.iterdir() if p.name.endswith(".tmp")]  # no temp folder left


def test_a_head_without_bias_records_none(converted):
    _, dst = converted["v_head_bin_model"]
    config = json.loads((dst / "config.json").read_text(encoding="utf-8"))
    assert BIAS_CONFIG_KEY not in config
    assert detect_layout(dst) == "seq-cls"


@pytest.mark.parametrize("which", LAYOUTS + ["v_head_bin_model"])
def test_plain_transformers_loads_every_weight(converted, which):
    """No missing, unexpected or mismatched keys; backbone = source's, score = v_head weight."""
    from safetensors.torch import load_file
    from transformers import AutoModelForSequenceClassification

    src, dst = converted[which]
    model, info = AutoModelForSequenceClassification.from_pretrained(dst, output_loading_info=True)
    assert type(model).__name__ == "Qwen2ForSequenceClassification"
    assert model.config.num_labels == 1
    assert not info["missing_keys"] and not info["unexpected_keys"] and not info["mismatched_keys"]
    assert torch.equal(model.score.weight.detach(), src.weight)
    source = load_file(str(src.dir / "model.safetensors"))
    state = model.state_dict()
    backbone = [k for k in state if k != "score.weight"]
    assert backbone and all(torch.equal(state[k], source[k]) for k in backbone)


# ----------------------------------------------------------------------------- same scores

@pytest.mark.parametrize("which", LAYOUTS + ["v_head_bin_model"])
def test_scores_are_the_source_scores_minus_the_bias(scores, converted, which):
    src, _ = converted[which]
    before, after = scores[which]
    assert len(before) == len(after) > 100
    shift = float(src.bias)
    worst = max(abs((b - shift) - a) for b, a in zip(before, after))
    assert worst <= ATOL
    # and the shift is really there: without subtracting it the scores would differ
    if shift:
        assert max(abs(b - a) for b, a in zip(before, after)) > 10 * ATOL


@pytest.mark.parametrize("which", LAYOUTS)
def test_every_pairwise_ordering_is_kept(scores, tiny_prompts, which):
    before, after = scores[which]
    i, pairs = 0, 0
    for p in tiny_prompts:
        n = len(p.responses)
        for a, b in combinations(range(i, i + n), 2):
            assert (before[a] > before[b]) == (after[a] > after[b])
            assert (before[a] < before[b]) == (after[a] < after[b])
            pairs += 1
        i += n
    assert i == len(before) and pairs > 50


def test_transformers_own_pooling_gives_the_same_scores(converted, scores, sample_items):
    """The converted folder through AutoModelForSequenceClassification's forward, no cheems code:
    one unpadded conversation at a time (its pooling finds the last non-pad token)."""
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    src, dst = converted["v_head_inline_model"]
    before, _ = scores["v_head_inline_model"]
    tok = AutoTokenizer.from_pretrained(dst)
    model = AutoModelForSequenceClassification.from_pretrained(dst).eval()
    shortest = sorted(range(len(sample_items)), key=lambda k: len(sample_items[k][1]))[:12]
    for k in shortest:
        prompt, response = sample_items[k]
        turns = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else list(prompt)
        text = tok.apply_chat_template(turns + [{"role": "assistant", "content": response}], tokenize=False)
        ids = tok(text, return_tensors="pt")["input_ids"]
        assert ids.shape[1] <= 2048 and tok.pad_token_id not in ids[0].tolist()
        with torch.no_grad():
            logit = model(input_ids=ids).logits[0, 0].item()
        assert abs(logit - (before[k] - float(src.bias))) <= ATOL


def test_a_tokenizer_without_pad_token_pads_with_eos(v_head_file_model, tmp_path):
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    src = copy_checkpoint(v_head_file_model.dir, tmp_path / "no-pad")
    tok = AutoTokenizer.from_pretrained(src)
    tok.pad_token = None
    tok.save_pretrained(src)
    assert AutoTokenizer.from_pretrained(src).pad_token_id is None
    dst = convert_v_head_checkpoint(src, tmp_path / "out")
    eos = tok.eos_token_id
    assert AutoTokenizer.from_pretrained(dst).pad_token_id == eos
    assert AutoModelForSequenceClassification.from_pretrained(dst).config.pad_token_id == eos


def test_dtype_casts_the_output(v_head_file_model, tmp_path):
    from safetensors.torch import load_file

    dst = convert_v_head_checkpoint(v_head_file_model.dir, tmp_path / "bf16", dtype="bfloat16")
    tensors = load_file(str(dst / "model.safetensors"))
    assert {t.dtype for t in tensors.values()} == {torch.bfloat16}
    assert torch.equal(tensors["score.weight"], v_head_file_model.weight.to(torch.bfloat16))


# ----------------------------------------------------------------------------- refusals

def test_refuses_a_seq_cls_source(seq_cls_model, tmp_path):
    with pytest.raises(CheemsInputError, match="already a sequence-classification") as e:
        convert_v_head_checkpoint(seq_cls_model, tmp_path / "out")
    assert e.value.file == str(seq_cls_model) and str(seq_cls_model) in str(e.value)
    assert not (tmp_path / "out").exists()


def test_refuses_a_folder_without_v_head(causal_lm_model, tmp_path):
    with pytest.raises(CheemsInputError, match="no v_head found") as e:
        convert_v_head_checkpoint(causal_lm_model, tmp_path / "out")
    assert e.value.file == str(causal_lm_model)
    assert not (tmp_path / "out").exists()


def test_refuses_a_folder_that_is_no_model(tmp_path):
    with pytest.raises(CheemsInputError, match="no config.json") as e:
        convert_v_head_checkpoint(tmp_path, tmp_path / "out")
    assert e.value.file == str(tmp_path)


def test_refuses_a_non_empty_destination_and_leaves_it_alone(v_head_file_model, tmp_path):
    dst = tmp_path / "taken"
    dst.mkdir()
    (dst / "notes.txt").write_text("keep me", encoding="utf-8")
    with pytest.raises(CheemsInputError, match="not empty") as e:
        convert_v_head_checkpoint(v_head_file_model.dir, dst)
    assert e.value.file == str(dst)
    assert [p.name for p in dst.iterdir()] == ["notes.txt"]
    assert [p.name for p in tmp_path.iterdir()] == ["taken"]


def test_an_existing_empty_destination_is_used(v_head_file_model, tmp_path):
    dst = tmp_path / "empty"
    dst.mkdir()
    assert convert_v_head_checkpoint(v_head_file_model.dir, dst) == dst
    assert detect_layout(dst) == "seq-cls"


def test_refuses_an_unknown_dtype(v_head_file_model, tmp_path):
    with pytest.raises(CheemsInputError, match="unknown dtype") as e:
        convert_v_head_checkpoint(v_head_file_model.dir, tmp_path / "out", dtype="int8")
    assert e.value.field == "dtype"
    assert not (tmp_path / "out").exists()
