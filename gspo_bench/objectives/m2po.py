"""M2PO: Second-Moment Trust Policy Optimization (Zheng, Zhao and Chen 2025, "Prosperity before
Collapse: How Far Can Off-Policy RL Reach with Stale Data on LLMs?", arXiv 2510.01161, section 5)."""

from __future__ import annotations

import torch

from gspo_bench.objectives.inputs import PolicyBatch, prepare
from gspo_bench.objectives.metrics import masked_mean
from gspo_bench.objectives.reduce import Reduction
from gspo_bench.objectives.registry import Metrics, register_objective
from gspo_bench.objectives.surrogate import masked_surrogate


@torch.no_grad()
def second_moment_mask(batch: PolicyBatch, tau: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Algorithm 1: the trust-region tokens (A > 0 and r > 1, or A < 0 and r < 1) whose M2 = (log r)^2
    is largest are masked one by one until the mean M2 of the remaining trust-region tokens is <= tau.

    Returns `(masked [B, T] bool, trust [B, T] bool)`. The greedy loop keeps the j smallest values for
    the largest j whose mean is <= tau (the running mean of ascending values never decreases), so it
    is one sort, without a host round trip.
    """
    log_r, adv = batch.log_ratio, batch.advantages
    trust = batch.mask & (((adv > 0) & (log_r > 0)) | ((adv < 0) & (log_r < 0)))  # [B, T]
    m2 = torch.where(trust, log_r**2, float("inf")).flatten()  # non-trust tokens sort last
    ordered, order = torch.sort(m2, stable=True)
    count = torch.arange(1, m2.numel() + 1, device=m2.device)
    running_mean = torch.where(ordered.isfinite(), ordered, 0.0).cumsum(0) / count
    keep = ((running_mean <= tau) & (count <= trust.sum())).sum()  # trust tokens kept
    rank = torch.empty_like(order).scatter_(0, order, torch.arange(m2.numel(), device=m2.device))
    return trust & (rank >= keep).reshape(trust.shape), trust


@register_objective(
    "m2po",
    description="M2PO: no clip; mask the largest-(log r)^2 trust-region tokens until their mean M2 <= tau",
    reference="Zheng et al. 2025, M2PO (arXiv 2510.01161), Algorithm 1 and eq. 5, tau_M2 = 0.04",
    coupled=True,  # the mask/selection is over the whole batch
    reduction="token_mean",
)
def m2po_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    tau: float = 0.04,
    weights: torch.Tensor | None = None,
    *,
    reduction: Reduction,
) -> tuple[torch.Tensor, Metrics]:
    """M2PO (eq. 5): J = 1/sum_i |y_i| sum_i sum_t M_it r_it A_it, M from `second_moment_mask`.

    r is pi_theta / pi_old (the paper's pi_behav: with `train.old_logp: rollout` it is the engine's mu).
    The denominator counts every token, masked or not (the paper's footnote 2). A masked token is
    reported as clipped: `clip/frac_high` for A > 0, `clip/frac_low` for A < 0.
    """
    if not tau >= 0:
        raise ValueError(f"m2po: tau must be >= 0, got {tau}")
    batch = prepare(logp, old_logp, advantages, mask, weights=weights, objective="m2po")
    masked, trust = second_moment_mask(batch, tau)
    loss, metrics = masked_surrogate(batch, masked, reduction)
    measured = {"m2po/m2_trust": masked_mean(batch.log_ratio.detach() ** 2, trust),
                "m2po/trust_frac": masked_mean(trust.float(), batch.mask)}
    return loss, {**metrics, **measured}
