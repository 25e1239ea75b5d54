"""The transformers reward-model scorer (cheems.scoring.transformers_rm, cheems.scoring.run).

Tiny real checkpoints (tests/tiny_models.py) are loaded with ``from_pretrained`` and scored;
every score is compared with a plain reference written here from transformers' own classes,
one conversation at a time, with no padding: ``AutoModelForSequenceClassification`` and its
own pooled logits for the seq-cls layout, ``AutoModel`` + the head weights the test wrote for
the v-head layout. All in float32 on CPU.
"""

from __future__ import annotations

import json
import random
import re
import os
import subprocess
import sys
import dataclasses
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import HANG_TIMEOUT_S, run_cli_in
from tests.tiny_models import ONE_THREAD_ENV, VHeadModel, require_models_extra, sample_annotation_files

require_models_extra()
import torch  # noqa: E402

from cheems.formats import read_prompts, read_scores  # noqa: E402
from cheems.records import CheemsInputError  # noqa: E402
from cheems.scoring.run import score_to_file  # noqa: E402
from cheems.models.checkpoints import detect_layout  # noqa: E402
from cheems.models.sequences import plan_batches  # noqa: E402
from cheems.scoring.transformers_rm import (check_batch_invariance, load_reward_model,  # noqa: E402
                                            TransformersRewardModel)

pytestmark = pytest.mark.usefixtures("single_torch_thread")

ATOL_REFERENCE = 1e-5  # library vs plain transformers, fp32
ATOL_BATCHING = 1e-4  # one at a time vs inside padded batches, fp32
CLI_MAX_LENGTH = 120  # short end-to-end runs on a 2-core CPU; truncates ~90% of the sample


# ----------------------------------------------------------------------------- plain references

def conversation(prompt, response: str) -> list[dict]:
    """The chat a reward model reads: the prompt turns, then the response as the assistant turn."""
    turns = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else [dict(m) for m in prompt]
    return turns + [{"role": "assistant", "content": response}]


def reference_seq_cls_scores(model_dir: Path, items) -> list[float]:
    """AutoModelForSequenceClassification's own pooled logit, one unpadded conversation at a time."""
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForSequenceClassification.from_pretrained(model_dir).eval()
    assert model.config.num_labels == 1
    scores = []
    with torch.no_grad():
        for prompt, response in items:
            text = tok.apply_chat_template(conversation(prompt, response), tokenize=False)
            enc = tok(text, return_tensors="pt")
            # the model pools at the last non-pad token: make sure that is the last token
            assert model.config.pad_token_id not in enc["input_ids"][0].tolist()
            scores.append(model(**enc).logits[0, 0].item())
    return scores


def reference_v_head_scores(vm: VHeadModel, items, max_length: int | None = None) -> list[float]:
    """AutoModel's last hidden state at the last token, times the head weight, plus the bias.

    ``max_length``: keep only the last ``max_length`` tokens (left truncation)."""
    from safetensors.torch import load_file
    from transformers import AutoModel, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(vm.dir)
    model = AutoModel.from_pretrained(vm.dir).eval()
    # the backbone really came from the checkpoint (not a fresh random init of missing weights)
    saved = load_file(str(vm.dir / "model.safetensors"))
    assert torch.equal(model.embed_tokens.weight, saved["model.embed_tokens.weight"])
    assert torch.equal(model.layers[1].mlp.down_proj.weight, saved["model.layers.1.mlp.down_proj.weight"])
    scores = []
    with torch.no_grad():
        for prompt, response in items:
            text = tok.apply_chat_template(conversation(prompt, response), tokenize=False)
            ids = tok(text, return_tensors="pt")["input_ids"]
            if max_length is not None:
                ids = ids[:, -max_length:]
            hidden = model(input_ids=ids).last_hidden_state[0, -1]  # (hidden,)
            scores.append((hidden @ vm.weight[0] + vm.bias[0]).item())
    return scores


def assert_close(actual, expected, atol: float) -> None:
    assert len(actual) == len(expected)
    worst = max(abs(a - b) for a, b in zip(actual, expected))
    assert worst <= atol, f"max |diff| {worst:.3e} > {atol:.0e}\nactual   {actual}\nexpected {expected}"


