"""Dr. GRPO: GRPO without length normalisation (Liu et al. 2025, "Understanding R1-Zero-Like
Training: A Critical Perspective", arXiv 2503.20783)."""

from __future__ import annotations

import torch

from gspo_bench.objectives.grpo import token_clip_objective
from gspo_bench.objectives.reduce import Reduction
from gspo_bench.objectives.registry import Metrics, register_objective


@register_objective(
    "dr_grpo",
    description="Dr. GRPO: token ratio and clip, sum over tokens / (B * T_max), no length normalisation",
    reference="Liu et al. 2025, Dr. GRPO (arXiv 2503.20783); pair with group_advantages(scale='none')",
    reduction="seq_mean_token_sum_norm",
)
def dr_grpo_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    clip_low: float = 0.2,
    clip_high: float = 0.2,
    *,
    max_tokens: int | None = None,
    dual_clip: float | None = None,
    weights: torch.Tensor | None = None,
    reduction: Reduction,
) -> tuple[torch.Tensor, Metrics]:
    """Dr. GRPO: J = 1/(B T_max) sum_i sum_t min(w_it A_i, clip(w_it) A_i).

    T_max is a constant (the generation budget) so that no response's tokens are weighted by its own
    length; pass it as `max_tokens`, or leave None to use the longest valid response in the batch.
    The paper's other change, advantages without std scaling, is `group_advantages(scale="none")`.
    `dual_clip` c > 1 (default off) bounds a term with A < 0 below by c A, as in `grpo`.
    """
    return token_clip_objective(
        "dr_grpo", logp, old_logp, advantages, mask, clip_low, clip_high,
        reduction, max_tokens=max_tokens, weights=weights, dual_clip=dual_clip,
    )
