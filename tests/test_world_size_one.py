"""torchrun with one process is a process group of one: the FSDP2 path (sharded parameters, collective
rollouts and gradients) on one device, how a one-GPU machine checks it on NCCL (`make gpu-check`'s
fsdp part compares such a step with one process's)."""

from __future__ import annotations

import socket

import torch
import torch.distributed as dist

from gspo_bench.runtime.distributed import GROUP_VARIABLES, World, world_from_env


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_a_launched_world_of_one_joins_a_process_group(monkeypatch):
    for name, value in zip(GROUP_VARIABLES, ("0", "1", "127.0.0.1", str(free_port())), strict=True):
        monkeypatch.setenv(name, value)
    world = world_from_env(torch.device("cpu"))
    try:
        assert world == World(rank=0, size=1, grouped=True) and world.distributed
        assert dist.get_backend() == "gloo" and dist.get_world_size() == 1
    finally:
        dist.destroy_process_group()


def test_world_size_one_without_a_launcher_is_one_process(monkeypatch):
    for name in GROUP_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("WORLD_SIZE", "1")
    world = world_from_env(torch.device("cpu"))
    assert world == World() and not world.distributed and not dist.is_initialized()