def assert_spread(scores) -> None:
    """Scores that differ from each other: equal scores would make the comparisons vacuous."""
    assert max(scores) - min(scores) > 1e-3, scores


# ----------------------------------------------------------------------------- items

def all_items(prompts) -> list[tuple]:
    return [(p.prompt, r.content) for p in prompts for r in p.responses]


def mixed_items(prompts, n_text: int = 4, n_chat: int = 2) -> list[tuple]:
    """A few single-turn and a few multi-turn (list of messages) conversations."""
    text = [p for p in prompts if isinstance(p.prompt, str)][::5][:n_text]
    chat = [p for p in prompts if isinstance(p.prompt, list)][:n_chat]
    assert len(text) == n_text and len(chat) == n_chat, "the bundled sample changed shape"
    return [(p.prompt, p.responses[k % len(p.responses)].content) for k, p in enumerate(text + chat)]


def length_spread_items(prompts, n: int = 10) -> list[tuple]:
    """Conversations from the shortest to the longest of the sample, plus a one-word reply."""
    items = sorted(all_items(prompts), key=lambda it: len(str(it[0])) + len(it[1]))
    picked = [items[round(k * (len(items) - 1) / (n - 1))] for k in range(n)]
    shortest_prompt = min((p for p in prompts if isinstance(p.prompt, str)), key=lambda p: len(p.prompt))
    return picked + [(shortest_prompt.prompt, "好。")]


@pytest.fixture(scope="module")
def seq_rm(seq_cls_model):
    return load_reward_model(seq_cls_model)


@pytest.fixture(scope="module")
def v_rm(v_head_file_model):
    return load_reward_model(v_head_file_model.dir)


@pytest.fixture(params=["seq-cls", "v-head"])
def layout_rm(request):
    """Each layout in turn (module-scoped models underneath)."""
    return request.getfixturevalue("seq_rm" if request.param == "seq-cls" else "v_rm")


# ----------------------------------------------------------------------------- 1. seq-cls layout

def test_seq_cls_layout_is_detected(seq_cls_model, seq_rm):
    assert detect_layout(seq_cls_model) == "seq-cls"
    assert seq_rm.layout == "seq-cls"
    assert seq_rm.v_head is None


def test_seq_cls_scores_equal_the_models_own_pooled_logits(seq_cls_model, seq_rm, tiny_prompts):
    items = mixed_items(tiny_prompts)
    expected = reference_seq_cls_scores(seq_cls_model, items)
    assert_spread(expected)
    assert_close(seq_rm.score(items), expected, ATOL_REFERENCE)
    assert_close([seq_rm.score([it])[0] for it in items], expected, ATOL_REFERENCE)


# ----------------------------------------------------------------------------- 2. v-head layout

@pytest.mark.parametrize("which", ["v_head_file_model", "v_head_inline_model"])
def test_v_head_scores_equal_backbone_times_head(which, request, tiny_prompts):
    vm: VHeadModel = request.getfixturevalue(which)
    assert detect_layout(vm.dir) == "v-head"
    rm = load_reward_model(vm.dir)
    assert rm.layout == "v-head"
    assert torch.equal(rm.v_head.weight.detach(), vm.weight)
    assert torch.equal(rm.v_head.bias.detach(), vm.bias)
    items = mixed_items(tiny_prompts)
    expected = reference_v_head_scores(vm, items)
    assert_spread(expected)
    assert_close(rm.score(items), expected, ATOL_REFERENCE)


def test_the_two_v_head_files_give_their_own_heads(v_head_file_model, v_head_inline_model, tiny_prompts):
    """Same backbone, different heads: the scores must follow the head of each folder."""
    items = mixed_items(tiny_prompts)[:3]
    a = load_reward_model(v_head_file_model.dir).score(items)
    b = load_reward_model(v_head_inline_model.dir).score(items)
    assert max(abs(x - y) for x, y in zip(a, b)) > 1e-3


def test_causal_lm_without_head_is_refused(causal_lm_model):
    with pytest.raises(CheemsInputError, match="cannot tell how to score"):
        detect_layout(causal_lm_model)


# ----------------------------------------------------------------------------- 3. batch invariance

