"""Checked, fp32 view of an objective's inputs, shared by every objective.

Numerics (one place for all objectives):
- log-ratios are computed in fp32 from `logp - old_logp`;
- padding positions are replaced by 0 with `torch.where` before any arithmetic, so NaN or inf in
  padding never reaches a result or a gradient;
- only clamped log-ratios are exponentiated (`safe_exp`), so |log-ratio| = 100 stays finite.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

# exp(20) ~ 4.9e8: far outside any clip range, still finite in fp32 after multiplying by an advantage.
LOG_RATIO_CLAMP = 20.0


def safe_exp(log_ratio: torch.Tensor) -> torch.Tensor:
    """exp of a log-ratio clamped to +-LOG_RATIO_CLAMP (zero gradient beyond the clamp)."""
    return torch.exp(log_ratio.clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP))


@dataclass(frozen=True)
class PolicyBatch:
    logp: torch.Tensor  # [B, T] fp32, 0 at padding, carries the gradient
    log_ratio: torch.Tensor  # [B, T] fp32 log w = logp - old_logp, 0 at padding
    advantages: torch.Tensor  # [B, T] fp32 (a [B] input broadcast over tokens), 0 at padding
    mask: torch.Tensor  # [B, T] bool, True at valid response tokens
    lengths: torch.Tensor  # [B] fp32, |y_i| (valid tokens per response)
    has_tokens: torch.Tensor  # [B] bool, responses with at least one valid token
    seq_advantages: torch.Tensor | None  # [B] fp32 A_i when advantages were given per response
    weights: torch.Tensor | None = None  # [B, T] fp32 detached per-token loss weights (an off-policy correction), 0 at padding

    @property
    def n_tokens(self) -> torch.Tensor:
        return self.mask.sum()  # 0-d

    @property
    def n_responses(self) -> torch.Tensor:
        return self.has_tokens.sum()  # 0-d

    def seq_log_ratio(self) -> torch.Tensor:
        """log s_i = 1/|y_i| sum_t log w_it (eq. 7, length-normalised), 0 for empty responses."""
        return self.log_ratio.sum(-1) / self.lengths.clamp(min=1.0)  # [B]

    def response_advantages(self) -> torch.Tensor:
        """A_i per response [B]; only for objectives prepared with `per_response_advantages=True`."""
        if self.seq_advantages is None:
            raise ValueError("this batch was given per-token advantages; there is no single A_i")
        return self.seq_advantages


def _check_mask(mask: torch.Tensor, objective: str) -> torch.Tensor:
    if mask.dtype == torch.bool:
        return mask
    if mask.dtype.is_complex or not bool(((mask == 0) | (mask == 1)).all()):
        raise ValueError(f"{objective}: mask must be bool or hold only 0 and 1")
    return mask != 0


def _check_shapes(objective: str, logp: torch.Tensor, old_logp: torch.Tensor, advantages: torch.Tensor,
                  mask: torch.Tensor, weights: torch.Tensor | None) -> None:
    for arg, t in (("logp", logp), ("old_logp", old_logp), ("advantages", advantages), ("mask", mask)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{objective}: {arg} must be a torch.Tensor, got {type(t).__name__}")
    if logp.dim() != 2:
        raise ValueError(f"{objective}: logp must be [B, T], got shape {tuple(logp.shape)}")
    if old_logp.shape != logp.shape or mask.shape != logp.shape:
        raise ValueError(
            f"{objective}: logp, old_logp and mask must share one [B, T] shape, got "
            f"{tuple(logp.shape)}, {tuple(old_logp.shape)} and {tuple(mask.shape)}"
        )
    if weights is not None and weights.shape != logp.shape:
        raise ValueError(f"{objective}: weights must be [B, T] = {tuple(logp.shape)}, got {tuple(weights.shape)}")


def prepare(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    per_response_advantages: bool = False,
    weights: torch.Tensor | None = None,
    objective: str = "objective",
) -> PolicyBatch:
    """Validate shapes and build the fp32 `PolicyBatch`.

    `per_response_advantages=True` refuses `[B, T]` advantages (sequence-level objectives need one
    A_i per response). `weights` [B, T]: per-token weights of the loss terms (an off-policy
    correction's, see `objectives.corrections`), detached; `aggregate` multiplies them in.
    """
    _check_shapes(objective, logp, old_logp, advantages, mask, weights)
    batch_size, _ = logp.shape
    seq_adv = None
    if advantages.dim() == 1 and advantages.shape[0] == batch_size:
        seq_adv = advantages.detach().float()  # [B]
        adv = seq_adv[:, None].expand_as(logp)  # [B, T]
    elif advantages.dim() == 2 and advantages.shape == logp.shape:
        if per_response_advantages:
            raise ValueError(
                f"{objective} is a sequence-level objective and needs one advantage per response "
                f"([B] = [{batch_size}]); got [B, T] advantages (use gspo_token for per-token advantages)"
            )
        adv = advantages.detach().float()
    else:
        raise ValueError(
            f"{objective}: advantages must be [B] or [B, T] with B={batch_size}, "
            f"T={logp.shape[1]}; got shape {tuple(advantages.shape)}"
        )

    valid = _check_mask(mask, objective).to(logp.device)  # [B, T]
    zero = torch.zeros((), dtype=torch.float32, device=logp.device)
    logp32 = torch.where(valid, logp.float(), zero)  # [B, T]
    old32 = torch.where(valid, old_logp.detach().float(), zero)  # [B, T]
    lengths = valid.sum(-1).float()  # [B]
    if seq_adv is not None:
        seq_adv = torch.where(lengths > 0, seq_adv, zero)  # [B]
    if weights is not None:
        weights = torch.where(valid, weights.detach().float().to(logp.device), zero)
    return PolicyBatch(
        logp=logp32,
        log_ratio=torch.where(valid, logp32 - old32, zero),
        advantages=torch.where(valid, adv, zero),
        mask=valid,
        lengths=lengths,
        has_tokens=lengths > 0,
        seq_advantages=seq_adv,
        weights=weights,
    )


def ieee_sqrt(values: torch.Tensor) -> torch.Tensor:
    """sqrt from IEEE-exact operations only: 1 / rsqrt(x), each step correctly rounded (within an
    ulp of the true root). torch's own sqrt of a float tensor goes to MKL's vector math library,
    whose result is not IEEE's (in ~20% of values the last bit, seen here) and differs between an
    AMD machine and an emulated Intel one even on MKL's COMPATIBLE branch; rsqrt and reciprocal are
    ATen's own exact divisions and square roots. For the training path of a run (tests hold it
    free of torch.sqrt: tests/test_kernels.py). See gspo_bench.runtime.kernels."""
    return values.rsqrt().reciprocal()
