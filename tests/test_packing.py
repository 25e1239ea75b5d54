"""Padding-free batches (cheems.models.packing): the packed row's layout, the packed attention
against a dense masked reference, and packed against padded scoring and training.

Reference for the attention: one SDPA call over the whole row with an explicit boolean mask
built token by token from the rule "same block, not in the future, and either a prefix token or
the query's own sequence". Reference for models: right-padded batches (the path cheems has
always scored and trained with, itself checked against transformers' own pooling in
tests/test_transformers_rm.py). All in float32 on CPU.
"""

from __future__ import annotations

import warnings

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.tiny_models import require_models_extra

require_models_extra()
import torch  # noqa: E402

from cheems.models.packing import (_segment_lengths, common_prefix, pack_sequences, packed_attention,  # noqa: E402
                                   packed_cost, use_packed_attention)
from cheems.models.sequences import plan_batches  # noqa: E402
from cheems.records import CheemsInputError  # noqa: E402
from cheems.scoring.transformers_rm import load_reward_model, score_items  # noqa: E402
from cheems.training.batching import batch_stats, greedy_prompt_batches, synthetic_preference_items  # noqa: E402
from cheems.training.loss import bradley_terry_loss  # noqa: E402

pytestmark = pytest.mark.usefixtures("single_torch_thread")

ATOL = 1e-5  # packed vs padded, fp32


# ----------------------------------------------------------------------------- the row's layout

token_lists = st.lists(st.lists(st.integers(1, 4), min_size=1, max_size=9), min_size=1, max_size=7)


@st.composite
def sequences_and_groups(draw):
    """Sequences cut into groups; most groups' members start with a common prefix of their own."""
    seqs = draw(token_lists)
    order = draw(st.permutations(range(len(seqs))))
    cuts = sorted(draw(st.sets(st.integers(1, max(1, len(seqs) - 1)), max_size=len(seqs))))
    groups, start = [], 0
    for c in cuts + [len(seqs)]:
        if c > start:
            groups.append(list(order[start:c]))
            start = c
    for members in groups:
        shared = draw(st.lists(st.integers(1, 4), max_size=6))
        for i in members:
            seqs[i] = shared + seqs[i]
    return seqs, groups


def plain_common_prefix(seqs) -> int:
    if len(seqs) < 2:
        return 0
    k = 0
    while all(len(s) > k + 1 for s in seqs) and len({s[k] for s in seqs}) == 1:
        k += 1
    return k


@given(sequences_and_groups())
def test_each_sequence_is_its_groups_prefix_then_its_own_tokens(case):
    seqs, groups = case
    batch = pack_sequences(seqs, "cpu", groups=groups)
    row, pos, last = batch.input_ids[0].tolist(), batch.position_ids[0].tolist(), batch.last.tolist()
    assert [sorted(i for g in groups for i in g)] == [list(range(len(seqs)))]
    assert batch.real_tokens == sum(map(len, seqs))
    assert batch.row_tokens == len(row) == sum(packed_cost([seqs[i] for i in g], True) for g in groups)
    for members, g in zip(groups, batch.groups):
        assert g.prefix == common_prefix([seqs[i] for i in members]) == plain_common_prefix([seqs[i] for i in members])
        for i, (start, n) in zip(members, g.members):
            rebuilt = row[g.start:g.start + g.prefix] + row[start:start + n]
            assert rebuilt == seqs[i]
            assert pos[g.start:g.start + g.prefix] + pos[start:start + n] == list(range(len(seqs[i])))
            assert last[i] == start + n - 1 and n >= 1


@given(token_lists)
def test_without_groups_the_row_is_the_sequences_end_to_end(seqs):
    batch = pack_sequences(seqs, "cpu")
    assert batch.input_ids[0].tolist() == [t for s in seqs for t in s]
    assert batch.position_ids[0].tolist() == [p for s in seqs for p in range(len(s))]
    assert batch.row_tokens == batch.real_tokens


def test_an_unknown_backend_or_an_empty_sequence_is_refused():
    with pytest.raises(CheemsInputError, match="backend"):
        pack_sequences([[1, 2]], "cpu", backend="magic")
    for seqs in ([], [[1], []]):
        with pytest.raises(CheemsInputError, match="empty"):
            pack_sequences(seqs, "cpu")


@given(st.lists(st.tuples(st.integers(1, 50), st.integers(1, 4)), min_size=1, max_size=30),
       st.integers(1, 120), st.integers(1, 9))
