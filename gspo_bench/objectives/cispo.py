"""CISPO: clipped, stop-gradient importance-sampling weight on every token (MiniMax 2025,
"MiniMax-M1", arXiv 2506.13585, section 3.1)."""

from __future__ import annotations

import torch

from gspo_bench.objectives.inputs import prepare, safe_exp
from gspo_bench.objectives.metrics import clip_metrics, ratio_metrics
from gspo_bench.objectives.reduce import Reduction, aggregate
from gspo_bench.objectives.registry import Metrics, register_objective
from gspo_bench.objectives.surrogate import check_clip_range


@register_objective(
    "cispo",
    description="CISPO: sg[clip(w_it)] A_it log pi, token mean; no lower bound, eps_high 0.28",
    reference="MiniMax 2025, MiniMax-M1 (arXiv 2506.13585), eq. 4-5",
    reduction="token_mean",
)
def cispo_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    clip_low: float = 1.0,
    clip_high: float = 0.28,
    weights: torch.Tensor | None = None,
    *,
    reduction: Reduction,
) -> tuple[torch.Tensor, Metrics]:
    """CISPO: J = sum_i sum_t sg[clip(w_it, 1-eps_low, 1+eps_high)] A_it log pi_theta(y_it) / sum_i |y_i|.

    No token's gradient is dropped: the IS weight is truncated and detached. M1 imposes no lower bound
    (eps_low = 1 makes it 0) and tunes only eps_high; 0.28 (DAPO's clip-higher) is the common default.
    `clip/frac` here is the fraction of tokens whose IS weight was truncated, whatever the sign of A.
    """
    check_clip_range("cispo", clip_low, clip_high)
    batch = prepare(logp, old_logp, advantages, mask, weights=weights, objective="cispo")
    w = safe_exp(batch.log_ratio).detach()  # [B, T]
    weight = w.clamp(1.0 - clip_low, 1.0 + clip_high)  # [B, T] sg[clip(w)]
    terms = weight * batch.advantages * batch.logp  # [B, T]
    loss = -aggregate(terms, batch, reduction)
    return loss, {**clip_metrics(w < 1.0 - clip_low, w > 1.0 + clip_high, batch), **ratio_metrics(batch)}
