"""RSPO: Router-Shift Policy Optimization (Zhang et al. 2025, "Towards Stable and Effective
Reinforcement Learning for Mixture-of-Experts", arXiv 2510.23027).

The router-shift ratio of token t measures how far the current router has moved from the old one
on the experts the old policy activated for it, averaged over the MoE layers:

    d_t     = 1/L sum_l 1/K sum_{k in TopK_old(l, t)} |log g^new_{l,k}(t) - log g^old_{l,k}(t)|
    gamma_t = max(exp(-d_t), gamma_min),   stop-gradient

with g the family's gate score (softmax probability, or sigmoid for sigmoid routers), read from
`RoutingCapture.gate_scores` (old pass) and `probe_scores` at the old experts (update forward).
gamma_t rescales the token ratio before clipping and aggregation: w_t -> w_t * gamma_t, which
down-weights exactly the tokens whose routing moved. RSPO as evaluated on Qwen3-30B-A3B is GMPO
plus this rescaling ("RSPO (GMPO+RS)"), which is what `rspo` computes.

Sources: the paper's abstract (v2) and its OpenReview version state the design (per-token ratio on
the old activated experts, stop-gradient, lower-bound floor, rescaling before clipping, GMPO as the
base); the per-layer, per-expert mean of absolute log-score changes is the paper's definition as
secondary summaries of section 3 restate it. The full text was not reachable here; gamma_min = 0.7
is our default (the paper names a floor, not a value we could read), tune it as a kwarg.
"""

from __future__ import annotations

import torch

from gspo_bench.objectives.gmpo import geometric_mean_loss
from gspo_bench.objectives.inputs import prepare
from gspo_bench.objectives.metrics import clip_metrics, masked_mean, ratio_metrics
from gspo_bench.objectives.reduce import Reduction
from gspo_bench.objectives.registry import Metrics, register_objective
from gspo_bench.objectives.surrogate import check_clip_range


def router_shift_from_scores(old_scores: torch.Tensor, new_scores: torch.Tensor) -> torch.Tensor:
    """d = mean over layers and experts of |log g_new - log g_old|: gate scores [L, ..., k] -> [...].

    Both score the same (the old policy's top-k) experts; a score that underflowed to 0 counts as the
    smallest positive fp32 number, so d stays finite."""
    if old_scores.shape != new_scores.shape:
        raise ValueError(f"router_shift_from_scores: old {tuple(old_scores.shape)} and new {tuple(new_scores.shape)} gate "
                         "scores differ in shape")
    tiny = torch.finfo(torch.float32).tiny
    old_log = old_scores.detach().float().clamp(min=tiny).log()
    new_log = new_scores.detach().float().clamp(min=tiny).log()
    return (new_log - old_log).abs().mean(dim=(0, -1))


@register_objective(
    "rspo",
    description="RSPO: token ratio x router-shift weight gamma = max(exp(-d), gamma_min) (sg), then GMPO",
    reference="Zhang et al. 2025, RSPO (arXiv 2510.23027), GMPO + router shift; clip (e^-0.4, e^0.4), gamma_min 0.7 (ours)",
    advantages="response",
    inputs=("router_shift",),
)
def rspo_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    router_shift: torch.Tensor,
    clip_low: float = 0.4,
    clip_high: float = 0.4,
    gamma_min: float = 0.7,
    weights: torch.Tensor | None = None,
    *,
    reduction: Reduction,
) -> tuple[torch.Tensor, Metrics]:
    """RSPO: J = 1/B sum_i A_i exp(1/|y_i| sum_t c_it) with GMPO's sign-aware log-space clip c_it of
    the rescaled token log-ratio log w_it + log gamma_it, gamma_it = max(exp(-d_it), gamma_min) (sg).

    `router_shift` [B, T] is d_it (see `router_shift_from_scores`); d = 0 everywhere gives GMPO exactly.
    Gradient through token t: A_i s_i / |y_i| where not clipped (s_i the clipped geometric mean).
    """
    check_clip_range("rspo", clip_low, clip_high, ratio_space=False)
    if not 0.0 <= gamma_min <= 1.0:
        raise ValueError(f"rspo: gamma_min must be in [0, 1], got {gamma_min}")
    batch = prepare(logp, old_logp, advantages, mask, per_response_advantages=True, weights=weights, objective="rspo")
    if router_shift.shape != batch.mask.shape:
        raise ValueError(f"rspo: router_shift must be [B, T] = {tuple(batch.mask.shape)}, got {tuple(router_shift.shape)}")
    shift = torch.where(batch.mask, router_shift.detach().float().to(batch.mask.device), 0.0)  # [B, T]
    gamma = torch.exp(-shift).clamp(min=gamma_min)  # [B, T], 1 at padding
    loss, cut_low, cut_high = geometric_mean_loss(batch.log_ratio + gamma.log(), batch, clip_low, clip_high, reduction)
    measured = {"rspo/gamma_mean": masked_mean(gamma, batch.mask), "rspo/shift_mean": masked_mean(shift, batch.mask),
                "rspo/gamma_floor_frac": masked_mean((torch.exp(-shift) <= gamma_min).float(), batch.mask)}
    return loss, {**clip_metrics(cut_low, cut_high, batch), **ratio_metrics(batch), **measured}
