"""KL-Cov and Clip-Cov (Cui et al. 2025, "The Entropy Mechanism of Reinforcement Learning for
Reasoning Language Models", arXiv 2505.22617, section 4): entropy falls through the tokens whose
log-probability covaries most with their advantage; these two objectives restrain just those tokens.

The centred covariance term of token t over the batch's valid tokens:
    Cov_t = (A_t - mean A) (log pi_theta(y_t) - mean log pi_theta)      (detached)
"""

from __future__ import annotations

import torch

from gspo_bench.objectives.inputs import PolicyBatch, prepare, safe_exp
from gspo_bench.objectives.metrics import clip_metrics, masked_mean, ratio_metrics
from gspo_bench.objectives.reduce import Reduction, aggregate
from gspo_bench.objectives.registry import Metrics, register_objective
from gspo_bench.objectives.surrogate import check_clip_range, check_dual_clip, clipped_surrogate, dual_clipped


@torch.no_grad()
def centred_covariance(batch: PolicyBatch, logp: torch.Tensor | None = None) -> torch.Tensor:
    """Cov_t [B, T] (0 at padding): (A_t - mean A)(log pi_t - mean log pi) over the valid tokens, of the
    policy's log-probs or of `logp` where given."""
    adv = batch.advantages
    logp = batch.logp.detach() if logp is None else torch.where(batch.mask, logp.detach().float(), 0.0)
    cov = (adv - masked_mean(adv, batch.mask)) * (logp - masked_mean(logp, batch.mask))
    return torch.where(batch.mask, cov, 0.0)


def _pick(score: torch.Tensor, eligible: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """[B, T] bool: the `k` eligible tokens with the largest `score` (ties: the earlier token)."""
    flat = torch.where(eligible, score, float("-inf")).flatten()
    order = torch.sort(flat, descending=True, stable=True).indices
    rank = torch.empty_like(order).scatter_(0, order, torch.arange(flat.numel(), device=flat.device))
    return eligible & (rank < k).reshape(eligible.shape)


def _budget(ratio: float, batch: PolicyBatch) -> torch.Tensor:
    """max(1, floor(ratio * valid tokens)): how many tokens a step treats (the paper's r * N)."""
    return torch.floor(ratio * batch.n_tokens.float()).clamp(min=1)


@register_objective(
    "kl_cov",
    description="KL-Cov: unclipped r A, plus beta |log r| on the top ratio_k of tokens by Cov(log pi, A)",
    reference="Cui et al. 2025 (arXiv 2505.22617), eq. for KL-Cov; k = 2e-4, beta = 1 as the released code; "
              "|log r| held at 0 below a float-noise floor of 1e-4",
    coupled=True,  # the mask/selection is over the whole batch
    reduction="token_mean",
    exempt={"zero_advantage": "its KL penalty on the top-covariance tokens has a gradient wherever pi != pi_old, "
                              "whatever the advantages"},
)
def kl_cov_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    ratio_k: float = 2e-4,
    kl_coef: float = 1.0,
    noise_floor: float = 1e-4,
    weights: torch.Tensor | None = None,
    *,
    reduction: Reduction,
) -> tuple[torch.Tensor, Metrics]:
    """KL-Cov: J = sum_t [r_t A_t - kl_coef |log r_t|_floor 1(t in top-k by Cov_t)] / sum_i |y_i|, with
    k = max(1, floor(ratio_k * N)) of the N valid tokens; no clip. `clip/frac*` stays 0 (nothing is
    clipped); `cov/frac` is the share of tokens under the KL term.
    Cov_t is taken on pi_old's log-probs (`old_logp`), the values every update path shares (the old
    policy's pass runs once per batch), not on the update forward's, whose float noise differs between
    a plain and a micro-batched forward and, at the default k (one token), moved the selected token;
    ties go to the earlier token (row-major).
    |x|_floor is |x| where |x| > `noise_floor`, else 0 (value and gradient). |log r| has a kink at
    r = 1, where every step's first update sits (pi_theta is pi_old): there its gradient is the sign
    of the float noise between the old-policy pass and the update forward (~1e-6 in float32), which
    differs between a plain, a micro-batched and a sharded forward and decided the update's direction
    on the selected token (a step's first update, micro-batched at 64 tokens: log r = -9.5e-7, the
    plain forward's 0.0). Below the floor the term is held at its value at r = 1; 0 keeps the released
    code's plain |log r|."""
    if not 0.0 < ratio_k <= 1.0 or kl_coef < 0 or noise_floor < 0:
        raise ValueError(f"kl_cov: ratio_k must be in (0, 1], kl_coef >= 0 and noise_floor >= 0, got {ratio_k}, "
                         f"{kl_coef}, {noise_floor}")
    batch = prepare(logp, old_logp, advantages, mask, weights=weights, objective="kl_cov")
    cov = centred_covariance(batch, old_logp)
    penalised = _pick(cov, batch.mask, _budget(ratio_k, batch))  # [B, T]
    moved = batch.log_ratio.abs()
    moved = torch.where(moved > noise_floor, moved, 0.0)
    terms = safe_exp(batch.log_ratio) * batch.advantages - kl_coef * moved * penalised
    loss = -aggregate(terms, batch, reduction)
    none = torch.zeros_like(batch.mask)
    measured = {"cov/frac": masked_mean(penalised.float(), batch.mask), "cov/mean": masked_mean(cov, batch.mask)}
    return loss, {**clip_metrics(none, none, batch), **ratio_metrics(batch), **measured}


