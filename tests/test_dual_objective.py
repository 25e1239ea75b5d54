"""The dual objective (cheems.training.dual, loss.lm_loss / dual_loss): a causal LM with a scalar
head trained on (1 - a) * BT + a * L_gen, on the tiny real causal LM of tests/tiny_models.py.

The losses are checked against plain formulas; a = 0 against the Bradley-Terry trainer's own
loss and gradients (the same backbone loaded as a *ForSequenceClassification); L_gen against
a full-row, full-vocabulary cross-entropy whose prompt tokens are masked. End to end, `cheems
train --objective dual` learns a synthetic preference (the response holding the marker 好
wins) and exports a scalar checkpoint that `cheems score` reads with the trained rewards.
"""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import run_cli_in
from tests.tiny_models import copy_checkpoint, require_models_extra, sample_texts

require_models_extra()
import torch  # noqa: E402

from cheems.formats import read_prompts  # noqa: E402
from cheems.models.checkpoints import load_classifier, load_tokenizer  # noqa: E402
from cheems.models.packing import use_packed_attention  # noqa: E402
from cheems.models.sequences import EncodeStats, encode_conversations  # noqa: E402
from cheems.records import CheemsInputError  # noqa: E402
from cheems.training.config import TrainConfig  # noqa: E402
from cheems.training.dual import (DualModel, dual_outputs, generation_targets, load_causal_lm,  # noqa: E402
                                  new_score_head)
from cheems.training.evaluation import batch_rewards  # noqa: E402
from cheems.training.loss import bradley_terry_loss, dual_loss, lm_loss  # noqa: E402
from cheems.training.reward_model import RewardModel  # noqa: E402
from cheems.training.trainer import train  # noqa: E402
from cheems.training.training_data import encode_training_data, preferred_responses  # noqa: E402

pytestmark = pytest.mark.usefixtures("single_torch_thread")

MARKER = "好"


# ----------------------------------------------------------------------------- the formulas

def plain_lm_loss(logits: list[list[float]], targets: list[int]) -> float:
    terms = []
    for row, t in zip(logits, targets):
        top = max(row)
        terms.append(top + math.log(sum(math.exp(x - top) for x in row)) - row[t])
    return sum(terms) / len(terms) if terms else 0.0


@settings(max_examples=100, deadline=None)
@given(st.integers(2, 7).flatmap(lambda v: st.tuples(st.just(v), st.lists(
    st.tuples(st.lists(st.floats(-8, 8), min_size=v, max_size=v), st.integers(0, v - 1)), max_size=6))))
def test_lm_loss_matches_plain_formula(data):
    vocab, rows = data
    logits = torch.tensor([r for r, _ in rows], dtype=torch.float64).reshape(len(rows), vocab).requires_grad_()
    targets = torch.tensor([t for _, t in rows], dtype=torch.long)
    loss = lm_loss(logits, targets)
    assert loss.item() == pytest.approx(plain_lm_loss([r for r, _ in rows], [t for _, t in rows]), rel=1e-5, abs=1e-6)
    loss.backward()
    assert torch.isfinite(logits.grad).all()  # no position: a zero loss that still reaches the logits


@settings(max_examples=200, deadline=None)
@given(st.floats(0, 20), st.floats(0, 20), st.sampled_from([0.0, 0.01, 0.1, 0.5, 1.0]))
def test_dual_loss_matches_plain_formula(bt, gen, a):
    b, g = torch.tensor(bt, dtype=torch.float64), torch.tensor(gen, dtype=torch.float64)
    assert dual_loss(b, g, a).item() == pytest.approx((1 - a) * bt + a * gen, rel=1e-12, abs=1e-12)
    if a == 0:
        assert dual_loss(b, g, a).item() == bt  # to the bit


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.lists(st.integers(0, 50), min_size=1, max_size=9),
                          st.one_of(st.none(), st.integers(0, 10))), min_size=1, max_size=5))
def test_generation_targets_are_the_response_tokens_only(items):
    seqs, starts = [s for s, _ in items], [b for _, b in items]
    offsets = [sum(len(s) + 3 for s in seqs[:i]) for i in range(len(seqs))]  # rows with gaps between
    positions, targets = generation_targets(seqs, starts, offsets)
    expected = [(offsets[i] + t - 1, seqs[i][t]) for i, (seq, start) in enumerate(items) if start is not None
                for t in range(len(seq)) if t >= max(start, 1)]  # every response token after the first
    assert list(zip(positions, targets)) == expected