def test_check_batch_invariance_ok(layout_rm, tiny_prompts):
    before = dataclasses.replace(layout_rm.stats)
    result = check_batch_invariance(layout_rm, tiny_prompts[::8], n=10)
    assert layout_rm.stats == before, "the check's own encodings must not count in the run's stats"
    assert result["n"] == 10
    assert result["ok"], result
    assert result["max_abs_diff"] <= ATOL_BATCHING


@dataclass
class PadsIntoTheSequence(TransformersRewardModel):
    """A deliberately broken scorer: padding tokens are fed as if they were text."""

    def score_ids(self, batch):
        width = max(len(x) for x in batch)
        pad = self.tokenizer.pad_token_id
        return super().score_ids([list(x) + [pad] * (width - len(x)) for x in batch])


def test_check_batch_invariance_catches_padding_leaks(seq_rm, tiny_prompts):
    fields = {k: getattr(seq_rm, k) for k in seq_rm.__dataclass_fields__}
    broken = PadsIntoTheSequence(**(fields | {"packing": False}))
    result = check_batch_invariance(broken, tiny_prompts[::8], n=10)
    assert not result["ok"], result


@dataclass
class PositionsRunOn(TransformersRewardModel):
    """A deliberately broken packed scorer: positions do not restart at each sequence."""

    def score_packed(self, seqs, groups=None):
        from cheems.models.packing import pack_sequences, rewards_at

        batch = pack_sequences(seqs, self.device, groups=groups)
        batch.position_ids = torch.arange(batch.row_tokens).unsqueeze(0)
        base = getattr(self.model, self.model.base_model_prefix)
        with torch.no_grad():
            return rewards_at(base(**batch.forward_kwargs()).last_hidden_state, batch, self.model.score).tolist()


def test_check_batch_invariance_catches_packing_leaks(seq_rm, tiny_prompts):
    assert seq_rm.packing
    broken = PositionsRunOn(**{k: getattr(seq_rm, k) for k in seq_rm.__dataclass_fields__})
    result = check_batch_invariance(broken, tiny_prompts[::8], n=10)
    assert not result["ok"], result


@pytest.fixture(scope="module")
def alone_scores() -> dict:
    return {}


@pytest.mark.parametrize("token_budget,batch_size,seed", [
    (8192, 64, 0),
    (2048, 4, 1),
    (1000, 3, 2),
    (100_000, 2, 3),
])
def test_scores_do_not_depend_on_batching_or_order(layout_rm, alone_scores, tiny_prompts, token_budget,
                                                  batch_size, seed):
    items = length_spread_items(tiny_prompts)
    if layout_rm.layout not in alone_scores:  # one at a time, once per layout
        lengths = [len(layout_rm.encode(*it)) for it in items]
        assert max(lengths) > 10 * min(lengths), lengths
        alone_scores[layout_rm.layout] = [layout_rm.score([it], batch_size=1)[0] for it in items]
    alone = alone_scores[layout_rm.layout]
    assert_spread(alone)

    order = list(range(len(items)))
    random.Random(seed).shuffle(order)
    shuffled = [items[i] for i in order]
    batched = layout_rm.score(shuffled, token_budget=token_budget, batch_size=batch_size)
    back = [0.0] * len(items)
    for pos, i in enumerate(order):
        back[i] = batched[pos]
    assert_close(back, alone, ATOL_BATCHING)


def test_some_batches_mix_lengths(tiny_prompts, seq_rm):
    """The settings above really pad short sequences next to long ones (else the test is empty)."""
    lengths = [len(seq_rm.encode(*it)) for it in length_spread_items(tiny_prompts)]
    for budget, size in ((8192, 64), (2048, 4), (100_000, 2)):
        assert any(len({lengths[i] for i in b}) > 1 for b in plan_batches(lengths, token_budget=budget,
                                                                          max_batch_size=size))


# ----------------------------------------------------------------------------- 4. plan_batches

@settings(max_examples=300, deadline=None)
@given(lengths=st.lists(st.integers(1, 3000), max_size=80), token_budget=st.integers(1, 20_000),
       max_batch_size=st.integers(1, 70))
