"""The tiny suite of the torchrun tests, and the router-margin columns they compare."""

from __future__ import annotations

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

