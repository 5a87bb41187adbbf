"""Training-inference mismatch corrections: per-token loss weights, composable with any objective.

The rollout engine samples from mu (its own numerics, precision, kernels, routing); the trainer's
old policy pi_old scores the same tokens differently. A correction turns the per-token ratio
rho_t = pi_old(y_t) / mu(y_t) (or, for OPSM, the current policy's distance from the sampling policy)
into a weight w_t (detached) that multiplies the objective's per-token term:

    J_corrected = reduce_t( w_t * term_t )          (the objective's own reduction and denominators)

    | kind    | weight                                                                  | level                |
    |---------|-------------------------------------------------------------------------|----------------------|
    | tis     | min(rho, C)                                                             | token or sequence    |
    | mis     | rho * 1[C_low <= rho <= C_high] (rejected: 0)                           | token, sequence, geometric |
    | icepop  | rho * 1[alpha <= rho <= beta]                                           | token                |
    | opsm    | 0 for a response with A_i < 0 and mean_t log(mu / pi_theta) > delta, else 1 | sequence         |

At sequence level rho_i = prod_t rho_t (computed in log space); at geometric level
rho_i = exp(mean_t log rho_t). Every correction reports, per minibatch: `correction/weight_mean`,
`correction/weight_std`, `correction/ess` (normalised effective sample size
(sum w)^2 / (n sum w^2) over its units: tokens, or responses at sequence level) and
`correction/masked_frac` (tokens whose weight is 0).

    weights, metrics = get_correction("icepop")(old_logp=..., sampling_logp=..., logp=..., advantages=..., mask=...,
                                                low=0.5, high=5.0)
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import torch

from gspo_bench.objectives.inputs import ieee_sqrt, safe_exp
from gspo_bench.objectives.surrogate import check_ratio_band
from gspo_bench.registry import Registry, origin_of

Level = Literal["token", "sequence", "geometric"]
CorrectionFn = Callable[..., tuple[torch.Tensor, dict[str, torch.Tensor]]]


@dataclass(frozen=True)
class CorrectionSpec:
    name: str
    fn: CorrectionFn
    description: str
    reference: str

    def params(self) -> dict[str, object]:
        """The correction's own parameters with their defaults (what a suite may set)."""
        skip = {"old_logp", "sampling_logp", "logp", "advantages", "mask"}
        return {n: p.default for n, p in inspect.signature(self.fn).parameters.items() if n not in skip}


_CORRECTIONS: Registry[CorrectionSpec] = Registry("correction")


def register_correction(name: str, *, description: str, reference: str) -> Callable[[CorrectionFn], CorrectionFn]:
    def decorate(fn: CorrectionFn) -> CorrectionFn:
        origin = origin_of("correction", name, fn)
        _CORRECTIONS.add(name, CorrectionSpec(name, fn, description, reference), origin)
        return fn

    return decorate


def list_corrections() -> list[str]:
    return _CORRECTIONS.names()


def correction_spec(name: str) -> CorrectionSpec:
    return _CORRECTIONS.lookup(name)


def get_correction(name: str) -> CorrectionFn:
    return correction_spec(name).fn


# ------------------------------------------------------------------ shared pieces

