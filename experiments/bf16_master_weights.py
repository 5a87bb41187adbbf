"""Does a bf16 run train at an RL learning rate? Runs experiments/ci.yaml (one objective) in bf16 at
lr 1e-6 for a few steps and compares the checkpoint with the starting weights; also shows what
AdamW would have done to bf16 weights (the update rounded away).

    python experiments/bf16_master_weights.py [--steps 3] [--lr 1e-6] [--out /tmp/bf16-check]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch
import yaml
from safetensors.torch import load_file

from gspo_bench.config import parse_suite
from gspo_bench.runtime.kernels import pin_kernels
from gspo_bench.suite.runner import plan_runs, run_suite, starting_weights

SUITE = Path(__file__).resolve().parent / "ci.yaml"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--lr", type=float, default=1e-6)
    parser.add_argument("--objective", default="gspo")
    parser.add_argument("--out", type=Path, default=Path("/tmp/bf16-check"))
    args = parser.parse_args()
    data = yaml.safe_load(SUITE.read_text())
    data.update(name="bf16-check", objectives=[{"name": args.objective}], budget={"kind": "steps", "value": args.steps})
    data["train"] |= {"dtype": "bfloat16", "lr": args.lr}
    suite = parse_suite(data, str(SUITE))
    runs = plan_runs(suite, args.out)
    [(planned, status)] = run_suite(suite, runs, args.out, log=lambda m: None)
    start = load_file(starting_weights(suite, 0, log=lambda m: None) / "model.safetensors")
    end = load_file(planned.run_dir / "checkpoint" / "model" / "model.safetensors")
    moved = [n for n in start if not torch.equal(start[n], end[n])]
    delta = max((end[n] - start[n]).abs().max().item() for n in moved) if moved else 0.0
    # the same change applied to bf16 weights: how many tensors would still differ after rounding
    kept = [n for n in moved if not torch.equal(start[n].bfloat16(), end[n].bfloat16())]
    elements = sum(start[n].numel() for n in start)
    changed = sum(int((start[n] != end[n]).sum()) for n in moved)
    changed_bf16 = sum(int((start[n].bfloat16() != end[n].bfloat16()).sum()) for n in moved)
    print(f"{status['status']} after {status['step']} steps of {args.objective}, bf16 compute, lr {args.lr:g}")
    print(f"weights saved as {sorted({str(t.dtype) for t in end.values()})}")
    print(f"tensors changed: {len(moved)} of {len(start)}; elements changed: {changed} of {elements}; "
          f"largest |change| {delta:.3g}")
    print(f"the same change on bf16 weights: {len(kept)} tensors, {changed_bf16} elements would differ")


if __name__ == "__main__":
    pin_kernels()  # as `gspo-bench` does, before anything computes: the same kernels as its runs
    main()
