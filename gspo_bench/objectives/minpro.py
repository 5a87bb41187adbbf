"""MinPRO, Minimum Prefix Ratio (Lei, Cheng, Tao 2026, "A Step Back: Prefix Importance Ratio Stabilizes
Policy Optimization", arXiv 2601.22718): the prefix importance ratio prod_{j <= t} r_j that a token's term
needs off-policy, replaced by the token's ratio times the smallest ratio before it."""

from __future__ import annotations

import torch

from gspo_bench.objectives.inputs import LOG_RATIO_CLAMP, prepare, safe_exp
from gspo_bench.objectives.metrics import clip_metrics, masked_mean, ratio_metrics
from gspo_bench.objectives.reduce import Reduction, aggregate
from gspo_bench.objectives.registry import Metrics, register_objective
from gspo_bench.objectives.surrogate import check_clip_range


@torch.no_grad()
def log_prefix_min(log_ratio: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """log of min_{j < t, j valid} r_j for every position t [B, T] (strictly before t, padding skipped), 0
    (r = 1) where no valid token precedes t; from the log-ratios [B, T]."""
    filled = torch.where(mask, log_ratio, torch.inf)  # [B, T]
    inclusive = torch.cummin(filled, dim=-1).values  # min over j <= t
    exclusive = torch.cat([torch.full_like(inclusive[:, :1], torch.inf), inclusive[:, :-1]], dim=-1)  # j < t
    return torch.where(torch.isinf(exclusive), 0.0, exclusive)


@register_objective(
    "minpro",
    description="MinPRO: sg[clip(min_{j<t} r_j * r_t)] A_t log pi, the minimum earlier ratio times the "
                "token's in place of the prefix ratio, CISPO-style clip (no lower bound, eps_high 0.28); "
                "token mean",
    reference="Lei, Cheng, Tao 2026, MinPRO (arXiv 2601.22718): the objective as restated from the paper "
              "(its method section and epsilons were not reachable here; no public implementation found)",
    reduction="token_mean",
)
def minpro_loss(
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
    """MinPRO: J = sum_i sum_t sg[clip(m_it r_it, 1 - eps_low, 1 + eps_high)] A_it log pi_theta(y_it) / sum_i |y_i|,

        r_it = pi_theta(y_it) / pi_old(y_it)          (pi_old: the run's anchor, `train.old_logp`)
        m_it = min_{j < t} r_ij                        (1 for a response's first token)

    The exact off-policy correction of token t's term is the prefix ratio prod_{j <= t} r_ij, whose product
    explodes or vanishes with length; MinPRO keeps its non-cumulative surrogate m_it r_it: a token after
    any far-down-weighted token of its response is down-weighted too, and no product grows with length.
    The weight is detached and clipped as CISPO's (the paper's baselines include CISPO; its restated
    objective clips the product with eps_low and eps_high), so no token's gradient is dropped. The minimum
    is not capped at 1 (m > 1 when every earlier ratio is above 1), as stated.

    The paper's method section, listing and clip range were not reachable here (only its abstract and
    restatements of its objective): the epsilons are CISPO's defaults (no lower bound, 0.28), said so in
    `gspo-bench ls`. Log-ratios are clamped to +-LOG_RATIO_CLAMP before the minimum. `clip/frac` counts
    tokens whose weight m r was truncated; `minpro/prefix_min_mean` is the mean m over valid tokens and
    `minpro/prefix_min_lt_half` the share of valid tokens with m < 1/2.
    """
    check_clip_range("minpro", clip_low, clip_high)
    batch = prepare(logp, old_logp, advantages, mask, weights=weights, objective="minpro")
    log_r = batch.log_ratio.detach().clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)  # [B, T]
    log_m = log_prefix_min(log_r, batch.mask)  # [B, T]
    w = safe_exp(log_m + log_r)  # [B, T] m r
    weight = w.clamp(1.0 - clip_low, 1.0 + clip_high)  # sg[clip(m r)]
    terms = weight * batch.advantages * batch.logp  # [B, T]
    loss = -aggregate(terms, batch, reduction)
    with torch.no_grad():
        prefix_min = safe_exp(log_m)
    return loss, {**clip_metrics(w < 1.0 - clip_low, w > 1.0 + clip_high, batch), **ratio_metrics(batch),
                  "minpro/prefix_min_mean": masked_mean(prefix_min, batch.mask),
                  "minpro/prefix_min_lt_half": masked_mean((prefix_min < 0.5).float(), batch.mask)}
