"""Measurements every ratio-based objective returns (names are part of the results schema).

- `ratio/token_*`: token ratio w_it over valid tokens (also for sequence-level objectives);
- `ratio/seq_*`: length-normalised sequence ratio s_i over non-empty responses (also for GRPO);
- `logratio/token_var`: variance of log w_it; `kl/old_new`: k3 estimate of KL(pi_old || pi_theta);
- `clip/frac*`: token-weighted fraction of valid tokens whose term the clip cut (paper Figure 2);
  `clip/seq_frac`: the fraction of responses with at least one clipped token (the unit some peers report);
  `clip/frac_dual`: with a dual clip on, the tokens its bound c A cut (A < 0, ratio > c), also counted
  in `clip/frac` and `clip/seq_frac` (their gradient is zero, as a clipped token's);
- `count/tokens_len{lo}-{hi}`, `count/clipped_len{lo}-{hi}`: valid and clipped tokens of responses
  whose length |y_i| is in [lo, hi] for power-of-two buckets 1-1, 2-3, 4-7, 8-15, ... up to the
  batch's width T (clipping by response length: GSPO's length-bias critique).
All values are detached 0-d tensors, computed without copying anything to the host; variances
are population variances (0 for a single element).
`count/*` values are counts, to be summed (not averaged) across minibatches and steps.
- `loss/max_token_share` (`term_share_metrics`): the largest |contribution| of one token to the loss
  over the sum of every token's |contribution| (from `reduce.recording_terms`); 0 where every term is 0.
- `clip/grad_weak_frac`, `clip/grad_weight_mean` (`gradient_weight_metrics`): one clip measure for every
  family, hard or soft: each token's gradient against the plain policy gradient's under the same
  reduction, the share passing less than half of it and the mean; over the `count/grad_tokens` valid
  tokens with a nonzero advantage, which also weigh them across minibatches.

`measurements_off()` makes both functions return {} (the performance benchmark uses it to measure
what the measurements cost); objectives need no change for it.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

import torch

from gspo_bench.objectives.inputs import PolicyBatch, safe_exp
from gspo_bench.objectives.kl import k3

_ENABLED: ContextVar[bool] = ContextVar("gspo_bench_measurements", default=True)


@contextmanager
def measurements_off(off: bool = True) -> Iterator[None]:
    """Within the block (when `off`), `ratio_metrics` and `clip_metrics` compute nothing."""
    token = _ENABLED.set(not off)
    try:
        yield
    finally:
        _ENABLED.reset(token)


def measuring() -> bool:
    """Whether measurements are on here (not within `measurements_off()`)."""
    return _ENABLED.get()


def masked_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean of `x` where `mask`; 0 when nothing is selected."""
    zero = x.new_zeros(())
    return torch.where(mask, x, zero).sum() / mask.sum().clamp(min=1)


