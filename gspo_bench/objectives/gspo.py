"""GSPO and GSPO-token (Zheng et al. 2025, "Group Sequence Policy Optimization", arXiv 2507.18071)."""

from __future__ import annotations

import torch

from gspo_bench.objectives.inputs import prepare, safe_exp
from gspo_bench.objectives.metrics import clip_metrics, ratio_metrics
from gspo_bench.objectives.reduce import Reduction, aggregate
from gspo_bench.objectives.registry import Metrics, register_objective
from gspo_bench.objectives.surrogate import check_clip_range, clipped_surrogate


@register_objective(
    "gspo",
    description="GSPO: length-normalised sequence ratio s_i, sequence clip (eq. 5-7)",
    reference="Zheng et al. 2025, GSPO (arXiv 2507.18071), eq. 5-7, clip 3e-4/4e-4",
    advantages="response",
)
def gspo_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    clip_low: float = 3e-4,
    clip_high: float = 4e-4,
    weights: torch.Tensor | None = None,
    *,
    reduction: Reduction,
) -> tuple[torch.Tensor, Metrics]:
    """GSPO (eq. 5): J = 1/B sum_i min(s_i A_i, clip(s_i, 1-eps_low, 1+eps_high) A_i),
    s_i = exp(1/|y_i| sum_t log w_it) (eq. 7), computed in log space in fp32.

    Unclipped gradient (eq. 10): every valid token of response i gets weight s_i A_i / (B |y_i|).
    A clipped response counts all its tokens in `clip/frac`.
    """
    check_clip_range("gspo", clip_low, clip_high)
    batch = prepare(logp, old_logp, advantages, mask, per_response_advantages=True, weights=weights, objective="gspo")
    s = safe_exp(batch.seq_log_ratio())  # [B] s_i
    seq_terms, cut_low, cut_high = clipped_surrogate(s, batch.response_advantages(), clip_low, clip_high)  # [B]
    # A per-response term repeated over its tokens: the token mean of response i is the term itself.
    terms = seq_terms[:, None].expand_as(batch.log_ratio)  # [B, T]
    loss = -aggregate(terms, batch, reduction)
    cuts = (cut_low[:, None].expand_as(batch.mask), cut_high[:, None].expand_as(batch.mask))  # [B, T] each
    return loss, {**clip_metrics(*cuts, batch), **ratio_metrics(batch)}


@register_objective(
    "gspo_token",
    description="GSPO-token: s_it = sg[s_i] pi/sg[pi], per-token advantages allowed (eq. 13-14)",
    reference="Zheng et al. 2025, GSPO (arXiv 2507.18071), eq. 13-15, clip 3e-4/4e-4",
)
def gspo_token_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    clip_low: float = 3e-4,
    clip_high: float = 4e-4,
    weights: torch.Tensor | None = None,
    *,
    reduction: Reduction,
) -> tuple[torch.Tensor, Metrics]:
    """GSPO-token (eq. 13): J = 1/B sum_i 1/|y_i| sum_t min(s_it A_it, clip(s_it) A_it) with
    s_it = sg[s_i] * pi_theta(y_it) / sg[pi_theta(y_it)] (eq. 14): numerically s_i, and
    d s_it / d log pi_theta(y_it) = s_i. With A_it = A_i it equals GSPO in value, clipping and gradient.
    """
    check_clip_range("gspo_token", clip_low, clip_high)
    batch = prepare(logp, old_logp, advantages, mask, weights=weights, objective="gspo_token")
    log_s = batch.seq_log_ratio().detach()  # [B] sg[log s_i]
    log_s_token = log_s[:, None] + (batch.logp - batch.logp.detach())  # [B, T], value log s_i
    s_token = safe_exp(log_s_token)  # [B, T] s_it
    terms, cut_low, cut_high = clipped_surrogate(s_token, batch.advantages, clip_low, clip_high)  # [B, T]
    loss = -aggregate(terms, batch, reduction)
    return loss, {**clip_metrics(cut_low, cut_high, batch), **ratio_metrics(batch)}
