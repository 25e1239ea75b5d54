"""Training with each prompt's shared prefix laid down once in the packed row (``share_prefix``):
the same rewards, losses and gradients as the sequences packed whole, fewer tokens computed."""

from __future__ import annotations

import pytest

from tests.tiny_models import require_models_extra

require_models_extra()
import torch  # noqa: E402

from cheems.models.packing import use_packed_attention  # noqa: E402
from cheems.training.evaluation import batch_rewards  # noqa: E402
from cheems.training.trainer import _prompt_groups, train  # noqa: E402
from tests.test_oom_midrun import _assert_same_weights, _weights  # noqa: E402
from tests.test_packing import _reward_model  # noqa: E402
from tests.test_trainer import config, ranked, write  # noqa: E402

pytestmark = pytest.mark.usefixtures("single_torch_thread")


@pytest.fixture(scope="module")
def data(tiny_prompts, tmp_path_factory) -> str:
    return write(tmp_path_factory.mktemp("shared") / "t.jsonl", ranked(tiny_prompts)[:10])


def test_prompt_groups_follow_the_items():
    items = [(3, 0, 5), (1, 0, 4), (3, 1, 6), (1, 2, 2), (7, 0, 9)]
    assert _prompt_groups([0, 1, 2, 3, 4], items) == [[0, 2], [1, 3], [4]]
    assert _prompt_groups([4, 2, 0], items) == [[0], [1, 2]]


@pytest.mark.parametrize("arch", ["qwen2", "llama"])
@pytest.mark.parametrize("backend", ["segments", "flex"])
def test_shared_rows_give_the_rewards_and_gradients_of_whole_rows(arch, backend, monkeypatch):
    import copy

    monkeypatch.setenv("CHEEMS_PACKED_ATTENTION", backend)
    g = torch.Generator().manual_seed(5)

    def tokens(n):
        return torch.randint(1, 120, (n,), generator=g).tolist()

    prompts = [tokens(n) for n in (23, 7, 40)]  # three prompts, 3, 2 and 1 responses
    seqs = [prompts[0] + tokens(9), prompts[1] + tokens(15), prompts[0] + tokens(1), prompts[2] + tokens(6),
            prompts[1] + tokens(4), prompts[0] + tokens(30)]
    groups = [[0, 2, 5], [1, 4], [3]]
    whole_model = _reward_model(arch)
    assert use_packed_attention(whole_model.inner)
    shared_model = copy.deepcopy(whole_model)
    results = []
    backward = backend == "segments"  # PyTorch's flex attention has no backward on CPU (tests/test_packing_cuda.py)
    for model, shared in ((whole_model, None), (shared_model, groups)):
        model.train()
        with torch.set_grad_enabled(backward):
            rewards = batch_rewards(model, seqs, packing=True, pad_id=0, device="cpu", groups=shared)
        if backward:
            (rewards.pow(2).sum() + rewards[::2].sum() - rewards[1]).backward()
        results.append((rewards.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}))
    (whole, whole_grads), (shared, shared_grads) = results
    torch.testing.assert_close(shared, whole, rtol=1e-4, atol=1e-5)
    assert whole_grads.keys() == shared_grads.keys() and (whole_grads or not backward)
    for name in whole_grads:
        torch.testing.assert_close(shared_grads[name], whole_grads[name], rtol=1e-3, atol=1e-5)


def test_a_run_sharing_prefixes_learns_what_a_run_without_does(seq_cls_model, data, tmp_path):
    losses, summaries = {}, {}
    for shared in (True, False):
        out = tmp_path / f"out-{shared}"
        steps = losses[shared] = []
        summaries[shared] = train(config(seq_cls_model, [data], out, epochs=2, share_prefix=shared, save_every=1000),
                                  progress=lambda step, total, stats, steps=steps: steps.append(stats["loss"]))
    assert losses[True] == pytest.approx(losses[False], rel=1e-4)
    _assert_same_weights(_weights(tmp_path / "out-True"), _weights(tmp_path / "out-False"))
    with_sharing, without = summaries[True], summaries[False]
    assert with_sharing["computed_tokens_per_s"] < 0.95 * with_sharing["tokens_per_s"]
    assert without["computed_tokens_per_s"] == pytest.approx(without["tokens_per_s"])
