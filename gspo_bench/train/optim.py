"""The optimizer, and an update that skips itself on non-finite gradients without a host sync."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch

from gspo_bench.config import TrainConfig

ROUTER_GROUP = "router"  # the `name` of the router parameters' param group (train.router_lr_scale != 1)


def make_optimizer(model: torch.nn.Module, cfg: TrainConfig, lr: float, distributed: bool = False) -> torch.optim.Optimizer:
    """AdamW over the (fp32) parameters. Fused on CPU and CUDA (one kernel for all parameters: 4x
    faster than the default on CPU, and able to skip a step on the device, see `guarded_step`);
    not under FSDP2, whose sharded parameters take the default implementation.

    With `cfg.router_lr_scale` != 1 the router parameters are a second param group at lr x that scale;
    param_groups[0] is every other parameter at `lr` (the lr the loop logs). Build it after
    sharding: the groups hold the model's parameter objects (DTensors under FSDP2) by identity."""
    device = next(model.parameters()).device
    groups = param_groups(model, lr, cfg.router_lr_scale)
    if cfg.optimizer == "adamw8bit":
        return adamw_8bit(groups, lr, cfg)
    return torch.optim.AdamW(groups, lr=lr, betas=cfg.betas, weight_decay=cfg.weight_decay,
                             fused=device.type in ("cpu", "cuda") and not distributed)


def adamw_8bit(groups: list[dict], lr: float, cfg: TrainConfig) -> torch.optim.Optimizer:
    """torchao's AdamW8bit (`train.optimizer: adamw8bit`): AdamW with both moments kept blockwise in
    8 bits (a byte per value and an fp32 scale per block of 256; tensors under 4,096 values stay fp32),
    ~2 bytes per parameter instead of 8, on the GPU or the CPU. The update is AdamW's, with quantised
    moments: not bit-equal to `adamw`'s. Learning rates stay plain floats in `param_groups` (what the
    loop logs and `set_lr` sets); torchao's step gets them as tensors."""
    try:
        from torchao.optim import AdamW8bit
    except ImportError as err:
        raise RuntimeError("train.optimizer: adamw8bit needs torchao, which is not installed here: pip install "
                           "'gspo-bench[lowmem]' (a GPU machine without a network: bring its wheel, docs/scale.md), "
                           "or set train.optimizer: adamw") from err

    class FloatLrAdamW8bit(AdamW8bit):
        def __init__(self, params, **kwargs):
            super().__init__(params, **kwargs)
            for group in self.param_groups:  # torchao made them tensors
                group["lr"] = float(group["lr"])

        def step(self, closure=None):
            rates = [group["lr"] for group in self.param_groups]
            for group in self.param_groups:
                group["lr"] = torch.tensor(float(group["lr"]), dtype=torch.float32)
            try:
                return super().step(closure)
            finally:
                for group, rate in zip(self.param_groups, rates, strict=True):
                    group["lr"] = rate

    return FloatLrAdamW8bit(groups, lr=lr, betas=cfg.betas, weight_decay=cfg.weight_decay)


def param_groups(model: torch.nn.Module, lr: float, router_lr_scale: float) -> list[dict]:
    """One group of all parameters at `lr`; with `router_lr_scale` != 1, the router parameters
    (`moe.routers.router_parameters`: each router module's weight, and gpt_oss's router bias) apart at
    lr x router_lr_scale (named ROUTER_GROUP), in the model's parameter order.

    AdamW's decay is decoupled and scaled by the group's lr (p <- p (1 - lr wd) - lr m_hat / (sqrt(v_hat) + eps)),
    so the router group's step, decay included, is router_lr_scale times the one it would take at lr; at
    0 the routers do not move at all, weight decay included (their moments still accumulate)."""
    params = list(model.parameters())
    if router_lr_scale == 1.0:
        return [{"params": params}]  # the one group of before (checkpoints of earlier runs still load)
    from gspo_bench.moe.routers import router_parameters

    router_ids = {id(param) for param in router_parameters(model)}
    routers = [p for p in params if id(p) in router_ids]
    if len(routers) != len(router_ids):
        raise RuntimeError(f"{len(router_ids) - len(routers)} router parameter(s) are not among the model's "
                           "parameters: build the optimizer from the model as it trains (after sharding)")
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
        optimizer.found_inf = (~finite).float()  # type: ignore[attr-defined]  # GradScaler's protocol, undeclared on Optimizer
        try:
            optimizer.step()
        finally:
            del optimizer.found_inf  # type: ignore[attr-defined]  # (as above)
    elif bool(finite):
        optimizer.step()


@contextmanager
def scaled_lr(optimizer: torch.optim.Optimizer, scale: torch.Tensor | None) -> Iterator[None]:
    """Within the block, every parameter group's learning rate times `scale` (0-d, copied to the host once),
    restored on exit (an objective's declared step hook: VCPO's ESS scaling); nothing changes where `scale`
    is None."""
    if scale is None:
        yield
        return
    factor = float(scale)
    if not 0.0 < factor <= 1.0:
        raise ValueError(f"a learning-rate scale must be in (0, 1], got {factor}")
    saved = [group["lr"] for group in optimizer.param_groups]
    for group, lr in zip(optimizer.param_groups, saved):
        group["lr"] = lr * factor
    try:
        yield
    finally:
        for group, lr in zip(optimizer.param_groups, saved):
            group["lr"] = lr
