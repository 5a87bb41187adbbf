"""Expert-activation drift between two routings of the same tokens (paper section 5.3)."""

from __future__ import annotations

import torch


def routing_drift(old: torch.Tensor, new: torch.Tensor, mask: torch.Tensor | None = None) -> dict[str, float]:
    """Compare expert ids `old` and `new` [L, B, T, k] over the valid (token, layer) pairs.

    - `moe/drift`: fraction of (token, layer) pairs whose top-k expert *set* changed;
    - `moe/drift_expert`: fraction of activated experts that changed, |old \\ new| / k averaged over
      pairs (the paper's "about 10% of activated experts change");
    - `moe/drift_layer_{i}`: `moe/drift` of MoE layer i.
    `mask` [B, T] (bool or 0/1) excludes padding; None counts every position.
    """
    if old.shape != new.shape or old.dim() != 4:
        raise ValueError(f"old and new must share one [L, B, T, k] shape, got {tuple(old.shape)} and {tuple(new.shape)}")
    n_layers, batch, length, k = old.shape
    valid = torch.ones(batch, length, dtype=torch.bool) if mask is None else mask.bool()
    if valid.shape != (batch, length):
        raise ValueError(f"mask must be [B, T] = [{batch}, {length}], got {tuple(valid.shape)}")
    valid = valid.to(old.device)
    kept = (old.unsqueeze(-1) == new.unsqueeze(-2)).any(-1)  # [L, B, T, k]: old expert still chosen
    lost = (~kept).sum(-1)  # [L, B, T] experts of old not in new (= set size difference)
    changed = lost > 0  # [L, B, T]
    n_valid = valid.sum().clamp(min=1)
    per_layer = (changed & valid).sum((1, 2)).float() / n_valid  # [L]
    stats = {
        "moe/drift": float(per_layer.mean()) if n_layers else 0.0,
        "moe/drift_expert": float((lost * valid).sum() / (n_valid * n_layers * k)) if n_layers else 0.0,
    }
    stats.update({f"moe/drift_layer_{i}": float(v) for i, v in enumerate(per_layer)})
    return stats
