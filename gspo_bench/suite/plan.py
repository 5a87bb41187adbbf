"""Planning a suite without running it (`gspo-bench run SUITE --dry-run`): parameters, compute per
step and to the budget, the memory of one step on one GPU and whether it fits. Needs no GPU and no
weights: the model is built from its config on PyTorch's `meta` device.

Estimates are per step: every response is taken at `max_new_tokens`. Prompts: `rollout.max_prompt_tokens`
where set (a bound the run enforces), else the first step's own prompts where the task and the
tokenizer are here (tiny models always), else left out (said so). FLOPs use the run's own accounting
(`gspo_bench.train.compute`: 2 N_active per token forwarded, 6 N_active per token trained, the tokens
of every pass the loop makes: generation, old-policy pass, reference, the drift-after pass). Memory
(`MemoryPlan`, formulas in `memory_plan`) is the training state, the rollout copy of the weights,
and the larger of one micro-batch's activations and logits or the rollout's KV cache; `Fit` checks
it against one GPU with 10% headroom, and `propose` finds the settings that make it fit.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from gspo_bench.config import SuiteConfig, sweep
from gspo_bench.models.families import hf_model
from gspo_bench.moe import find_routers
from gspo_bench.rollout.chunks import kv_bytes_per_token, rows_per_chunk
from gspo_bench.train import StepCompute, active_parameters

if TYPE_CHECKING:
    from transformers import PretrainedConfig

    from gspo_bench.config.schema import TrainConfig

BYTES = {"float32": 4, "bfloat16": 2}
GIB = 2**30
HEADROOM = 0.10  # of the GPU's memory left free by a plan that fits (allocator, CUDA context, kernels' workspace)
# AdamW's two moments per parameter: fp32, or torchao's blockwise 8-bit (1 byte + an fp32 scale per 256)
MOMENT_BYTES = {"adamw": 8.0, "adamw8bit": 2 * (1 + 4 / 256)}
# Activations a training forward keeps for its backward, per token and layer (without activation
# checkpointing), by train.dtype: (attention block, norms and router, in units
# of hidden_size bytes; bytes per element of a routed expert's tensors). Measured on one H100 (torch
# 2.11, transformers 5.17, SDPA, grouped_mm experts) for qwen3_moe, hidden 1024, 16 heads of 64, 4 KV
# heads, 64 experts of width 384 at top-8, a 64 x 148 minibatch, and checked there at top-2 and at
# width 768 (within 0.5%). With bf16 autocast the experts still run in fp32: transformers' grouped_mm
# casts their input to the fp32 master weights' dtype (issue 23); bf16 weights measured (34, 2).
ACTIVATION_FACTORS = {"float32": (52, 4), "bfloat16": (42, 2)}


class PlanError(ValueError):
    pass


@dataclass(frozen=True)
class Shapes:
    """What the memory plan reads from the model: its sizes, not its weights."""

    params: int  # total parameters N
    hidden: int  # H
    layers: int  # decoder layers
    vocab: int  # V
    experts: tuple[tuple[int, int], ...]  # (top_k, expert width I) of each MoE layer
    kv_elements: int  # keys and values one token adds to the cache, over all layers, in elements

    @classmethod
    def of(cls, config: PretrainedConfig, experts: list[tuple[int, int]], params: int) -> Shapes:
        return cls(params=params, hidden=config.hidden_size, layers=config.num_hidden_layers, vocab=config.vocab_size,
                   experts=tuple(experts), kv_elements=kv_bytes_per_token(config, 1))


@dataclass(frozen=True)
class MemoryPlan:
    """Bytes on one GPU (one rank under FSDP2) at a step's peak (`memory_plan` gives the formulas)."""

    state: int  # fp32 weights, gradients, AdamW moments (+ reference), this rank's share
    activations: int  # saved for backward by one micro-batch's forward
    logits: int  # one micro-batch's response logits, their gradient and the fp32 log-softmax chunks
    kv_cache: int  # the rollout's keys and values: one chunk of rows at full length
    rollout_copy: int = 0  # the hf engine's bf16 copy of the weights (one GPU, bf16 rollouts)
    engine: int = 0  # what the vllm engine reserves (gpu_memory_utilization of the GPU)

    @property
    def training(self) -> int:
        return self.activations + self.logits

    @property
    def peak(self) -> int:
        """The state, the rollout copy and the engine's reservation, plus the larger of the update's
        activations and logits and the rollout's KV cache (the previous step's gradients are still
        held during the rollout and the next forward)."""
        return self.state + self.rollout_copy + self.engine + max(self.training, self.kv_cache)