def test_plan_batches_properties(lengths, token_budget, max_batch_size):
    batches = plan_batches(lengths, token_budget=token_budget, max_batch_size=max_batch_size)
    flat = [i for b in batches for i in b]
    assert sorted(flat) == list(range(len(lengths)))  # every index exactly once
    for b in batches:
        assert b, "empty batch"
        assert len(b) <= max_batch_size
        if len(b) > 1:
            assert max(lengths[i] for i in b) * len(b) <= token_budget
    flat_lengths = [lengths[i] for i in flat]
    assert all(x >= y for x, y in zip(flat_lengths, flat_lengths[1:]))


def test_plan_batches_fills_batches_up_to_the_budget():
    # 6 sequences of 100 tokens under a 300-token budget: two batches of 3
    assert [len(b) for b in plan_batches([100] * 6, token_budget=300, max_batch_size=64)] == [3, 3]
    # the longest first, alone when it is over the budget
    assert plan_batches([10, 500, 20], token_budget=100, max_batch_size=8) == [[1], [2, 0]]


# ----------------------------------------------------------------------------- 5. encoding

def test_doubled_bos_is_detected_counted_and_removed(bos_template_model, tiny_prompts):
    rm = load_reward_model(bos_template_model)
    tok = rm.tokenizer
    bos = tok.bos_token_id
    items = mixed_items(tiny_prompts)[:3]
    for prompt, response in items:
        raw = tok(tok.apply_chat_template(conversation(prompt, response), tokenize=False))["input_ids"]
        assert raw[:2] == [bos, bos], "precondition: template and tokenizer both add BOS"
        ids = rm.encode(prompt, response)
        assert ids == raw[1:]
        assert ids[0] == bos and ids[1] != bos
    assert rm.stats.doubled_bos == len(items)
    assert rm.stats.sequences == len(items)


@pytest.mark.parametrize("model", ["bos_template_model", "seq_cls_model", "no_template_model"])
@pytest.mark.parametrize("max_length,truncation", [(4096, "left"), (40, "left"), (40, "right")])
def test_encoding_many_at_once_equals_encoding_one_by_one(request, model, max_length, truncation, tiny_prompts):
    """`encode_many` hands the tokenizer chunks of conversations; ids, BOS handling,
    truncation and the counts must be those of `encode` called once per conversation."""
    folder = request.getfixturevalue(model)
    one = load_reward_model(folder, max_length=max_length, truncation=truncation)
    many = load_reward_model(folder, max_length=max_length, truncation=truncation)
    items = mixed_items(tiny_prompts) + [(p.prompt, r.content) for p in tiny_prompts[:20] for r in p.responses]
    want = [one.encode(*item) for item in items]
    from cheems.models.sequences import encode_conversations

    got = encode_conversations(many.tokenizer, items, max_length=max_length, truncation=truncation,
                               stats=many.stats, reward_position=many.reward_position,
                               chunk=7)  # chunks that do not divide the items
    assert got == want
    assert dataclasses.asdict(many.stats) == dataclasses.asdict(one.stats)
    assert one.stats.sequences == len(items)


def test_single_bos_is_left_alone(seq_cls_model, tiny_prompts):
    rm = load_reward_model(seq_cls_model)
    prompt, response = mixed_items(tiny_prompts)[0]
    tok = rm.tokenizer
    raw = tok(tok.apply_chat_template(conversation(prompt, response), tokenize=False))["input_ids"]
    assert rm.encode(prompt, response) == raw
    assert rm.stats.doubled_bos == 0


