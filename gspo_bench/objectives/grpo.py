"""GRPO: token-level importance ratio, token-level clip (GSPO paper eq. 2).

Shao et al. 2024, "DeepSeekMath", arXiv 2402.03300; as restated in Zheng et al. 2025, "Group
Sequence Policy Optimization", arXiv 2507.18071, eq. 2 and 4, with the paper's tuned clip range.
"""

from __future__ import annotations

import torch

from gspo_bench.objectives.inputs import prepare, safe_exp
from gspo_bench.objectives.metrics import clip_metrics, ratio_metrics
from gspo_bench.objectives.reduce import Reduction, aggregate
from gspo_bench.objectives.registry import Metrics, register_objective
from gspo_bench.objectives.surrogate import check_clip_range, check_dual_clip, clipped_surrogate, dual_clipped


def token_clip_objective(
    name: str,
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    clip_low: float,
    clip_high: float,
    reduction: Reduction,
    max_tokens: int | None = None,
    weights: torch.Tensor | None = None,
    dual_clip: float | None = None,
) -> tuple[torch.Tensor, Metrics]:
    """-J for J = reduce_t min(w_it A_it, clip(w_it) A_it): the token-ratio family (GRPO, DAPO, Dr. GRPO);
    with `dual_clip` c, a term with A < 0 is bounded below by c A (`surrogate.dual_clipped`)."""
    check_clip_range(name, clip_low, clip_high)
    check_dual_clip(name, dual_clip)
    batch = prepare(logp, old_logp, advantages, mask, weights=weights, objective=name)
    w = safe_exp(batch.log_ratio)  # [B, T] w_it
    terms, cut_low, cut_high = clipped_surrogate(w, batch.advantages, clip_low, clip_high)  # [B, T]
    terms, cut_dual = dual_clipped(terms, w, batch.advantages, dual_clip)  # [B, T]
    loss = -aggregate(terms, batch, reduction, max_tokens=max_tokens)
    return loss, {**clip_metrics(cut_low, cut_high, batch, cut_dual=cut_dual), **ratio_metrics(batch)}


@register_objective(
    "grpo",
    description="GRPO: token ratio w_it, token clip, mean over tokens then responses (eq. 2)",
    reference="Shao et al. 2024 (arXiv 2402.03300); GSPO paper eq. 2, tuned clip 0.2/0.27",
)
def grpo_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    clip_low: float = 0.2,
    clip_high: float = 0.27,
    dual_clip: float | None = None,
    weights: torch.Tensor | None = None,
    *,
    reduction: Reduction,
) -> tuple[torch.Tensor, Metrics]:
    """GRPO (eq. 2): J = 1/B sum_i 1/|y_i| sum_t min(w_it A_i, clip(w_it, 1-eps_low, 1+eps_high) A_i).

    Unclipped gradient (eq. 12): every valid token gets weight w_it A_i / (B |y_i|).
    `dual_clip` c > 1 (default None: the paper's GRPO) bounds a term with A_i < 0 below by c A_i, so
    one token with a huge ratio cannot dominate the loss (dual-clip PPO; verl's `clip_ratio_c`).
    """
    return token_clip_objective(
        "grpo", logp, old_logp, advantages, mask, clip_low, clip_high, reduction, weights=weights,
        dual_clip=dual_clip,
    )