@dataclass(frozen=True)
class Fit:
    """The planned peak against one GPU of `gpu_bytes`: fits with HEADROOM of it left free."""

    gpu_bytes: int
    peak: int

    @property
    def fits(self) -> bool:
        return self.peak <= (1 - HEADROOM) * self.gpu_bytes

    @property
    def headroom(self) -> float:
        return 1 - self.peak / self.gpu_bytes


@dataclass(frozen=True)
class Batching:
    """How a step's sequences meet the GPU: rows of a minibatch and micro-batch, the padded length."""

    prompt_width: int  # planned prompt width (tokens), 0 when unknown
    length: int  # prompt_width + max_new_tokens: the padded sequence length of training forwards
    minibatch_rows: int  # this rank's rows of the largest minibatch
    micro_rows: int  # rows of one micro-batch
    rollout_rows: int  # rows of one rollout chunk (this rank's)


@dataclass(frozen=True)
class Proposal:
    """Settings (`--set` path, value) under which a plan that does not fit one GPU fits (`changes`
    empty: none do), and the peak they give."""

    changes: list[tuple[str, object]]
    peak: int

    @property
    def found(self) -> bool:
        return bool(self.changes)


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
    state_bytes: int  # weights + gradients + optimizer moments (+ frozen reference) of one run, this rank's share
    memory: MemoryPlan  # activations, logits, KV cache and the peak they make with the state
    batching: Batching
    fit: Fit  # the peak against one GPU of train.gpu_memory_gb
    prompts: str = "left out"  # where the planned prompt lengths come from
    prompt_tokens_per_step: int = 0  # prompt tokens of a step's sequences (each prompt G times)
    proposal: Proposal | None = None  # where it does not fit: settings under which it does
    ranks: int = 1  # GPUs the plan is for (FSDP2 ranks)

    @property
    def flops_total(self) -> float:
        return self.flops_per_step * self.steps_per_run * self.runs


def planning_config(suite: SuiteConfig) -> tuple[PretrainedConfig, str]:
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
    sizes = model.tiny_sizes()
    spec = TinyMoESpec(family=model.family, vocab_size=len(build_char_tokenizer()), **sizes)
    return tiny_config(spec), f"tiny {model.family} built from the suite"


def expert_layers(model: torch.nn.Module) -> list[tuple[int, int]]:
    """(top_k, expert width I) of each MoE layer; I = parameters per routed expert / (3 hidden_size):
    gate, up and down projections."""
    hidden = int(hf_model(model, "the dry run's expert shapes").config.hidden_size)
    widths = []
    for router in find_routers(model):
        per_expert = sum(p.numel() for p in router.experts.parameters()) / router.num_experts
        widths.append((router.top_k, round(per_expert / (3 * hidden))))
    return widths


def first_prompts(suite: SuiteConfig) -> tuple[list[int], str] | None:
    """Token lengths of the first step's P prompts (the first seed's draw, as the run renders them),
    and where they come from; None where the task's data or the tokenizer is not on this machine."""
    from gspo_bench.train import draw_examples, run_prompt_format, step_seed

    try:
        task = suite.task.instance()
        if suite.model.path is None:
            from gspo_bench.models import build_char_tokenizer

            tokenizer = build_char_tokenizer()
        elif (Path(suite.model.path) / "tokenizer_config.json").is_file():
            from transformers import AutoTokenizer

            tokenizer = AutoTokenizer.from_pretrained(suite.model.path, local_files_only=True)
        else:
            return None
        prompt_format = run_prompt_format(suite, tokenizer)
    except (ValueError, OSError):
        return None
    examples = draw_examples(task, suite.rollout.prompts_per_step, step_seed(suite.seeds[0], 1, 0))
    return [len(prompt_format.encode(tokenizer, ex.prompt)) for ex in examples], "the first step's prompts"


