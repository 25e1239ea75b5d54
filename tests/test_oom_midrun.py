"""Running out of GPU memory in the middle of a run (cheems.training.oom_retry).

On CPU, with the tiny sequence-classification model of tests/tiny_models.py: running out of
memory is simulated by a reward model whose forward raises ``torch.OutOfMemoryError`` for a
batch of more than ``limit`` tokens once ``after`` forward passes have run, and
``--token-budget auto`` is given the budget a probe on a GPU would have found (CPU has no
probe). The split of a forward batch into pieces is checked against plain references with
hypothesis: the pieces' losses and gradients add up to the whole batch's.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.tiny_models import require_models_extra

require_models_extra()
import torch  # noqa: E402

from cheems.records import CheemsInputError  # noqa: E402
from cheems.training import recipe_setup, reward_model  # noqa: E402
from cheems.training.loss import bradley_terry_terms  # noqa: E402
from cheems.training.oom_retry import LOWERED_KEY, batch_cost, split_batch  # noqa: E402
from cheems.training.trainer import train  # noqa: E402
from tests.conftest import run_cli_in  # noqa: E402
from tests.test_train_cli import workdir  # noqa: E402, F401  (the ranked sample and a tiny model in a folder)
from tests.test_trainer import config, ranked, write  # noqa: E402

pytestmark = pytest.mark.usefixtures("single_torch_thread")

PROBED = 4096
"""The budget ``auto`` finds here (what a probe on a GPU would say)."""

LIMIT = 3000
"""Forward batches of more tokens than this run out of memory (the twelve prompts below make
batches of 891 to 3449 tokens; the first one over the limit after step 2 is step 3's 3449,
so the run goes on at smaller_budget(3449) = 2560 tokens, under the limit: one lowering)."""

SETTINGS = dict(epochs=2, gradient_accumulation=2, token_budget="auto", save_every=2, learning_rate=5e-4,
                share_prefix=False)  # the limit is on the row's tokens: every sequence whole


@dataclass
class OutOfMemory:
    """The reward model's forward, running out of memory for a batch of more than ``limit``
    tokens after ``after`` forward passes; each step's loss as ``progress`` saw it."""

    limit: int
    after: int
    calls: int = 0
    raised: int = 0
    losses: list = field(default_factory=list)

    def install(self, monkeypatch) -> None:
        forward = reward_model.RewardModel.forward

        def short_of_memory(model, input_ids, attention_mask=None, packing=None):
            self.calls += 1
            if self.calls > self.after and input_ids.numel() > self.limit:
                self.raised += 1
                raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
            return forward(model, input_ids, attention_mask, packing)

        monkeypatch.setattr(reward_model.RewardModel, "forward", short_of_memory)

    def progress(self, step, total, stats) -> None:
        self.losses.append(stats["loss"])


def _found(config, accelerator, module, lengths, *, recorded=None, **kw):
    return recorded if recorded is not None else PROBED


@pytest.fixture
def probed(monkeypatch):
    """``--token-budget auto`` finds ``PROBED`` tokens (a resumed run: the budget recorded)."""
    monkeypatch.setattr(recipe_setup, "training_token_budget", _found)


@pytest.fixture(scope="module")
def data(tiny_prompts, tmp_path_factory) -> str:
    return write(tmp_path_factory.mktemp("oom") / "t.jsonl", ranked(tiny_prompts)[:12])


@pytest.fixture(scope="module")
def baseline(seq_cls_model, data, tmp_path_factory):
    """The run without running out of memory: (each step's loss, final weights, summary)."""
    plain, out = OutOfMemory(limit=10 ** 9, after=0), tmp_path_factory.mktemp("plain")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(recipe_setup, "training_token_budget", _found)
        torch.set_num_threads(1)
        summary = train(config(seq_cls_model, [data], out, **SETTINGS), progress=plain.progress)
    return plain.losses, _weights(out), summary


def _weights(folder):
    from safetensors.torch import load_file

    return load_file(str(folder / "model.safetensors"))


def _assert_same_weights(a, b):
    assert a.keys() == b.keys()
    for k in a:
        torch.testing.assert_close(a[k], b[k], rtol=1e-4, atol=1e-5)


# ----------------------------------------------------------------------------- the split is exact

def _batches():
    """A forward batch: sequence lengths, its rows and its pairs (between distinct rows)."""
    @st.composite
    def draw(d):
        n = d(st.integers(1, 12))
        lengths = d(st.lists(st.integers(1, 50), min_size=n, max_size=n))
        links = d(st.lists(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1)), max_size=20))
        pairs = list(dict.fromkeys((a, b) for a, b in links if a != b))
        return lengths, list(range(n)), pairs
    return draw()


