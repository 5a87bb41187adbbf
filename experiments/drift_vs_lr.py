"""Expert-activation drift after ONE AdamW step, at several learning rates, on tiny MoEs.

For each family and learning rate: sample P x G responses from a freshly initialised tiny MoE,
record the routing of the old policy on the whole sequences, take one AdamW step on the GRPO loss
(synthetic digit-share reward), record the routing again on the same tokens, and report
`routing_drift` over the valid tokens. This is the range of `moe/drift` the harness will see.

    python experiments/drift_vs_lr.py [--layers 8] [--out results/drift_vs_lr.csv]
"""

from __future__ import annotations

import argparse
import copy
from functools import partial

import pandas as pd
import torch

from gspo_bench.config import TrainConfig
from gspo_bench.models import build_char_tokenizer, build_tiny_moe
from gspo_bench.objectives import get_objective
from gspo_bench.runtime.kernels import pin_kernels
from gspo_bench.suite.probe import ProbeConfig, probe_batch
from gspo_bench.train.optim import make_optimizer
from gspo_bench.train.policy import Policy
from gspo_bench.train.row import to_host
from gspo_bench.train.update import UpdateSettings, drift_after_update, update_policy


def drift_after_one_step(family: str, lr: float, layers: int, seed: int) -> dict:
    """One AdamW step (K = 1, the whole batch) on the GRPO loss through the training loop's own
    update phase, then the routing of the same tokens against the old policy's."""
    tokenizer = build_char_tokenizer()
    base = build_tiny_moe(family, seed=seed, vocab_size=len(tokenizer), num_layers=layers)
    cfg = ProbeConfig(family=family, num_layers=layers, prompts=8, group_size=8, max_new_tokens=24, seed=seed)
    batch, old = probe_batch(base, tokenizer, cfg)
    model = copy.deepcopy(base).train()
    policy = Policy(model, make_optimizer(model, TrainConfig(), lr=lr))
    update_policy(policy, partial(get_objective("grpo")), batch, old, torch.arange(len(batch)), 1,
                  UpdateSettings(grad_clip=float("inf"), measure=False))
    stats = to_host(drift_after_update(policy, batch, old))
    per_layer = stats["moe/drift_layer"]
    return {"family": family, "layers": layers, "lr": lr, "seed": seed,
            "moe/drift": stats["moe/drift_after"], "moe/drift_expert": stats["moe/drift_expert_after"],
            "drift_first_layer": per_layer[0], "drift_last_layer": per_layer[-1]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--families", default="qwen3_moe,qwen2_moe,olmoe,mixtral")
    parser.add_argument("--lrs", default="1e-6,1e-5,1e-4,1e-3,1e-2")
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--out", default=None, help="CSV path for the per-seed rows")
    args = parser.parse_args()
    rows = [
        drift_after_one_step(family, float(lr), args.layers, seed)
        for family in args.families.split(",")
        for lr in args.lrs.split(",")
        for seed in range(args.seeds)
    ]
    frame = pd.DataFrame(rows)
    if args.out:
        frame.to_csv(args.out, index=False)
    summary = frame.groupby(["family", "lr"])[["moe/drift", "moe/drift_expert", "drift_first_layer", "drift_last_layer"]].mean()
    print(summary.to_markdown(floatfmt=".4f"))


if __name__ == "__main__":
    pin_kernels()  # as `gspo-bench` does, before anything computes: the same kernels as its runs
    main()