def masked_var(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Population variance of `x` where `mask`; 0 when nothing (or one element) is selected."""
    mean = masked_mean(x, mask)
    return masked_mean((x - mean) ** 2, mask)


def _masked_extreme(x: torch.Tensor, mask: torch.Tensor, largest: bool) -> torch.Tensor:
    """Max (or min) of `x` where `mask`; 0 when nothing is selected. Decided on the device: no host sync."""
    filled = torch.where(mask, x, float("-inf") if largest else float("inf"))
    extreme = filled.max() if largest else filled.min()
    return torch.where(mask.any(), extreme, 0.0)


@torch.no_grad()
def ratio_metrics(batch: PolicyBatch) -> dict[str, torch.Tensor]:
    """Token and sequence importance-ratio statistics and the old->new KL of `batch`."""
    if not _ENABLED.get():
        return {}
    log_w = batch.log_ratio.detach()  # [B, T]
    w = safe_exp(log_w)  # [B, T]
    s = safe_exp(batch.seq_log_ratio().detach())  # [B]
    return {
        "ratio/token_mean": masked_mean(w, batch.mask),
        "ratio/token_var": masked_var(w, batch.mask),
        "ratio/token_min": _masked_extreme(w, batch.mask, largest=False),
        "ratio/token_max": _masked_extreme(w, batch.mask, largest=True),
        "ratio/seq_mean": masked_mean(s, batch.has_tokens),
        "ratio/seq_var": masked_var(s, batch.has_tokens),
        "logratio/token_var": masked_var(log_w, batch.mask),
        "kl/old_new": masked_mean(k3(log_w), batch.mask),
    }


@torch.no_grad()
def term_share_metrics(recorded: list[torch.Tensor]) -> dict[str, torch.Tensor]:
    """`loss/max_token_share` of one loss from the per-token contributions its `aggregate` calls recorded
    (summed where an objective reduces several terms of the same tokens); {} when nothing was recorded
    or measurements are off."""
    if not _ENABLED.get() or not recorded:
        return {}
    per_token = torch.stack(recorded).sum(0).abs().double()  # [B, T]
    total = per_token.sum()
    share = per_token.max() / total.clamp(min=torch.finfo(torch.float64).tiny) if per_token.numel() else total
    return {"loss/max_token_share": torch.where(total > 0, share, 0.0)}


# A token whose gradient is less than this share of the plain policy gradient's counts as cut in
# `clip/grad_weak_frac` (the threshold SAPO's and VESPO's `clip/frac` use for their soft cut)
WEAK_GRADIENT_WEIGHT = 0.5


@torch.no_grad()
def gradient_weight_metrics(grad_logp: torch.Tensor, token_weights: torch.Tensor, advantages: torch.Tensor,
                            mask: torch.Tensor) -> dict[str, torch.Tensor]:
    """The clip measure that reads the same for every objective: each token's gradient weight

        omega_it = -(d loss / d log pi_it) / (A_it c_it)

    from the loss's gradient `grad_logp` [B, T] and the reduction's weight c_it of each token
    (`token_weights` [B, T], `reduce.recording_token_weights`): the token's gradient over the plain
    policy gradient's, A_it grad log pi_it under the same reduction. omega = 1 on-policy for GRPO, r for an
    unclipped token ratio, 0 for a hard-clipped or masked token, SAPO's gate derivative, VESPO's phi,
    CISPO's clipped weight, 1 - beta log r / A for DRO's penalty; a correction's weight multiplies it.
    Over valid tokens with A_it != 0 (tokens without advantage have no plain gradient to compare with):
    `clip/grad_weak_frac`, the share with omega < WEAK_GRADIENT_WEIGHT (so a hard clip, a mask and a soft
    gate that passes less than half the gradient count alike: TRL PR #6713's point that a hard-clip
    share misreads soft-gated losses), `clip/grad_weight_mean` and `count/grad_tokens` (their count, which
    weighs them across minibatches; both 0 where it is 0)."""
    if not _ENABLED.get():
        return {}
    adv = advantages if advantages.dim() == 2 else advantages[:, None].expand_as(mask)  # [B, T]
    plain = adv.double() * token_weights.double()  # d(plain J) / d log pi per token
    seen = mask & (plain != 0)
    omega = torch.where(seen, -grad_logp.double() / torch.where(seen, plain, 1.0), 0.0)  # [B, T]
    n = seen.sum()
    return {"clip/grad_weak_frac": (seen & (omega < WEAK_GRADIENT_WEIGHT)).sum() / n.clamp(min=1),
            "clip/grad_weight_mean": omega.sum() / n.clamp(min=1),
            "count/grad_tokens": n.to(torch.float64)}


@torch.no_grad()
def clip_metrics(cut_low: torch.Tensor, cut_high: torch.Tensor, batch: PolicyBatch,
                 cut_dual: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
    """Token-weighted clip fractions from per-token flags [B, T] (a clipped response flags all its tokens);
    `cut_dual` (a dual clip's, when on) adds `clip/frac_dual` and counts in `clip/frac`."""
    if not _ENABLED.get():
        return {}
    low = cut_low & batch.mask
    high = cut_high & batch.mask
    dual = cut_dual & batch.mask if cut_dual is not None else torch.zeros_like(batch.mask)
    clipped = low | high | dual  # [B, T]
    n = batch.n_tokens.clamp(min=1)
    out = {
        "clip/frac": clipped.sum() / n,
        "clip/frac_low": low.sum() / n,
        "clip/frac_high": high.sum() / n,
        # the same clipping counted in responses: the share of responses with any clipped token
        "clip/seq_frac": (clipped.any(-1) & batch.has_tokens).sum() / batch.n_responses.clamp(min=1),
    }
    if cut_dual is not None:
        out["clip/frac_dual"] = dual.sum() / n
    out.update(length_bucket_counts(clipped, batch))
    return out


def length_bucket_counts(clipped: torch.Tensor, batch: PolicyBatch) -> dict[str, torch.Tensor]:
    """Valid and clipped token counts per power-of-two response-length bucket, for every bucket a
    response of the batch's width T could fall in (so the columns depend on T only, not on the data,
    and no count is copied to the host to decide them)."""
    bucket = torch.log2(batch.lengths.clamp(min=1.0)).floor()  # [B] 0 for length 1, 1 for 2-3, ...
    out = {}
    for b in range(max(batch.mask.shape[1], 1).bit_length()):  # buckets 1-1, 2-3, ... up to T
        rows = (bucket == b) & batch.has_tokens  # [B]
        name = f"len{2**b}-{2 ** (b + 1) - 1}"
        out[f"count/tokens_{name}"] = (batch.mask & rows[:, None]).sum().float()
        out[f"count/clipped_{name}"] = (clipped & rows[:, None]).sum().float()
    return out
