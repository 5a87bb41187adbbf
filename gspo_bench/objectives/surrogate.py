"""The PPO clipped surrogate min(r A, clip(r, 1-eps_low, 1+eps_high) A), shared by the hard-clip objectives."""

from __future__ import annotations

import torch


def check_clip_range(objective: str, clip_low: float, clip_high: float, ratio_space: bool = True) -> None:
    """clip_low, clip_high >= 0; in ratio space (the range [1 - clip_low, 1 + clip_high]) clip_low <= 1,
    else the lower bound is a negative ratio: the range is inverted."""
    if not (clip_low >= 0 and clip_high >= 0):
        raise ValueError(f"{objective}: clip_low and clip_high must be >= 0, got {clip_low}, {clip_high}")
    if ratio_space and clip_low > 1:
        raise ValueError(f"{objective}: clip_low {clip_low} > 1 puts the range's lower end 1 - clip_low below 0 "
                         "(ratios are positive); clip_low is a distance below 1")


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
