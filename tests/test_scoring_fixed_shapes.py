"""Fixed packed shapes for scoring (cheems.models.fixed_shapes, ``pack_sequences(pad_to=...)``,
``--fixed-shapes``): the buckets against a plain reference, the padded row's layout, the padded
attention tables against the dense masked reference, the scores against the unpadded packed
path's for any batching, the bound on distinct row lengths over a run, and the flag's way from
the settings to the loaded model (and to static-shape compilation). All in float32 on CPU.
"""

from __future__ import annotations

import warnings

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import run_cli_in
from tests.tiny_models import require_models_extra

require_models_extra()
import torch  # noqa: E402

from cheems.models.fixed_shapes import MAX_ROW_BUCKETS, ROW_FLOOR, row_buckets, row_length, table_length  # noqa: E402
from cheems.models.packing import pack_sequences, packed_attention, packed_cost  # noqa: E402
from cheems.records import CheemsInputError  # noqa: E402
from cheems.scoring import transformers_rm  # noqa: E402
from cheems.scoring.model_settings import ModelSettings  # noqa: E402
from cheems.scoring.transformers_rm import conversation_key, load_reward_model, scored_batches  # noqa: E402
from tests.test_packing import dense_reference, reference_varlen_kernel, sequences_and_groups  # noqa: E402

pytestmark = pytest.mark.usefixtures("single_torch_thread")


# ----------------------------------------------------------------------------- the buckets

def plain_buckets(budget: int) -> list[int]:
    """The rule written out: powers of two from 256 (raised until at most six lie under the
    budget) below the budget, then the budget."""
    floor = 256
    while sum(1 for k in range(40) if floor <= 2 ** k < budget) > 6:
        floor *= 2
    return [2 ** k for k in range(40) if floor <= 2 ** k < budget] + [budget]


@given(st.integers(1, 1 << 19), st.integers(1, 1 << 20))
def test_a_row_takes_the_shortest_bucket_that_holds_it(budget, tokens):
    buckets = row_buckets(budget)
    assert buckets == plain_buckets(budget) and len(buckets) <= MAX_ROW_BUCKETS
    if tokens <= budget:
        assert row_length(tokens, budget) == min(b for b in buckets if b >= tokens)
    else:  # a lone sequence over the budget: the next power of two
        n = row_length(tokens, budget)
        assert n >= tokens and n & (n - 1) == 0 and n < 2 * tokens


@given(st.integers(0, 5000))
def test_a_table_takes_the_next_power_of_two(n):
    m = table_length(n)
    assert m >= max(n, 8) and m & (m - 1) == 0 and (m == 8 or m < 2 * n)


# ----------------------------------------------------------------------------- the padded row

@given(case=sequences_and_groups(), extra=st.integers(0, 40), pad_id=st.integers(0, 9), share=st.booleans())
def test_the_padding_is_one_trailing_segment_nobody_reads(case, extra, pad_id, share):
    seqs, groups = case
    groups = groups if share else None
    plain = pack_sequences(seqs, "cpu", groups=groups)
    padded = pack_sequences(seqs, "cpu", groups=groups, pad_to=plain.row_tokens + extra, pad_id=pad_id)
    t = plain.row_tokens
    row, pos = padded.input_ids[0].tolist(), padded.position_ids[0].tolist()
    assert padded.row_tokens == len(row) == len(pos) == t + extra  # the row is the asked length
    assert padded.padding == extra and padded.fixed_shapes and not plain.fixed_shapes
    assert padded.real_tokens == plain.real_tokens == sum(map(len, seqs))  # padding is no real token
    assert row[:t] == plain.input_ids[0].tolist() and pos[:t] == plain.position_ids[0].tolist()
    assert row[t:] == [pad_id] * extra and pos[t:] == list(range(extra))  # positions restart at 0
    assert padded.last.tolist() == plain.last.tolist() and max(padded.last.tolist()) < t  # never read
    assert padded.sequence_groups() == plain.groups
    if extra:
        assert padded.groups[-1].prefix == 0 and padded.groups[-1].members == ((t, extra),)
    else:
        assert padded.groups == plain.groups
    asked = []  # the length as a function of the unpadded row's: called once, with that length
    by_function = pack_sequences(seqs, "cpu", groups=groups, pad_to=lambda n: asked.append(n) or n + extra,
                                 pad_id=pad_id)
    assert asked == [t] and by_function.input_ids.tolist() == padded.input_ids.tolist()
    assert by_function.groups == padded.groups and by_function.padding == extra


