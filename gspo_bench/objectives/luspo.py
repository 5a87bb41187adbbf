"""LUSPO: Length-Unbiased Sequence Policy Optimization (arXiv 2602.05261)."""

from __future__ import annotations

import torch

from gspo_bench.objectives.inputs import prepare, safe_exp
from gspo_bench.objectives.metrics import clip_metrics, ratio_metrics
from gspo_bench.objectives.reduce import Reduction, aggregate
from gspo_bench.objectives.registry import Metrics, register_objective
from gspo_bench.objectives.surrogate import check_clip_range, clipped_surrogate


@register_objective(
    "luspo",
    description="LUSPO: GSPO's clipped sequence term scaled by the response length |y_i|, mean over responses",
    reference="LUSPO (arXiv 2602.05261), GSPO eq. 5 x |y_i|; clip 2e-3/2.5e-3 as TRL's LUSPO setting",
    advantages="response",
    exempt={"on_policy": "the sequence term is scaled by |y_i|: its on-policy gradient is A_i / B on every token, "
                        "which none of the three reductions gives"},
)
def luspo_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    clip_low: float = 2e-3,
    clip_high: float = 2.5e-3,
    weights: torch.Tensor | None = None,
    *,
    reduction: Reduction,
) -> tuple[torch.Tensor, Metrics]:
    """LUSPO: J = 1/B sum_i |y_i| min(s_i A_i, clip(s_i, 1-eps_low, 1+eps_high) A_i), s_i GSPO's
    length-normalised sequence ratio (eq. 7).

    GSPO's per-response term gives every response one vote whatever its length, so each token of a
    long response weighs 1/|y_i| of a short one's: the gradient favours short correct and long wrong
    answers (the length bias LUSPO names). Scaling the term by |y_i| gives each token weight
    s_i A_i / B again, as in GRPO's token sum, while keeping GSPO's sequence ratio and clip.
    The formula follows the paper's abstract and TRL's implementation; the full text was not reachable here.
    """
    check_clip_range("luspo", clip_low, clip_high)
    batch = prepare(logp, old_logp, advantages, mask, per_response_advantages=True, weights=weights, objective="luspo")
    s = safe_exp(batch.seq_log_ratio())  # [B]
    seq_terms, cut_low, cut_high = clipped_surrogate(s, batch.response_advantages(), clip_low, clip_high)  # [B]
    # |y_i| x the term, spread over its tokens: the token mean of response i is |y_i| x its term
    terms = (seq_terms * batch.lengths)[:, None].expand_as(batch.log_ratio)  # [B, T]
    loss = -aggregate(terms, batch, reduction)
    cuts = (cut_low[:, None].expand_as(batch.mask), cut_high[:, None].expand_as(batch.mask))
    return loss, {**clip_metrics(*cuts, batch), **ratio_metrics(batch)}
