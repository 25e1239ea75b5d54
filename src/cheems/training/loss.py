"""The reward-model losses: Cheems' Bradley-Terry loss (paper §5, eq. 3-4) and the dual-path
objective that adds a language-model loss (Yang et al. 2024, "Regularizing Hidden States
Enables Learning Generalizable Reward Model").

Bradley–Terry over every ranked pair: the mean over pairs of ``-log sigmoid(r_w - r_l)``,
plus ``reg_coef`` times the mean of ``r^2`` over the batch's responses, which keeps rewards
centred near zero (the paper's regularisation, coefficient 0.1 by default).

Dual path: one forward pass of a causal LM feeds both a scalar head (the rewards, trained by
Bradley–Terry) and the LM head, whose token cross-entropy on the preferred responses keeps the
hidden states good at text generation while the head learns preferences:
``L = (1 - a) * L_BT + a * L_gen`` (`lm_loss`, `dual_loss`).
"""

from __future__ import annotations

__all__ = ["bradley_terry_loss", "bradley_terry_terms", "dual_loss", "lm_loss"]


def bradley_terry_loss(rewards, better, worse, reg_coef: float = 0.1):
    """Loss of one forward batch.

    ``rewards``: float tensor (n,) of the batch's responses; ``better``/``worse``: long tensors
    (p,) indexing into ``rewards``, one entry per training pair whose two responses are both in
    the batch. Returns ``(loss, {"pair_loss", "reg", "accuracy", "pairs"})`` with plain floats
    in the dict. A batch without pairs contributes only the regulariser.
    """
    loss, terms = bradley_terry_terms(rewards, better, worse, reg_coef)
    pairs = int(better.numel())
    return loss, {"pair_loss": terms["pair_loss"].item(), "reg": terms["reg"].item(),
                  "accuracy": terms["right"].item() / pairs if pairs else float("nan"), "pairs": pairs}


def bradley_terry_terms(rewards, better, worse, reg_coef: float = 0.1, *, counted=None, n_pairs: int | None = None,
                        n_rows: int | None = None):
    """`bradley_terry_loss` with its terms left on the device, so a training step reads them
    once rather than waiting for the GPU after every forward batch: ``(loss, {"pair_loss",
    "reg", "right"})``, ``right`` the number of pairs ranked right (float tensors, detached).

    L = -mean over pairs of log sigmoid(r_better - r_worse) + reg_coef * mean(r^2).

    With ``counted`` (indices into ``rewards``), ``n_pairs`` and ``n_rows``, the share of a
    larger forward batch's loss that these pairs and rewards carry: the sum of the pair terms
    over ``n_pairs`` and the sum of the ``counted`` rewards' squares over ``n_rows`` (the larger
    batch's pair and sequence counts), so that the shares of a batch cut into pieces add up to
    the batch's terms (:mod:`cheems.training.oom_retry`)."""
    import torch
    import torch.nn.functional as F

    squares = (rewards if counted is None else rewards[counted]).float().pow(2)
    rows = rewards.numel() if n_rows is None else n_rows
    reg = squares.sum() / rows if rows else rewards.new_zeros((), dtype=torch.float32)
    if better.numel():
        margin = rewards[better].float() - rewards[worse].float()
        pair_loss = -F.logsigmoid(margin).sum() / (better.numel() if n_pairs is None else n_pairs)
        right = (margin > 0).float().sum()
    else:
        pair_loss = rewards.new_zeros((), dtype=torch.float32)
        right = rewards.new_zeros((), dtype=torch.float32)
    loss = pair_loss + reg_coef * reg
    return loss, {"pair_loss": pair_loss.detach(), "reg": reg.detach(), "right": right.detach()}


def lm_loss(logits, targets):
    """The LM loss ``L_gen``, Yang et al.'s (2024) SFT regulariser taken per token: the mean
    token cross-entropy ``-1/m * sum_t log softmax(logits_t)[targets_t]`` over the ``m``
    positions given.

    ``logits``: float tensor (m, vocab), the LM head at the positions that predict a
    preferred response's tokens (position t predicts token t + 1; prompt positions are never
    given); ``targets``: long tensor (m,), the tokens predicted. Returns a 0-dim float32
    tensor; with no position (m = 0) it is 0 and still depends on ``logits``, so every
    process of a data-parallel run gives the LM head a gradient (of zeros).
    """
    import torch.nn.functional as F

    if targets.numel() == 0:
        return logits.float().sum() * 0.0
    return F.cross_entropy(logits.float(), targets, reduction="mean")


def dual_loss(bt_loss, gen_loss, lm_coef: float):
    """The dual-path objective of Yang et al. (2024), their reward loss regularised by the
    text-generation loss: ``(1 - a) * L_BT + a * L_gen`` with ``a = lm_coef`` in [0, 1];
    ``bt_loss`` is `bradley_terry_loss`'s (its r^2 term included), ``gen_loss`` is
    `lm_loss`'s. With a = 0 it is ``bt_loss`` itself, to the bit, and so are its gradients."""
    return (1.0 - lm_coef) * bt_loss + lm_coef * gen_loss
