"""Group-relative advantages (GSPO paper eq. 3 / 6)."""

from __future__ import annotations

from typing import Literal

import torch


def group_advantages(
    rewards: torch.Tensor, group_size: int, scale: Literal["std", "none"] = "std"
) -> torch.Tensor:
    """A_i = (r_i - mean_group r) / std_group r for rewards [N] laid out as N/G consecutive groups of G.

    `scale="std"` is eq. 3 (sample std, Bessel-corrected, as common GRPO code); `scale="none"` keeps
    r_i - mean (Dr. GRPO). A group with zero spread gets advantage 0, never NaN. Returns [N] fp32.
    """
    if rewards.dim() != 1:
        raise ValueError(f"rewards must be 1-D [N], got shape {tuple(rewards.shape)}")
    if group_size < 2:
        raise ValueError(f"group_size must be >= 2 (a group needs a spread), got {group_size}")
    if rewards.numel() % group_size:
        raise ValueError(f"{rewards.numel()} rewards do not split into groups of {group_size}")
    if scale not in ("std", "none"):
        raise ValueError(f"scale must be 'std' or 'none', got {scale!r}")
    if not bool(torch.isfinite(rewards).all()):
        raise ValueError("rewards must be finite")
    grouped = rewards.float().view(-1, group_size)  # [N/G, G]
    centred = grouped - grouped.mean(-1, keepdim=True)  # [N/G, G]
    if scale == "none":
        return centred.reshape(-1)
    std = grouped.std(-1, keepdim=True)  # [N/G, 1]
    spread = std > 0
    scaled = torch.where(spread, centred / torch.where(spread, std, torch.ones_like(std)), 0.0)
    return scaled.reshape(-1)
