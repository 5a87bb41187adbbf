"""What one held-out evaluation costs on CPU at the stress suite's shapes, by each eval engine.

    python experiments/eval_cost.py [--examples 128] [--threads 1] [--repeats 2]

The stress suite's model (experiments/stress_cpu.yaml: qwen3_moe, 4 layers, hidden 128, 32 experts of
32, top-4), its task (chain, 30 steps) and rollout length (200 new tokens), one torch thread as each
run of the suite has. The model is freshly built (no warm start) and its end-of-sequence logit is set
to -inf, so every response runs to 200 tokens: an upper bound for the warm-started model's ~180-token
chain answers. Prints the seconds (wall, and CPU of the process) of one evaluation of `--examples` test prompts (1 sample each) by
lm-eval (`eval.engine: lm_eval`) and by the rollout engine (`eval.engine: rollout`), the first call
(lm-eval's task indexing and dataset build included) and the later ones, and of one rollout of the
suite (8 prompts x 8 responses) for scale.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch

from gspo_bench.config import EvalConfig
from gspo_bench.models import build_char_tokenizer, build_tiny_moe
from gspo_bench.models.tokenizer import EOS_ID, PAD_ID
from gspo_bench.rollout import SamplingParams, make_engine
from gspo_bench.runtime.kernels import pin_kernels
from gspo_bench.tasks import make_task
from gspo_bench.train.evaluation import EngineEvaluator, Evaluator

SHAPE = {"num_layers": 4, "hidden_size": 128, "expert_hidden": 32, "num_experts": 32, "top_k": 4}
TASK = ("chain", {"steps": 30, "max_operand": 3, "max_value": 9})
NEW_TOKENS = 200


def never_ends(model: torch.nn.Module) -> None:
    """Every response runs to the token budget: the end-of-sequence logit is -inf."""
    def hook(module: torch.nn.Module, args: tuple, output: torch.Tensor) -> torch.Tensor:
        output[..., EOS_ID] = float("-inf")
        return output

    model.lm_head.register_forward_hook(hook)


def timed(call: Callable[[], object]) -> tuple[float, float]:
    """(wall seconds, CPU seconds of this process) of `call()`: on a shared machine the CPU time is the
    figure that does not depend on what else runs."""
    wall, cpu = time.perf_counter(), time.process_time()
    call()
    return time.perf_counter() - wall, time.process_time() - cpu


def shown(times: list[tuple[float, float]]) -> str:
    return ", ".join(f"{wall:.1f} s ({cpu:.1f} s CPU)" for wall, cpu in times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=128)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    tokenizer = build_char_tokenizer()
    model = build_tiny_moe("qwen3_moe", seed=0, vocab_size=len(tokenizer), **SHAPE).eval()
    never_ends(model)
    name, params = TASK
    settings = {"tasks": [name], "limit": args.examples, "samples": 1, "max_new_tokens": NEW_TOKENS, "batch_size": 64}
    engine = make_engine("hf", pad_id=PAD_ID, eos_id=EOS_ID, router_noise=0.3)
    with tempfile.TemporaryDirectory() as tmp:
        evaluators = {
            "lm_eval": Evaluator(EvalConfig(**settings), Path(tmp), name, params),
            "rollout": EngineEvaluator(EvalConfig(**settings, engine="rollout"), engine, name, params),
        }
        for label, evaluator in evaluators.items():
            times = [timed(lambda e=evaluator: e(model, tokenizer, seed=0)) for _ in range(args.repeats)]
            print(f"{label:8s} {args.examples} prompts x {NEW_TOKENS} tokens: {shown(times)} (first call, then later ones)")
    prompts = [tokenizer.encode(ex.prompt) for ex in make_task(name, **params).test_examples(8)]
    sampling = SamplingParams(group_size=8, max_new_tokens=NEW_TOKENS, seed=0, capture_routing=True)
    print(f"rollout  8 x 8 responses x {NEW_TOKENS} tokens (one RL step's generation): "
          f"{shown([timed(lambda: engine.generate(model, prompts, sampling))])}")
    print(f"load average during the measurement: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")


if __name__ == "__main__":
    pin_kernels()  # as `gspo-bench` does, before anything computes: the same kernels as its runs
    main()