def test_preferred_responses_are_the_ones_ranked_first():
    assert preferred_responses([("a", "b"), ("a", "c"), ("b", "c")]) == {"a"}
    assert preferred_responses([("a", "c"), ("b", "c")]) == {"a", "b"}  # a tie at the top
    assert preferred_responses([("a", "b"), ("b", "c"), ("c", "a")]) == set()  # a cycle has no best


# ----------------------------------------------------------------------------- marker data

def marker_rows(n: int, seed: int, tag: str, chars: list[str]) -> list[dict]:
    """Prompts of random characters with two responses of space-separated characters; the one
    holding MARKER is ranked first."""
    g = random.Random(seed)
    rows = []
    for i in range(n):
        good = [g.choice(chars) for _ in range(g.randint(4, 8))]
        good.insert(g.randint(0, len(good)), MARKER)
        bad = [g.choice(chars) for _ in range(g.randint(5, 9))]
        responses = [{"id": "good", "content": " ".join(good)}, {"id": "bad", "content": " ".join(bad)}]
        g.shuffle(responses)
        rows.append({"id": f"{tag}{i}", "prompt": "".join(g.choice(chars) for _ in range(6)),
                     "responses": responses, "rank": {"good": 0, "bad": 1}})
    return rows


def write_rows(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def marker_data(tmp_path_factory, tiny_prompts, causal_lm_model) -> Path:
    """A folder with ``train.jsonl`` (200 prompts), ``held.jsonl`` (50 others) and ``clm``, a
    copy of the tiny causal LM."""
    d = tmp_path_factory.mktemp("dual")
    chars = sorted({c for t in sample_texts(tiny_prompts) for c in t if "\u4e00" <= c <= "\u9fff"} - {MARKER})
    write_rows(d / "train.jsonl", marker_rows(200, 0, "t", chars))
    write_rows(d / "held.jsonl", marker_rows(50, 1, "h", chars))
    copy_checkpoint(causal_lm_model, d / "clm")
    return d


@pytest.fixture(scope="module")
def encoded(marker_data):
    """The tokenizer, the first 3 marker prompts and their responses encoded with LM targets."""
    tok = load_tokenizer(marker_data / "clm")
    prompts = read_prompts(marker_data / "train.jsonl").prompts[:3]
    return tok, prompts, encode_training_data(prompts, tok, max_length=512, truncate=False, lm_targets=True)


def test_response_starts_mark_the_best_responses_after_their_prompt(encoded):
    tok, prompts, data = encoded
    for (pi, ri, _), ids, start in zip(data.items, data.ids, data.response_starts):
        p, r = prompts[pi], prompts[pi].responses[ri]
        if r.id != "good":
            assert start is None
            continue
        prompt_text = tok.apply_chat_template([{"role": "user", "content": p.prompt}], add_generation_prompt=True,
                                              tokenize=False)
        assert tok.decode(ids[:start]) == prompt_text
        # the reply up to the end-of-turn token where its reward is read (the template's newline after it
        # is not part of the sequence: cheems.models.reward_position)
        assert tok.decode(ids[start:]) == r.content + "<|im_end|>"


def test_truncation_moves_the_response_start_with_the_cut(encoded):
    tok, prompts, data = encoded
    cut = encode_training_data(prompts, tok, max_length=12, truncate=True, lm_targets=True)
    assert cut.truncated == len(data.items)
    for ids, whole, start, start_whole in zip(cut.ids, data.ids, cut.response_starts, data.response_starts):
        assert ids == whole[-12:]
        if start_whole is not None:
            assert start == max(0, start_whole - (len(whole) - 12))


# ----------------------------------------------------------------------------- one forward pass

def two_ways(path: Path, packing: bool):
    """The tiny causal LM loaded as the bt trainer loads a checkpoint (*ForSequenceClassification,
    a new score head) and as the dual trainer does, its head a copy of the first's."""
    tok = load_tokenizer(path)
    torch.manual_seed(0)
    seq_cls, _ = load_classifier(path, tok, num_labels=1, dtype="float32")
    causal = load_causal_lm(path, tok)
    head = new_score_head(causal.config, seed=0)
    with torch.no_grad():
        head.weight.copy_(seq_cls.score.weight)
    if packing:
        assert use_packed_attention(seq_cls) and use_packed_attention(causal)
    return tok, RewardModel(seq_cls), DualModel(causal, head)


def batch_pairs(data):
    where = {(pi, ri): i for i, (pi, ri, _) in enumerate(data.items)}
    pairs = [(where[(p, a)], where[(p, b)]) for p, plist in data.pairs_by_prompt.items() for a, b in plist]
    return torch.tensor([a for a, _ in pairs]), torch.tensor([b for _, b in pairs])


def dual_step(model, data, pad_id: int, packing: bool, a: float):
    """The dual loss of the whole encoded batch, backpropagated; returns (loss, rewards, logits, targets)."""
    better, worse = batch_pairs(data)
    rewards, logits, targets = dual_outputs(model, data.ids, data.response_starts, packing=packing, pad_id=pad_id,
                                            device="cpu")
    loss = dual_loss(bradley_terry_loss(rewards, better, worse)[0], lm_loss(logits, targets), a)
    loss.backward()
    return loss, rewards, logits, targets


@pytest.mark.parametrize("packing", [True, False])
def test_a_zero_gives_exactly_bts_loss_and_gradients(marker_data, encoded, packing):
    _, _, data = encoded
    tok, bt_model, dual_model = two_ways(marker_data / "clm", packing)
    better, worse = batch_pairs(data)
    rewards = batch_rewards(bt_model, data.ids, packing=packing, pad_id=tok.pad_token_id, device="cpu")
    bt_loss, _ = bradley_terry_loss(rewards, better, worse)
    bt_loss.backward()
    loss, dual_rewards, _, targets = dual_step(dual_model, data, tok.pad_token_id, packing, a=0.0)
    assert targets.numel() > 0
    assert torch.equal(loss, bt_loss) and torch.equal(dual_rewards, rewards)
    bt_grads = dict(bt_model.classifier.model.named_parameters())
    for name, p in dual_model.causal_lm.model.named_parameters():
        assert torch.equal(p.grad, bt_grads[name].grad), name
    assert torch.equal(dual_model.score.weight.grad, bt_model.classifier.score.weight.grad)


def test_lm_head_gets_a_gradient_only_when_a_is_positive(marker_data, encoded):
    tok, _, data = encoded
    for a in (0.0, 0.3):
        _, _, model = two_ways(marker_data / "clm", packing=True)
        head = model.causal_lm.get_output_embeddings().weight
        assert head is not model.causal_lm.get_input_embeddings().weight  # untied: BT never reaches it
        dual_step(model, data, tok.pad_token_id, packing=True, a=a)
        assert (head.grad is not None and head.grad.abs().sum() > 0) == (a > 0), a
        assert model.score.weight.grad.abs().sum() > 0


def test_lm_loss_is_the_masked_cross_entropy_of_the_whole_row(marker_data, encoded):
    """L_gen from the logits at the chosen positions only equals the usual causal-LM loss over
    the whole padded batch (every position, the full vocabulary) with the prompt tokens, the
    other responses and the padding masked out (-100)."""
    tok, _, data = encoded
    _, _, model = two_ways(marker_data / "clm", packing=False)
    _, logits, targets = dual_outputs(model, data.ids, data.response_starts, packing=False,
                                      pad_id=tok.pad_token_id, device="cpu")
    width = max(len(s) for s in data.ids)
    input_ids = torch.full((len(data.ids), width), tok.pad_token_id)
    mask = torch.zeros_like(input_ids)
    labels = torch.full_like(input_ids, -100)
    for i, (seq, start) in enumerate(zip(data.ids, data.response_starts)):
        input_ids[i, :len(seq)] = torch.tensor(seq)
        mask[i, :len(seq)] = 1
        if start is not None:
            labels[i, start:len(seq)] = torch.tensor(seq[start:])
    with torch.no_grad():
        full = model.causal_lm(input_ids=input_ids, attention_mask=mask).logits  # (n, width, vocab)
        plain = torch.nn.functional.cross_entropy(full[:, :-1].reshape(-1, full.shape[-1]), labels[:, 1:].reshape(-1))
    assert int((labels != -100).sum()) == targets.numel()
    assert lm_loss(logits, targets).item() == pytest.approx(plain.item(), rel=1e-5)


def test_packed_and_padded_dual_batches_agree(marker_data, encoded):
    tok, _, data = encoded
    results = []
    for packing in (True, False):
        _, _, model = two_ways(marker_data / "clm", packing=packing)
        loss, rewards, logits, targets = dual_step(model, data, tok.pad_token_id, packing, a=0.5)
        results.append((loss, rewards, logits, targets, {n: p.grad for n, p in model.named_parameters()}))
    (l1, r1, g1, t1, grads1), (l2, r2, g2, t2, grads2) = results
    assert torch.equal(t1, t2)
    torch.testing.assert_close(l1, l2, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(r1, r2, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(g1, g2, rtol=1e-5, atol=1e-5)
    for name, grad in grads1.items():
        torch.testing.assert_close(grad, grads2[name], rtol=1e-4, atol=1e-6, msg=name)


# ----------------------------------------------------------------------------- the recipe

def cli(folder: Path, *args):
    r = run_cli_in(folder, *args)
    assert r.returncode == 0, r.stderr
    return r


TRAIN_FLAGS = ("--objective", "dual", "--lm-coef", "0.1", "--learning-rate", "1e-3", "--micro-batch-size", "32",
               "--gradient-accumulation", "1", "--warmup-ratio", "0")


@pytest.fixture(scope="module")
def dual_run(marker_data) -> dict:
    """`cheems train --objective dual` on the marker data, 2 epochs; its summary."""
    r = cli(marker_data, "train", "--model", "clm", "--train", "train.jsonl", "--eval", "held.jsonl",
            "--output", "run", "--epochs", "2", *TRAIN_FLAGS)
    assert "trained" in r.stdout and "final eval" in r.stdout
    return json.loads((marker_data / "run" / "train_summary.json").read_text(encoding="utf-8"))


def test_dual_learns_the_marker_preference_through_the_cli(dual_run):
    assert dual_run["objective"] == "dual" and dual_run["lm_coef"] == 0.1
    assert dual_run["eval"]["accuracy"] >= 0.95, dual_run["eval"]
    assert dual_run["train_lm_loss"] > 0


def trained_rewards(folder: Path, rows: list) -> list[float]:
    """The rewards of the trained weights themselves: the run's causal LM (generative/) with the
    head its last checkpoint saved, as a DualModel."""
    from safetensors.torch import load_file

    run = folder / "run"
    tok = load_tokenizer(run / "generative")
    causal = load_causal_lm(run / "generative", tok)
    last = max(run.glob("checkpoint-*"), key=lambda d: int(d.name.split("-")[1]))
    head = torch.nn.Linear(causal.config.hidden_size, 1, bias=False)
    head.weight.data.copy_(load_file(str(last / "value_head.safetensors"))["v_head.weight"])
    model = DualModel(causal, head).eval()
    seqs = encode_conversations(tok, [(p.prompt, r.content) for p in rows for r in p.responses], max_length=1 << 30,
                                truncation="left", stats=EncodeStats())
    with torch.no_grad():
        return [batch_rewards(model, [s], packing=False, pad_id=tok.pad_token_id, device="cpu").item() for s in seqs]


def cli_scores(folder: Path, model: str, name: str) -> list[float]:
    cli(folder, "score", "held.jsonl", "--model", model, "-o", name)
    rows = [json.loads(line) for line in (folder / name).read_text(encoding="utf-8").splitlines()]
    by_key = {(r["prompt_id"], r["response_id"]): r["score"] for r in rows}
    return [by_key[(p.id, r.id)] for p in read_prompts(folder / "held.jsonl").prompts for r in p.responses]


def test_the_exported_checkpoint_scores_as_the_trained_model(marker_data, dual_run):
    from transformers import AutoModelForSequenceClassification

    model = AutoModelForSequenceClassification.from_pretrained(marker_data / "run")
    assert model.config.num_labels == 1 and type(model).__name__.endswith("ForSequenceClassification")
    expected = trained_rewards(marker_data, read_prompts(marker_data / "held.jsonl").prompts)
    scored = cli_scores(marker_data, "run", "scores.jsonl")
    assert max(abs(a - b) for a, b in zip(scored, expected)) <= 1e-5
    last = max((marker_data / "run").glob("checkpoint-*"), key=lambda d: int(d.name.split("-")[1]))
    from_checkpoint = cli_scores(marker_data, str(last.relative_to(marker_data)), "scores-ckpt.jsonl")  # v-head layout
    assert max(abs(a - b) for a, b in zip(from_checkpoint, expected)) <= 1e-5
    cli(marker_data, "eval", "held.jsonl", "--model", "run", "--json", "e.json", "--bootstrap", "0")
    report = json.loads((marker_data / "e.json").read_text(encoding="utf-8"))
    assert report["overall"] == pytest.approx(dual_run["eval"]["overall"], abs=1e-6)


def test_the_generative_path_is_a_causal_lm_with_its_tokenizer(marker_data, dual_run):
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM, AutoTokenizer

    generative = marker_data / "run" / "generative"
    assert Path(dual_run["generative"]) == Path("run") / "generative"  # the output as given, in the CLI's folder
    model = AutoModelForCausalLM.from_pretrained(generative)
    assert type(model).__name__.endswith("ForCausalLM") and not (generative / "value_head.safetensors").exists()
    assert AutoTokenizer.from_pretrained(generative).chat_template == load_tokenizer(marker_data / "clm").chat_template
    before = load_file(str(marker_data / "clm" / "model.safetensors"))["lm_head.weight"]
    assert not torch.equal(model.lm_head.weight.detach(), before)  # a > 0 trained the LM head


def dual_config(folder: Path, output: str, **kw) -> TrainConfig:
    settings = dict(objective="dual", lm_coef=0.2, epochs=2, learning_rate=1e-3, micro_batch_size=8,
                    gradient_accumulation=1, warmup_ratio=0.0)
    settings.update(kw)
    return TrainConfig(model=str(folder / "clm"), train=[str(folder / "small.jsonl")], output=str(folder / output),
                       **settings)


def test_resume_of_a_dual_run_matches_the_uninterrupted_run(marker_data):
    from safetensors.torch import load_file

    rows = [json.loads(line) for line in (marker_data / "train.jsonl").read_text(encoding="utf-8").splitlines()]
    write_rows(marker_data / "small.jsonl", rows[:16])  # 4 steps of 8 sequences an epoch
    full = train(dual_config(marker_data, "full", save_every=2))

    def stop_at_step_2(step, total, stats):
        if step == 2:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        train(dual_config(marker_data, "cut", save_every=2), progress=stop_at_step_2)
    assert (marker_data / "cut" / "checkpoint-2" / "value_head.safetensors").exists()
    resumed = train(dual_config(marker_data, "cut", save_every=2, resume=True))
    assert resumed["resumed_from"] == 2 and resumed["steps"] == full["steps"] == 8
    for f in ("model.safetensors", "generative/model.safetensors"):
        a, b = load_file(str(marker_data / "full" / f)), load_file(str(marker_data / "cut" / f))
        assert a.keys() == b.keys()
        for k in a:
            torch.testing.assert_close(a[k], b[k], rtol=1e-5, atol=1e-6, msg=f"{f}: {k}")
    assert resumed["train_lm_loss"] == pytest.approx(full["train_lm_loss"], rel=1e-5)


def test_dual_with_lora_trains_the_adapters_and_the_head_only(marker_data):
    from safetensors.torch import load_file

    if not (marker_data / "small.jsonl").exists():
        rows = [json.loads(line) for line in (marker_data / "train.jsonl").read_text(encoding="utf-8").splitlines()]
        write_rows(marker_data / "small.jsonl", rows[:16])
    summary = train(dual_config(marker_data, "lora", epochs=1, lora_r=4))
    start = load_file(str(marker_data / "clm" / "model.safetensors"))
    generative = load_file(str(marker_data / "lora" / "generative" / "model.safetensors"))
    scalar = load_file(str(marker_data / "lora" / "model.safetensors"))
    assert torch.equal(generative["lm_head.weight"], start["lm_head.weight"])  # frozen: no adapter on the LM head
    assert not torch.equal(generative["model.layers.0.self_attn.q_proj.weight"],
                           start["model.layers.0.self_attn.q_proj.weight"])  # adapters merged in
    assert torch.equal(scalar["model.layers.0.self_attn.q_proj.weight"],
                       generative["model.layers.0.self_attn.q_proj.weight"])
    assert summary["trainable_parameters"] < sum(t.numel() for t in start.values()) / 4


def test_dual_from_a_classifier_checkpoint_is_one_clear_error(marker_data, seq_cls_model, tmp_path):
    config = TrainConfig(model=str(seq_cls_model), train=[str(marker_data / "held.jsonl")], output=str(tmp_path / "o"),
                         objective="dual")
    with pytest.raises(CheemsInputError, match="causal LM"):
        train(config)
