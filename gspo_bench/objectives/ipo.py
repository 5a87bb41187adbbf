"""IPO, prime-rl's `ipo` loss type (not the preference-learning IPO): a symmetric trust region in
probability space around the rollout engine's mu, a ratio-weighted policy gradient on the tokens inside
it, and a squared log-ratio penalty on every token."""

from __future__ import annotations

import torch

from gspo_bench.objectives.inputs import prepare, safe_exp
from gspo_bench.objectives.kl import k3
from gspo_bench.objectives.metrics import clip_metrics, masked_mean, ratio_metrics
from gspo_bench.objectives.reduce import Reduction, aggregate
from gspo_bench.objectives.registry import Metrics, register_objective


@register_objective(
    "ipo",
    description="prime-rl IPO: r = pi/mu; tokens with |pi - mu| > 0.1 leave the r A term; minus kl_tau (log r)^2 on "
                "every token; token mean",
    reference="prime-rl trainer/rl/loss.py ipo_loss_fn (IPOLossConfig: ipo_threshold 0.1, adv_tau 1, kl_tau 1e-3)",
    inputs=("sampling_logp",),
    reduction="token_mean",
    exempt={"zero_advantage": "its penalty kl_tau (log pi/mu)^2 has a gradient wherever pi != mu, whatever the "
                              "advantages"},
)
def ipo_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    sampling_logp: torch.Tensor,
    threshold: float = 0.1,
    adv_tau: float = 1.0,
    kl_tau: float = 1e-3,
    weights: torch.Tensor | None = None,
    *,
    reduction: Reduction,
) -> tuple[torch.Tensor, Metrics]:
    """J = sum_it [K_it adv_tau A_it r_it - kl_tau (log r_it)^2] / sum_i |y_i|, r_it = pi_theta(y_it) / mu(y_it),

        K_it = 0  if |pi_theta(y_it) - mu(y_it)| > threshold   (moved out of the region, either way)
        K_it = 1  otherwise.

    Unlike DPPO-Binary-TV's mask, the region is symmetric: a token that moved far is left out of the
    policy-gradient term whatever its advantage's sign. The penalty stays on every token, masked or not,
    and pulls pi back toward mu (its gradient -2 kl_tau log r). The anchor is mu, the engine's
    `sampling_logp`; `old_logp` only feeds the ratio measurements.

    Follows prime-rl (`ipo_loss_fn`, summed per sample and divided by the global count of loss tokens in
    `compute_loss`: a token mean). Where it differs: the ratio is exponentiated from a log-ratio clamped
    to +-20 (prime-rl's is not clamped; beyond e^20 it holds the value with zero gradient here); a
    correction's `weights` multiply both terms, as prime-rl's `loss_weights`. Masked tokens are reported
    as clipped, `clip/frac_high` where pi rose, `clip/frac_low` where it fell; `ipo/masked_frac`,
    `ipo/masked_mismatch_kl` and `ipo/unmasked_mismatch_kl` are prime-rl's `is_masked`,
    `masked_mismatch_kl` and `unmasked_mismatch_kl` (r - log r - 1, the k3 of mu's samples, here with its
    log-ratio clamped to +-20 as every KL of the benchmark: `objectives.kl`).
    """
    if not 0.0 <= threshold <= 1.0:
        raise ValueError(f"ipo: threshold is a probability distance in [0, 1], got {threshold}")
    if not (adv_tau >= 0 and kl_tau >= 0):
        raise ValueError(f"ipo: adv_tau and kl_tau must be >= 0, got {adv_tau}, {kl_tau}")
    anchored = prepare(logp, sampling_logp, advantages, mask, weights=weights, objective="ipo")
    log_r = anchored.log_ratio  # [B, T] log pi - log mu, with gradient
    pi, mu = anchored.logp.detach(), anchored.logp.detach() - log_r.detach()  # log-probs, [B, T]
    shift = pi.clamp(max=0.0).exp() - mu.clamp(max=0.0).exp()  # [B, T] pi - mu (log-probs are <= 0)
    masked = anchored.mask & (shift.abs() > threshold)  # [B, T]
    policy_term = torch.where(masked, 0.0, adv_tau * anchored.advantages * safe_exp(log_r))  # [B, T]
    terms = policy_term - kl_tau * log_r**2  # [B, T]
    loss = -aggregate(terms, anchored, reduction)
    measured = prepare(logp.detach(), old_logp, advantages, mask, objective="ipo")
    mismatch = k3(log_r.detach())  # [B, T]
    kept = anchored.mask & ~masked
    return loss, {**clip_metrics(masked & (shift < 0), masked & (shift > 0), measured), **ratio_metrics(measured),
                  "ipo/masked_frac": masked_mean(masked.float(), anchored.mask),
                  "ipo/masked_mismatch_kl": masked_mean(mismatch, masked),
                  "ipo/unmasked_mismatch_kl": masked_mean(mismatch, kept)}
