"""`gspo-bench run SUITE --out OUT` that also writes OUT/world.json: how the run was sharded (the process
group's backend and size, and whether the policy's parameters became FSDP2 DTensors), read by the
`fsdp` part of `make gpu-check`.

    python experiments/gpu_check/check_fsdp_rank.py SUITE OUT                                  # one process
    torchrun --standalone --nproc_per_node=1 experiments/gpu_check/check_fsdp_rank.py SUITE OUT  # FSDP2
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch.distributed as dist

from gspo_bench import cli
from gspo_bench.train import setup


def main() -> None:
    suite, out = sys.argv[1], Path(sys.argv[2])
    world = {"process_group": False, "backend": None, "world_size": 1, "dtensor_parameters": False}
    shard = setup.shard

    def shard_and_record(model):
        sharded = shard(model)
        world.update(process_group=True, backend=dist.get_backend(), world_size=dist.get_world_size(),
                     dtensor_parameters=all(hasattr(p, "to_local") for p in sharded.parameters()))
        return sharded

    setup.shard = shard_and_record
    sys.argv = ["gspo-bench", "run", suite, "--out", str(out)]
    try:
        cli.main()
    except SystemExit as end:
        if end.code not in (0, None):
            raise
    if not dist.is_initialized() or dist.get_rank() == 0:
        (out / "world.json").write_text(json.dumps(world) + "\n")


if __name__ == "__main__":
    main()