def test_truncation_counts_and_keeps_the_right_end(seq_cls_model, tiny_prompts):
    items = length_spread_items(tiny_prompts)
    full = [load_reward_model(seq_cls_model, max_length=100_000).encode(*it) for it in items]
    lengths = sorted(len(x) for x in full)
    limit = lengths[len(lengths) // 2]  # about half the conversations are longer
    n_longer = sum(len(x) > limit for x in full)
    assert 0 < n_longer < len(items)

    left = load_reward_model(seq_cls_model, max_length=limit, truncation="left")
    right = load_reward_model(seq_cls_model, max_length=limit, truncation="right")
    for it, ids in zip(items, full):
        assert left.encode(*it) == (ids[-limit:] if len(ids) > limit else ids)
        assert right.encode(*it) == (ids[:limit] if len(ids) > limit else ids)
    for rm in (left, right):
        assert rm.stats.truncated == n_longer
        assert rm.stats.sequences == len(items)
    # the default, left, keeps the end of the response: the token the reward is read at
    assert left.truncation == load_reward_model(seq_cls_model, max_length=limit).truncation == "left"


def test_bad_truncation_side_is_refused(seq_cls_model):
    with pytest.raises(CheemsInputError, match=r"truncation: unknown truncation side\(s\) .middle.; known: left, right"):
        load_reward_model(seq_cls_model, truncation="middle")


def test_max_length_below_one_is_refused(seq_cls_model):
    """Unchecked, --max-length 0 'truncates' every sequence (counted) while keeping all of it (ids[-0:])."""
    with pytest.raises(CheemsInputError, match="max_length|max-length"):
        load_reward_model(seq_cls_model, max_length=0)


def test_tokenizer_without_chat_template(no_template_model, seq_cls_model, tiny_prompts):
    rm = load_reward_model(no_template_model)
    assert not rm.tokenizer.chat_template
    prompt, response = mixed_items(tiny_prompts)[0]
    ids = rm.encode(prompt, response)
    assert rm.stats.no_chat_template is True
    assert ids == rm.tokenizer(f"user: {prompt}\nassistant: {response}")["input_ids"]
    # a tokenizer with a template does not raise the flag
    fresh = load_reward_model(seq_cls_model)
    fresh.encode(prompt, response)
    assert fresh.stats.no_chat_template is False


# ----------------------------------------------------------------------------- 6. multi-turn

def test_multi_turn_prompt_goes_through_the_chat_template(seq_cls_model, tiny_prompts):
    rm = load_reward_model(seq_cls_model)
    chat = next(p for p in tiny_prompts if isinstance(p.prompt, list) and len(p.prompt) >= 3
                and any(m["role"] == "assistant" for m in p.prompt))
    messages, response = chat.prompt, chat.responses[0].content
    before = json.dumps(messages, ensure_ascii=False)

    # ChatML written out by hand: every prompt turn in order, the response as the last turn
    turns = list(messages) + [{"role": "assistant", "content": response}]
    expected_text = "".join(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in turns)
    ids = rm.encode(messages, response)
    assert ids == rm.tokenizer(expected_text)["input_ids"]
    assert rm.tokenizer.decode(ids).endswith(f"<|im_start|>assistant\n{response}<|im_end|>\n")
    assert json.dumps(messages, ensure_ascii=False) == before, "encode changed the prompt's messages"

    # and the score is the model's score of that whole conversation
    expected = reference_seq_cls_scores(seq_cls_model, [(messages, response)])
    assert_close(rm.score([(messages, response)]), expected, ATOL_REFERENCE)


# ----------------------------------------------------------------------------- bad input

def test_unknown_device_is_a_bad_input_error(seq_cls_model):
    """`--device gpu` is a typo a user makes; it must be one readable error, not a torch traceback."""
    with pytest.raises(CheemsInputError, match="device"):
        load_reward_model(seq_cls_model, device="gpu")


def test_folder_without_config_is_refused(tmp_path):
    with pytest.raises(CheemsInputError, match="no config.json"):
        detect_layout(tmp_path)


def test_three_label_classifier_is_refused(three_label_model):
    with pytest.raises(CheemsInputError, match="one label; this one has 3"):
        load_reward_model(three_label_model)


# ----------------------------------------------------------------------------- 7. resume

def read_rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def meta_of(rm, model_dir: Path) -> dict:
    """What `cheems score` records about a run."""
    return {"model": str(Path(model_dir).resolve()), "max_length": rm.max_length, "truncation": rm.truncation,
            "dtype": "auto", "layout": rm.layout}


class StopAfterFirstBatch:
    """A progress callback that interrupts the run as Ctrl-C would, once a batch is written."""

    def __init__(self):
        self.calls = []

    def __call__(self, done: int, total: int) -> None:
        self.calls.append((done, total))
        if done > 0:
            raise KeyboardInterrupt


@pytest.fixture(scope="module")
def resume_case(tmp_path_factory, seq_rm, seq_cls_model, tiny_prompts):
    """Six prompts (30 responses), their uninterrupted scores, and the settings of the run."""
    prompts = tiny_prompts[:6]
    meta = meta_of(seq_rm, seq_cls_model)
    full_path = tmp_path_factory.mktemp("resume") / "full.jsonl"
    summary = score_to_file(seq_rm, prompts, full_path, meta=meta, batch_size=4)
    total = sum(len(p.responses) for p in prompts)
    assert summary == {"scored": total, "resumed": 0, "total": total}
    full = {(r["prompt_id"], r["response_id"]): r["score"] for r in read_rows(full_path)}
    assert len(full) == total
    return SimpleNamespace(prompts=prompts, meta=meta, full=full, total=total)


def interrupted_run(rm, case, out: Path) -> int:
    stop = StopAfterFirstBatch()
    with pytest.raises(KeyboardInterrupt):
        score_to_file(rm, case.prompts, out, meta=case.meta, batch_size=4, progress=stop)
    first = len(read_rows(out))
    assert stop.calls == [(0, case.total), (first, case.total)]
    assert 0 < first < case.total
    return first


def assert_complete_and_equal(out: Path, case) -> None:
    rows = read_rows(out)
    pairs = [(r["prompt_id"], r["response_id"]) for r in rows]
    assert len(pairs) == len(set(pairs)) == case.total, "each pair exactly once"
    assert set(pairs) == set(case.full)
    for r in rows:
        assert r["score"] == pytest.approx(case.full[(r["prompt_id"], r["response_id"])], abs=1e-6)


def test_resume_scores_only_the_remainder(seq_rm, resume_case, tmp_path):
    out = tmp_path / "s.jsonl"
    first = interrupted_run(seq_rm, resume_case, out)
    calls = []
    summary = score_to_file(seq_rm, resume_case.prompts, out, meta=resume_case.meta, batch_size=4,
                            progress=lambda done, total: calls.append((done, total)))
    rest = resume_case.total - first
    assert summary == {"scored": rest, "resumed": first, "total": resume_case.total}
    assert calls[0] == (0, rest) and calls[-1] == (rest, rest)
    assert_complete_and_equal(out, resume_case)
    # a third run has nothing left to do
    again = score_to_file(seq_rm, resume_case.prompts, out, meta=resume_case.meta, batch_size=4)
    assert again == {"scored": 0, "resumed": resume_case.total, "total": resume_case.total}
    assert_complete_and_equal(out, resume_case)


def test_resume_cuts_a_partial_last_line(seq_rm, resume_case, tmp_path):
    out = tmp_path / "s.jsonl"
    first = interrupted_run(seq_rm, resume_case, out)
    scored = {(r["prompt_id"], r["response_id"]) for r in read_rows(out)}
    pid, rid = next(k for k in resume_case.full if k not in scored)
    row = json.dumps({"prompt_id": pid, "response_id": rid, "score": 0.123456789})
    with open(out, "ab") as f:  # a process killed in the middle of a write
        f.write(row[: len(row) // 2].encode("utf-8"))
    summary = score_to_file(seq_rm, resume_case.prompts, out, meta=resume_case.meta, batch_size=4)
    assert summary["resumed"] == first
    assert summary["scored"] == resume_case.total - first
    assert_complete_and_equal(out, resume_case)
    assert out.read_bytes().endswith(b"\n")


def test_resume_with_other_settings_is_refused_until_overwrite(seq_rm, seq_cls_model, resume_case, tmp_path):
    out = tmp_path / "s.jsonl"
    first = interrupted_run(seq_rm, resume_case, out)
    before = out.read_bytes()

    short = load_reward_model(seq_cls_model, max_length=48)
    meta = meta_of(short, seq_cls_model)
    with pytest.raises(CheemsInputError) as e:
        score_to_file(short, resume_case.prompts, out, meta=meta, batch_size=4)
    assert "(overwrite starts again)" in str(e.value)
    from cheems.cli.console import cli_name

    assert e.value.render(cli_name).endswith("(--overwrite starts again)")  # as the CLI says it
    assert "max_length" in str(e.value)
    assert out.read_bytes() == before, "a refused resume must leave the file alone"
    assert len(read_rows(out)) == first

    summary = score_to_file(short, resume_case.prompts, out, meta=meta, batch_size=4, overwrite=True)
    assert summary == {"scored": resume_case.total, "resumed": 0, "total": resume_case.total}
    rows = read_rows(out)
    assert len(rows) == resume_case.total
    keys = [(p.id, r.id) for p in resume_case.prompts for r in p.responses]
    expected = dict(zip(keys, short.score(all_items(resume_case.prompts))))
    assert_close([r["score"] for r in rows], [expected[(r["prompt_id"], r["response_id"])] for r in rows],
                 ATOL_REFERENCE)
    assert json.loads((tmp_path / "s.jsonl.meta.json").read_text(encoding="utf-8"))["max_length"] == 48


# ----------------------------------------------------------------------------- 8. the command line

def cheems(cwd: Path, *args):
    """``cheems ARGS`` in folder ``cwd``, run in this process (tests/conftest.py ``run_cli_in``)."""
    return run_cli_in(cwd, *args)


def assert_one_error_line(r, *parts: str) -> None:
    """Exit 2 and one readable error line (after the 'loading ...' note), no traceback, no stdout."""
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    assert "Traceback" not in r.stderr, r.stderr
    lines = [line for line in r.stderr.strip().splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("error: ")]
    assert len(errors) == 1 and lines[-1] == errors[0], r.stderr
    assert all(line.startswith("loading ") for line in lines[:-1]), r.stderr
    for p in parts:
        assert p in errors[0], r.stderr
    assert r.stdout.strip() == "", r.stdout


@pytest.fixture(scope="module")
def cli_bench(tmp_path_factory) -> SimpleNamespace:
    d = tmp_path_factory.mktemp("cli")
    r = cheems(d, "rank", *sample_annotation_files(), "-o", "bench.jsonl")
    assert r.returncode == 0, r.stderr
    prompts = read_prompts(d / "bench.jsonl").prompts
    return SimpleNamespace(dir=d, bench=d / "bench.jsonl", prompts=prompts,
                           n_responses=sum(len(p.responses) for p in prompts))


@pytest.fixture(scope="module")
def cli_scored(cli_bench, v_head_inline_model) -> SimpleNamespace:
    """`cheems score --check` with the official v-head layout (seq-cls is covered in-process above)."""
    r = cheems(cli_bench.dir, "score", "bench.jsonl", "--model", v_head_inline_model.dir, "-o", "s.jsonl",
               "--check", "--max-length", CLI_MAX_LENGTH)
    return SimpleNamespace(run=r, scores=cli_bench.dir / "s.jsonl", model=v_head_inline_model)


def test_cli_score_with_check(cli_bench, cli_scored):
    r = cli_scored.run
    assert r.returncode == 0, r.stderr
    assert re.search(r"batch invariance: .* ok", r.stderr), r.stderr
    assert "Traceback" not in r.stderr
    assert f"scored {cli_bench.n_responses} responses of {len(cli_bench.prompts)} prompts" in r.stdout
    assert "[v-head]" in r.stdout
    scores = read_scores(cli_scored.scores)
    rows = read_rows(cli_scored.scores)
    assert len(rows) == len(scores) == cli_bench.n_responses
    # the file holds the plain reference scores of the left-truncated conversations (a few of them)
    some = cli_bench.prompts[::12]
    keys = [(p.id, resp.id) for p in some for resp in p.responses]
    expected = reference_v_head_scores(cli_scored.model, all_items(some), max_length=CLI_MAX_LENGTH)
    assert_close([scores[k] for k in keys], expected, ATOL_REFERENCE)


def test_cli_score_stderr_has_no_transformers_load_report(cli_scored):
    """The v-head layout loads its backbone with AutoModel and leaves lm_head / v_head out on
    purpose; transformers' multi-line LOAD REPORT calling them 'UNEXPECTED ... not ok if you
    expect identical arch' would be noise that reads like a failure."""
    r = cli_scored.run
    assert r.returncode == 0, r.stderr
    assert "LOAD REPORT" not in r.stderr and "UNEXPECTED" not in r.stderr, r.stderr


def test_cli_score_warnings_count_each_response_once(cli_bench, cli_scored):
    """The truncation warning says 'N of M sequence(s)': M is the number of responses scored,
    not counting the conversations encoded again for the --check."""
    rm = load_reward_model(cli_scored.model.dir, max_length=CLI_MAX_LENGTH)
    for p in cli_bench.prompts:
        for resp in p.responses:
            rm.encode(p.prompt, resp.content)
    assert 0 < rm.stats.truncated < cli_bench.n_responses
    m = re.search(r"warning: (\d+) of (\d+) sequence\(s\) exceeded --max-length", cli_scored.run.stderr)
    assert m, cli_scored.run.stderr
    assert (int(m.group(1)), int(m.group(2))) == (rm.stats.truncated, cli_bench.n_responses)


def test_cli_eval_with_scores_file_equals_eval_with_model(cli_bench, cli_scored):
    """The scores file came from packed rows with shared prefixes (the default); eval --model
    scores again in right-padded batches (--no-packing): the same numbers."""
    assert cli_scored.run.returncode == 0, cli_scored.run.stderr
    d = cli_bench.dir
    a = cheems(d, "eval", "bench.jsonl", "--scores", cli_scored.scores, "--json", "a.json")
    assert a.returncode == 0, a.stderr
    b = cheems(d, "eval", "bench.jsonl", "--model", cli_scored.model.dir, "--max-length", CLI_MAX_LENGTH,
               "--json", "b.json", "--no-packing")
    assert b.returncode == 0, b.stderr
    ra = json.loads((d / "a.json").read_text(encoding="utf-8"))
    rb = json.loads((d / "b.json").read_text(encoding="utf-8"))
    assert ra["overall"] == pytest.approx(rb["overall"], abs=1e-12)
    assert ra["subsets"].keys() == rb["subsets"].keys() == {"open", "human"}
    for name in ra["subsets"]:
        for k in ("accuracy", "exact_match"):
            assert ra["subsets"][name][k] == pytest.approx(rb["subsets"][name][k], abs=1e-12)


@pytest.fixture(scope="module")
def cli_refusals(cli_bench, seq_cls_model, three_label_model, tmp_path_factory) -> dict:
    """Four `cheems score` runs that must be refused. The one asking for CUDA runs in a fresh process
    with every GPU hidden (CUDA_VISIBLE_DEVICES is read once, when a process first touches CUDA), so
    the case means the same on every machine; the other three run in this process meanwhile."""
    d = tmp_path_factory.mktemp("refusals")
    folder = d / "not-a-model"
    folder.mkdir()
    (folder / "README.md").write_text("权重还没上传\n", encoding="utf-8")
    cuda_out = d / "cuda.jsonl"
    cuda = subprocess.Popen([sys.executable, "-m", "cheems.cli", "score", "bench.jsonl", "-o", str(cuda_out),
                             "--model", str(seq_cls_model), "--device", "cuda"], cwd=cli_bench.dir,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, encoding="utf-8",
                            env={**os.environ, **ONE_THREAD_ENV, "CUDA_VISIBLE_DEVICES": ""})
    results = {}
    try:
        for name, args in {"no-config": ["--model", folder], "three-labels": ["--model", three_label_model],
                           "liger": ["--model", seq_cls_model, "--liger-kernels"]}.items():
            out = d / f"{name}.jsonl"
            results[name] = SimpleNamespace(run=cheems(cli_bench.dir, "score", "bench.jsonl", "-o", out, *args),
                                            out=out)
        stdout, stderr = cuda.communicate(timeout=HANG_TIMEOUT_S)
    finally:
        cuda.kill()  # a no-op once it has ended; a hung run must not outlive the tests
        cuda.wait()
    results["cuda"] = SimpleNamespace(run=subprocess.CompletedProcess(cuda.args, cuda.returncode, stdout, stderr),
                                      out=cuda_out)
    return results


def test_cli_model_folder_without_config(cli_refusals):
    r = cli_refusals["no-config"]
    assert_one_error_line(r.run, "config.json", "not-a-model")
    assert not r.out.exists()


def test_cli_three_label_classifier(cli_refusals):
    r = cli_refusals["three-labels"]
    assert_one_error_line(r.run, "one label", "3")
    assert not r.out.exists()


def test_cli_device_cuda_without_cuda(cli_refusals):
    r = cli_refusals["cuda"]
    assert_one_error_line(r.run, "device: cuda asked for", "no CUDA device", "(--device cpu runs without one)")
    assert not r.out.exists()


def test_cli_liger_kernels_on_the_cpu(cli_refusals):
    r = cli_refusals["liger"]
    assert_one_error_line(r.run, "Liger", "CUDA")
    assert not r.out.exists()
