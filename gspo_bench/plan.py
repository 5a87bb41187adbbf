"""Planning a suite without running it (`gspo-bench run SUITE --dry-run`): parameters, compute per
step and to the budget, and the memory of the training state. Needs no GPU and no weights: the
model is built from its config on PyTorch's `meta` device.

Estimates are upper bounds per step: every response is taken at `max_new_tokens` and prompt tokens
are left out (their length is data-dependent); FLOPs use the harness's own accounting
(`gspo_bench.compute`: 2 N_active per token forwarded, 6 N_active per token trained).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import torch

from gspo_bench.compute import StepCompute, active_parameters
from gspo_bench.config import SuiteConfig

BYTES = {"float32": 4, "bfloat16": 2}


class PlanError(ValueError):
    pass


@dataclass(frozen=True)
class SuitePlan:
    model_source: str
    params_total: int
    params_active: int
    sequences_per_step: int
    response_tokens_per_step: int
    flops_per_step: float
    steps_per_run: int
    runs: int
    state_bytes: int  # fp32 weights + gradients + AdamW moments (+ frozen reference) of one run

    @property
    def flops_total(self) -> float:
        return self.flops_per_step * self.steps_per_run * self.runs

    def gpus_needed(self, gpu_bytes: float = 80e9, usable: float = 0.8) -> int:
        """GPUs over which FSDP2 must shard the training state to fit `usable` of each (activations,
        KV cache and the rollout engine need the rest)."""
        return max(1, math.ceil(self.state_bytes / (gpu_bytes * usable)))


def planning_config(suite: SuiteConfig):
    """The transformers config the suite's model would have, and where it came from."""
    from transformers import AutoConfig

    from gspo_bench.models import build_char_tokenizer
    from gspo_bench.models.tiny import TinyMoESpec, tiny_config

    model = suite.model
    if model.path is not None and (Path(model.path) / "config.json").is_file():
        return AutoConfig.from_pretrained(model.path, local_files_only=True), f"checkpoint {model.path}"
    if model.architecture is not None:
        arch = Path(model.architecture)
        if not (arch / "config.json").is_file():
            raise PlanError(f"model.architecture {arch} has no config.json")
        return AutoConfig.from_pretrained(arch, local_files_only=True), f"architecture {arch} (no weights)"
    if model.path is not None:
        raise PlanError(f"model.path {model.path} is not on this machine; to plan without it, set "
                        "model.architecture to a directory with the checkpoint's config.json "
                        "(experiments/models/ has some)")
    sizes = model.model_dump(exclude={"family", "path", "architecture"})
    spec = TinyMoESpec(family=model.family, vocab_size=len(build_char_tokenizer()), **sizes)
    return tiny_config(spec), f"tiny {model.family} built from the suite"


def plan_suite(suite: SuiteConfig) -> SuitePlan:
    from transformers import AutoModelForCausalLM

    config, source = planning_config(suite)
    with torch.device("meta"):  # shapes only: no memory, no weights
        model = AutoModelForCausalLM.from_config(config)
    n_total = sum(p.numel() for p in model.parameters())
    n_active = active_parameters(model)
    rollout, train = suite.rollout, suite.train
    sequences = rollout.prompts_per_step * rollout.group_size
    tokens = sequences * rollout.max_new_tokens
    passes = 2 + (train.kl_coef > 0) + (train.drift_after_update and train.measure)  # generation, old pass, ...
    compute = StepCompute(tokens_forward=passes * tokens, tokens_trained=tokens)
    flops = compute.flops(n_active)
    budget = suite.budget
    per_step = {"steps": 1.0, "tokens": float(compute.tokens), "flops": flops}[budget.kind]
    steps = min(budget.max_steps, math.ceil(budget.value / per_step))
    # fp32 master weights, gradients and both AdamW moments, whatever the compute dtype (bf16 runs
    # compute under autocast), plus a frozen reference in the compute dtype for a KL penalty
    state = n_total * 4 * 4
    if train.kl_coef > 0:
        state += n_total * BYTES[train.dtype]
    runs = len(suite.objectives) * len(suite.seeds)
    return SuitePlan(model_source=source, params_total=n_total, params_active=n_active, sequences_per_step=sequences,
                     response_tokens_per_step=tokens, flops_per_step=flops, steps_per_run=steps, runs=runs,
                     state_bytes=state)
