"""VCPO (arXiv 2602.17616, mit-han-lab/vcpo): a sequence-level truncated importance weight against the
sampler mu on an unclipped policy gradient, and each update's learning rate scaled by the effective sample
size of the minibatch's sequence weights (an objective with an optimizer-step hook)."""

from __future__ import annotations

import torch

from gspo_bench.objectives.inputs import LOG_RATIO_CLAMP, ieee_sqrt, prepare
from gspo_bench.objectives.metrics import clip_metrics, masked_mean, ratio_metrics
from gspo_bench.objectives.reduce import Reduction, aggregate
from gspo_bench.objectives.registry import LR_SCALE, Metrics, register_objective


@torch.no_grad()
def ess_lr_scale(log_weight: torch.Tensor, has_tokens: torch.Tensor, ess_base: float) -> tuple[torch.Tensor, torch.Tensor]:
    """(rho_ess, the learning-rate factor) from the sequences' log-weights [B]: rho_ess = (sum_i w_i)^2 /
    (B' sum_i w_i^2) over the B' responses with tokens (1 when every weight is equal), the factor
    sqrt(min(1, rho_ess / ess_base)); weights taken relative to the largest, so no exp overflows."""
    shifted = torch.where(has_tokens, log_weight - log_weight.masked_fill(~has_tokens, -torch.inf).max(), -torch.inf)
    w = torch.exp(shifted.double())  # [B] w_i / max_j w_j, 0 for empty rows
    n = has_tokens.sum().clamp(min=1).double()
    rho = torch.where(has_tokens.any(), w.sum() ** 2 / (n * (w**2).sum()), 1.0)
    return rho, ieee_sqrt(torch.clamp(rho / ess_base, max=1.0))  # exact on every CPU (not MKL's vector math)


@register_objective(
    "vcpo",
    description="VCPO: sg[min(w_i, 8)] A_i mean_t log pi, w_i = pi(y_i)/mu(y_i) the sequence weight against the "
                "sampler, no clip; each update's lr x sqrt(min(1, ESS/B)); GRPO's group baseline (not OPOB)",
    reference="VCPO (arXiv 2602.17616), mit-han-lab/vcpo: sequence-level truncated IS at 8 (rollout_is sequence, "
              "threshold 8), ESS over the minibatch's unclipped sequence weights, lr x sqrt(min(1, rho/rho_base)), "
              "rho_base 1; its optimal off-policy baseline (OPOB) is not implemented",
    inputs=("sampling_logp",),
    advantages="response",
    reduction="seq_mean_token_mean",
    scales_lr=True,
)
def vcpo_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    sampling_logp: torch.Tensor,
    is_cap: float = 8.0,
    ess_base: float = 1.0,
    weights: torch.Tensor | None = None,
    *,
    reduction: Reduction,
) -> tuple[torch.Tensor, Metrics]:
    """VCPO: J = 1/B' sum_i sg[min(w_i, c)] A_i 1/|y_i| sum_t log pi_theta(y_it), with

        w_i = exp(sum_t log pi_theta(y_it) - log mu(y_it))     (the sequence weight against the sampler mu,
                                                                 not length-normalised; detached)
        lr_update = lr x sqrt(min(1, rho_ess / rho_base)),  rho_ess = (sum_i w_i)^2 / (B' sum_i w_i^2)

    over the minibatch's B' responses, the ESS from the unclipped weights. No ratio clip: the weight is
    truncated at c (`is_cap`, 8) and the step shrinks as the weights spread (rho_ess falls from 1 toward 1/B'),
    the effective learning rate growing as the square root of the ESS, for AdamW (the paper's rule). The
    factor is returned as `optim/lr_scale` (the registry's LR_SCALE) with measurements on or off, and the
    update applies it to its optimizer step (`train.optim.scaled_lr`).

    Follows mit-han-lab/vcpo (`compute_is_info`, the ESS rule `sqrt` with `use_clipped` off,
    `update_policy_per_traj`), except its baseline: VCPO subtracts an optimal off-policy baseline per group,
    b = sum_i ||g_i||^2 w_i^2 R_i / sum_i ||g_i||^2 w_i^2, which needs each trajectory's own gradient norm (a
    backward per trajectory); here the advantages are the run's (GRPO's group-normalised ones), and docs say so.
    Log-weights are clamped to +-LOG_RATIO_CLAMP per token and in sum. `clip/frac` counts the tokens of responses
    whose weight was truncated (w_i > c); `vcpo/ess` is rho_ess, `vcpo/weight_mean` the mean truncated weight.
    """
    if not is_cap > 0 or not ess_base > 0:
        raise ValueError(f"vcpo: is_cap and ess_base must be > 0, got {is_cap}, {ess_base}")
    batch = prepare(logp, sampling_logp, advantages, mask, per_response_advantages=True, weights=weights, objective="vcpo")
    log_weight = batch.log_ratio.detach().clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP).sum(-1)  # [B] log w_i
    log_weight = log_weight.clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
    truncated = torch.exp(log_weight).clamp(max=is_cap)  # [B] sg[min(w_i, c)]
    terms = truncated[:, None] * batch.advantages * batch.logp  # [B, T]
    loss = -aggregate(terms, batch, reduction)
    rho, scale = ess_lr_scale(log_weight, batch.has_tokens, ess_base)
    with torch.no_grad():
        cut = (log_weight > torch.log(torch.tensor(is_cap)))[:, None].expand_as(batch.mask)
    measured = {**clip_metrics(torch.zeros_like(cut), cut, batch), **ratio_metrics(batch)}
    if measured:  # measurements on
        measured |= {"vcpo/ess": rho.float(), "vcpo/weight_mean": masked_mean(truncated, batch.has_tokens)}
    return loss, {**measured, LR_SCALE: scale.float()}
