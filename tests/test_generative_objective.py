"""The generative objective: judge examples, the verdict loss, the verdict-position logits, and
the recipe (cheems.training.generative) on tiny real causal LMs.

The learning test trains a tiny Qwen2 causal LM (hidden 64, 2 layers) whose tokenizer is
trained on the synthetic data itself (tests/marker_task.py), on a preference a judge can only
learn from the text: the response holding the marker 【好】 wins. With the small-data settings of
docs/training.md (228 steps of 8 judge prompts) every held-out verdict is right in each order
on its own, for seeds 0, 1 and 2 of the model and the batches; with 76 steps (one epoch) the
judge learns a position and only a trace of the marker (one-order accuracy 0.5, both orders
averaged 1.0). About 20 s on one CPU thread.
"""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import run_cli_in
from tests.marker_task import SHORT, build_marker_task, synthetic_rows, write_rows
from tests.tiny_models import copy_checkpoint, require_models_extra

require_models_extra()
import torch  # noqa: E402

from cheems.formats import read_prompts  # noqa: E402
from cheems.llm.verdict_template import load_verdict_template, verdict_template  # noqa: E402
from cheems.models.judge_sequences import verdict_token_ids  # noqa: E402
from cheems.records import CheemsInputError, Comparison, Prompt, Response  # noqa: E402
from cheems.training.config import TrainConfig  # noqa: E402
from cheems.training.generative import VerdictModel, load_judge_model, train_generative, verdict_logits  # noqa: E402
from cheems.training.generative_loss import verdict_loss  # noqa: E402
from cheems.training.judge_data import encode_judge_data, judge_examples  # noqa: E402

pytestmark = pytest.mark.usefixtures("single_torch_thread")



# ----------------------------------------------------------------------------- judge examples

def _prompt(pid, texts, rank=None, comparisons=()):
    return Prompt(pid, f"问题{pid}", [Response(rid, text) for rid, text in texts.items()], rank=rank,
                  comparisons=list(comparisons))


def test_judge_examples_are_both_orders_of_every_ranked_pair_and_ties_only_when_asked():
    t = verdict_template("zh")
    ranked = _prompt("p", {"a": "甲", "b": "乙", "c": "丙"}, rank={"a": 1, "b": 2, "c": 2})
    compared = _prompt("q", {"x": "子", "y": "丑", "z": "寅"},
                       comparisons=[Comparison("x", "y", "b"), Comparison("y", "z", "s"), Comparison("z", "y", "s")])
    twins = _prompt("r", {"u": "同", "v": "同"}, rank={"u": 1, "v": 2})  # one text: no strict example
    m = lambda p, a, b, ties: t.messages(p.prompt, a, b, ties=ties)  # noqa: E731

    def expected(ties):
        out = [(m(ranked, "甲", "乙", ties), 0), (m(ranked, "乙", "甲", ties), 1),
               (m(ranked, "甲", "丙", ties), 0), (m(ranked, "丙", "甲", ties), 1)]
        if ties:
            out += [(m(ranked, "乙", "丙", ties), 2), (m(ranked, "丙", "乙", ties), 2)]
        out += [(m(compared, "丑", "子", ties), 0), (m(compared, "子", "丑", ties), 1)]  # "b": y beats x
        if ties:
            out += [(m(compared, "丑", "寅", ties), 2), (m(compared, "寅", "丑", ties), 2)]  # one tie, twice said
        return out

    for ties in (False, True):
        got = judge_examples([ranked, compared, twins], t, ties=ties)
        assert [(e.messages, e.verdict) for e in got] == expected(ties)
    assert "C" in judge_examples([ranked], t, ties=True)[0].messages[1]["content"]
    assert "C 表示" not in judge_examples([ranked], t, ties=False)[0].messages[1]["content"]


def test_only_ties_without_judge_ties_is_one_clear_error(causal_lm_model):
    from cheems.models.checkpoints import load_tokenizer

    tied = _prompt("p", {"a": "甲", "b": "乙"}, rank={"a": 1, "b": 1})
    with pytest.raises(CheemsInputError, match=r"\(ties train only with judge_ties\)"):
        encode_judge_data([tied], load_tokenizer(causal_lm_model), SHORT, ties=False, max_length=512, truncate=False)
    data = encode_judge_data([tied], load_tokenizer(causal_lm_model), SHORT, ties=True, max_length=512, truncate=False)
    assert data.targets == [2, 2] and data.pairs == 1


# ----------------------------------------------------------------------------- the loss