def test_planned_packed_batches_keep_the_budget(groups, budget, max_size):
    costs = [c for c, _ in groups]
    sizes = [n for _, n in groups]
    batches = plan_batches(costs, token_budget=budget, max_batch_size=max_size, packed=True, sizes=sizes)
    assert sorted(g for b in batches for g in b) == list(range(len(groups)))
    for b in batches:
        assert len(b) == 1 or (sum(costs[g] for g in b) <= budget and sum(sizes[g] for g in b) <= max_size)


@given(st.integers(0, 10_000), st.integers(300, 4000), st.integers(2, 16))
@settings(max_examples=15, deadline=None)
def test_packed_training_batches_keep_the_row_budget(seed, budget, batch_size):
    items, ranks = synthetic_preference_items(40, seed=seed)
    batches = greedy_prompt_batches(items, batch_size=batch_size, token_budget=budget, seed=seed, packed=True)
    assert sorted(i for b in batches for i in b) == list(range(len(items)))
    for b in batches:
        assert len(b) <= batch_size
        assert len(b) == 1 or sum(items[i][2] for i in b) <= budget
    stats = batch_stats(batches, items, {}, packed=True)
    assert stats["padding_share"] == 0 and stats["padded_tokens"] == stats["real_tokens"]


# ----------------------------------------------------------------------------- attention

def dense_reference(query, key, value, batch, scaling):
    """One SDPA over the whole row, the mask written block by block: a prefix sees itself
    causally; a member sees its group's whole prefix and itself causally; nothing else."""
    t = batch.row_tokens
    mask = torch.zeros(t, t, dtype=torch.bool)
    for g in batch.groups:
        s, p = g.start, g.prefix
        mask[s:s + p, s:s + p] = torch.ones(p, p, dtype=torch.bool).tril()
        for a, n in g.members:
            mask[a:a + n, s:s + p] = True
            mask[a:a + n, a:a + n] = torch.ones(n, n, dtype=torch.bool).tril()
    out = torch.nn.functional.scaled_dot_product_attention(query, key, value, attn_mask=mask, scale=scaling,
                                                           enable_gqa=query.shape[1] != key.shape[1])
    return out.transpose(1, 2)


@pytest.mark.parametrize("backend,grad", [("segments", False), ("segments", True), ("flex", False)])
@given(case=sequences_and_groups(), heads=st.sampled_from([(4, 4), (4, 2), (2, 1)]), seed=st.integers(0, 99))
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_packed_attention_equals_the_dense_masked_reference(backend, grad, case, heads, seed):
    """Without gradients a shared prefix runs as a cascade of two softmaxes; with them, as
    one masked SDPA per member, whose gradients must match the reference's too."""
    check_against_the_reference(case, heads, seed, grad, backend)


@given(case=sequences_and_groups(), heads=st.sampled_from([(4, 4), (4, 2)]), seed=st.integers(0, 99))
@settings(max_examples=25, deadline=None)
def test_segments_attention_takes_the_models_token_major_layout(case, heads, seed):
    """Queries, keys and values as a transformers model passes them, (1, T, heads, D) tensors
    seen as (1, heads, T, D), with gradients: the same outputs and gradients as the reference."""
    check_against_the_reference(case, heads, seed, True, "segments", token_major=True)


@given(sequences_and_groups())
def test_the_segments_tile_the_row_in_order(case):
    seqs, groups = case
    batch = pack_sequences(seqs, "cpu", groups=groups)
    want, at = [], 0
    for g in batch.groups:  # each group's prefix, then its members, end to end from the row's start
        assert g.start == at
        if g.prefix:
            want.append(g.prefix)
        at = g.start + g.prefix
        for start, n in g.members:
            assert start == at
            want.append(n)
            at += n
    assert _segment_lengths(batch) == want and at == batch.row_tokens


def check_against_the_reference(case, heads, seed: int, grad: bool, backend: str, token_major: bool = False) -> None:
    """``packed_attention`` on random queries, keys and values for the layout ``case``, against
    `dense_reference`: outputs and (with ``grad``) the gradients of a random projection.
    ``token_major``: the inputs are (1, T, heads, D) tensors transposed, as a model passes them."""
    seqs, groups = case
    batch = pack_sequences(seqs, "cpu", groups=groups, backend=backend)
    t, (h, kv), d = batch.row_tokens, heads, 8
    g = torch.Generator().manual_seed(seed)
    if token_major:
        q, k, v = (torch.randn(1, t, n, d, generator=g).transpose(1, 2).requires_grad_(grad) for n in (h, kv, kv))
    else:
        q, k, v = (torch.randn(1, n, t, d, generator=g).requires_grad_(grad) for n in (h, kv, kv))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # flex attention's note that it runs uncompiled on CPU
        out, _ = packed_attention(None, q, k, v, None, scaling=d ** -0.5, cheems_packing=batch)
    reference = dense_reference(q, k, v, batch, d ** -0.5)
    assert out.shape == (1, t, h, d)
    torch.testing.assert_close(out, reference, atol=1e-5, rtol=1e-5)
    if grad:
        weights = torch.randn(out.shape, generator=g)
        got = torch.autograd.grad((out * weights).sum(), (q, k, v))
        want = torch.autograd.grad((reference * weights).sum(), (q, k, v))
        for a, b in zip(got, want):
            torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-4)


