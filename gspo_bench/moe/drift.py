"""Expert-activation drift between two routings of the same tokens (paper section 5.3)."""

from __future__ import annotations

import torch


def routing_drift(old: torch.Tensor, new: torch.Tensor, mask: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
    """Compare expert ids `old` and `new` [L, B, T, k] over the valid (token, layer) pairs.

    - `moe/drift`: fraction of (token, layer) pairs whose top-k expert *set* changed;
    - `moe/drift_expert`: fraction of activated experts that changed, |old \\ new| / k averaged over
      pairs (the paper's "about 10% of activated experts change");
    - `moe/drift_layer`: [L], `moe/drift` of each MoE layer;
    - `moe/drift_expert_layer`: [L], `moe/drift_expert` of each MoE layer.
    `mask` [B, T] (bool or 0/1) excludes padding; None counts every position. Values are tensors on
    the routing's device (no host copy); the training loop copies them with the rest of its step.
    """
    if old.shape != new.shape or old.dim() != 4:
        raise ValueError(f"old and new must share one [L, B, T, k] shape, got {tuple(old.shape)} and {tuple(new.shape)}")
    n_layers, batch, length, k = old.shape
    valid = torch.ones(batch, length, dtype=torch.bool) if mask is None else mask.bool()
    if valid.shape != (batch, length):
        raise ValueError(f"mask must be [B, T] = [{batch}, {length}], got {tuple(valid.shape)}")
    valid = valid.to(old.device)
    lost = experts_lost(old, new)  # [L, B, T]
    n_valid = valid.sum().clamp(min=1)
    per_layer = ((lost > 0) & valid).sum((1, 2)).float() / n_valid  # [L]
    return {
        "moe/drift": per_layer.mean() if n_layers else per_layer.new_zeros(()),
        "moe/drift_expert": (lost * valid).sum() / (n_valid * max(n_layers, 1) * k),
        "moe/drift_layer": per_layer,
        "moe/drift_expert_layer": (lost * valid).sum((1, 2)).float() / (n_valid * k),  # [L]
    }


def experts_lost(old: torch.Tensor, new: torch.Tensor) -> torch.Tensor:
    """[L, B, T]: how many of the experts in `old` [L, B, T, k] are not in `new` (a set difference)."""
    kept = (old.unsqueeze(-1) == new.unsqueeze(-2)).any(-1)  # [L, B, T, k]: old expert still chosen
    return (~kept).sum(-1)


def rerouted_positions(old: torch.Tensor, new: torch.Tensor) -> torch.Tensor:
    """[B, T] bool: positions whose top-k expert set changed in at least one layer."""
    return (experts_lost(old, new) > 0).any(0)