def planned_prompts(suite: SuiteConfig) -> tuple[int, int, str]:
    """(prompt width, prompt tokens of a step's P G sequences, where from): rollout.max_prompt_tokens
    (an upper bound), else the first step's own prompts, else 0 (left out)."""
    group = suite.rollout.group_size
    if suite.rollout.max_prompt_tokens is not None:
        limit = suite.rollout.max_prompt_tokens
        return limit, limit * suite.rollout.prompts_per_step * group, "rollout.max_prompt_tokens (upper bound)"
    measured = first_prompts(suite)
    if measured is None:
        return 0, 0, "left out (no task data or tokenizer here; set rollout.max_prompt_tokens)"
    lengths, source = measured
    return max(lengths), sum(lengths) * group, source


def world_size() -> int:
    """Ranks the run is planned for: torchrun's WORLD_SIZE, else 1."""
    return max(1, int(os.environ.get("WORLD_SIZE", "1")))


def batching(suite: SuiteConfig, shapes: Shapes, prompt_width: int, ranks: int = 1) -> Batching:
    """Rows per minibatch (the largest: ceil(P G / K), this rank's ceil share), per micro-batch
    (train.micro_batch_tokens // padded length, at least one row) and per rollout chunk."""
    rollout, train = suite.rollout, suite.train
    length = prompt_width + rollout.max_new_tokens
    minibatch = math.ceil(math.ceil(rollout.prompts_per_step * rollout.group_size / train.minibatches) / ranks)
    micro = minibatch if train.micro_batch_tokens is None else min(minibatch, max(1, train.micro_batch_tokens // length))
    sequences = math.ceil(rollout.prompts_per_step * rollout.group_size / ranks)
    element = BYTES[rollout.dtype or train.dtype]
    chunk = sequences if rollout.engine != "hf" else rows_per_chunk(sequences, length * shapes.kv_elements * element,
                                                                    rollout.kv_cache_gib)
    return Batching(prompt_width=prompt_width, length=length, minibatch_rows=minibatch, micro_rows=micro,
                    rollout_rows=chunk)


def state_bytes(suite: SuiteConfig, params: int, ranks: int = 1) -> int:
    """fp32 master weights and gradients and the optimizer's moments, sharded over `ranks` (FSDP2),
    plus a frozen reference in the compute dtype for a KL penalty."""
    train = suite.train
    state = math.ceil(params * (4 + 4 + MOMENT_BYTES[train.optimizer]) / ranks)
    return state + (params * BYTES[train.dtype] if train.kl_coef > 0 else 0)


def rollout_copy_bytes(suite: SuiteConfig, params: int, ranks: int = 1) -> int:
    """2 N where the hf engine keeps a bf16 copy of the weights (`rollout.hf.RolloutWeights.applies`):
    bf16 rollouts on a GPU, one process, unless engine_options.copy_weights says otherwise."""
    rollout, train = suite.rollout, suite.train
    copy_option = rollout.engine_options.get("copy_weights")
    on_gpu = train.device.startswith("cuda")
    copies = (rollout.engine == "hf" and (rollout.dtype or train.dtype) == "bfloat16" and ranks == 1
              and (copy_option if copy_option is not None else on_gpu))
    return 2 * params if copies else 0


def memory_plan(suite: SuiteConfig, shapes: Shapes, prompt_width: int = 0, ranks: int = 1) -> MemoryPlan:
    """What one GPU holds at a step's peak. With H = hidden_size, L decoder layers, V the vocabulary,
    m rows of a micro-batch (`batching`) of padded length S = prompt width + T, T = max_new_tokens:

        activations = m S [L a H + sum over MoE layers of k (2 H + 4 I) e]             (no checkpointing)
                    = m S [L 4 H + sum over MoE layers of 8 k + max over layers of the above per layer]
                                                                                    (activation_checkpointing)
            (a, e) = ACTIVATION_FACTORS[train.dtype]; a routed (token, expert) pair keeps its gathered
            input (H), gate and up (2 I), silu(gate) (I), their product (I) and the expert's output (H).
            Checkpointed, a layer keeps its input (the fp32 residual stream, 4 H) and the route keeper
            its experts' ids (int64), and one layer at a time is recomputed in backward
        logits = 2 m T V c + 2 min(m T, CHUNK_ROWS) V 4                                 (no chunked head)
               = C V (2 c + 8)                                        (train.logprob_chunk_tokens = C)
            the T response positions' logits in the compute dtype (c = 2 under bf16 autocast, 4 in fp32)
            and their gradient, both alive when the backward starts; fp32 log-softmax chunks of
            CHUNK_ROWS rows (`models.logprobs`). Chunked: one chunk's logits, their fp32 copy, softmax
            and gradient at a time
        kv_cache = 2 L n_kv d_head r S R
            keys and values of the R rows of one rollout chunk (all P G rows without rollout.kv_cache_gib),
            r = bytes of rollout.dtype
        rollout_copy = 2 N where the hf engine keeps a bf16 copy (`rollout_copy_bytes`)
        engine = gpu_memory_utilization (vLLM's default 0.9) x the GPU, with the vllm engine

    Shared experts and dense layers' MLPs count only within `a` (an underestimate for families with
    them); every layer counts as full attention in the KV cache (an overestimate for sliding-window
    and linear-attention layers). The hf engine's generate needs more than its KV cache: on the
    measuring H100, 5 GiB at P G = 256 with a 20-token prompt, also for 32 new tokens, so at prefill.
    """
    rollout, train = suite.rollout, suite.train
    rows = batching(suite, shapes, prompt_width, ranks)
    tokens = rows.micro_rows * rows.length
    return MemoryPlan(state=state_bytes(suite, shapes.params, ranks), activations=tokens * activation_bytes(train, shapes),
                      logits=logit_bytes(train, shapes.vocab, rows.micro_rows * rollout.max_new_tokens),
                      kv_cache=rows.rollout_rows * rows.length * shapes.kv_elements * BYTES[rollout.dtype or train.dtype]
                      if rollout.engine == "hf" else 0,
                      rollout_copy=rollout_copy_bytes(suite, shapes.params, ranks),
                      engine=round(rollout.engine_options.get("gpu_memory_utilization", 0.9) * train.gpu_memory_gb * 1e9)
                      if rollout.engine == "vllm" else 0)


def activation_bytes(train: TrainConfig, shapes: Shapes) -> int:
    """Bytes a training forward keeps per token (see `memory_plan`)."""
    attention, expert_bytes = ACTIVATION_FACTORS[train.dtype]
    routed = [k * (2 * shapes.hidden + 4 * width) * expert_bytes for k, width in shapes.experts]
    whole = shapes.layers * attention * shapes.hidden + sum(routed)
    if not train.activation_checkpointing:
        return whole
    one_layer = attention * shapes.hidden + max(routed, default=0)
    return shapes.layers * 4 * shapes.hidden + sum(8 * k for k, _ in shapes.experts) + one_layer


def logit_bytes(train: TrainConfig, vocab: int, positions: int) -> int:
    """Bytes of a micro-batch's response logits at the backward's start (see `memory_plan`)."""
    from gspo_bench.models.logprobs import CHUNK_ROWS

    compute = BYTES[train.dtype]
    if train.logprob_chunk_tokens is not None:
        return min(train.logprob_chunk_tokens, positions) * vocab * (2 * compute + 8)
    return 2 * positions * vocab * compute + 2 * min(positions, CHUNK_ROWS) * vocab * 4


def step_compute(suite: SuiteConfig, prompt_tokens: int) -> StepCompute:
    """The tokens of one step as the loop counts them (`train.loop.run_step`), every response at
    max_new_tokens: each pass forwards every sequence (prompt and response): generation, the old-policy
    pass, the reference (KL), and the drift-after pass (measured after the last update when asked, and
    always with one minibatch, whose drift it is); the updates train every sequence once."""
    rollout, train = suite.rollout, suite.train
    tokens = rollout.prompts_per_step * rollout.group_size * rollout.max_new_tokens + prompt_tokens
    drift_after = train.measure and (train.drift_after_update or train.minibatches == 1)
    passes = 2 + (train.kl_coef > 0) + drift_after
    return StepCompute(tokens_forward=passes * tokens, tokens_trained=tokens)


def plan_suite(suite: SuiteConfig, ranks: int | None = None) -> SuitePlan:
    """The plan of `suite` on `ranks` GPUs (default: torchrun's WORLD_SIZE, else one)."""
    from transformers import AutoModelForCausalLM

    ranks = world_size() if ranks is None else ranks
    config, source = planning_config(suite)
    with torch.device("meta"):  # shapes only: no memory, no weights
        model = AutoModelForCausalLM.from_config(config)
    n_total = sum(p.numel() for p in model.parameters())
    n_active = active_parameters(model)
    shapes = Shapes.of(config, expert_layers(model), n_total)
    width, prompt_tokens, prompts = planned_prompts(suite)
    rollout = suite.rollout
    sequences = rollout.prompts_per_step * rollout.group_size
    compute = step_compute(suite, prompt_tokens)
    flops = compute.flops(n_active)
    budget = suite.budget
    per_step = {"steps": 1.0, "tokens": float(compute.tokens), "flops": flops}[budget.kind]
    steps = min(budget.max_steps, math.ceil(budget.value / per_step))
    try:
        memory = memory_plan(suite, shapes, width, ranks)
    except ValueError as err:  # a KV budget below one row
        raise PlanError(str(err)) from None
    fit = Fit(gpu_bytes=round(suite.train.gpu_memory_gb * 1e9), peak=memory.peak)
    return SuitePlan(model_source=source, params_total=n_total, params_active=n_active, sequences_per_step=sequences,
                     response_tokens_per_step=sequences * rollout.max_new_tokens, flops_per_step=flops,
                     steps_per_run=steps, runs=len(suite.objectives) * len(suite.seeds) * len(sweep.points(suite.sweep or {})),
                     state_bytes=memory.state,
                     memory=memory, prompts=prompts, prompt_tokens_per_step=prompt_tokens,
                     batching=batching(suite, shapes, width, ranks), fit=fit, ranks=ranks,
                     proposal=None if fit.fits else proposal(suite, shapes, width, ranks))


def proposal(suite: SuiteConfig, shapes: Shapes, width: int, ranks: int) -> Proposal:
    changes = propose(suite, shapes, width, ranks)
    if changes is None:
        return Proposal(changes=[], peak=0)
    return Proposal(changes=changes, peak=memory_plan(with_changes(suite, changes), shapes, width, ranks).peak)


# settings the proposal switches on, cheapest first; micro-batches and the KV budget are searched
SWITCHES: tuple[tuple[str, object], ...] = (("train.activation_checkpointing", True),
                                            ("train.logprob_chunk_tokens", 4096),
                                            ("rollout.kv_cache_gib", "search"), ("train.optimizer", "adamw8bit"))


def with_changes(suite: SuiteConfig, changes: list[tuple[str, object]]) -> SuiteConfig:
    """`suite` with `changes` (train.* and rollout.* paths) applied, unvalidated (planning only)."""
    parts: dict[str, dict] = {"train": {}, "rollout": {}}
    for path, value in changes:
        section, name = path.split(".")
        parts[section][name] = value
    return suite.model_copy(update={"train": suite.train.model_copy(update=parts["train"]),
                                    "rollout": suite.rollout.model_copy(update=parts["rollout"])})


def fits(suite: SuiteConfig, shapes: Shapes, width: int, ranks: int) -> bool:
    try:
        peak = memory_plan(suite, shapes, width, ranks).peak
    except ValueError:  # a KV budget below one row
        return False
    return Fit(gpu_bytes=round(suite.train.gpu_memory_gb * 1e9), peak=peak).fits


def propose(suite: SuiteConfig, shapes: Shapes, width: int, ranks: int = 1) -> list[tuple[str, object]] | None:
    """The settings (`--set` path, value) under which a plan that does not fit one GPU fits, cheapest
    first: micro-batches alone (the largest power-of-two token budget that fits), then with activation
    checkpointing, the chunked log-prob head, a KV-cache budget (the largest power-of-two GiB that
    fits) and 8-bit AdamW added in that order; None when even all of them leave it too large."""
    length = width + suite.rollout.max_new_tokens
    rows = batching(suite, shapes, width, ranks).minibatch_rows
    micro = [None] + [2**j for j in range(math.ceil(math.log2(rows * length)), math.ceil(math.log2(length)) - 1, -1)]
    kv_budgets = [None] + [2.0**j for j in range(8, -5, -1)]
    for n in range(len(SWITCHES) + 1):
        switched = [(path, value) for path, value in SWITCHES[:n] if value != "search"]
        kv = kv_budgets if any(value == "search" for _, value in SWITCHES[:n]) else [None]
        for tokens in micro:
            for budget in kv:
                changes = switched + [("train.micro_batch_tokens", tokens)] * (tokens is not None) \
                    + [("rollout.kv_cache_gib", budget)] * (budget is not None)
                if fits(with_changes(suite, changes), shapes, width, ranks):
                    return changes
    return None


def memory_lines(suite: SuiteConfig, plan: SuitePlan) -> list[tuple[str, str]]:
    """The dry run's memory rows: (what, GiB and how)."""
    memory, rows, train, rollout = plan.memory, plan.batching, suite.train, suite.rollout
    saved = ("checkpointed: one hidden state per layer, one layer recomputed in backward"
             if train.activation_checkpointing else "saved for backward, no checkpointing")
    head = (f"the log-prob head in chunks of {train.logprob_chunk_tokens} tokens" if train.logprob_chunk_tokens
            else "response positions and their gradient; fp32 log-softmax in chunks")
    chunks = f"{rows.rollout_rows} rows per chunk" + (f" (rollout.kv_cache_gib = {rollout.kv_cache_gib:g})"
                                                       if rollout.kv_cache_gib else "")
    lines = [
        ("micro-batch", f"{rows.micro_rows} rows x {rows.length} tokens (prompt width {rows.prompt_width} + "
                        f"{rollout.max_new_tokens}); {rows.minibatch_rows} rows per minibatch"
                        + (f", micro_batch_tokens = {train.micro_batch_tokens}" if train.micro_batch_tokens else "")),
        ("activations per micro-batch", f"{memory.activations / GIB:,.2f} GiB ({saved})"),
        ("logits per micro-batch", f"{memory.logits / GIB:,.2f} GiB ({head})"),
        ("KV cache, rollout", f"{memory.kv_cache / GIB:,.2f} GiB ({chunks}, every response at full length)"),
        ("rollout copy", f"{memory.rollout_copy / GIB:,.2f} GiB (bf16 weights the hf engine samples from, one GPU)"),
    ]
    if memory.engine:
        lines.append(("vllm engine", f"{memory.engine / GIB:,.2f} GiB (gpu_memory_utilization of the GPU)"))
    lines.append(("peak per run, one GPU", f"{memory.peak / GIB:,.1f} GiB = state + rollout copy"
                  + (" + vllm engine" if memory.engine else "") + " + max(activations + logits, KV cache)"))
    return lines


def fit_line(suite: SuiteConfig, plan: SuitePlan) -> tuple[str, str]:
    """Whether the peak fits one GPU of train.gpu_memory_gb with HEADROOM free, and if not, what would."""
    fit, gb = plan.fit, suite.train.gpu_memory_gb
    what = f"one GPU of {gb:g} GB ({fit.gpu_bytes / GIB:.1f} GiB)" + (f", x {plan.ranks} ranks" if plan.ranks > 1 else "")
    if fit.fits:
        return what, f"fits: peak {fit.peak / GIB:,.1f} GiB, {fit.headroom:.0%} free"
    usable = f"peak {fit.peak / GIB:,.1f} GiB > {1 - HEADROOM:.0%} of {fit.gpu_bytes / GIB:.1f} GiB"
    found = plan.proposal
    if found is None:  # plan_suite proposes wherever the plan does not fit
        raise RuntimeError("a plan that does not fit has no proposal: make it with plan_suite")
    if found.found:
        sets = " ".join(f"--set {path}={str(value).lower() if isinstance(value, bool) else value}"
                        for path, value in found.changes)
        return what, f"does not fit ({usable}); fits with {sets} (peak {found.peak / GIB:,.1f} GiB)"
    return what, (f"does not fit ({usable}), not even with micro-batches of one row, activation checkpointing, the "
                  "chunked log-prob head, rows in chunks and 8-bit AdamW: shard it over more GPUs (torchrun)")


def plan_vs_peak(memory: MemoryPlan, measured_gib: float) -> str:
    """The line step 1 prints on a GPU: the dry run's estimate beside the measured peak."""
    extra = (f" + rollout copy {memory.rollout_copy / GIB:.2f}" if memory.rollout_copy else "") + \
        (f" + vllm engine {memory.engine / GIB:.2f}" if memory.engine else "")
    return (f"GPU memory at step 1: measured peak {measured_gib:.1f} GiB; planned {memory.peak / GIB:.1f} GiB = "
            f"state {memory.state / GIB:.1f} + activations {memory.activations / GIB:.1f} + logits "
            f"{memory.logits / GIB:.2f}{extra} (KV cache {memory.kv_cache / GIB:.2f})")


@dataclass(frozen=True)
class RunsPlan:
    """The plan of the runs `names`, which share one suite (an arm's `set:` at one sweep point)."""

    names: tuple[str, ...]
    plan: SuitePlan


def plans_by_suite(runs: list[tuple[str, SuiteConfig]], known: tuple[SuiteConfig, SuitePlan] | None = None,
                   ranks: int | None = None) -> list[RunsPlan]:
    """One plan per distinct suite among the (run name, its suite) pairs, in the order first met;
    `known`: a suite already planned (the dry run's base suite), whose plan is reused."""
    groups: dict[str, tuple[SuiteConfig, list[str]]] = {}
    for name, run_suite in runs:
        groups.setdefault(run_suite.model_dump_json(), (run_suite, []))[1].append(name)
    planned = {known[0].model_dump_json(): known[1]} if known else {}
    return [RunsPlan(tuple(names), planned.get(key) or plan_suite(run_suite, ranks))
            for key, (run_suite, names) in groups.items()]


def runs_differ(groups: list[RunsPlan]) -> bool:
    """Whether some runs' arm or sweep point gives them another peak, FLOPs per step or step count."""
    return len({(g.plan.memory.peak, g.plan.flops_per_step, g.plan.steps_per_run) for g in groups}) > 1


def group_rows(groups: list[RunsPlan]) -> list[tuple[str, str]]:
    """Where runs differ (`runs_differ`): each group's peak, fit and compute; nothing where every run
    has the suite's plan."""
    if not runs_differ(groups):
        return []
    return [(", ".join(g.names), f"peak {g.plan.fit.peak / GIB:,.1f} GiB "
                                 f"({'fits' if g.plan.fit.fits else 'does not fit'} one GPU), "
                                 f"{g.plan.flops_per_step:.3g} FLOPs per step, >= {g.plan.steps_per_run:,} steps")
            for g in groups]


def suite_flops(plan: SuitePlan, groups: list[RunsPlan]) -> str:
    """The whole suite's FLOPs: the plan's, or where runs differ the sum of each run's own plan."""
    if not runs_differ(groups):
        return f"{plan.flops_total:.3g}"
    total = sum(g.plan.flops_per_step * g.plan.steps_per_run * len(g.names) for g in groups)
    return f"{total:.3g} (summed over the runs' own plans below)"


def plan_rows(suite: SuiteConfig, plan: SuitePlan, run_names: list[str],
              groups: list[RunsPlan] | None = None) -> list[tuple[str, str]]:
    """The dry run's table: (what, how much) for the model, one step, the budget, the runs and memory;
    with `groups` whose runs differ (an arm's `set:` or a sweep point changing shapes or compute), the
    whole suite's FLOPs are theirs and each group's peak and compute follow the suite's own rows."""
    r, t = suite.rollout, suite.train
    reference = f" + {t.dtype} reference" if t.kl_coef > 0 else ""
    moments = "8-bit AdamW moments" if t.optimizer == "adamw8bit" else "AdamW"
    passes = step_compute(suite, 0).tokens_forward // max(1, step_compute(suite, 0).tokens_trained)
    rows = [
        ("model", plan.model_source),
        ("parameters", f"{plan.params_total / 1e9:.3g} B total, {plan.params_active / 1e9:.3g} B active per token"),
        ("per step", f"{r.prompts_per_step} prompts x {r.group_size} = {plan.sequences_per_step} responses of <= "
                     f"{r.max_new_tokens} tokens = {plan.response_tokens_per_step:,} response tokens, "
                     f"{t.minibatches} minibatch updates"),
        ("prompts", f"{plan.prompt_tokens_per_step:,} prompt tokens per step, width {plan.batching.prompt_width} "
                    f"({plan.prompts})"),
        ("FLOPs per step", f"{plan.flops_per_step:.3g} (upper bound: full-length responses; {passes} forward passes "
                           "of every token and one trained)"),
        ("budget", f"{suite.budget.kind} = {suite.budget.value:g} -> >= {plan.steps_per_run:,} steps per run "
                   f"(cap {suite.budget.max_steps:,})"),
        ("runs", f"{plan.runs}: " + ", ".join(run_names)),
        ("FLOPs, whole suite", suite_flops(plan, groups or [])),
        ("training state per run", f"{plan.state_bytes / GIB:,.1f} GiB (fp32 master weights + grads + {moments}"
                                   f"{reference}; {t.dtype} compute)"),
        *memory_lines(suite, plan),
        fit_line(suite, plan),
    ]
    return rows + group_rows(groups or [])
