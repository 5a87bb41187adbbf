"""The optimizer, and an update that skips itself on non-finite gradients without a host sync."""

from __future__ import annotations

import torch

from gspo_bench.config import TrainConfig

ROUTER_GROUP = "router"  # the `name` of the router weights' param group (train.router_lr_scale != 1)


def make_optimizer(model: torch.nn.Module, cfg: TrainConfig, lr: float, distributed: bool = False):
    """AdamW over the (fp32) parameters. Fused on CPU and CUDA (one kernel for all parameters: 4x
    faster than the default on CPU, and able to skip a step on the device, see `guarded_step`);
    not under FSDP2, whose sharded parameters take the default implementation.

    With `cfg.router_lr_scale` != 1 the router weights are a second param group at lr x that scale;
    param_groups[0] is every other parameter at `lr` (the lr the loop logs). Build it after
    sharding: the groups hold the model's parameter objects (DTensors under FSDP2) by identity."""
    device = next(model.parameters()).device
    return torch.optim.AdamW(param_groups(model, lr, cfg.router_lr_scale), lr=lr, betas=cfg.betas,
                             weight_decay=cfg.weight_decay, fused=device.type in ("cpu", "cuda") and not distributed)


def param_groups(model: torch.nn.Module, lr: float, router_lr_scale: float) -> list[dict]:
    """One group of all parameters at `lr`; with `router_lr_scale` != 1, the router weights apart at
    lr x router_lr_scale (named ROUTER_GROUP)."""
    params = list(model.parameters())
    if router_lr_scale == 1.0:
        return [{"params": params}]  # the one group of before (checkpoints of earlier runs still load)
    from gspo_bench.moe.routers import find_routers

    router_ids = {id(router.weight) for router in find_routers(model)}
    routers = [p for p in params if id(p) in router_ids]
    if len(routers) != len(router_ids):
        raise RuntimeError(f"{len(router_ids) - len(routers)} router weight(s) are not among the model's parameters: "
                           "build the optimizer from the model as it trains (after sharding)")
    rest = [p for p in params if id(p) not in router_ids]
    return [{"params": rest}, {"params": routers, "lr": lr * router_lr_scale, "name": ROUTER_GROUP}]


def set_lr(optimizer: torch.optim.Optimizer, lr: float, router_lr_scale: float) -> None:
    """Every group at `lr`, the router group at lr x router_lr_scale (a resumed run's settings apply)."""
    for group in optimizer.param_groups:
        group["lr"] = lr * router_lr_scale if group.get("name") == ROUTER_GROUP else lr


def guarded_step(optimizer: torch.optim.Optimizer, finite: torch.Tensor) -> None:
    """`optimizer.step()`, a no-op (parameters, moments and step count unchanged) where the 0-d bool
    `finite` is False.

    Fused Adam(W) decides on the device: it reads a `found_inf` tensor, the protocol
    `torch.amp.GradScaler` uses, and leaves everything untouched where it is 1. Other optimizers
    cannot, so for them the flag is copied to the host (one sync per update).
    """
    if optimizer.defaults.get("fused"):
        optimizer.found_inf = (~finite).float()
        try:
            optimizer.step()
        finally:
            del optimizer.found_inf
    elif bool(finite):
        optimizer.step()
