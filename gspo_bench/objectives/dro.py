"""DRO, Direct Reward Optimization as verl's policy loss `dro` has it: the advantage-weighted log-likelihood
with a quadratic penalty on each token's log-ratio to pi_old in place of a clip."""

from __future__ import annotations

import torch

from gspo_bench.objectives.inputs import prepare
from gspo_bench.objectives.metrics import clip_metrics, masked_mean, ratio_metrics
from gspo_bench.objectives.reduce import Reduction, aggregate
from gspo_bench.objectives.registry import Metrics, register_objective


@register_objective(
    "dro",
    description="DRO: A log pi - beta/2 (log r)^2 per token, no clip, token mean; beta 0.05",
    reference="verl core_algos.compute_policy_loss_dro (policy loss 'dro', verl PR 7245, 2026); beta 0.05 as "
              "its usage example (verl has no default)",
    reduction="token_mean",
    exempt={"zero_advantage": "its quadratic penalty beta/2 (log r)^2 has a gradient wherever pi != pi_old, "
                              "whatever the advantages"},
)
def dro_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    beta: float = 0.05,
    weights: torch.Tensor | None = None,
    *,
    reduction: Reduction,
) -> tuple[torch.Tensor, Metrics]:
    """DRO: J = sum_i sum_t [A_it log pi_theta(y_it) - beta/2 (log r_it)^2] / sum_i |y_i|, r_it = pi_theta / pi_old.

    No clip: the penalty's gradient -beta log r pulls each token back toward pi_old, linearly in its
    log-ratio, so the policy-gradient step A grad log pi is balanced where log r = A / beta. At r = 1 the
    gradient is the plain policy gradient. The loss value carries log pi itself, as verl's.

    Follows verl (`compute_policy_loss_dro` with its default `loss_agg_mode` token-mean): the log-ratio
    is not clamped, a correction's per-token `weights` multiply the terms (verl's `rollout_is_weights`).
    verl requires `dro_beta` set and > 0 and has no default; 0.05 is its usage example's. `clip/frac*`
    stay 0 (nothing is clipped); `dro/ppo_kl` is verl's `actor/ppo_kl`, the mean -log r over valid tokens.
    """
    if not beta > 0:
        raise ValueError(f"dro: beta must be > 0, got {beta}")
    batch = prepare(logp, old_logp, advantages, mask, weights=weights, objective="dro")
    terms = batch.advantages * batch.logp - 0.5 * beta * batch.log_ratio**2  # [B, T]
    loss = -aggregate(terms, batch, reduction)
    nothing = torch.zeros_like(batch.mask)
    return loss, {**clip_metrics(nothing, nothing, batch), **ratio_metrics(batch),
                  "dro/ppo_kl": masked_mean(-batch.log_ratio.detach(), batch.mask)}
