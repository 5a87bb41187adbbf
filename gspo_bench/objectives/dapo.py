"""DAPO: clip-higher and a token-level loss (Yu et al. 2025, "DAPO", arXiv 2503.14476)."""

from __future__ import annotations

import torch

from gspo_bench.objectives.grpo import token_clip_objective
from gspo_bench.objectives.reduce import Reduction
from gspo_bench.objectives.registry import Metrics, register_objective


@register_objective(
    "dapo",
    description="DAPO: token ratio, clip-higher 0.2/0.28, sum over all tokens / total tokens",
    reference="Yu et al. 2025, DAPO (arXiv 2503.14476), eq. 8 and 10",
    reduction="token_mean",
)
def dapo_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    clip_low: float = 0.2,
    clip_high: float = 0.28,
    dual_clip: float | None = None,
    weights: torch.Tensor | None = None,
    *,
    reduction: Reduction,
) -> tuple[torch.Tensor, Metrics]:
    """DAPO: J = sum_i sum_t min(w_it A_it, clip(w_it, 1-eps_low, 1+eps_high) A_it) / sum_i |y_i|.

    Every token weighs the same, whatever the length of its response (token-level policy gradient
    loss); eps_high > eps_low ("clip-higher"). Dynamic sampling is a rollout choice, not part of the loss.
    `dual_clip` c > 1 (default off) bounds a term with A < 0 below by c A, as in `grpo`.
    """
    return token_clip_objective("dapo", logp, old_logp, advantages, mask, clip_low, clip_high, reduction,
                                weights=weights, dual_clip=dual_clip)
