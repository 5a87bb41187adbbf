"""Routing confidence: how decisively the routers choose, per MoE layer (what practitioners watch
beside drift: a router that spreads its mass is one small update away from rerouting)."""

from __future__ import annotations

import torch


def routing_confidence(conf: torch.Tensor, mask: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
    """Summarise per-token routing confidence `conf` [L, B, T] (`RoutingCapture(confidence=True)`: the
    share of the router's score mass on the experts it chose, `gates.py`) over the valid tokens:

    - `moe/route_conf_layer`: [L], the mean over valid (b, t) of each MoE layer;
    - `moe/route_conf`: the mean of those over layers (every layer weighs alike, as in `moe/drift`).

    `mask` [B, T] (bool or 0/1) excludes padding; None counts every position. NaN where no position
    is valid. Values are tensors on the confidence's device (no host copy)."""
    if conf.dim() != 3:
        raise ValueError(f"conf must be [L, B, T], got {tuple(conf.shape)}")
    n_layers, batch, length = conf.shape
    valid = torch.ones(batch, length, dtype=torch.bool) if mask is None else mask.bool()
    if valid.shape != (batch, length):
        raise ValueError(f"mask must be [B, T] = [{batch}, {length}], got {tuple(valid.shape)}")
    valid = valid.to(conf.device)
    per_layer = torch.where(valid, conf.double(), 0.0).sum((1, 2)) / valid.sum()  # [L]; 0 / 0 = NaN
    return {"moe/route_conf": per_layer.mean() if n_layers else per_layer.new_full((), float("nan")),
            "moe/route_conf_layer": per_layer}
