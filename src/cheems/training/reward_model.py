"""The reward model as the trainer runs it: one reward per sequence, gathered across processes.

- `RewardModel`: a ``*ForSequenceClassification`` (or a peft model around one) whose
  ``forward(input_ids, attention_mask)`` returns the score head at each sequence's last real
  token, as cheems scores, and ``forward(input_ids, packing=batch)`` the same for a packed
  row (:mod:`cheems.models.packing`); no LM head is computed. DDP-, FSDP- and
  DeepSpeed-wrappable.
- `gather_rewards`: every process's rewards of a micro-step in one vector, with gradients
  flowing back to each process's own part (`GatherRewards`).

Imports torch at the top: only the trainer's functions import this module, once torch is
known to be installed, so ``cheems.training.trainer`` itself imports without it.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from cheems.models.checkpoints import unwrap_peft
from cheems.models.packing import PackedBatch, rewards_at
from cheems.models.sequences import reward_at_last_token

__all__ = ["GatherRewards", "RewardModel", "gather_rewards"]


class RewardModel(torch.nn.Module):
    """``inner`` wrapped so that ``forward(input_ids, attention_mask)`` returns one reward per
    row (n,): the score head at each sequence's last real token; with ``packing`` (the
    `PackedBatch` whose ``input_ids`` are given) one reward per packed sequence. ``inner`` may
    be a peft model around a ``*ForSequenceClassification``."""

    def __init__(self, inner):
        super().__init__()
        self.inner = inner

    @property
    def classifier(self):  # the *ForSequenceClassification (LoRA layers inside when peft)
        return unwrap_peft(self.inner)

    def forward(self, input_ids, attention_mask=None, packing: PackedBatch | None = None):
        core = self.classifier
        base = getattr(core, core.base_model_prefix)
        if packing is not None:  # one packed row (1, T): a reward per packed sequence
            hidden = base(input_ids=input_ids, position_ids=packing.position_ids,
                          cheems_packing=packing).last_hidden_state
            return rewards_at(hidden, packing, core.score).float()  # (n,)
        hidden = base(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        return reward_at_last_token(hidden, attention_mask, core.score).float()  # (n,)


class GatherRewards(torch.autograd.Function):
    """``all_gather`` of each process's rewards, every part padded to ``max(sizes)``; the
    backward all-reduces the gradient and keeps this process's slice (see `gather_rewards`)."""

    @staticmethod
    def forward(ctx, x, sizes: list[int], rank: int):
        width = max(sizes)
        ctx.width, ctx.size, ctx.rank = width, sizes[rank], rank
        padded = torch.zeros(width, dtype=x.dtype, device=x.device)
        padded[:len(x)] = x
        parts = [torch.empty_like(padded) for _ in sizes]
        dist.all_gather(parts, padded)
        return torch.cat(parts)  # (processes * width,)

    @staticmethod
    def backward(ctx, grad):
        grad = grad.contiguous().clone()
        dist.all_reduce(grad)
        start = ctx.rank * ctx.width
        return grad[start:start + ctx.size], None, None


def gather_rewards(local, sizes: list[int], rank: int):
    """Every process's rewards of this micro-step, concatenated in process order, with
    gradients flowing back to each process's own part.

    ``sizes[i]`` is process i's number of rewards (known to all from the shared plan). Each
    part is padded to the largest for ``all_gather``. Every process then computes the same
    loss from the same vector, so the gradient of the gathered vector is identical on all;
    the backward all-reduces it (a sum, as a reduce-scatter would) and keeps this process's
    slice, and the data-parallel average of parameter gradients brings it back to the mean.
    """
    width = max(sizes)
    gathered = GatherRewards.apply(local, sizes, rank)
    keep = torch.cat([torch.arange(i * width, i * width + n, device=local.device) for i, n in enumerate(sizes)])
    return gathered[keep]