@settings(max_examples=300, deadline=None)
@given(batch=_batches(), budget=st.integers(1, 200), packed=st.booleans())
def test_split_keeps_pairs_whole_counts_each_sequence_once_and_fits(batch, budget, packed):
    lengths, rows, pairs = batch
    pieces = split_batch(rows, pairs, lengths, budget, packed)
    trained = sorted((p.rows[b], p.rows[w]) for p in pieces for b, w in zip(p.better, p.worse))
    assert trained == sorted(pairs)  # every pair once, both sequences in its piece
    counted = sorted(p.rows[k] for p in pieces for k in p.counted)
    assert counted == sorted(rows)  # every sequence's r^2 once
    unpaired = {i for i in rows if all(i not in pair for pair in pairs)}
    assert sum(p.units for p in pieces) == len(pairs) + len(unpaired)
    for p in pieces:
        assert len(set(p.rows)) == len(p.rows)
        assert p.units == 1 or batch_cost(p.rows, lengths, packed) <= budget


@settings(max_examples=100, deadline=None)
@given(batch=_batches(), budget=st.integers(1, 120), seed=st.integers(0, 2 ** 16), reg=st.sampled_from([0.0, 0.1]))
def test_the_pieces_losses_and_gradients_add_up_to_the_batch(batch, budget, seed, reg):
    lengths, rows, pairs = batch
    weights = torch.randn(len(rows), generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    whole = weights.clone().requires_grad_()  # the batch's loss, written out plainly
    margins = [whole[a] - whole[b] for a, b in pairs]
    loss = (-sum(torch.nn.functional.logsigmoid(m) for m in margins) / len(pairs) if pairs else 0.0) \
        + reg * (whole ** 2).mean()
    loss.backward()
    right_whole = sum(1 for m in margins if m > 0)
    cut = weights.clone().requires_grad_()
    total, right = 0.0, 0.0
    for p in split_batch(rows, pairs, lengths, budget, packed=True):
        rewards = cut[list(p.rows)]  # a piece's own forward: the same reward for a sequence in two pieces
        piece_loss, piece = bradley_terry_terms(rewards, torch.tensor(p.better, dtype=torch.long),
                                                torch.tensor(p.worse, dtype=torch.long), reg,
                                                counted=torch.tensor(p.counted, dtype=torch.long),
                                                n_pairs=len(pairs), n_rows=len(rows))
        piece_loss.backward()
        total += piece_loss.item()
        right += piece["right"].item()
    assert total == pytest.approx(float(loss), rel=1e-6, abs=1e-7)  # the pieces sum in float32
    assert right == right_whole
    torch.testing.assert_close(cut.grad, whole.grad, rtol=1e-5, atol=1e-7)


# ----------------------------------------------------------------------------- a run goes on

def test_auto_goes_on_at_a_smaller_budget_with_the_same_steps(seq_cls_model, data, baseline, probed, monkeypatch,
                                                              tmp_path):
    losses, weights, plain = baseline
    oom = OutOfMemory(limit=LIMIT, after=4)  # steps 1 and 2: four forward batches
    oom.install(monkeypatch)
    notes = []
    summary = train(config(seq_cls_model, [data], tmp_path / "oom", **SETTINGS), progress=oom.progress,
                    notify=notes.append)
    assert oom.raised == 1
    said = [n for n in notes if "out of GPU memory" in n]
    assert said == ["note: out of GPU memory on a forward batch of 3449 tokens at token budget 4096 (found by "
                    "probing) at step 3; going on at token budget 2560 (the step is done again in "
                    "smaller forward batches, on the same pairs)"]
    assert summary["steps"] == plain["steps"] == summary["total_steps"] == len(oom.losses) == 8
    assert oom.losses == pytest.approx(losses, rel=1e-5, abs=1e-6)
    _assert_same_weights(_weights(tmp_path / "oom"), weights)
    states = sorted((tmp_path / "oom").glob("checkpoint-*/trainer_state.json"))
    last = json.loads(states[-1].read_text(encoding="utf-8"))
    assert last["token_budget"] == PROBED and last[LOWERED_KEY] == 2560  # planned with 4096, cut at 2560


def test_a_checkpoint_after_the_lowering_keeps_it_for_resume(seq_cls_model, data, baseline, probed, monkeypatch,
                                                             tmp_path):
    losses, weights, _ = baseline
    oom = OutOfMemory(limit=LIMIT, after=4)
    oom.install(monkeypatch)
    cut, notes = tmp_path / "cut", []

    def stop_at_step_4(step, total, stats):
        oom.progress(step, total, stats)
        if step == 4:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        train(config(seq_cls_model, [data], cut, **SETTINGS), progress=stop_at_step_4, notify=notes.append)
    state = json.loads((cut / "checkpoint-4" / "trainer_state.json").read_text(encoding="utf-8"))
    assert state["token_budget"] == PROBED and state[LOWERED_KEY] == 2560
    assert not (cut / "checkpoint-2" / "trainer_state.json").read_text(encoding="utf-8").count(LOWERED_KEY)
    raised, notes = oom.raised, []
    resumed = train(config(seq_cls_model, [data], cut, resume=True, **SETTINGS), progress=oom.progress,
                    notify=notes.append)
    # without the lowered budget, step 5's batch of 3084 tokens would run out of memory again
    assert oom.raised == raised and not [n for n in notes if "out of GPU memory" in n], notes
    assert resumed["resumed_from"] == 4 and resumed["steps"] == 8
    assert oom.losses == pytest.approx(losses, rel=1e-5, abs=1e-6)
    _assert_same_weights(_weights(cut), weights)


def test_one_pair_that_does_not_fit_is_one_line(seq_cls_model, data, probed, monkeypatch, tmp_path):
    oom = OutOfMemory(limit=0, after=4)  # from step 3 nothing fits
    oom.install(monkeypatch)
    notes = []
    with pytest.raises(CheemsInputError) as e:
        train(config(seq_cls_model, [data], tmp_path / "none", **SETTINGS), notify=notes.append)
    lowered = [n for n in notes if "going on at token budget" in n]
    assert len(lowered) >= 2 and all("at step 3;" in n for n in lowered)
    message = str(e.value)
    assert "\n" not in message and e.value.field == "token_budget"
    assert "out of GPU memory on a forward batch of" in message and ", found by probing)" in message
    tokens = int(message.split("forward batch of ")[1].split()[0])
    assert tokens < 2 * 600  # one pair's two sequences (each under 600 tokens here)


# ----------------------------------------------------------------------------- the command line

def _oom_lines(stderr: str) -> list[str]:
    return [x for x in stderr.splitlines() if "out of GPU memory" in x]


def test_a_fixed_budget_is_one_line_naming_the_budget_to_try(workdir, monkeypatch):  # noqa: F811
    OutOfMemory(limit=0, after=2).install(monkeypatch)  # from step 2
    r = run_cli_in(workdir, "train", "--model", "tiny", "--train", "bench.jsonl", "--output", "run-fixed-oom",
                   "--epochs", "1", "--gradient-accumulation", "2", "--token-budget", "4096")
    assert r.returncode != 0 and "Traceback" not in r.stderr, r.stderr
    lines = _oom_lines(r.stderr)
    assert len(lines) == 1 and "(token budget 4096) (try --token-budget 3072 or --token-budget auto)" in lines[0], \
        r.stderr


def test_auto_that_cannot_go_lower_is_one_line_after_its_notes(workdir, probed, monkeypatch):  # noqa: F811
    OutOfMemory(limit=0, after=2).install(monkeypatch)  # from step 2
    r = run_cli_in(workdir, "train", "--model", "tiny", "--train", "bench.jsonl", "--output", "run-auto-oom",
                   "--epochs", "1", "--gradient-accumulation", "2", "--token-budget", "auto")
    assert r.returncode != 0 and "Traceback" not in r.stderr, r.stderr
    lines = _oom_lines(r.stderr)
    notes = [x for x in lines if "going on at token budget" in x]
    errors = [x for x in lines if x not in notes]
    assert notes and len(errors) == 1 and ", found by probing) (try --token-budget" in errors[0], r.stderr
    assert errors[0].startswith("error: token_budget: out of GPU memory on a forward batch of"), r.stderr


def test_dual_goes_on_with_the_same_losses(causal_lm_model, data, probed, monkeypatch, tmp_path):
    """The dual objective's LM loss (a mean over the batch's target tokens) is cut with it."""
    from cheems.training import dual

    settings = {**SETTINGS, "objective": "dual", "lm_coef": 0.5, "epochs": 1}
    runs = {}
    for name, limit in (("plain", 10 ** 9), ("oom", LIMIT)):
        oom = OutOfMemory(limit=limit, after=4)
        forward = dual.DualModel.forward

        def short_of_memory(model, input_ids, attention_mask=None, packing=None, lm_at=None, oom=oom):
            oom.calls += 1
            if oom.calls > oom.after and input_ids.numel() > oom.limit:
                oom.raised += 1
                raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
            return forward(model, input_ids, attention_mask, packing, lm_at)

        with monkeypatch.context() as patch:
            patch.setattr(dual.DualModel, "forward", short_of_memory)
            lm = []
            summary = train(config(causal_lm_model, [data], tmp_path / name, **settings),
                            progress=lambda step, total, stats, oom=oom, lm=lm: (oom.progress(step, total, stats),
                                                                                 lm.append(stats["lm_loss"])))
        runs[name] = oom, lm, summary
    (plain, plain_lm, a), (oom, oom_lm, b) = runs["plain"], runs["oom"]
    assert oom.raised >= 1 and plain.raised == 0
    assert a["steps"] == b["steps"] == len(oom.losses)
    assert oom.losses == pytest.approx(plain.losses, rel=1e-5, abs=1e-6)
    assert oom_lm == pytest.approx(plain_lm, rel=1e-5, abs=1e-6)