def reference_varlen_kernel(backend):
    """The variable-length kernels' contract, written plainly: segment i's queries
    cu_q[i]:cu_q[i+1] attend to keys cu_k[i]:cu_k[i+1], causal aligned to the keys' end."""
    def kernel(q, k, v, cu_q, cu_k, max_q, max_k, scale, dropout):
        cu_q, cu_k = cu_q.tolist(), cu_k.tolist()
        assert max_q == max(b - a for a, b in zip(cu_q, cu_q[1:]))
        assert max_k == max(b - a for a, b in zip(cu_k, cu_k[1:]))
        assert cu_q[-1] == q.shape[0] and cu_k[-1] == k.shape[0]
        outs = []
        for q0, q1, k0, k1 in zip(cu_q, cu_q[1:], cu_k, cu_k[1:]):
            mask = torch.ones(q1 - q0, k1 - k0, dtype=torch.bool).tril(diagonal=(k1 - k0) - (q1 - q0))
            o = torch.nn.functional.scaled_dot_product_attention(
                q[q0:q1].transpose(0, 1), k[k0:k1].transpose(0, 1), v[k0:k1].transpose(0, 1), attn_mask=mask,
                scale=scale, enable_gqa=q.shape[1] != k.shape[1])
            outs.append(o.transpose(0, 1))
        return torch.cat(outs)
    return kernel


@pytest.mark.parametrize("grad", [False, True])
@given(case=sequences_and_groups(), heads=st.sampled_from([(4, 4), (4, 2), (2, 1)]), seed=st.integers(0, 99))
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_the_variable_length_layout_equals_the_dense_masked_reference(monkeypatch, grad, case, heads, seed):
    """The ``flash`` and ``varlen`` backends hand a kernel the row as segments with gathered
    prefix keys; with a plain kernel of the same contract the output is the reference's
    (the real kernels are checked against it on a GPU in tests/test_packing_cuda.py)."""
    from cheems.models import packing

    monkeypatch.setattr(packing, "_varlen_kernel", reference_varlen_kernel)
    check_against_the_reference(case, heads, seed, grad, "varlen")


@pytest.mark.parametrize("pad_to", [None, 16])
def test_half_precision_kernels_get_autocast_inputs_or_hand_over_to_flex(monkeypatch, pad_to):
    """The variable-length kernels take float16/bfloat16 only: float32 inputs under autocast
    (mixed-precision training) are cast to autocast's dtype; without autocast the row runs
    flex attention, exact in float32. The same for a row of fixed shape (``pad_to``, the
    kernel then called outside compiled graphs)."""
    from cheems.models import packing

    calls = []

    def half_only(backend):
        plain = reference_varlen_kernel(backend)

        def kernel(q, k, v, *rest):
            calls.append({q.dtype, k.dtype, v.dtype})
            return plain(q, k, v, *rest)

        kernel.dtypes = frozenset({torch.float16, torch.bfloat16})
        return kernel

    monkeypatch.setattr(packing, "_varlen_kernel", half_only)
    seqs, groups = [[1, 2, 3, 4], [1, 2, 3, 5, 6], [7, 8]], [[0, 1], [2]]
    batch = pack_sequences(seqs, "cpu", groups=groups, backend="varlen", pad_to=pad_to)
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, n, batch.row_tokens, 16, generator=g) for n in (4, 2, 2))
    reference = dense_reference(q, k, v, batch, 0.25)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out, _ = packed_attention(None, q, k, v, None, scaling=0.25, cheems_packing=batch)
    assert calls == [] and out.dtype == torch.float32
    torch.testing.assert_close(out, reference, atol=1e-5, rtol=1e-5)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out, _ = packed_attention(None, q, k, v.bfloat16(), None, scaling=0.25, cheems_packing=batch)
    assert calls == [{torch.bfloat16}] and out.dtype == torch.bfloat16
    torch.testing.assert_close(out.float(), reference, atol=3e-2, rtol=3e-2)


