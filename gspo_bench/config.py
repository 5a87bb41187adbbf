"""Suite files: YAML validated into typed, documented config models.

    name: quickstart
    model: {family: qwen3_moe, num_layers: 8}
    task: {name: countdown, params: {count: 3}}
    rollout: {prompts_per_step: 8, group_size: 8, max_new_tokens: 16}
    train: {lr: 1e-4, minibatches: 4}
    budget: {kind: flops, value: 2.0e12}
    objectives: [{name: grpo}, {name: grpo_rr}, {name: gspo}, {name: gspo_token}]
    seeds: [0]

Errors name the file, the field and what was expected.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from gspo_bench.models.families import SUPPORTED_FAMILIES
from gspo_bench.objectives import list_objectives, objective_spec

# Algorithms of the suite that are an objective plus a training option.
ALGORITHMS: dict[str, dict[str, Any]] = {
    "grpo_rr": {"objective": "grpo", "replay": True},  # GRPO + Routing Replay (paper section 5.3)
    # GRPO + Rollout Routing Replay (R3): the experts chosen while *generating* are replayed in the
    # old-policy pass and in every update forward, so training routes as the rollout engine did
    "grpo_r3": {"objective": "grpo", "replay": True, "replay_from": "rollout"},
}


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ModelConfig(Strict):
    family: str = Field("qwen3_moe", description=f"tiny MoE family: one of {', '.join(SUPPORTED_FAMILIES)}")
    path: str | None = Field(None, description="local HF checkpoint directory of a real MoE (overrides the sizes)")
    architecture: str | None = Field(None, description="directory with the checkpoint's config.json, for "
                                     "`run --dry-run` where model.path is absent (experiments/models/)")
    num_layers: int = Field(8, ge=1, description="decoder layers (all MoE)")
    hidden_size: int = Field(64, ge=8)
    num_experts: int = Field(8, ge=1)
    top_k: int = Field(2, ge=1)
    num_heads: int = Field(4, ge=1)
    num_kv_heads: int = Field(2, ge=1)
    expert_hidden: int = Field(64, ge=1, description="intermediate size of one routed expert")
    aux_loss: bool = Field(False, description="add the load-balancing loss (off as in the paper's setup)")

    @field_validator("family")
    @classmethod
    def _family(cls, v: str) -> str:
        if v not in SUPPORTED_FAMILIES:
            raise ValueError(f"expected one of {', '.join(SUPPORTED_FAMILIES)}")
        return v

    @model_validator(mode="after")
    def _sizes(self):
        if self.top_k > self.num_experts:
            raise ValueError(f"top_k ({self.top_k}) must be <= num_experts ({self.num_experts})")
        return self


class TaskConfig(Strict):
    name: str = Field(description="registered task: see `gspo-bench ls`")
    params: dict[str, Any] = Field(default_factory=dict, description="task parameters (see `gspo-bench ls`)")

    @model_validator(mode="after")
    def _known(self):
        from gspo_bench.tasks import list_tasks, task_params

        if self.name not in list_tasks():
            raise ValueError(f"unknown task {self.name!r}; expected one of {', '.join(list_tasks())}")
        unknown = set(self.params) - set(task_params(self.name))
        if unknown:
            raise ValueError(f"task {self.name!r} has no params {sorted(unknown)}; valid: {sorted(task_params(self.name))}")
        return self


class WarmStartConfig(Strict):
    enabled: bool = Field(True, description="supervised warm start before RL (tiny models only)")
    lr: float = Field(3e-3, gt=0)
    batch_size: int = Field(64, ge=1)
    max_steps: int = Field(2000, ge=1)
    eval_every: int = Field(25, ge=1)
    eval_examples: int = Field(64, ge=1)
    band: tuple[float, float] = Field((0.2, 0.6), description="target sampled test accuracy [low, high]")
    cache_dir: str | None = Field(None, description="where warm-started weights are cached; default ~/.cache/gspo-bench")

    @field_validator("band")
    @classmethod
    def _band(cls, v):
        if not 0.0 <= v[0] <= v[1] <= 1.0:
            raise ValueError("expected 0 <= low <= high <= 1")
        return v


class RolloutConfig(Strict):
    engine: str = Field("hf", description="rollout engine: hf (default) or vllm (extra)")
    prompts_per_step: int = Field(8, ge=1, description="P prompts per RL step")
    group_size: int = Field(8, ge=2, description="G responses per prompt")
    max_new_tokens: int = Field(32, ge=1)
    temperature: float = Field(1.0, gt=0)
    top_p: float = Field(1.0, gt=0, le=1)
    engine_options: dict[str, Any] = Field(default_factory=dict, description="engine keyword arguments "
                                           "(vllm: tensor_parallel_size, gpu_memory_utilization, ...)")
    ignore_eos: bool = Field(False, description="never sample </s>, so every response has max_new_tokens "
                             "tokens (for benchmarks that need a fixed length)")


class TrainConfig(Strict):
    optimizer: Literal["adamw"] = "adamw"
    lr: float = Field(1e-4, gt=0)
    weight_decay: float = Field(0.0, ge=0)
    betas: tuple[float, float] = (0.9, 0.999)
    minibatches: int = Field(4, ge=1, description="K updates per rollout batch (the paper uses 4)")
    grad_clip: float = Field(1.0, gt=0)
    dtype: Literal["float32", "bfloat16"] = "float32"
    device: str = Field("cpu", description="cpu, cuda, cuda:N")
    threads: int | None = Field(None, ge=1, description="torch CPU threads (default: torch's choice)")
    kl_coef: float = Field(0.0, ge=0, description="KL-to-reference penalty (k3); off as in the paper")
    advantage_scale: Literal["std", "none"] = "std"
    drift_after_update: bool = Field(False, description="one extra no-grad pass after the last update to measure drift")
    old_logp: Literal["recompute", "rollout"] = Field(
        "recompute", description="pi_old log-probs: the training forward's (recompute) or the rollout "
        "engine's (rollout, the paper's section 5.4 option)")
    checkpoint_every: int = Field(1, ge=1, description="steps between checkpoints (resume granularity)")
    measure: bool = Field(True, description="ratio statistics, clip fractions, routing capture and drift, "
                          "engine mismatch. Off only to measure their cost (experiments/perf): such runs lack "
                          "those columns and `gspo-bench report` refuses them")


class BudgetConfig(Strict):
    kind: Literal["steps", "tokens", "flops"] = Field(description="what every run spends equally")
    value: float = Field(gt=0, description="steps, cumulative tokens processed, or cumulative FLOPs")
    max_steps: int = Field(10_000, ge=1, description="safety cap for tokens/flops budgets")


class EvalConfig(Strict):
    tasks: list[str] = Field(default_factory=list, description="our tasks by name (the suite's task uses its "
                             "params) or lm-eval task names with local data; empty: no evaluation")
    every: int | None = Field(None, ge=1, description="steps between evaluations (also at step 0 and at the end)")
    samples: int = Field(1, ge=1, description="samples per prompt: the score is the average Pass@1")
    limit: int = Field(64, ge=1, description="test documents per task")
    greedy: bool = Field(False, description="greedy decoding (samples must be 1)")
    temperature: float | None = Field(None, gt=0, description="default: the rollout temperature")
    max_new_tokens: int | None = Field(None, ge=1, description="default: the rollout's")
    batch_size: int = Field(64, ge=1)

    @model_validator(mode="after")
    def _greedy(self):
        if self.greedy and self.samples > 1:
            raise ValueError("greedy decoding gives one response per prompt: set samples: 1")
        return self


class CollapseConfig(Strict):
    nonfinite_patience: int = Field(2, ge=1, description="consecutive steps with non-finite loss/grads -> collapsed")
    reward_window: int = Field(5, ge=1, description="steps averaged for reward collapse")
    reward_floor: float | None = Field(
        0.02, description="collapsed when the windowed reward mean falls to this after having been above 2x it"
    )


class ObjectiveEntry(Strict):
    name: str = Field(description="registered objective or algorithm (grpo_rr = grpo + routing replay, "
                      "grpo_r3 = grpo + rollout routing replay)")
    label: str | None = Field(None, description="run label (default: the name)")
    clip_low: float | None = Field(None, description="default: the objective's (the paper's)")
    clip_high: float | None = None
    replay: bool | None = Field(None, description="routing replay in the update forwards")
    replay_from: Literal["old_pass", "rollout"] | None = Field(
        None, description="which routing is replayed: the old-policy training pass's (Routing Replay, "
        "default) or the rollout engine's (R3; needs an engine that returns routed experts)")
    lr: float | None = Field(None, gt=0, description="override train.lr for this entry")
    kwargs: dict[str, Any] = Field(default_factory=dict, description="extra objective keyword arguments")

    @model_validator(mode="after")
    def _known(self):
        valid = list_objectives() + sorted(ALGORITHMS)
        if self.name not in valid:
            raise ValueError(f"unknown objective {self.name!r}; expected one of {', '.join(valid)}")
        if self.replay is False and self.replay_from is not None:
            raise ValueError(f"replay_from: {self.replay_from} needs routing replay, but replay is false")
        return self

    @property
    def objective(self) -> str:
        return ALGORITHMS.get(self.name, {}).get("objective", self.name)

    @property
    def use_replay(self) -> bool:
        if self.replay is not None:
            return self.replay
        return self.replay_from is not None or ALGORITHMS.get(self.name, {}).get("replay", False)

    @property
    def replay_source(self) -> str:
        """`old_pass` or `rollout` (meaningful when `use_replay`)."""
        return self.replay_from or ALGORITHMS.get(self.name, {}).get("replay_from", "old_pass")

    @property
    def run_label(self) -> str:
        return self.label or self.name

    def clip_range(self) -> dict[str, float]:
        spec = objective_spec(self.objective)
        low = self.clip_low if self.clip_low is not None else spec.clip_low
        high = self.clip_high if self.clip_high is not None else spec.clip_high
        return {} if low is None and high is None else {"clip_low": low, "clip_high": high}


class SuiteConfig(Strict):
    name: str = Field(pattern=r"^[A-Za-z0-9_.-]+$", description="suite name (a directory name)")
    description: str = ""
    model: ModelConfig = ModelConfig()
    task: TaskConfig
    warm_start: WarmStartConfig = WarmStartConfig()
    rollout: RolloutConfig = RolloutConfig()
    train: TrainConfig = TrainConfig()
    budget: BudgetConfig
    objectives: list[ObjectiveEntry] = Field(min_length=1)
    seeds: list[int] = Field(default_factory=lambda: [0], min_length=1)
    output_dir: str = Field("runs", description="results go to OUTPUT_DIR/<name>/<label>-s<seed>/")
    collapse: CollapseConfig = CollapseConfig()
    eval: EvalConfig = EvalConfig()

    @model_validator(mode="after")
    def _warm_start_is_for_tiny_models(self):
        if self.model.path is not None and self.warm_start.enabled:
            raise ValueError("warm_start is for tiny models built from a config; with model.path set "
                             "(a real checkpoint, already fine-tuned) set warm_start.enabled: false")
        return self

    @model_validator(mode="after")
    def _unique_labels(self):
        labels = [o.run_label for o in self.objectives]
        dupes = sorted({x for x in labels if labels.count(x) > 1})
        if dupes:
            raise ValueError(f"objective labels must be unique; repeated: {dupes} (set `label:`)")
        return self


class SuiteError(ValueError):
    """A suite file that cannot be read or validated; the message names file and field."""


def _format_errors(path: str, err: ValidationError) -> str:
    lines = [f"{path}: {err.error_count()} problem(s)"]
    for e in err.errors():
        where = ".".join(str(p) for p in e["loc"]) or "(top level)"
        if e["type"] == "missing":
            lines.append(f"  {where}: required field missing")
            continue
        msg = "unknown key (not a field of this section)" if e["type"] == "extra_forbidden" else e["msg"]
        got = "" if isinstance(e.get("input"), dict) else f" (got {e['input']!r})"
        lines.append(f"  {where}: {msg.removeprefix('Value error, ')}{got}")
    return "\n".join(lines)


def parse_suite(data: Any, source: str = "<suite>") -> SuiteConfig:
    if not isinstance(data, dict):
        raise SuiteError(f"{source}: expected a mapping of suite fields at the top level")
    try:
        return SuiteConfig.model_validate(data)
    except ValidationError as err:
        raise SuiteError(_format_errors(source, err)) from None


def load_suite(path: str | Path) -> SuiteConfig:
    """Read and validate a suite YAML file."""
    path = Path(path)
    if not path.is_file():
        raise SuiteError(f"{path}: no such file")
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as err:
        raise SuiteError(f"{path}: not valid YAML: {err}") from None
    return parse_suite(data, str(path))


def dump_config(config: BaseModel) -> str:
    return yaml.safe_dump(config.model_dump(mode="json"), sort_keys=False)
