"""SAPO: a soft sigmoid gate instead of the hard clip (Gao et al. 2025, Qwen team, "Soft Adaptive
Policy Optimization", arXiv 2511.20347)."""

from __future__ import annotations

import torch

from gspo_bench.objectives.inputs import prepare, safe_exp
from gspo_bench.objectives.metrics import clip_metrics, ratio_metrics
from gspo_bench.objectives.reduce import Reduction, aggregate
from gspo_bench.objectives.registry import Metrics, register_objective

# A token counts as (softly) clipped when the gate passes less than half the unclipped gradient.
SOFT_CLIP_GRAD_WEIGHT = 0.5


@register_objective(
    "sapo",
    description="SAPO: soft gate (4/tau) sigmoid(tau (w-1)) on token ratios, tau 1.0 (A>0) / 1.05 (A<0)",
    reference="Gao et al. 2025, SAPO (arXiv 2511.20347), tau_pos 1.0, tau_neg 1.05",
)
def sapo_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    clip_low: float | None = None,
    clip_high: float | None = None,
    *,
    tau_pos: float = 1.0,
    tau_neg: float = 1.05,
    weights: torch.Tensor | None = None,
    reduction: Reduction,
) -> tuple[torch.Tensor, Metrics]:
    """SAPO: J = 1/B sum_i 1/|y_i| sum_t f(w_it) A_it, f(w) = (4/tau) sigmoid(tau (w - 1)),
    tau = tau_pos where A > 0 else tau_neg.

    The gate's gradient weight is 4 sigmoid(1-sigmoid) w: 1 at w = 1, decaying smoothly off-policy.
    SAPO has no hard clip, so `clip_low` / `clip_high` must stay None. `clip/frac` here counts tokens
    whose gate passes less than half the unclipped gradient (`clip/frac_low`: w < 1, `_high`: w > 1).
    """
    if clip_low is not None or clip_high is not None:
        raise ValueError("sapo has no hard clip range; set its temperatures tau_pos / tau_neg instead")
    if tau_pos <= 0 or tau_neg <= 0:
        raise ValueError(f"sapo: tau_pos and tau_neg must be > 0, got {tau_pos}, {tau_neg}")
    batch = prepare(logp, old_logp, advantages, mask, weights=weights, objective="sapo")
    w = safe_exp(batch.log_ratio)  # [B, T]
    tau = torch.where(batch.advantages > 0, tau_pos, tau_neg)  # [B, T]
    gate_arg = torch.sigmoid(tau * (w - 1.0))  # [B, T]
    terms = (4.0 / tau) * gate_arg * batch.advantages  # [B, T]
    loss = -aggregate(terms, batch, reduction)
    with torch.no_grad():
        soft_cut = 4.0 * gate_arg * (1.0 - gate_arg) < SOFT_CLIP_GRAD_WEIGHT  # [B, T]
    return loss, {**clip_metrics(soft_cut & (w < 1.0), soft_cut & (w > 1.0), batch), **ratio_metrics(batch)}