def test_packed_attention_needs_its_batch():
    q = torch.zeros(1, 2, 3, 4)
    with pytest.raises(CheemsInputError, match="without a packed batch"):
        packed_attention(None, q, q, q, None)


# ----------------------------------------------------------------------------- scoring

def _items(prompts, n_prompts=6):
    return [(p.prompt, r.content) for p in prompts[:n_prompts] for r in p.responses]


@pytest.fixture(scope="module", params=["seq-cls", "v-head"])
def model_folder(request, seq_cls_model, v_head_file_model):
    return seq_cls_model if request.param == "seq-cls" else v_head_file_model.dir


def test_packed_scores_equal_padded_scores_for_both_layouts(model_folder, tiny_prompts):
    items = _items(tiny_prompts)
    padded = load_reward_model(model_folder, max_length=300, packing=False)
    shared = load_reward_model(model_folder, max_length=300, packing=True, share_prefix=True)
    unshared = load_reward_model(model_folder, max_length=300, packing=True, share_prefix=False)
    assert not padded.packing and shared.packing and unshared.packing
    reference = padded.score(items, token_budget=1024, batch_size=8)
    for rm, budget in ((shared, 1024), (unshared, 1024), (shared, 300), (shared, 10_000)):
        scores = rm.score(items, token_budget=budget, batch_size=8)
        assert scores == pytest.approx(reference, abs=ATOL), (rm.share_prefix, budget)


def test_a_shared_prefix_saves_tokens_and_keeps_scores(seq_cls_model, tiny_prompts):
    rm = load_reward_model(seq_cls_model, max_length=4096, packing=True, share_prefix=True)
    p = tiny_prompts[0]
    seqs = [rm.encode(p.prompt, r.content) for r in p.responses]
    prefix = common_prefix(seqs)
    assert prefix > 5  # the chat template and the prompt
    alone = [rm.score_packed([s])[0] for s in seqs]
    together = rm.score_packed(seqs, [list(range(len(seqs)))])
    assert together == pytest.approx(alone, abs=ATOL)
    assert pack_sequences(seqs, "cpu", groups=[list(range(len(seqs)))]).row_tokens == \
        sum(map(len, seqs)) - (len(seqs) - 1) * prefix


def test_identical_conversations_are_scored_once_with_the_same_score(seq_cls_model, tiny_prompts):
    rm = load_reward_model(seq_cls_model, max_length=300)
    items = _items(tiny_prompts, 3)
    doubled = items + items[::-1]
    calls = []
    original = rm.score_packed

    def counting(seqs, groups=None):
        calls.append(len(seqs))
        return original(seqs, groups)

    rm.score_packed = counting
    scores = score_items(rm, doubled, token_budget=1024, batch_size=8)
    assert sum(calls) == len(set(doubled)) < len(doubled)
    one_by_one = [original([rm.encode(*it)])[0] for it in doubled]
    assert scores == pytest.approx(one_by_one, abs=ATOL)


# ----------------------------------------------------------------------------- training

def _reward_model(arch: str, seed: int = 0, hidden: int = 32):
    from transformers import LlamaConfig, LlamaForSequenceClassification, Qwen2Config, Qwen2ForSequenceClassification

    from cheems.training.reward_model import RewardModel

    cls_config, cls_model = {"qwen2": (Qwen2Config, Qwen2ForSequenceClassification),
                             "llama": (LlamaConfig, LlamaForSequenceClassification)}[arch]
    config = cls_config(vocab_size=120, hidden_size=hidden, num_hidden_layers=2, num_attention_heads=4,
                        num_key_value_heads=2, intermediate_size=2 * hidden, num_labels=1, pad_token_id=0)
    torch.manual_seed(seed)
    return RewardModel(cls_model(config))


def _loss_and_grads(reward_model, seqs, better, worse, *, packing: bool):
    from cheems.training.trainer import batch_rewards

    reward_model.zero_grad()
    rewards = batch_rewards(reward_model, seqs, packing=packing, pad_id=0, device="cpu")
    loss, _ = bradley_terry_loss(rewards, torch.tensor(better), torch.tensor(worse), reg_coef=0.1)
    loss.backward()
    grads = {n: p.grad.clone() for n, p in reward_model.named_parameters() if p.grad is not None}
    return rewards.detach(), loss.detach(), grads


