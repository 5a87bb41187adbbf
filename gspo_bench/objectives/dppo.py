"""DPPO with the Binary-TV trust region (arXiv 2602.04879): a token leaves the update once the
probability of the sampled token itself, not its ratio, has moved more than delta from the behaviour
policy in the direction its advantage pushes."""

from __future__ import annotations

import torch

from gspo_bench.objectives.inputs import prepare
from gspo_bench.objectives.metrics import masked_mean
from gspo_bench.objectives.reduce import Reduction
from gspo_bench.objectives.registry import Metrics, register_objective
from gspo_bench.objectives.surrogate import masked_surrogate


@register_objective(
    "dppo_binary_tv",
    description="DPPO-Binary-TV: r = pi/mu, mask a token once |pi - mu| > delta in its advantage's direction",
    reference="DPPO (arXiv 2602.04879), Binary-TV mask, delta 0.15",
    inputs=("sampling_logp",),
    reduction="token_mean",
)
def dppo_binary_tv_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    sampling_logp: torch.Tensor,
    delta: float = 0.15,
    weights: torch.Tensor | None = None,
    *,
    reduction: Reduction,
) -> tuple[torch.Tensor, Metrics]:
    """J = sum_it M_it r_it A_it / sum_i |y_i| with r_it = pi_theta(y_it) / mu(y_it) and

        M_it = 0  if A_it > 0 and pi_theta(y_it) - mu(y_it) >  delta   (pushed up past the region)
                  or A_it < 0 and pi_theta(y_it) - mu(y_it) < -delta   (pushed down past it)
        M_it = 1  otherwise.

    The binary total variation |pi - mu| compares probabilities of the sampled token, so a rare token
    may move its ratio far (0.01 -> 0.05 is r = 5) while a likely one may not (0.5 -> 0.7). The anchor
    mu is the rollout engine's `sampling_logp`, not pi_old; `old_logp` only feeds the ratio measurements.
    Masked tokens are reported as clipped (`clip/frac_high` for A > 0, `clip/frac_low` for A < 0).
    """
    if not 0.0 <= delta <= 1.0:
        raise ValueError(f"dppo_binary_tv: delta is a probability distance in [0, 1], got {delta}")
    anchored = prepare(logp, sampling_logp, advantages, mask, weights=weights, objective="dppo_binary_tv")
    adv = anchored.advantages
    pi, mu = anchored.logp.detach(), anchored.logp.detach() - anchored.log_ratio.detach()  # log-probs, [B, T]
    shift = pi.clamp(max=0.0).exp() - mu.clamp(max=0.0).exp()  # [B, T] pi - mu (log-probs are <= 0)
    masked = anchored.mask & (((adv > 0) & (shift > delta)) | ((adv < 0) & (shift < -delta)))
    measured = prepare(logp.detach(), old_logp, advantages, mask, objective="dppo_binary_tv")
    loss, metrics = masked_surrogate(anchored, masked, reduction, measured)
    return loss, {**metrics, "dppo/tv_mean": masked_mean(shift.abs(), anchored.mask)}