def plain_verdict_loss(logits, targets, verdict_ids, eps):
    total = 0.0
    for row, t in zip(logits, targets):
        top = max(row)
        log_z = top + math.log(sum(math.exp(x - top) for x in row))
        log_p = [x - log_z for x in row]
        k = len(verdict_ids)
        total += -((1 - eps) * log_p[verdict_ids[t]] + eps / k * sum(log_p[v] for v in verdict_ids))
    return total / len(logits)


@settings(max_examples=150, deadline=None)
@given(st.integers(4, 10).flatmap(lambda v: st.tuples(
    st.lists(st.lists(st.floats(-8, 8, allow_nan=False), min_size=v, max_size=v), min_size=1, max_size=6),
    st.lists(st.integers(0, v - 1), min_size=2, max_size=3, unique=True))).flatmap(lambda lv: st.tuples(
        st.just(lv[0]), st.just(lv[1]), st.lists(st.integers(0, len(lv[1]) - 1), min_size=len(lv[0]),
                                                 max_size=len(lv[0])))),
       st.sampled_from([0.0, 0.1, 0.5, 0.9]))
def test_verdict_loss_matches_plain_formula(data, eps):
    logits, verdict_ids, targets = data
    x = torch.tensor(logits, dtype=torch.float64, requires_grad=True)
    loss, terms = verdict_loss(x, torch.tensor(targets), torch.tensor(verdict_ids), eps)
    assert loss.item() == pytest.approx(plain_verdict_loss(logits, targets, verdict_ids, eps), rel=1e-5, abs=1e-6)
    assert terms["examples"] == len(targets)
    loss.backward()
    others = [j for j in range(len(logits[0])) if j not in verdict_ids]
    # probability moves off every token that is no verdict: its logit's gradient is its probability / n
    p = torch.softmax(x.detach(), dim=-1)
    assert torch.allclose(x.grad[:, others], p[:, others] / len(logits), atol=1e-9)


def test_verdict_loss_without_smoothing_is_cross_entropy():
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(7, 50, generator=g)
    ids = torch.tensor([11, 3, 40])
    targets = torch.tensor([0, 1, 2, 2, 1, 0, 0])
    loss, terms = verdict_loss(logits, targets, ids, 0.0)
    assert loss.item() == pytest.approx(torch.nn.functional.cross_entropy(logits, ids[targets]).item(), rel=1e-6)
    smoothed, _ = verdict_loss(logits, targets, ids, 0.1)
    assert smoothed.item() != pytest.approx(loss.item())
    assert terms["accuracy"] == pytest.approx((logits[:, ids].argmax(1) == targets).float().mean().item())


# ----------------------------------------------------------------------------- logits at the verdict only

@pytest.mark.parametrize("packing", [True, False])
def test_lm_head_runs_on_the_last_token_only_and_gets_gradient_from_it_alone(causal_lm_model, packing):
    tokenizer, lm = load_judge_model(str(causal_lm_model), gradient_checkpointing=False, packing=packing)
    seqs = [tokenizer(t)["input_ids"] for t in ("天地人山水", "风云", "花草鸟鱼虫日月")]
    model = VerdictModel(lm)
    head = lm.get_output_embeddings()
    seen = []
    handle = head.register_forward_hook(lambda mod, args, out: seen.append(tuple(args[0].shape)))
    logits = verdict_logits(model, seqs, packing=packing, pad_id=tokenizer.pad_token_id, device="cpu")
    handle.remove()
    assert seen == [(3, head.in_features)] and logits.shape == (3, head.out_features)
    with torch.no_grad():  # the plain model, one sequence at a time: the logits at its last token
        for seq, row in zip(seqs, logits):
            assert torch.allclose(row, _plain_last_logits(causal_lm_model, seq), atol=1e-4)
    ids = torch.tensor(verdict_token_ids(tokenizer, ["A", "B"]))
    loss, _ = verdict_loss(logits, torch.tensor([0, 1, 0]), ids, 0.1)
    loss.backward()
    with torch.no_grad():  # d loss / d W_head = sum over the n verdict positions of (dlogits)^T h_last
        hidden = _last_hidden(lm, seqs)
        p = torch.softmax(logits.detach(), dim=-1)
        target = torch.full_like(p, 0.0)
        for i, t in enumerate([0, 1, 0]):
            target[i, ids] += 0.1 / 2
            target[i, ids[t]] += 0.9
        expected = ((p - target) / 3).T @ hidden
    assert torch.allclose(head.weight.grad, expected, atol=1e-5)


def _plain_last_logits(path, seq):
    """The next-token logits at the last token of ``seq`` from a fresh copy of the model."""
    from transformers import AutoModelForCausalLM

    lm = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    return lm(input_ids=torch.tensor([seq])).logits[0, -1]


