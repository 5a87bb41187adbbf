"""Bugs planted in the objectives to show that `gspo-bench regress` catches them at the first step:
each is an objective function with one deliberate mistake whose logged metrics stay right, so only the
loss and the gradient move. tests/test_regress.py asserts each lands far past its tolerance;
experiments/regress_margins.py prints how far.
"""

from __future__ import annotations

from gspo_bench.objectives.grpo import grpo_loss, token_clip_objective
from gspo_bench.objectives.inputs import prepare, safe_exp
from gspo_bench.objectives.metrics import clip_metrics, ratio_metrics
from gspo_bench.objectives.reduce import aggregate
from gspo_bench.objectives.surrogate import clipped_surrogate


def gspo_summing_in_the_loss(logp, old_logp, advantages, mask, clip_low=3e-4, clip_high=4e-4, weights=None):
    """GSPO with the sequence log-ratio summed instead of averaged in the loss only: the logged ratio
    statistics (computed from the batch) stay right."""
    batch = prepare(logp, old_logp, advantages, mask, per_response_advantages=True, objective="gspo")
    s = safe_exp(batch.log_ratio.sum(-1))  # the bug: no 1/|y_i|
    seq_terms, cut_low, cut_high = clipped_surrogate(s, batch.response_advantages(), clip_low, clip_high)
    loss = -aggregate(seq_terms[:, None].expand_as(batch.log_ratio), batch, "seq_mean_token_mean")
    cuts = (cut_low[:, None].expand_as(batch.mask), cut_high[:, None].expand_as(batch.mask))
    return loss, {**clip_metrics(*cuts, batch), **ratio_metrics(batch)}


def grpo_with_its_sign_flipped(*args, **kwargs):
    """GRPO descending its objective: the loss's sign flipped (the metrics stay right)."""
    loss, metrics = grpo_loss(*args, **kwargs)
    return -loss, metrics


def grpo_over_all_tokens(logp, old_logp, advantages, mask, clip_low=0.2, clip_high=0.27, dual_clip=None, weights=None):
    """GRPO with the wrong normaliser: one mean over every token of the batch (DAPO's token mean)
    instead of the mean over tokens, then over responses (eq. 2)."""
    return token_clip_objective("grpo", logp, old_logp, advantages, mask, clip_low, clip_high, "token_mean",
                                weights=weights, dual_clip=dual_clip)
