"""GMPO: geometric mean of token ratios (Zhao et al. 2025, "Geometric-Mean Policy Optimization",
arXiv 2507.20673)."""

from __future__ import annotations

import torch

from gspo_bench.objectives.inputs import PolicyBatch, prepare, safe_exp
from gspo_bench.objectives.metrics import clip_metrics, ratio_metrics
from gspo_bench.objectives.reduce import Reduction, aggregate
from gspo_bench.objectives.registry import Metrics, register_objective
from gspo_bench.objectives.surrogate import check_clip_range


@register_objective(
    "gmpo",
    description="GMPO: geometric mean of token ratios, sign-aware token clip in log space (eps 0.4)",
    reference="Zhao et al. 2025, GMPO (arXiv 2507.20673), clip range (e^-0.4, e^0.4)",
    advantages="response",
)
def gmpo_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    clip_low: float = 0.4,
    clip_high: float = 0.4,
    weights: torch.Tensor | None = None,
    *,
    reduction: Reduction,
) -> tuple[torch.Tensor, Metrics]:
    """GMPO: J = 1/B sum_i A_i * exp(1/|y_i| sum_t c_it), with the token log-ratio clipped sign-aware:
    c_it = sgn(A_i) * min(sgn(A_i) log w_it, sgn(A_i) clip(log w_it, -eps_low, eps_high)).

    `clip_low` / `clip_high` are in log space (the ratio range is (e^-eps_low, e^eps_high)). For A > 0
    only the upper bound binds, for A < 0 only the lower one; a clipped token gets no gradient and
    counts in `clip/frac`.
    """
    check_clip_range("gmpo", clip_low, clip_high, ratio_space=False)  # log space: any width
    batch = prepare(logp, old_logp, advantages, mask, per_response_advantages=True, weights=weights, objective="gmpo")
    loss, cut_low, cut_high = geometric_mean_loss(batch.log_ratio, batch, clip_low, clip_high, reduction)
    return loss, {**clip_metrics(cut_low, cut_high, batch), **ratio_metrics(batch)}


def geometric_mean_loss(
    log_w: torch.Tensor, batch: PolicyBatch, clip_low: float, clip_high: float, reduction: Reduction
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """-J of GMPO for token log-ratios `log_w` [B, T] (GMPO: log w_it; RSPO: log w_it + log gamma_it);
    the per-response terms reduced by `reduction`;
    returns `(loss, cut_low, cut_high)` with the [B, T] flags of the tokens the clip cut."""
    adv = batch.response_advantages()  # [B]
    sign = torch.sign(adv)[:, None]  # [B, 1]
    clipped = log_w.clamp(-clip_low, clip_high)  # [B, T]
    log_w_used = sign * torch.minimum(sign * log_w, sign * clipped)  # [B, T]
    log_geo = torch.where(batch.mask, log_w_used, 0.0).sum(-1) / batch.lengths.clamp(min=1.0)  # [B]
    seq_terms = safe_exp(log_geo) * adv  # [B]
    loss = -aggregate(seq_terms[:, None].expand_as(log_w), batch, reduction)
    cut_high = (sign > 0) & (log_w > clip_high)  # [B, T]
    cut_low = (sign < 0) & (log_w < -clip_low)  # [B, T]
    return loss, cut_low, cut_high
