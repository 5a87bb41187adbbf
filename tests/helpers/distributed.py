"""The tiny suite of the torchrun tests, the router-margin columns they compare, and a rollout gathered by two
gloo ranks."""

from __future__ import annotations

import torch

from gspo_bench.rollout.batching import gather_rollout
from gspo_bench.rollout.engine import Rollout
from gspo_bench.runtime.distributed import World

SUITE = {
    "name": "dist",
    "model": {"num_layers": 2, "hidden_size": 32, "expert_hidden": 32, "num_experts": 4, "top_k": 2},
    "task": {"name": "sort", "params": {"max_len": 3}},
    "warm_start": {"band": [0.1, 1.0], "eval_every": 20, "eval_examples": 32},
    "rollout": {"prompts_per_step": 2, "group_size": 4, "max_new_tokens": 8},
    "train": {"lr": 1.0e-3, "minibatches": 2, "threads": 1, "drift_after_update": True},
    "budget": {"kind": "steps", "value": 2},
    "objectives": [{"name": "grpo_rr"}, {"name": "grpo_r3"}, {"name": "gspo"}],
    "seeds": [0],
}


# figures of the router logits themselves: under R3 they follow the hidden states of the replayed engine routing
MARGIN_COLUMNS = ("moe/flip_pred", "moe/margin", "moe/dscore", "moe/dmargin", "moe/route_conf")


def rank_rollout(rank: int) -> Rollout:
    """Rank `rank`'s two rows of a 4-row batch: rank 1's responses and kept sets wider than rank 0's."""
    width, set_width = (3, 2) if rank == 0 else (4, 3)
    gen = torch.Generator().manual_seed(rank)
    return Rollout(input_ids=torch.full((2, 2 + width), 5), attention_mask=torch.ones(2, 2 + width, dtype=torch.long),
                   response_mask=torch.ones(2, width, dtype=torch.bool), sampling_logp=torch.zeros(2, width),
                   routing=None, sampling_kept=torch.randint(0, 9, (2, width, set_width), generator=gen))


def gather_on_rank(rank: int, init_file: str, out: str) -> None:
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=2)
    try:
        full = gather_rollout(World(rank=rank, size=2), rank_rollout(rank), 4, pad_id=0)
        torch.save(full.sampling_kept, f"{out}/{rank}.pt")
    finally:
        dist.destroy_process_group()
