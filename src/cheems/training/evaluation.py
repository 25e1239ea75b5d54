"""Scoring the reward model while it trains: the rewards of a batch of token sequences (what
the training loop's forward and the evaluation both run) and the CheemsBench metrics of the
current weights on the eval set, every process scoring its share.

Imports torch and accelerate inside the functions that need them, so the trainer imports
without them.
"""

from __future__ import annotations

import math

from cheems.metrics import evaluate
from cheems.models.packing import pack_sequences, packed_backend
from cheems.models.sequences import default_token_budget, pad_right, plan_batches
from cheems.training.training_data import EvalSet

__all__ = ["batch_rewards", "evaluate_weights"]


def batch_rewards(reward_model, seqs: list[list[int]], *, packing: bool, pad_id: int, device):
    """The rewards (n,) of token sequences ``seqs``: one packed row, or one right-padded batch."""
    if packing:
        batch = pack_sequences(seqs, device, backend=packed_backend(device))
        return reward_model(batch.input_ids, packing=batch)
    return reward_model(*pad_right(seqs, pad_id, device))


def evaluate_weights(accelerator, reward_model, eval_set: EvalSet, pad_id: int, batch_size: int,
                     packing: bool) -> dict:
    """CheemsBench Accuracy / Exact Match / Overall of the current weights on the eval set.

    Every process scores every n-th batch (padded to the same number of batches, since
    ZeRO-3 gathers weights collectively) and the scores are gathered on all of them."""
    import torch
    from accelerate.utils import gather_object

    device = accelerator.device
    budget = default_token_budget(device.type)
    batches = plan_batches([len(x) for x in eval_set.ids], token_budget=budget, max_batch_size=batch_size,
                           packed=packing)
    n = accelerator.num_processes
    mine = batches[accelerator.process_index::n]
    rounds = math.ceil(len(batches) / n)
    mine = mine + [batches[0]] * (rounds - len(mine))  # repeats score again; the dict keeps one
    scored = []
    was_training = reward_model.training
    reward_model.eval()
    with torch.no_grad():
        for batch in mine:
            values = batch_rewards(reward_model, [eval_set.ids[i] for i in batch], packing=packing, pad_id=pad_id,
                                   device=device)
            scored.extend(zip(batch, values.tolist()))
    reward_model.train(was_training)
    if n > 1:
        scored = gather_object(scored)
    scores = {eval_set.keys[i]: v for i, v in scored}
    report = evaluate(eval_set.prompts, scores, n_bootstrap=0)
    subsets = {name: {"accuracy": e["accuracy"], "exact_match": e["exact_match"], "score": e["score"]}
               for name, e in report["subsets"].items() if e["score"] is not None}
    means = {k: sum(s[k] for s in subsets.values()) / len(subsets) if subsets else None
             for k in ("accuracy", "exact_match")}
    return {"overall": report["overall"], **means, "subsets": subsets}