@pytest.mark.parametrize("arch", ["qwen2", "llama"])
@pytest.mark.parametrize("checkpointing", [False, True])
def test_packed_training_gives_the_padded_rewards_loss_and_gradients(arch, checkpointing):
    import copy

    padded = _reward_model(arch)
    packed = copy.deepcopy(padded)
    assert use_packed_attention(packed.inner)
    for m in (padded, packed):
        m.train()
        if checkpointing:
            (getattr(m.inner, "activation_checkpointing_enable", None) or m.inner.gradient_checkpointing_enable)()
    g = torch.Generator().manual_seed(3)
    lengths = [5, 17, 9, 1, 12, 30]
    seqs = [torch.randint(1, 120, (n,), generator=g).tolist() for n in lengths]
    better, worse = [0, 1, 2, 4], [1, 3, 5, 5]
    r0, l0, g0 = _loss_and_grads(padded, seqs, better, worse, packing=False)
    r1, l1, g1 = _loss_and_grads(packed, seqs, better, worse, packing=True)
    torch.testing.assert_close(r1, r0, atol=ATOL, rtol=1e-5)
    torch.testing.assert_close(l1, l0, atol=ATOL, rtol=1e-5)
    assert g0.keys() == g1.keys() and len(g0) > 10
    for name in g0:
        torch.testing.assert_close(g1[name], g0[name], atol=1e-5, rtol=1e-4, msg=name)
    assert max(g.abs().max().item() for g in g0.values()) > 1e-4  # the gradients are not all zero


def test_padded_batches_still_run_on_a_packed_model(seq_cls_model, tiny_prompts):
    rm = load_reward_model(seq_cls_model, max_length=200)
    seqs = [rm.encode(p.prompt, r.content) for p in tiny_prompts[:2] for r in p.responses]
    assert rm.packing
    assert rm.score_ids(seqs) == pytest.approx(rm.score_packed(seqs), abs=ATOL)


class RecordingScorer:
    """Stands in for a model to watch how `scored_batches` cuts and packs prompts: it scores a
    sequence by its length and records every row it is given."""

    packing, share_prefix, fixed_shapes, token_budget_auto = True, True, False, False

    def __init__(self, budget):
        self.token_budget, self.rows = budget, []

    def max_batch(self, asked):
        return asked

    def score_packed(self, seqs, groups):
        self.rows.append([[list(seqs[k]) for k in g] for g in groups])
        return [float(len(s)) for s in seqs]


@given(st.lists(st.tuples(st.lists(st.integers(1, 3), max_size=5), token_lists), min_size=1, max_size=6),
       st.integers(1, 40), st.integers(1, 5))
def test_scored_batches_cut_prompts_greedily_within_the_budget(prompts, budget, batch_size):
    from cheems.scoring.transformers_rm import scored_batches

    encoded, prompt_of = [], []
    for p, (prefix, seqs) in enumerate(prompts):
        for s in seqs:
            encoded.append(prefix + s + [100 + len(encoded)])  # a last token of its own: sequences are told apart
            prompt_of.append(p)
    rm = RecordingScorer(budget)
    scored = {}
    for batch, values in scored_batches(rm, encoded, prompt_of, token_budget=None, batch_size=batch_size):
        scored.update(zip(batch, values))
    assert scored == {i: float(len(s)) for i, s in enumerate(encoded)}  # every sequence once, its own score
    for row in rm.rows:
        assert len(row) == 1 or (sum(packed_cost(g, True) for g in row) <= budget
                                 and sum(map(len, row)) <= batch_size)
    parts = sorted([[s[-1] - 100 for s in g] for row in rm.rows for g in row])
    for g in parts:
        assert len({prompt_of[i] for i in g}) == 1 and g == list(range(g[0], g[0] + len(g)))  # a run of one prompt
        assert len(g) == 1 or (packed_cost([encoded[i] for i in g], True) <= budget and len(g) <= batch_size)
    for g, h in zip(parts, parts[1:]):  # a part closes only when the prompt's next sequence does not fit it
        if prompt_of[g[0]] == prompt_of[h[0]]:
            grown = [encoded[i] for i in g + h[:1]]
            assert len(grown) > batch_size or packed_cost(grown, True) > budget


@settings(max_examples=300, deadline=None)
@given(st.lists(st.lists(st.integers(0, 2), min_size=1, max_size=40), min_size=1, max_size=6), st.booleans())
def test_common_prefix_is_the_plain_one(seqs, as_tuples):
    """Few token values, so sequences share long prefixes and depart anywhere."""
    given_seqs = [tuple(s) for s in seqs] if as_tuples else seqs
    assert common_prefix(given_seqs) == plain_common_prefix(seqs)
