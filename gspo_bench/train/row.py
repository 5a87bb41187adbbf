"""Phase 4 of a step: its row of metrics (and per-layer drift rows), from one host copy."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from gspo_bench.train.compute import StepCompute
from gspo_bench.train.old_policy import OldPolicy
from gspo_bench.train.rollout import RolloutBatch
from gspo_bench.train.update import UpdateResult


@dataclass(frozen=True)
class StepRow:
    row: dict  # one row of metrics.parquet
    layer_rows: list[dict]  # rows of layers.parquet: drift and router margins per measured minibatch and MoE layer
    compute: StepCompute  # tokens forwarded and trained in this step
    rollout_finite: bool  # the engine's sampling distributions were finite
    params_finite: bool  # every parameter is finite after the step


def step_values(batch: RolloutBatch, old: OldPolicy, update: UpdateResult, after: dict[str, torch.Tensor],
                tokens_forward: torch.Tensor) -> dict[str, torch.Tensor]:
    """The step's measurements by column name, still on the device."""
    lengths = batch.response_mask.sum(-1).double()  # [B]
    rewards = batch.rewards.double()
    return {
        "reward/mean": rewards.mean(), "reward/std": rewards.std(), "reward/accuracy": (rewards >= 1.0).double().mean(),
        "response/len_mean": lengths.mean(), "response/len_max": lengths.max(),
        **update.metrics,
        "entropy/mean": old.entropy_mean,
        **{k: v for k, v in after.items() if not k.endswith("_layer") and not k.startswith("layer:")}, **old.metrics,
        "compute/tokens_forward": tokens_forward, "compute/tokens_trained": update.tokens_trained,
    }


def with_route_confidence(layers: dict[str, torch.Tensor], old: OldPolicy) -> dict[str, torch.Tensor]:
    """`layers` ({name: [J, L]}) with pi_old's routing confidence of each MoE layer, `moe/route_conf`,
    beside every measured minibatch (measured before any update: one value per step and layer, the
    same for every `updates`); `layers` itself where either is missing."""
    if not layers or old.route_conf is None:
        return layers
    n_measured = next(iter(layers.values())).shape[0]
    return {**layers, "moe/route_conf": old.route_conf[None].expand(n_measured, -1)}  # [J, L]


def with_sampler_routes(layers: dict[str, torch.Tensor], old: OldPolicy) -> dict[str, torch.Tensor]:
    """`layers` ({name: [J, L]}) with `lag/route_diff` of each MoE layer (the share of activated experts
    that differ between the sampler's routes and the learner's at the step's start: one value per step and
    layer) beside every measured minibatch, as `moe/route_conf`; `layers` itself where either is missing."""
    if not layers or old.route_diff is None:
        return layers
    n_measured = next(iter(layers.values())).shape[0]
    return {**layers, "lag/route_diff": old.route_diff[None].expand(n_measured, -1)}  # [J, L]


def build_row(identity: dict, values: dict[str, torch.Tensor], layers: dict[str, torch.Tensor],
              health: dict[str, torch.Tensor]) -> StepRow:
    """Copy `values`, the per-layer figures `layers` ({name: [J, L]}, J measured minibatches) and the
    health flags to the host at once; the row starts with `identity` (step, label, ...); times and
    cumulative compute are the caller's to add. Layer row (j, l) has `updates` = j + 1: the
    minibatch forward it measures ran after that many updates from the old policy."""
    shapes = {key: tuple(v.shape) for key, v in layers.items()}
    host = to_host({**values, **{f"_layer:{k}": v for k, v in layers.items()},
                    **{f"_{k}": v for k, v in health.items()}})
    counts = {key: int(_number(host, key))
              for key in ("compute/tokens_forward", "compute/tokens_trained", "response/len_max", "nonfinite/minibatches")}
    host.update(counts)
    compute = StepCompute(tokens_forward=counts["compute/tokens_forward"], tokens_trained=counts["compute/tokens_trained"])
    per_layer = {key: _numbers(host.pop(f"_layer:{key}"), key) for key in layers}
    rollout_finite, params_finite = bool(host.pop("_rollout_finite")), bool(host.pop("_params_finite"))
    n_measured, n_layers = next(iter(shapes.values()), (0, 0))
    layer_rows = [{"step": identity["step"], "label": identity["label"], "seed": identity["seed"], "layer": i,
                   "updates": j + 1, **{name: per_layer[name][j * n_layers + i] for name in per_layer}}
                  for j in range(n_measured) for i in range(n_layers)]
    return StepRow({**identity, **host}, layer_rows, compute, rollout_finite, params_finite)


def to_host(values: dict[str, torch.Tensor | float | int]) -> dict[str, float | list[float]]:
    """Every tensor of `values` in one device->host copy: 0-d tensors become floats, others flat
    lists of floats; plain numbers pass through as floats."""
    tensors = {k: v.detach().reshape(-1) for k, v in values.items() if isinstance(v, torch.Tensor)}
    scalar = {k: v.dim() == 0 for k, v in values.items() if isinstance(v, torch.Tensor)}
    out: dict[str, float | list[float]] = {k: float(v) for k, v in values.items() if k not in tensors}
    if not tensors:
        return out
    device = next((t.device for t in tensors.values() if t.device.type != "cpu"), torch.device("cpu"))
    flat = torch.cat([t.to(device=device, dtype=torch.float64) for t in tensors.values()]).tolist()
    start = 0
    for key, tensor in tensors.items():
        part = flat[start : start + tensor.numel()]
        start += tensor.numel()
        out[key] = part[0] if scalar[key] else part
    return out


def _number(host: dict[str, float | list[float]], key: str) -> float:
    """The one number of `host[key]`; ValueError where it holds several (a measurement of the wrong shape)."""
    value = host[key]
    if isinstance(value, list):
        raise ValueError(f"{key}: expected one number, got {len(value)}")
    return value


def _numbers(value: float | list[float], key: str) -> list[float]:
    """The values of a per-layer measurement; ValueError where it holds one number (not [J, L])."""
    if not isinstance(value, list):
        raise ValueError(f"layer measurement {key}: expected one value per minibatch and layer, got one number")
    return value
