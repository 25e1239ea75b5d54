"""The loss of a generative reward model: the verdict token of a pairwise judge prompt, with
label smoothing over the verdicts.

The model reads a judge prompt (:mod:`cheems.training.judge_data`) and its first reply token
is the verdict letter. The loss sits on that one token: the cross-entropy of the next-token
distribution at the prompt's last position against a target that puts ``1 - eps`` on the
right verdict and ``eps / K`` on each of the K verdicts (label smoothing, Szegedy et al.
2016, §7), the probabilities taken over the whole vocabulary.
"""

from __future__ import annotations

__all__ = ["verdict_loss", "verdict_terms"]


def verdict_loss(logits, targets, verdict_ids, smoothing: float = 0.1):
    """Label-smoothed cross-entropy of the verdict token.

    ``logits``: (n, V) the next-token logits at each example's verdict position (its last
    prompt token); ``targets``: long (n,) indices into ``verdict_ids``; ``verdict_ids``: long
    (K,) the token of each verdict letter. With p_i = softmax(logits_i) over all V tokens and
    eps = ``smoothing``::

        loss = 1/n sum_i -[ (1 - eps) log p_i(v_{t_i}) + eps / K sum_k log p_i(v_k) ]

    Because p is over the whole vocabulary, descending the loss also moves probability off
    every token that is no verdict. eps = 0 is the plain cross-entropy of the right letter.
    Returns ``(loss, {"verdict_loss", "accuracy", "examples"})``, plain floats in the dict;
    ``accuracy`` is the share of examples whose most probable verdict is the right one. No
    example gives a zero loss (connected to ``logits``) and accuracy NaN.
    """
    n = int(targets.numel())
    loss, right = verdict_terms(logits, targets, verdict_ids, smoothing)
    accuracy = right.item() / n if n else float("nan")
    return loss, {"verdict_loss": loss.item(), "accuracy": accuracy, "examples": n}


def verdict_terms(logits, targets, verdict_ids, smoothing: float = 0.1):
    """`verdict_loss` with the count of right verdicts left on the device, so that a training
    step reads it once rather than waiting for the GPU after every forward batch:
    ``(loss, right)``, ``right`` a detached float tensor (0 for no example)."""
    if logits.shape[0] == 0:
        zero = logits.sum() * 0.0
        return zero, zero.detach()
    log_p = logits.float().log_softmax(dim=-1)  # (n, V)
    at_verdicts = log_p[:, verdict_ids]  # (n, K)
    picked = at_verdicts.gather(1, targets[:, None]).squeeze(1)  # (n,)
    k = at_verdicts.shape[1]
    loss = -((1.0 - smoothing) * picked + (smoothing / k) * at_verdicts.sum(dim=1)).mean()
    return loss, (at_verdicts.argmax(dim=1) == targets).float().sum().detach()
