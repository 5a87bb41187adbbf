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

import pandas as pd
import torch

from gspo_bench.models import build_char_tokenizer, build_tiny_moe
from gspo_bench.models.forward import response_forward
from gspo_bench.moe import RoutingCapture, routing_drift
from gspo_bench.objectives import get_objective, group_advantages
from gspo_bench.probe import ProbeConfig, digit_share_reward, sample_rollouts


def drift_after_one_step(family: str, lr: float, layers: int, seed: int) -> dict:
    tokenizer = build_char_tokenizer()
    base = build_tiny_moe(family, seed=seed, vocab_size=len(tokenizer), num_layers=layers)
    cfg = ProbeConfig(family=family, num_layers=layers, prompts=8, group_size=8, max_new_tokens=24, seed=seed)
    rollout = sample_rollouts(base, tokenizer, cfg)
    seqs, attention_mask, response_mask = rollout.input_ids, rollout.attention_mask, rollout.response_mask
    n = response_mask.shape[1]
    texts = tokenizer.batch_decode(rollout.response_ids, skip_special_tokens=True)
    advantages = group_advantages(digit_share_reward(texts), cfg.group_size)
    model = copy.deepcopy(base).train()
    with RoutingCapture(model) as old:
        logp, _ = response_forward(model, seqs, attention_mask, n)
    loss, _ = get_objective("grpo")(logp=logp, old_logp=logp.detach(), advantages=advantages, mask=response_mask)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr)
    loss.backward()
    optimizer.step()
    with RoutingCapture(model) as new, torch.no_grad():
        model(input_ids=seqs, attention_mask=attention_mask)
    stats = routing_drift(old.routing, new.routing, attention_mask)
    return {"family": family, "layers": layers, "lr": lr, "seed": seed,
            "moe/drift": stats["moe/drift"], "moe/drift_expert": stats["moe/drift_expert"],
            "drift_first_layer": stats["moe/drift_layer_0"], "drift_last_layer": stats[f"moe/drift_layer_{layers - 1}"]}


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
    main()