def _last_hidden(lm, seqs):
    """The hidden state at the last token of each sequence, one sequence at a time."""
    from cheems.models.packing import padded_attention

    rows = []
    with padded_attention(lm):
        for seq in seqs:
            rows.append(lm.model(input_ids=torch.tensor([seq])).last_hidden_state[0, -1])
    return torch.stack(rows)


# ----------------------------------------------------------------------------- the recipe

@pytest.fixture(scope="module")
def marker_task(tmp_path_factory):
    """Training and held-out files, the short template as a file, and a tiny causal LM whose
    tokenizer learnt the data and the template (so a judge prompt is some 60 tokens)."""
    return build_marker_task(tmp_path_factory.mktemp("marker"))


def config(task, output, **kw) -> TrainConfig:
    settings_ = dict(model=str(task["model"]), train=[task["train"]], output=str(output), objective="generative",
                     judge_template=task["template"], epochs=3, learning_rate=1e-3, micro_batch_size=16,
                     gradient_accumulation=1, warmup_ratio=0.1)
    settings_.update(kw)
    return TrainConfig(**settings_)


def held_out_accuracy(folder: Path, held_out: str) -> tuple[float, float]:
    """Pairwise accuracy of the saved judge, computed with nothing but transformers: each pair in
    both orders, p(A) over the letters A and B; ``(averaged, one order)``: the pairs right by
    (p_AB(A) + p_BA(B)) / 2 > 0.5, and the verdicts of each order on its own that are right."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    lm = AutoModelForCausalLM.from_pretrained(folder).eval()
    tokenizer = AutoTokenizer.from_pretrained(folder)
    template = load_verdict_template(folder)
    a, b = verdict_token_ids(tokenizer, ["A", "B"])
    right = one_order = total = 0
    for p in read_prompts(held_out).prompts:
        text = {r.id: r.content for r in p.responses}
        best = min(p.rank, key=p.rank.get)
        for other in (r for r in p.rank if p.rank[r] > p.rank[best]):
            p_first = []
            for x, y in ((best, other), (other, best)):
                ids = tokenizer.apply_chat_template(template.messages(p.prompt, text[x], text[y], ties=False),
                                                    add_generation_prompt=True, tokenize=False)
                with torch.no_grad():
                    logits = lm(**tokenizer(ids, return_tensors="pt")).logits[0, -1]
                p_first.append(torch.softmax(logits[[a, b]], dim=0)[0].item())
            right += (p_first[0] + 1 - p_first[1]) / 2 > 0.5
            one_order += (p_first[0] > 0.5) + (p_first[1] < 0.5)
            total += 1
    return right / total, one_order / (2 * total)


SMALL_DATA = dict(gradient_accumulation=1, micro_batch_size=8, epochs=3, learning_rate=1e-3)
"""The settings docs/training.md recommends for small data ("How many steps"): one forward batch
of 8 a step and epochs enough for 200 steps (76 steps an epoch here); the learning rate of a
tiny model trained from random weights."""


def test_a_tiny_causal_lm_learns_the_marker_preference_and_exports_a_judge(marker_task, tmp_path):
    """With the small-data settings the judge learns the marker, not a position: each order's
    verdict is right on its own (a judge of 100 steps or fewer picks one position, 0.5 here)."""
    out, notes = tmp_path / "judge", []
    summary = train_generative(config(marker_task, out, eval=[marker_task["held_out"]], **SMALL_DATA),
                               notify=notes.append)
    assert summary["objective"] == "generative" and summary["steps"] == summary["total_steps"] >= 200
    assert not notes, notes  # no few-steps note: the recommended settings plan enough
    assert summary["pairs"] > 200 and summary["examples"] == 2 * summary["pairs"]
    held = summary["eval"]
    assert held["verdict_accuracy"] >= 0.95 and held["order_accuracy"] >= 0.95, held
    assert held["position_consistency"] >= 0.9 and held["accuracy"] >= 0.95, held
    # the folder is a judge of its own: a causal LM, its tokenizer and the template it learnt
    assert load_verdict_template(out) == replace(SHORT, ties=False)  # the folder records that no tie was learnt
    assert held_out_accuracy(out, marker_task["held_out"]) == pytest.approx((held["verdict_accuracy"],
                                                                             held["order_accuracy"]))
    assert json.loads((out / "train_summary.json").read_text(encoding="utf-8"))["steps"] == summary["steps"]
    log = [json.loads(x) for x in (out / "train_log.jsonl").read_text(encoding="utf-8").splitlines()]
    assert [r["step"] for r in log] == list(range(1, summary["steps"] + 1))
    assert "eval/verdict_accuracy" in log[-1] and "eval/order_accuracy" in log[-1]


def test_resume_continues_from_the_last_checkpoint_without_repeating_steps(marker_task, tmp_path):
    small = write_rows(tmp_path / "small.jsonl", synthetic_rows(24, seed=3))
    base = dict(train=[small], epochs=2, micro_batch_size=8, save_every=3)
    whole = train_generative(config(marker_task, tmp_path / "whole", **base))

    class Stop(Exception):
        pass

    def stop_after_4(step, total, stats):
        if step == 4:
            raise Stop

    with pytest.raises(Stop):
        train_generative(config(marker_task, tmp_path / "cut", **base), progress=stop_after_4)
    assert (tmp_path / "cut" / "checkpoint-3" / "judge_template.json").exists()  # a checkpoint is a judge too
    steps = []
    resumed = train_generative(config(marker_task, tmp_path / "cut", resume=True, **base),
                               progress=lambda step, total, stats: steps.append(step))
    assert resumed["resumed_from"] == 3 and steps == list(range(4, whole["steps"] + 1))
    from safetensors.torch import load_file

    a, b = load_file(tmp_path / "whole" / "model.safetensors"), load_file(tmp_path / "cut" / "model.safetensors")
    assert a.keys() == b.keys() and all(torch.allclose(a[k], b[k], atol=1e-5) for k in a)
    again = train_generative(config(marker_task, tmp_path / "cut", resume=True, **base))
    assert again.get("already_finished")


def test_built_in_template_with_ties_packed_and_padded_agree(causal_lm_model, tiny_prompts, tmp_path):
    from cheems.graph import resolve_conflicts

    rows = []
    for p, rank in zip(tiny_prompts[:2], resolve_conflicts(tiny_prompts[:2]).ranks):
        d = p.to_dict(comparisons=False)
        d["rank"] = rank
        rows.append(d)
    train_file = write_rows(tmp_path / "t.jsonl", rows)
    first = {}
    for packing in (True, False):
        cfg = TrainConfig(model=str(causal_lm_model), train=[train_file], output=str(tmp_path / f"out-{packing}"),
                          objective="generative", judge_ties=True, epochs=1, micro_batch_size=64,
                          gradient_accumulation=1, max_length=4096, truncate=True, packing=packing)
        summary = train_generative(cfg, progress=lambda s, t, stats: first.setdefault(packing, stats["loss"]))
        assert summary["verdicts"] == ["A", "B", "C"]
    assert first[True] == pytest.approx(first[False], rel=1e-4)
    assert load_verdict_template(tmp_path / "out-True") == replace(verdict_template("zh"), ties=True)


def test_cli_trains_a_generative_judge(marker_task, tmp_path):
    copy_checkpoint(marker_task["model"], tmp_path / "lm")
    r = run_cli_in(tmp_path, "train", "--objective", "generative", "--model", "lm", "--train", marker_task["train"],
                   "--eval", marker_task["held_out"], "--judge-template", marker_task["template"], "--output", "judge",
                   "--epochs", "1", "--learning-rate", "1e-3", "--gradient-accumulation", "1",
                   "--micro-batch-size", "16")
    assert r.returncode == 0, r.stderr
    assert "trained" in r.stdout and "final eval" in r.stdout
    summary = json.loads((tmp_path / "judge" / "train_summary.json").read_text(encoding="utf-8"))
    held = summary["eval"]
    assert (f"judge: each order alone {held['order_accuracy']:.4f} right, position consistency "
            f"{held['position_consistency']:.4f}") in r.stdout, r.stdout
    assert summary["objective"] == "generative" and summary["eval"]["pairs"] > 0
    assert load_verdict_template(tmp_path / "judge") == replace(SHORT, ties=False)
    # one epoch is under 100 steps: said before the first, with the run's own count
    assert f"note: {summary['steps']} optimizer step(s) planned" in r.stderr and summary["steps"] < 100, r.stderr


def test_out_of_memory_is_one_line_naming_the_budget(marker_task, tmp_path, monkeypatch):
    """Running out of GPU memory in a step of the generative recipe is the trainer's one line:
    the budget that failed, the one to try."""
    from cheems.training import generative

    real, calls = generative.verdict_logits, []

    def short_of_memory(model, seqs, **kw):
        calls.append(len(seqs))
        if len(calls) > 2:  # the first two forward batches run
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        return real(model, seqs, **kw)

    monkeypatch.setattr(generative, "verdict_logits", short_of_memory)
    with pytest.raises(CheemsInputError) as caught:
        train_generative(config(task=marker_task, output=tmp_path / "judge", epochs=1, token_budget=1024,
                                micro_batch_size=4))
    message = str(caught.value)
    assert "out of GPU memory on a forward batch of" in message and "(token budget 1024)" in message
    assert "try token_budget 768 or token_budget auto" in message and len(calls) == 3
