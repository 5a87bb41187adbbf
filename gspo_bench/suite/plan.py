"""Planning a suite without running it (`gspo-bench run SUITE --dry-run`): parameters, compute per
step and to the budget, and the memory of the training state. Needs no GPU and no weights: the
model is built from its config on PyTorch's `meta` device.

Estimates are per step: every response is taken at `max_new_tokens` and prompt tokens are left out
(their length is data-dependent); FLOPs use the harness's own accounting (`gspo_bench.train.compute`:
2 N_active per token forwarded, 6 N_active per token trained). Memory (`MemoryPlan`) is the training
state plus the larger of one training minibatch's activations and logits, or the rollout's KV cache
(see `memory_plan` for the formulas and where their factors were measured).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import torch

from gspo_bench.config import SuiteConfig
from gspo_bench.moe import find_routers
from gspo_bench.train.compute import StepCompute, active_parameters

BYTES = {"float32": 4, "bfloat16": 2}
# Activations a training forward keeps for its backward, per token and layer (no activation
# checkpointing: the project has none), by train.dtype: (attention block, norms and router, in units
# of hidden_size bytes; bytes per element of a routed expert's tensors). Measured on one H100 (torch
# 2.11, transformers 5.17, SDPA, grouped_mm experts) for qwen3_moe, hidden 1024, 16 heads of 64, 4 KV
# heads, 64 experts of width 384 at top-8, a 64 x 148 minibatch, and checked there at top-2 and at
# width 768 (within 0.5%). With bf16 autocast the experts still run in fp32: transformers' grouped_mm
# casts their input to the fp32 master weights' dtype (issue 23); bf16 weights measured (34, 2).
ACTIVATION_FACTORS = {"float32": (52, 4), "bfloat16": (42, 2)}


class PlanError(ValueError):
    pass


@dataclass(frozen=True)
class MemoryPlan:
    """Bytes on one GPU, single process (`memory_plan` gives the formulas)."""

    state: int  # fp32 weights, gradients, AdamW moments (+ reference)
    activations: int  # saved for backward by one training minibatch's forward
    logits: int  # one minibatch's response logits (kept for backward) and the fp32 log-softmax chunks
    kv_cache: int  # the rollout's keys and values, every response at full length
    rollout_copy: int = 0  # the hf engine's bf16 copy of the weights (one GPU, bf16 rollouts)

    @property
    def training(self) -> int:
        return self.activations + self.logits

    @property
    def peak(self) -> int:
        """The state plus the larger of the update's activations and logits and the rollout's KV cache
        (the previous step's gradients are still held during the rollout and the next forward), and
        the rollout copy of the weights."""
        return self.state + self.rollout_copy + max(self.training, self.kv_cache)


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
    memory: MemoryPlan  # activations, logits, KV cache and the peak they make with the state

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


def expert_layers(model: torch.nn.Module) -> list[tuple[int, int]]:
    """(top_k, expert width I) of each MoE layer; I = parameters per routed expert / (3 hidden_size):
    gate, up and down projections."""
    hidden = model.config.hidden_size
    widths = []
    for router in find_routers(model):
        per_expert = sum(p.numel() for p in router.experts.parameters()) / router.num_experts
        widths.append((router.top_k, round(per_expert / (3 * hidden))))
    return widths


def memory_plan(suite: SuiteConfig, config, experts: list[tuple[int, int]], state: int, params: int = 0) -> MemoryPlan:
    """What one GPU holds besides the training state. With H = hidden_size, L decoder layers, V the
    vocabulary, b = ceil(P G / K) rows of a training minibatch and T = max_new_tokens:

        activations = b T [L a H + sum over MoE layers of k (2 H + 4 I) e]
            (a, e) = ACTIVATION_FACTORS[train.dtype]; a routed (token, expert) pair keeps its gathered
            input (H), gate and up (2 I), silu(gate) (I), their product (I) and the expert's output (H)
        logits = b T V c + 2 min(b T, CHUNK_ROWS) V 4
            only the T response positions get logits (`response_forward`), kept for backward in the
            compute dtype (c = 2 bytes under bf16 autocast, 4 in fp32); the log-softmax runs in fp32
            chunks of CHUNK_ROWS rows (`models.logprobs`)
        kv_cache = 2 L n_kv d_head P G T r
            keys and values of every layer for all P G responses, r = bytes of rollout.dtype
        rollout_copy = 2 N for bf16 rollouts (N = `params`): the hf engine's bf16 copy of the weights on
            one GPU (none under FSDP2, where the sharded model samples)

    With bf16 autocast the experts' activations are bf16 too (e = 2: `train.precision`'s autocast rule
    for grouped matmuls, on CUDA).

    Shared experts and dense layers' MLPs count only within `a` (an underestimate for families with
    them); every layer counts as full attention in the KV cache (an overestimate for sliding-window
    and linear-attention layers). The hf engine's generate needs more than its KV cache: on the
    measuring H100, 5 GiB at P G = 256 with a 20-token prompt, also for 32 new tokens, so at prefill.
    """
    from gspo_bench.models.logprobs import CHUNK_ROWS

    rollout, train = suite.rollout, suite.train
    hidden, layers, vocab = config.hidden_size, config.num_hidden_layers, config.vocab_size
    heads = config.num_attention_heads
    kv_heads = getattr(config, "num_key_value_heads", None) or heads
    head_dim = getattr(config, "head_dim", None) or hidden // heads
    sequences, length = rollout.prompts_per_step * rollout.group_size, rollout.max_new_tokens
    rows = math.ceil(sequences / train.minibatches)
    attention, expert_bytes = ACTIVATION_FACTORS[train.dtype]
    per_token = layers * attention * hidden + sum(k * (2 * hidden + 4 * width) * expert_bytes for k, width in experts)
    logits = rows * length * vocab * BYTES[train.dtype] + 2 * min(rows * length, CHUNK_ROWS) * vocab * 4
    kv_cache = 2 * layers * kv_heads * head_dim * sequences * length * BYTES[rollout.dtype or train.dtype]
    copy = params * 2 if (rollout.dtype or train.dtype) == "bfloat16" else 0  # `rollout.hf.RolloutWeights`
    return MemoryPlan(state=state, activations=rows * length * per_token, logits=logits, kv_cache=kv_cache,
                      rollout_copy=copy)


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
                     state_bytes=state, memory=memory_plan(suite, config, expert_layers(model), state, n_total))


def memory_lines(memory: MemoryPlan) -> list[tuple[str, str]]:
    """The dry run's memory rows: (what, GiB and how)."""
    gib = 2**30
    return [
        ("activations per minibatch", f"{memory.activations / gib:,.2f} GiB (saved for backward, no checkpointing; "
                                      "1/N of it on each of N ranks)"),
        ("logits per minibatch", f"{memory.logits / gib:,.2f} GiB (response positions; fp32 log-softmax in chunks)"),
        ("KV cache, rollout", f"{memory.kv_cache / gib:,.2f} GiB (all responses at full length)"),
        ("rollout copy", f"{memory.rollout_copy / gib:,.2f} GiB (bf16 weights the hf engine samples from, one GPU)"),
        ("peak per run, one GPU", f"{memory.peak / gib:,.1f} GiB = state + rollout copy + max(activations + logits, "
                                  "KV cache); prompts left out"),
    ]