@register_objective(
    "clip_cov",
    description="Clip-Cov: PPO clip, plus ratio_k of the tokens with Cov in (cov_low, cov_high) left out of the update",
    reference="Cui et al. 2025 (arXiv 2505.22617), Clip-Cov; clip 0.2/0.2, k = 2e-4, Cov in (1, 5) as the released code",
    inputs=("generator",),
    coupled=True,  # the mask/selection is over the whole batch
    reduction="token_mean",
    exempt={"inputs_used": "the generator draws among the tokens whose covariance lies in (cov_low, cov_high): on "
                           "the kit's small batches none is eligible, so another seed changes nothing",
            "on_policy": "at ratio 1 it still leaves its drawn high-covariance tokens out of the update"},
)
def clip_cov_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    clip_low: float = 0.2,
    clip_high: float = 0.2,
    ratio_k: float = 2e-4,
    cov_low: float = 1.0,
    cov_high: float = 5.0,
    dual_clip: float | None = None,
    weights: torch.Tensor | None = None,
    *,
    generator: torch.Generator,
    reduction: Reduction,
) -> tuple[torch.Tensor, Metrics]:
    """Clip-Cov: J = sum_t min(r_t A_t, clip(r_t) A_t) (1 - 1(t in C)) / sum_i |y_i|, C a uniformly
    random draw of k = max(1, floor(ratio_k * N)) tokens among those the clip left alone whose
    cov_low < Cov_t < cov_high. The draw takes `generator` (a CPU torch.Generator: the training loop
    makes one per seed and step, so runs repeat on any device); the dropped tokens' terms count 0 in
    the token mean.
    `clip/frac` counts the PPO clip and the dropped tokens (as the released code's clip fraction).
    `dual_clip` c > 1 (default off) bounds a term with A < 0 below by c A, as in `grpo`.
    """
    check_clip_range("clip_cov", clip_low, clip_high)
    check_dual_clip("clip_cov", dual_clip)
    if not 0.0 < ratio_k <= 1.0 or not cov_low < cov_high:
        raise ValueError(f"clip_cov: ratio_k must be in (0, 1] and cov_low < cov_high, got {ratio_k}, {cov_low}, {cov_high}")
    batch = prepare(logp, old_logp, advantages, mask, weights=weights, objective="clip_cov")
    w = safe_exp(batch.log_ratio)  # [B, T]
    terms, cut_low, cut_high = clipped_surrogate(w, batch.advantages, clip_low, clip_high)
    terms, cut_dual = dual_clipped(terms, w, batch.advantages, dual_clip)
    cov = centred_covariance(batch)
    clipped = cut_low | cut_high if cut_dual is None else cut_low | cut_high | cut_dual
    eligible = batch.mask & ~clipped & (cov > cov_low) & (cov < cov_high)
    # the n-th valid token (row-major) draws the n-th number, whatever the padding around it
    pool = torch.rand(batch.mask.numel(), generator=generator).to(batch.mask.device)
    draw = pool[(batch.mask.flatten().cumsum(0) - 1).clamp(min=0)].reshape(batch.mask.shape)
    dropped = _pick(draw, eligible, _budget(ratio_k, batch))  # [B, T]
    loss = -aggregate(torch.where(dropped, 0.0, terms), batch, reduction)
    measured = {"cov/frac": masked_mean(dropped.float(), batch.mask), "cov/mean": masked_mean(cov, batch.mask)}
    return loss, {**clip_metrics(cut_low | (dropped & (batch.advantages < 0)), cut_high | (dropped & (batch.advantages >= 0)), batch,
                                 cut_dual=cut_dual), **ratio_metrics(batch), **measured}