def _log_rho(old_logp: torch.Tensor, sampling_logp: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """[B, T] log pi_old - log mu in fp64, 0 at padding (so sums over a response are its log-product)."""
    valid = mask.bool()
    return torch.where(valid, old_logp.detach().double() - sampling_logp.detach().double().to(old_logp.device), 0.0)


def _level_log_rho(log_rho: torch.Tensor, mask: torch.Tensor, level: Level) -> torch.Tensor:
    """[B, T] the log-ratio each token's weight is decided on: its own, its response's log-product
    (`sequence`) or its response's mean log-ratio (`geometric`)."""
    if level == "token":
        return log_rho
    total = log_rho.sum(-1, keepdim=True)  # [B, 1]
    if level == "sequence":
        return total.expand_as(log_rho)
    if level == "geometric":
        return (total / mask.sum(-1, keepdim=True).clamp(min=1)).expand_as(log_rho)
    raise ValueError(f"level must be token, sequence or geometric, got {level!r}")


@torch.no_grad()
def weight_metrics(weights: torch.Tensor, mask: torch.Tensor, per_response: bool = False) -> dict[str, torch.Tensor]:
    """Mean, std and normalised ESS of the weights over their units (tokens, or responses when
    `per_response`: a sequence-level weight counts once per response), and the masked token fraction."""
    valid = mask.bool()
    if per_response:
        units = valid.any(-1)  # [B]: one weight per response (constant over its tokens)
        w = torch.where(units, (weights.double() * valid).sum(-1) / valid.sum(-1).clamp(min=1), 0.0)
    else:
        units, w = valid, torch.where(valid, weights.double(), 0.0)
    n = units.sum().clamp(min=1)
    mean = w.sum() / n
    var = (torch.where(units, (w - mean) ** 2, 0.0)).sum() / n
    ess = w.sum() ** 2 / (n * (w**2).sum()).clamp(min=1e-300)
    masked = (valid & (weights == 0)).sum() / valid.sum().clamp(min=1)
    return {"correction/weight_mean": mean, "correction/weight_std": ieee_sqrt(var),
            "correction/ess": torch.where(w.abs().sum() > 0, ess, 0.0), "correction/masked_frac": masked}


# ------------------------------------------------------------------ the corrections

@register_correction("tis", description="truncated IS: w = min(pi_old/mu, cap), per token or per sequence",
                     reference="Yao et al. 2025, 'Your efficient RL framework secretly brings you off-policy RL "
                               "training' (fengyao.notion.site/off-policy-rl); verl rollout_is truncate mode")
def tis(
    old_logp: torch.Tensor, sampling_logp: torch.Tensor, mask: torch.Tensor, *,
    logp: torch.Tensor | None = None, advantages: torch.Tensor | None = None,
    cap: float = 2.0, level: Level = "token",
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """TIS: w_t = min(rho_t, C) (token) or w_i = min(prod_t rho_t, C) on every token of response i (sequence)."""
    if cap <= 0:
        raise ValueError(f"tis: cap must be > 0, got {cap}")
    if level not in ("token", "sequence"):
        raise ValueError(f"tis: level must be token or sequence, got {level!r}")
    log_w = _level_log_rho(_log_rho(old_logp, sampling_logp, mask), mask, level)
    weights = torch.where(mask.bool(), safe_exp(log_w).clamp(max=cap), 0.0).float()
    return weights, weight_metrics(weights, mask, per_response=level != "token")


@register_correction("mis", description="masked IS: w = rho inside [low, high], 0 outside; token, sequence or "
                                        "geometric-mean rho",
                     reference="Liu, Li et al. 2025, 'When speed kills stability: demystifying RL collapse from the "
                               "training-inference mismatch' (MIS); verl rollout_is mask mode")
def mis(
    old_logp: torch.Tensor, sampling_logp: torch.Tensor, mask: torch.Tensor, *,
    logp: torch.Tensor | None = None, advantages: torch.Tensor | None = None,
    low: float = 0.5, high: float = 2.0, level: Level = "token",
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """MIS: w = rho 1[low <= rho <= high] with rho the token ratio, the response's product (sequence)
    or its geometric mean (geometric); a rejected response's tokens all get 0."""
    check_ratio_band("mis", low, high)
    log_w = _level_log_rho(_log_rho(old_logp, sampling_logp, mask), mask, level)
    rho = safe_exp(log_w)
    keep = mask.bool() & (rho >= low) & (rho <= high)
    weights = torch.where(keep, rho, 0.0).float()
    return weights, weight_metrics(weights, mask, per_response=level != "token")


@register_correction("icepop", description="IcePop: w = pi_old/mu inside [low, high] (alpha, beta), 0 outside",
                     reference="Ling team 2025, 'Every Step Evolves' (Ring-1T, arXiv 2510.18855), IcePop, "
                               "alpha 0.5, beta 5.0")
def icepop(
    old_logp: torch.Tensor, sampling_logp: torch.Tensor, mask: torch.Tensor, *,
    logp: torch.Tensor | None = None, advantages: torch.Tensor | None = None, low: float = 0.5, high: float = 5.0,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """IcePop: M(k) = k if alpha <= k <= beta else 0, k = pi_train(y_t; theta_old) / pi_infer(y_t; theta_old):
    tokens whose training and inference probabilities disagree by more than the band get no gradient."""
    check_ratio_band("icepop", low, high)
    return mis(old_logp, sampling_logp, mask, low=low, high=high, level="token")


@register_correction("opsm", description="OPSM: drop a negative-advantage response whose mean log(mu/pi_theta) "
                                         "exceeds delta",
                     reference="DeepSeek-AI 2025, DeepSeek-V3.2 (arXiv 2512.02556), off-policy sequence masking")
def opsm(
    old_logp: torch.Tensor, sampling_logp: torch.Tensor, mask: torch.Tensor, *,
    logp: torch.Tensor | None = None, advantages: torch.Tensor | None = None, delta: float = 0.5,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """OPSM: M_i = 0 if A_i < 0 and 1/|y_i| sum_t log(mu(y_t) / pi_theta(y_t)) > delta, else 1.

    The divergence is of the current policy from the policy the response was sampled from (the
    rollout engine's log-probs mu), so both off-policy staleness and engine mismatch count.
    """
    if logp is None or advantages is None:
        raise ValueError("opsm needs the current log-probs and the advantages")
    valid = mask.bool()
    log_div = torch.where(valid, sampling_logp.detach().double() - logp.detach().double(), 0.0)  # [B, T]
    mean_div = log_div.sum(-1) / valid.sum(-1).clamp(min=1)  # [B]
    adv = advantages.detach().double()
    negative = (adv < 0) if adv.dim() == 1 else (torch.where(valid, adv, 0.0).sum(-1) < 0)  # [B]
    keep = ~(negative & (mean_div > delta))  # [B]
    weights = (valid & keep[:, None]).float()
    return weights, weight_metrics(weights, mask, per_response=True)