def plan_vs_peak(memory: MemoryPlan, measured_gib: float) -> str:
    """The line step 1 prints on a GPU: the dry run's estimate beside the measured peak."""
    gib = 2**30
    return (f"GPU memory at step 1: measured peak {measured_gib:.1f} GiB; planned {memory.peak / gib:.1f} GiB = "
            f"state {memory.state / gib:.1f} + activations {memory.activations / gib:.1f} + logits "
            f"{memory.logits / gib:.2f}" + (f" + rollout copy {memory.rollout_copy / gib:.2f}" if memory.rollout_copy else "")
            + f" (KV cache {memory.kv_cache / gib:.2f}; prompts left out)")


def plan_rows(suite: SuiteConfig, plan: SuitePlan, run_names: list[str]) -> list[tuple[str, str]]:
    """The dry run's table: (what, how much) for the model, one step, the budget, the runs and memory."""
    r, t = suite.rollout, suite.train
    reference = f" + {t.dtype} reference" if t.kl_coef > 0 else ""
    return [
        ("model", plan.model_source),
        ("parameters", f"{plan.params_total / 1e9:.3g} B total, {plan.params_active / 1e9:.3g} B active per token"),
        ("per step", f"{r.prompts_per_step} prompts x {r.group_size} = {plan.sequences_per_step} responses of <= "
                     f"{r.max_new_tokens} tokens = {plan.response_tokens_per_step:,} response tokens, "
                     f"{t.minibatches} minibatch updates"),
        ("FLOPs per step", f"{plan.flops_per_step:.3g} (upper bound: full-length responses, prompts left out)"),
        ("budget", f"{suite.budget.kind} = {suite.budget.value:g} -> >= {plan.steps_per_run:,} steps per run "
                   f"(cap {suite.budget.max_steps:,})"),
        ("runs", f"{plan.runs}: " + ", ".join(run_names)),
        ("FLOPs, whole suite", f"{plan.flops_total:.3g}"),
        ("training state per run", f"{plan.state_bytes / 2**30:,.1f} GiB (fp32 master weights + grads + AdamW"
                                   f"{reference}; {t.dtype} compute); activations, logits and KV cache below"),
        *memory_lines(plan.memory),
        ("GPUs (80 GB)", f">= {plan.gpus_needed()} with FSDP2 (state sharded over 80% of each); device {t.device}"),
    ]
