"""VESPO: Variational Sequence-Level Soft Policy Optimization (arXiv 2602.10693): a gamma-shaped kernel
of the unnormalised sequence importance weight scales each response's policy gradient, in place of a clip."""

from __future__ import annotations

import math

import torch

from gspo_bench.objectives.inputs import LOG_RATIO_CLAMP, prepare
from gspo_bench.objectives.metrics import clip_metrics, masked_mean, ratio_metrics
from gspo_bench.objectives.reduce import Reduction, aggregate
from gspo_bench.objectives.registry import Metrics, register_objective
from gspo_bench.objectives.sapo import SOFT_CLIP_GRAD_WEIGHT

# The reference's floor on log W: W >= 1e-8 (its upper end is LOG_RATIO_CLAMP, W <= exp(20)).
LOG_WEIGHT_FLOOR = math.log(1e-8)


@torch.no_grad()
def gamma_kernel(log_weight: torch.Tensor, k: torch.Tensor, lam: torch.Tensor) -> torch.Tensor:
    """phi(W) = W^k exp(lam (1 - W)) from log W, computed as exp(lam + k log W - lam W): the gamma
    density's shape normalised to phi(1) = 1, rising as W^k below W = 1 and decaying as exp(-lam W) above."""
    return torch.exp(lam + k * log_weight - lam * torch.exp(log_weight))


@register_objective(
    "vespo",
    description="VESPO: sg[phi(W_i)] A_i log pi, phi(W) = W^k e^(lambda (1 - W)) of the unnormalised sequence "
                "ratio W_i; k 2 / 3, lambda 3 / 2 for A >= 0 / A < 0; token mean",
    reference="VESPO (arXiv 2602.10693); TRL GRPOTrainer loss_type='vespo' (get_gamma_weights), its defaults "
              "vespo_k_pos 2, vespo_lambda_pos 3, vespo_k_neg 3, vespo_lambda_neg 2",
    advantages="response",
    reduction="token_mean",
)
def vespo_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    k_pos: float = 2.0,
    lambda_pos: float = 3.0,
    k_neg: float = 3.0,
    lambda_neg: float = 2.0,
    weights: torch.Tensor | None = None,
    *,
    reduction: Reduction,
) -> tuple[torch.Tensor, Metrics]:
    """VESPO: J = sum_i sum_t sg[phi(W_i)] A_i log pi_theta(y_it) / sum_i |y_i|, with

        W_i = exp(sum_t log w_it)                      (the sequence ratio pi_theta(y_i) / pi_old(y_i),
                                                        not length-normalised as GSPO's s_i)
        phi(W) = W^k exp(lambda (1 - W))               (k, lambda = k_pos, lambda_pos where A_i >= 0,
                                                        else k_neg, lambda_neg)

    phi is detached: the gradient is phi(W_i) A_i grad log pi, the plain policy gradient at W = 1
    (phi(1) = 1) and smoothly smaller away from it, falling as W^k for W < 1 and as exp(-lambda W) for W > 1.

    Follows TRL's implementation (GRPOTrainer.get_gamma_weights and the `vespo` branch of `_compute_loss`):
    each log w_it is clamped to +-20 before the sum and log W_i to [log 1e-8, 20]; the terms are summed
    over tokens and divided by the batch's valid-token count (TRL's `num_items_in_batch`), so the loss
    value carries log pi itself (the paper's L = -E[sg[phi(W)] A log pi(tau)]), not a ratio.
    Where it differs from TRL: TRL folds a rollout engine's per-token truncated IS ratio into log W; here
    pi_old is whatever the run anchors at (`train.old_logp`), and a correction's per-token `weights`
    multiply the terms as for every objective. TRL floors lambda at 1e-4; here lambda must be > 0.
    `clip/frac` counts the tokens of responses whose phi passes less than half the plain gradient
    (`clip/frac_low`: W < 1, `_high`: W > 1), as SAPO's soft gate; `vespo/phi_mean` is TRL's
    `vespo/phi_seq_mean` over the responses with tokens (TRL's counts an all-padding row as phi = 1).
    """
    if not (k_pos >= 0 and k_neg >= 0 and lambda_pos > 0 and lambda_neg > 0):
        raise ValueError(f"vespo: k_pos, k_neg must be >= 0 and lambda_pos, lambda_neg > 0, got "
                         f"{k_pos}, {k_neg}, {lambda_pos}, {lambda_neg}")
    batch = prepare(logp, old_logp, advantages, mask, per_response_advantages=True, weights=weights, objective="vespo")
    adv = batch.response_advantages()  # [B]
    log_weight = batch.log_ratio.detach().clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP).sum(-1)  # [B] log W_i
    log_weight = log_weight.clamp(LOG_WEIGHT_FLOOR, LOG_RATIO_CLAMP)
    nonneg = adv >= 0  # [B]
    phi = gamma_kernel(log_weight, torch.where(nonneg, k_pos, k_neg), torch.where(nonneg, lambda_pos, lambda_neg))  # [B]
    terms = phi[:, None] * batch.advantages * batch.logp  # [B, T]
    loss = -aggregate(terms, batch, reduction)
    with torch.no_grad():
        soft_cut = (phi < SOFT_CLIP_GRAD_WEIGHT)[:, None].expand_as(batch.mask)  # [B, T]
        above = (log_weight > 0)[:, None].expand_as(batch.mask)
    return loss, {**clip_metrics(soft_cut & ~above, soft_cut & above, batch), **ratio_metrics(batch),
                  "vespo/phi_mean": masked_mean(phi, batch.has_tokens)}
