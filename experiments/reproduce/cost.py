"""What the kernel pins cost: CPU seconds per supervised step of a tiny MoE, with the kernels this
process gets (pinned as `gspo-bench` pins them, or the machine's own with GSPO_BENCH_NATIVE_KERNELS=1).

    python experiments/reproduce/cost.py                                  # the stress suite's model
    GSPO_BENCH_NATIVE_KERNELS=1 python experiments/reproduce/cost.py      # the same, unpinned

One thread; a warm-up step, then the mean over `--steps` steps of 32 `chain` examples (~190 tokens).
"""

from __future__ import annotations

import argparse
import random
import time

import torch

from gspo_bench.models import build_char_tokenizer, build_tiny_moe
from gspo_bench.runtime.kernels import kernel_state, pin_kernels
from gspo_bench.tasks import make_task
from gspo_bench.train.warmstart import WarmStartParams, sft_optimizer, sft_step


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--experts", type=int, default=32)
    parser.add_argument("--expert-hidden", type=int, default=32)
    parser.add_argument("--top-k", type=int, default=4)
    args = parser.parse_args()
    torch.set_num_threads(1)
    tokenizer = build_char_tokenizer()
    model = build_tiny_moe("qwen3_moe", seed=0, vocab_size=len(tokenizer), num_layers=args.layers,
                           hidden_size=args.hidden, num_experts=args.experts, expert_hidden=args.expert_hidden,
                           top_k=args.top_k)
    task, rng = make_task("chain", steps=26, max_operand=3, max_value=9), random.Random(0)
    params = WarmStartParams(batch_size=32)
    optimizer = sft_optimizer(model, params, torch.device("cpu"))
    sft_step(model, tokenizer, task, params, rng, optimizer, torch.device("cpu"))  # warm-up
    start = time.process_time()
    for _ in range(args.steps):
        sft_step(model, tokenizer, task, params, rng, optimizer, torch.device("cpu"))
    state = kernel_state()
    print(f"{(time.process_time() - start) / args.steps:.2f} CPU s per step with {state['aten_cpu_capability']} "
          f"ATen kernels and MKL's {state['mkl_branch']} branch ({state['cpu']})")


if __name__ == "__main__":
    pin_kernels()  # as `gspo-bench` does (GSPO_BENCH_NATIVE_KERNELS=1 leaves the machine's own)
    main()
