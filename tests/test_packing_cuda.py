"""Packed attention on a GPU: the CUDA backends (PyTorch's variable-length kernel, flex
attention, flash-attn's kernel where installed) against a float64 reference, and packed
against padded scoring and training in bfloat16. Skipped without CUDA (CI has none); run on a
GPU machine with ``python -m pytest tests/test_packing_cuda.py``.

Tolerances are relative errors ||out - ref|| / ||ref||: bfloat16 operands land between 1e-3
and 1e-2, so 2e-2 passes rounding and fails any mask or layout mistake (those are O(1)).
"""

from __future__ import annotations

import random

import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("needs a CUDA device", allow_module_level=True)

from tests.test_packing import _reward_model, dense_reference  # noqa: E402

from cheems.models.packing import _torch_varlen, pack_sequences, packed_attention, use_packed_attention  # noqa: E402
from cheems.scoring.transformers_rm import load_reward_model  # noqa: E402
from cheems.training.loss import bradley_terry_loss  # noqa: E402
from cheems.training.trainer import batch_rewards  # noqa: E402

BACKENDS = ["flex"] + (["varlen"] if _torch_varlen() is not None else [])
try:
    import flash_attn  # noqa: F401

    BACKENDS.append("flash")
except ImportError:
    pass


def relative_error(got, want) -> float:
    got, want = got.double().cpu(), want.double().cpu()
    assert torch.isfinite(got).all()
    return ((got - want).norm() / want.norm()).item()


def random_layout(seed: int):
    """Groups of 1-5 sequences of 1-300 tokens, most groups sharing a prefix of up to 200."""
    rng = random.Random(seed)
    seqs, groups = [], []
    for _ in range(rng.randint(1, 6)):
        shared = [rng.randint(1, 99) for _ in range(rng.choice([0, 1, 30, 200]))]
        members = []
        for _ in range(rng.randint(1, 5)):
            members.append(len(seqs))
            seqs.append(shared + [rng.randint(1, 99) for _ in range(rng.randint(1, 300))])
        groups.append(members)
    return seqs, groups


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("heads,dim", [((14, 2), 64), ((4, 4), 128), ((8, 1), 64)])
@pytest.mark.parametrize("seed", range(4))
def test_cuda_backends_equal_the_float64_reference(backend, heads, dim, seed):
    seqs, groups = random_layout(seed)
    batch = pack_sequences(seqs, "cuda", groups=groups, backend=backend)
    t, (h, kv) = batch.row_tokens, heads
    g = torch.Generator(device="cuda").manual_seed(seed)
    q, k, v = (torch.randn(1, n, t, dim, generator=g, device="cuda", dtype=torch.bfloat16).requires_grad_()
               for n in (h, kv, kv))
    out, _ = packed_attention(None, q, k, v, None, scaling=dim ** -0.5, cheems_packing=batch)
    leaves = [x.detach().double().cpu().requires_grad_() for x in (q, k, v)]
    reference = dense_reference(*leaves, batch, dim ** -0.5)
    assert out.shape == (1, t, h, dim)
    assert relative_error(out, reference) < 2e-2
    weights = torch.randn(out.shape, generator=g, device="cuda", dtype=torch.bfloat16)
    got = torch.autograd.grad((out.float() * weights.float()).sum(), (q, k, v))
    want = torch.autograd.grad((reference * weights.double().cpu()).sum(), leaves)
    for name, a, b in zip("qkv", got, want):
        assert relative_error(a, b) < 3e-2, name


@pytest.fixture(scope="module")
def bf16_model(seq_cls_model, tiny_prompts):
    """The session's tiny seq-cls checkpoint (each test loads it in bfloat16) and the sample's prompts."""
    return seq_cls_model, tiny_prompts


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("liger", [False, True])
def test_cuda_packed_and_shared_scores_equal_padded_scores(bf16_model, backend, liger, monkeypatch):
    if liger:
        pytest.importorskip("liger_kernel")
    monkeypatch.setenv("CHEEMS_PACKED_ATTENTION", backend)
    folder, prompts = bf16_model
    items = [(p.prompt, r.content) for p in prompts[:8] for r in p.responses]
    padded = load_reward_model(folder, device="cuda", dtype="bfloat16", max_length=512, packing=False)
    reference = torch.tensor(padded.score(items, token_budget=4096, batch_size=16))
    assert reference.std() > 0
    for share in (False, True):
        rm = load_reward_model(folder, device="cuda", dtype="bfloat16", max_length=512, packing=True,
                               share_prefix=share, liger_kernels=liger)
        scores = torch.tensor(rm.score(items, token_budget=4096, batch_size=16))
        assert relative_error(scores - scores.mean(), reference - reference.mean()) < 5e-2, share


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("arch", ["qwen2", "llama"])
@pytest.mark.parametrize("precision", ["bf16", "autocast"])
def test_cuda_packed_training_gives_the_padded_loss_and_gradients(backend, arch, precision, monkeypatch):
    """bf16 weights, or float32 weights under bf16 autocast (how `cheems train --bf16` runs);
    packed rows with and without a prompt's shared prefix laid down once."""
    import contextlib
    import copy

    monkeypatch.setenv("CHEEMS_PACKED_ATTENTION", backend)
    padded = _reward_model(arch, hidden=128).to("cuda")  # flex needs head_dim >= 16
    if precision == "bf16":
        padded = padded.to(torch.bfloat16)
    context = ((lambda: torch.autocast("cuda", dtype=torch.bfloat16)) if precision == "autocast"
               else contextlib.nullcontext)
    packed = copy.deepcopy(padded)
    assert use_packed_attention(packed.inner)
    shared = copy.deepcopy(packed)
    g = torch.Generator().manual_seed(5)
    seqs = [torch.randint(1, 120, (n,), generator=g).tolist() for n in (5, 170, 90, 1, 120, 300)]
    seqs[4] = seqs[1][:100] + seqs[4][100:]  # sequences 1, 4 and 5 answer one prompt of 100 tokens
    seqs[5] = seqs[1][:100] + seqs[5][100:]
    groups = [[0], [1, 4, 5], [2], [3]]  # as `cheems train` groups a packed row by prompt (share_prefix)
    better, worse = torch.tensor([0, 1, 2, 4], device="cuda"), torch.tensor([1, 3, 5, 5], device="cuda")
    results = []
    for m, packing, layout in ((padded, False, None), (packed, True, None), (shared, True, groups)):
        m.train()
        m.zero_grad()
        with context():
            rewards = batch_rewards(m, seqs, packing=packing, pad_id=0, device="cuda", groups=layout)
        loss, _ = bradley_terry_loss(rewards.float(), better, worse, reg_coef=0.1)
        loss.backward()
        results.append((rewards.detach(), loss.detach(), {n: p.grad.clone() for n, p in m.named_parameters()
                                                           if p.grad is not None}))
    (r0, l0, g0), *others = results
    flat = lambda grads: torch.cat([grads[n].float().flatten() for n in sorted(grads)])  # noqa: E731
    for r1, l1, g1 in others:
        assert relative_error(r1, r0) < 3e-2 and abs(l1.item() - l0.item()) < 2e-2
        assert g0.keys() == g1.keys() and len(g0) > 10
        assert relative_error(flat(g1), flat(g0)) < 5e-2