def test_a_row_longer_than_asked_is_refused():
    with pytest.raises(CheemsInputError, match="cannot be padded to 3"):
        pack_sequences([[1, 2], [3, 4]], "cpu", pad_to=3)


def check_padded_attention(case, extra: int, heads, seed: int, backend: str) -> None:
    """``packed_attention`` over a padded row equals the dense masked reference (the padding
    segment a lone causal block in it) on every token, padding included."""
    seqs, groups = case
    plain = pack_sequences(seqs, "cpu", groups=groups)
    batch = pack_sequences(seqs, "cpu", groups=groups, backend=backend, pad_to=plain.row_tokens + extra)
    t, (h, kv), d = batch.row_tokens, heads, 8
    g = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(1, n, t, d, generator=g) for n in (h, kv, kv))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # flex attention's note that it runs uncompiled on CPU
        out, _ = packed_attention(None, q, k, v, None, scaling=d ** -0.5, cheems_packing=batch)
    torch.testing.assert_close(out, dense_reference(q, k, v, batch, d ** -0.5), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("backend", ["segments", "flex"])
@given(case=sequences_and_groups(), extra=st.integers(0, 20), heads=st.sampled_from([(4, 4), (4, 2)]),
       seed=st.integers(0, 99))
@settings(max_examples=20, deadline=None)
def test_padded_rows_attend_as_the_reference(backend, case, extra, heads, seed):
    check_padded_attention(case, extra, heads, seed, backend)


@given(case=sequences_and_groups(), extra=st.integers(0, 20), heads=st.sampled_from([(4, 4), (4, 2), (2, 1)]),
       seed=st.integers(0, 99))
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_bucketed_variable_length_tables_attend_as_the_reference(monkeypatch, case, extra, heads, seed):
    """The ``flash``/``varlen`` tables of a padded row have bucketed lengths (zero-length
    segments, filler keys in the key row) and, through a plain kernel of the same contract,
    give the reference's output."""
    from cheems.models import packing

    monkeypatch.setattr(packing, "_varlen_kernel", reference_varlen_kernel)
    check_padded_attention(case, extra, heads, seed, "varlen")
    seqs, groups = case
    batch = pack_sequences(seqs, "cpu", groups=groups, backend="varlen",
                           pad_to=pack_sequences(seqs, "cpu", groups=groups).row_tokens + extra)
    cu_q, cu_k, _, _, index = packing._varlen_layout(batch, "cpu")
    segments = sum((1 if g.prefix else 0) + len(g.members) for g in batch.groups)
    assert len(cu_q) == len(cu_k) == table_length(segments + 1) + 1
    assert cu_q[-1] == batch.row_tokens and cu_q[segments:].unique().numel() == 1  # the rest: no queries
    if index is not None:
        assert len(index) == table_length(len(index)) == cu_k[-1]


# ----------------------------------------------------------------------------- scores

def _items(prompts, n_prompts=8):
    return [(p.prompt, r.content) for p in prompts[:n_prompts] for r in p.responses]


@pytest.fixture(scope="module", params=["seq-cls", "v-head"])
def model_pair(request, seq_cls_model, v_head_file_model):
    """The same folder loaded twice, packed, without and with fixed shapes."""
    folder = seq_cls_model if request.param == "seq-cls" else v_head_file_model.dir
    return (load_reward_model(folder, max_length=300), load_reward_model(folder, max_length=300, fixed_shapes=True))


@pytest.fixture(scope="module")
def scored_items(tiny_prompts):
    """(prompt, response) items of the sample, and the token count of its distinct conversations."""
    items = _items(tiny_prompts)
    return items, {conversation_key(p, r): (p, r) for p, r in items}


@given(budget=st.sampled_from([200, 300, 700, 1024, 5000]), batch_size=st.integers(1, 40), share=st.booleans(),
       reverse=st.booleans())
@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_fixed_shapes_keep_the_packed_scores(model_pair, scored_items, budget, batch_size, share, reverse):
    """Any budget, batch size, order and prefix sharing: the padded rows score as the unpadded
    ones (exactly, on this CPU; within 1e-6 asked), and their padding is counted apart."""
    plain, fixed = model_pair
    items, distinct = scored_items
    items = items[::-1] if reverse else items
    plain.share_prefix = fixed.share_prefix = share
    fixed.row_stats = transformers_rm.RowStats()
    want = plain.score(items, token_budget=budget, batch_size=batch_size)
    got = fixed.score(items, token_budget=budget, batch_size=batch_size)
    assert got == pytest.approx(want, abs=1e-6, rel=1e-6)
    stats = fixed.row_stats
    assert stats.rows >= 1 and stats.real_tokens == sum(len(fixed.encode(*it)) for it in distinct.values())
    assert 0 <= stats.padding_tokens < stats.row_tokens


class RowSpy:
    """Records the length of every row `pack_sequences` builds (the real function runs)."""

    def __init__(self, monkeypatch):
        self.rows, self.padding = [], []
        real = transformers_rm.pack_sequences

        def spy(*args, **kwargs):
            batch = real(*args, **kwargs)
            self.rows.append(batch.row_tokens)
            self.padding.append(batch.padding)
            return batch

        monkeypatch.setattr(transformers_rm, "pack_sequences", spy)


def test_a_run_meets_no_more_row_lengths_than_buckets(seq_cls_model, monkeypatch):
    """Random sequences (up to 330 tokens) in random prompts, scored under several budgets:
    every row is one of the budget's buckets, or (a lone sequence over the budget) a power of
    two under twice its length, so a run meets at most MAX_ROW_BUCKETS lengths plus one per
    doubling from the budget to the longest sequence."""
    rm = load_reward_model(seq_cls_model, max_length=400, fixed_shapes=True)
    spy = RowSpy(monkeypatch)
    g = torch.Generator().manual_seed(0)
    vocab = rm.model.config.vocab_size
    for budget in (256, 900, 2000):
        spy.rows.clear()
        for _ in range(3):
            n = int(torch.randint(20, 60, (1,), generator=g))
            prefix = torch.randint(1, vocab, (30,), generator=g).tolist()
            encoded = [prefix + torch.randint(1, vocab, (int(torch.randint(1, 300, (1,), generator=g)),),
                                              generator=g).tolist() for _ in range(n)]
            prompt_of = torch.randint(0, 6, (n,), generator=g).tolist()
            list(scored_batches(rm, encoded, prompt_of, token_budget=budget, batch_size=12))
        over = {n for n in spy.rows if n > budget}
        assert len(spy.rows) > 5 and set(spy.rows) - over <= set(row_buckets(budget)), (budget, sorted(set(spy.rows)))
        assert all(n & (n - 1) == 0 and n < 2 * 330 for n in over)
        doublings = max(0, (330 - 1) // budget).bit_length()  # powers of two from the budget up to 330
        assert len(set(spy.rows)) <= len(row_buckets(budget)) + doublings
        assert len(row_buckets(budget)) <= MAX_ROW_BUCKETS


@given(st.lists(st.integers(1, 300), min_size=1, max_size=30), st.integers(1, 2000))
@settings(max_examples=30, deadline=None)
def test_a_planned_row_is_padded_within_its_budget(lengths, budget):
    """The row a plan makes (at most the budget, or one sequence over it) padded to its bucket
    stays within the budget, or within twice the lone sequence; never under ROW_FLOOR unless
    the budget is."""
    from cheems.models.sequences import plan_batches

    for batch in plan_batches(lengths, token_budget=budget, max_batch_size=64, packed=True):
        row = sum(lengths[i] for i in batch)
        padded = row_length(row, budget)
        assert padded >= row and padded >= min(ROW_FLOOR, budget)
        assert padded <= budget if row <= budget else (len(batch) == 1 and padded < 2 * row)


def test_shared_prefix_rows_are_sized_on_their_computed_tokens(seq_cls_model, tiny_prompts, monkeypatch):
    """With shared prefixes the bucket is chosen on the row's tokens (each prefix once)."""
    rm = load_reward_model(seq_cls_model, max_length=300, fixed_shapes=True)
    spy = RowSpy(monkeypatch)
    p = tiny_prompts[0]
    seqs = [rm.encode(p.prompt, r.content) for r in p.responses]
    rm.score_packed(seqs, [list(range(len(seqs)))], budget=4096)
    computed = packed_cost(seqs, True)
    assert spy.rows == [row_length(computed, 4096)] and spy.padding == [spy.rows[0] - computed]


# ----------------------------------------------------------------------------- the flag

def test_the_setting_reaches_the_loaded_model(seq_cls_model, monkeypatch):
    from cheems.models import kernels

    assert ModelSettings().fixed_shapes is False and ModelSettings(fixed_shapes=True).fixed_shapes
    assert load_reward_model(seq_cls_model, fixed_shapes=True).fixed_shapes
    assert not load_reward_model(seq_cls_model).fixed_shapes
    with pytest.raises(CheemsInputError, match="needs packing"):  # padded batches: nothing to fix
        load_reward_model(seq_cls_model, fixed_shapes=True, packing=False)
    asked = []
    real = kernels.compile_layers
    monkeypatch.setattr(kernels, "compile_layers", lambda model, **kw: asked.append(kw) or real(model, **kw))
    load_reward_model(seq_cls_model, compile=True)
    load_reward_model(seq_cls_model, compile=True, fixed_shapes=True)
    load_reward_model(seq_cls_model, compile=True, packing=False)
    assert asked == [{"dynamic": True}, {"dynamic": False}, {"dynamic": True}]  # static with fixed rows only


def test_the_commands_settings_reach_the_model(seq_cls_model, monkeypatch):
    """The flag of ``cheems score``/``eval``/``bon``/``serve`` (through `load_scorer`) and of a
    Ray run (its replicas' load arguments) reaches `load_reward_model`."""
    from cheems.scoring import ray_scoring, run

    assert run.load_scorer(seq_cls_model, ModelSettings(fixed_shapes=True), []).fixed_shapes
    assert not run.load_scorer(seq_cls_model, ModelSettings(), []).fixed_shapes
    seen = {}

    def stand_in(*args, load_kwargs, **kwargs):
        seen.update(load_kwargs)
        return {"scored": 0, "resumed": 0, "replicas": 1}

    monkeypatch.setattr(ray_scoring, "score_with_ray", stand_in)
    run._score_on_ray(seq_cls_model, [], ModelSettings(fixed_shapes=True), "unused.jsonl", {}, "seq-cls", 1, False,
                      None)
    assert seen.get("fixed_shapes") is True


@pytest.mark.parametrize("command", [("score",), ("eval",), ("bon",), ("curate", "resolve"), ("serve",)])
def test_the_flag_is_offered(tmp_path, command):
    r = run_cli_in(tmp_path, *command, "--help")
    assert r.returncode == 0 and "--fixed-shapes" in r.stdout, r.stdout


@pytest.mark.parametrize("flags, message", [
    (["--fixed-shapes", "--no-packing"], "--fixed-shapes pads packed rows: it needs --packing on"),
    (["--backend", "vllm", "--compile", "--fixed-shapes"], "--compile, --fixed-shapes apply to the transformers backend"),
    (["--backend", "vllm", "--liger-kernels"], "--liger-kernels apply to the transformers backend"),
])
def test_flags_that_cannot_apply_are_one_line_before_any_work(tmp_path, seq_cls_model, flags, message):
    from tests.test_cli import assert_one_line_error

    bench = tmp_path / "bench.jsonl"
    bench.write_text('{"id": "p", "prompt": "问", "responses": [{"id": "a", "content": "答"}]}\n', encoding="utf-8")
    r = run_cli_in(tmp_path, "score", "bench.jsonl", "--model", str(seq_cls_model), *flags, "-o", "s.jsonl")
    assert_one_line_error(r, message)
    assert not (tmp_path / "s.jsonl").exists()


def test_compiled_fixed_shapes_score_as_the_plain_model(seq_cls_model, tiny_prompts):
    """``compile`` with ``fixed_shapes`` on CPU: the layers compiled for static shapes (one per
    bucket met) give the plain model's scores."""
    items = _items(tiny_prompts, 1)  # one prompt: few row lengths to compile, each costing seconds on a CPU
    want = load_reward_model(seq_cls_model, max_length=300).score(items, token_budget=512, batch_size=8)
    rm = load_reward_model(seq_cls_model, max_length=300, compile=True, fixed_shapes=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = rm.score(items, token_budget=512, batch_size=8)
        again = rm.score(items[::-1], token_budget=512, batch_size=3)[::-1]
    assert got == pytest.approx(want, abs=1e-5) and again == pytest.approx(want, abs=1e-5)
    assert rm.row_stats.rows >= 2 and rm.row_stats.padding_tokens > 0
