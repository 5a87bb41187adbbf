"""The PPO clipped surrogate min(r A, clip(r, 1-eps_low, 1+eps_high) A), shared by the hard-clip
objectives; its dual clip (a lower bound c A on the terms with A < 0); the masked surrogate r A with
some tokens left out, shared by the masking ones (M2PO, DPPO); and the one check of a ratio band."""

from __future__ import annotations

import torch

from gspo_bench.objectives.inputs import PolicyBatch, safe_exp
from gspo_bench.objectives.metrics import clip_metrics, ratio_metrics
from gspo_bench.objectives.reduce import Reduction, aggregate


def check_ratio_band(owner: str, low: float, high: float, names: str = "low, high") -> None:
    """A band of ratios [low, high] that a method keeps or clips to: 0 <= low <= high (ratios are
    positive; a lower end below 0 or above the upper one inverts or empties the band). One check for
    the clip ranges of the objectives and the bands of the corrections (MIS, IcePop)."""
    if not 0 <= low <= high:
        raise ValueError(f"{owner}: the ratio band [{names}] = [{low:g}, {high:g}] needs 0 <= lower end <= upper "
                         "end (ratios are positive: a lower end below 0 or above the upper end inverts the band)")


def check_clip_range(objective: str, clip_low: float, clip_high: float, ratio_space: bool = True) -> None:
    """clip_low, clip_high >= 0 (distances from 1, or from 0 in log space); in ratio space the band
    [1 - clip_low, 1 + clip_high] must not reach below 0 (`check_ratio_band`)."""
    if not (clip_low >= 0 and clip_high >= 0):
        raise ValueError(f"{objective}: clip_low and clip_high must be >= 0, got {clip_low}, {clip_high}")
    if ratio_space:
        check_ratio_band(objective, 1.0 - clip_low, 1.0 + clip_high, names="1 - clip_low, 1 + clip_high")


def clipped_surrogate(
    ratio: torch.Tensor, adv: torch.Tensor, clip_low: float, clip_high: float
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per-element surrogate and where the clip cut the gradient.

    Returns `(terms, cut_low, cut_high)`: the clip cuts the gradient when A > 0 and r > 1 + eps_high
    (`cut_high`) or A < 0 and r < 1 - eps_low (`cut_low`); elsewhere `terms` = r A with full gradient.
    """
    clipped = ratio.clamp(1.0 - clip_low, 1.0 + clip_high)
    terms = torch.minimum(ratio * adv, clipped * adv)
    cut_high = (adv > 0) & (ratio > 1.0 + clip_high)
    cut_low = (adv < 0) & (ratio < 1.0 - clip_low)
    return terms, cut_low, cut_high


def check_dual_clip(objective: str, dual_clip: float | None) -> None:
    """None (off) or a number c > 1: the dual clip bounds a term with A < 0 below by c A, which only
    binds where the ratio is above 1 (dual-clip PPO; verl's `clip_ratio_c` asserts the same)."""
    if dual_clip is None:
        return
    if isinstance(dual_clip, bool) or not isinstance(dual_clip, int | float) or not dual_clip > 1.0:
        raise ValueError(f"{objective}: dual_clip must be a number > 1 (the bound c of c * A for A < 0) or "
                         f"None (off), got {dual_clip!r}")


def dual_clipped(terms: torch.Tensor, ratio: torch.Tensor, adv: torch.Tensor,
                 dual_clip: float | None) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Dual clip (Ye et al. 2020, "Mastering Complex Control in MOBA Games", arXiv 1912.09729; verl's
    `clip_ratio_c`): for A < 0 the term min(r A, clip(r) A) is bounded below by c A, i.e.
    max(c A, min(r A, clip(r) A)); the bound binds exactly where r > c, and those terms are the
    constant c A (zero gradient). Returns `(terms, cut_dual)`; (terms, None) when `dual_clip` is None."""
    if dual_clip is None:
        return terms, None
    cut_dual = (adv < 0) & (ratio > dual_clip)  # [B, T]
    return torch.where(cut_dual, dual_clip * adv, terms), cut_dual


def masked_surrogate(batch: PolicyBatch, masked: torch.Tensor, reduction: Reduction,
                     measured: PolicyBatch | None = None) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """J = sum_it (1 - M_it) r_it A_it / sum_i |y_i|: the masked tokens' terms count 0, the denominator
    counts every token. Returns the loss -J and the clip and ratio measurements, a masked token reported
    as clipped (`clip/frac_high` for A > 0, `clip/frac_low` for A < 0); the ratios measured are those
    of `measured` (another anchor's, DPPO) or of `batch`."""
    adv = batch.advantages
    terms = torch.where(masked, 0.0, safe_exp(batch.log_ratio) * adv)  # [B, T]
    loss = -aggregate(terms, batch, reduction)
    measured = batch if measured is None else measured
    return loss, {**clip_metrics(masked & (adv < 0), masked & (adv > 0), measured), **ratio_metrics(measured)}
