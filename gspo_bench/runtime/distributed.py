"""Data-parallel, sharded training with torch.distributed FSDP2 (`fully_shard`), under `torchrun`.

    torchrun --nproc_per_node=2 -m gspo_bench.cli run SUITE      # CPU (gloo) or one GPU per rank (nccl)

How a step is split (see `gspo_bench.train`):
- each rank generates its share of the rollout batch (rows r, r + W, ...; every row samples with its
  own key, so its tokens do not depend on the world size; `synced_gpus` keeps the ranks' decode
  loops, whose forwards are collective under FSDP2, in step), then the rows are all-gathered and
  every rank scores the whole batch;
- the old-policy pass and every minibatch forward/backward run on the rank's own rows
  (rows r, r + W, r + 2W, ... of the batch or minibatch);
- per-row results (old log-probs, entropies, routing, new log-probs) are all-gathered, and the
  objective is evaluated on the whole minibatch with gradient flowing only into the rank's rows:
  the loss value and every measurement are those of the single-process step (token means reduce
  as sums and counts over all ranks' tokens), and the gradients summed over ranks are its gradient;
- only rank 0 writes results and checkpoints.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch
import torch.distributed as dist


@dataclass(frozen=True)
class World:
    rank: int = 0
    size: int = 1
    grouped: bool = False  # in a process group (torchrun), FSDP2 even at world size 1

    @property
    def distributed(self) -> bool:
        """Sharded (FSDP2) and collective: under torchrun, whatever the world size; else never."""
        return self.size > 1 or self.grouped

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def rows(self, index: torch.Tensor) -> torch.Tensor:
        """This rank's share of `index` (a 1-D tensor of row ids)."""
        return index[self.rank :: self.size]


# what torchrun (or any launcher using env:// initialisation) sets for each rank
GROUP_VARIABLES = ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")


def world_from_env(device: torch.device) -> World:
    """The process group torchrun describes, initialised once (NCCL on CUDA, gloo on CPU); else one
    process. `torchrun --nproc_per_node=1` is a group of one: the FSDP2 path on one GPU, its
    collectives on NCCL (how a one-GPU machine checks that path)."""
    size = int(os.environ.get("WORLD_SIZE", "1"))
    if size <= 1 and not all(name in os.environ for name in GROUP_VARIABLES):
        return World()
    if not dist.is_initialized():
        dist.init_process_group(backend="nccl" if device.type == "cuda" else "gloo")
    return World(rank=dist.get_rank(), size=dist.get_world_size(), grouped=True)


def device_for(world: World, device: torch.device) -> torch.device:
    """One GPU per rank under torchrun (LOCAL_RANK); CPU stays CPU."""
    if device.type == "cuda" and world.distributed and device.index is None:
        local = int(os.environ.get("LOCAL_RANK", "0"))
        torch.cuda.set_device(local)
        return torch.device("cuda", local)
    return device


def shard(model: torch.nn.Module) -> torch.nn.Module:
    """FSDP2: each decoder layer is one sharded unit, the rest (embeddings, head) the root's."""
    from torch.distributed.fsdp import fully_shard

    layers = getattr(getattr(model, "model", None), "layers", None)
    if layers is None:
        raise TypeError(f"{type(model).__name__} has no model.layers to shard")
    for layer in layers:
        fully_shard(layer)
    fully_shard(model)
    return model


def gather_rows(world: World, local: torch.Tensor, index: torch.Tensor, dim: int = 0) -> torch.Tensor:
    """All ranks' rows back into one tensor: rank r holds rows `index[r::W]` of the result along `dim`.

    Detached (what is gathered carries no gradient); equal on every rank.
    """
    local = local.detach()
    if not world.distributed:
        return local
    n, per_rank = index.numel(), -(-index.numel() // world.size)
    moved = local.movedim(dim, 0)
    padded = moved.new_zeros((per_rank, *moved.shape[1:]))
    padded[: moved.shape[0]] = moved
    parts = [torch.empty_like(padded) for _ in range(world.size)]
    dist.all_gather(parts, padded.contiguous())
    full = moved.new_zeros((n, *moved.shape[1:]))
    positions = torch.arange(n, device=index.device)
    for rank, part in enumerate(parts):
        mine = positions[rank :: world.size]
        full[mine.to(full.device)] = part[: mine.numel()]
    return full.movedim(0, dim)


def with_local_grad(world: World, full: torch.Tensor, local: torch.Tensor) -> torch.Tensor:
    """`full` (gathered, detached) with this rank's rows replaced by `local`, which carries the gradient."""
    if not world.distributed:
        return local
    out = full.clone()
    out[world.rank :: world.size] = local
    return out


def joined_world(device: str) -> World:
    """This process's world on `device` (`world_from_env`), every rank past a barrier: under torchrun the
    ranks start a suite's checks together."""
    world = world_from_env(torch.device(device))
    barrier(world)
    return world


def barrier(world: World) -> None:
    if world.distributed:
        dist.barrier()


def local_tensor(value: torch.Tensor) -> torch.Tensor:
    """A plain tensor of a result that may be a DTensor (clip_grad_norm_ returns one under FSDP2)."""
    return value.full_tensor() if hasattr(value, "full_tensor") else value
