"""The loop's state between steps (what a checkpoint restores), the budget and the collapse checks."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from gspo_bench.config import BudgetConfig, CollapseConfig
from gspo_bench.train.compute import StepCompute
from gspo_bench.train.lag import Sampled


class Collapsed(Exception):
    """The run diverged or its reward collapsed; the message says at which step and why."""


@dataclass
class RunState:
    step: int = 0
    cum_tokens: float = 0.0
    cum_flops: float = 0.0
    bad_steps: int = 0  # consecutive steps with a non-finite loss or gradient
    peak_reward: float = -math.inf  # highest windowed reward mean so far
    rows: list[dict] = field(default_factory=list)  # metrics.parquet
    layer_rows: list[dict] = field(default_factory=list)  # layers.parquet
    eval_rows: list[dict] = field(default_factory=list)  # eval.parquet
    waiting: dict[int, Sampled] = field(default_factory=dict)  # batches sampled ahead (rollout.lag), by their step

    def add_compute(self, compute: StepCompute, n_active: int) -> dict:
        """The step's compute columns (FLOPs from active parameters), its totals added to the run's."""
        flops = compute.flops(n_active)
        self.cum_tokens += compute.tokens
        self.cum_flops += flops
        return {"compute/tokens": compute.tokens, "compute/cum_tokens": self.cum_tokens,
                "compute/flops": flops, "compute/cum_flops": self.cum_flops}

    def scalars(self) -> dict:
        """What a checkpoint keeps besides the weights and the optimizer state: the loop's numbers and,
        under `rollout.lag`, the batches sampled for later steps (none at lag 0)."""
        kept = {"step": self.step, "cum_tokens": self.cum_tokens, "cum_flops": self.cum_flops,
                "bad_steps": self.bad_steps, "peak_reward": self.peak_reward}
        return kept | ({"waiting": [s.record() for s in self.waiting.values()]} if self.waiting else {})

    @classmethod
    def restored(cls, scalars: dict, rows: list[dict], layer_rows: list[dict], eval_rows: list[dict]) -> RunState:
        """The state at a checkpoint; rows written after it (a crash between row and checkpoint) are dropped."""
        step = scalars["step"]
        keep = lambda table: [r for r in table if r["step"] <= step]  # noqa: E731
        waiting = [Sampled.from_record(record) for record in scalars.get("waiting", [])]
        return cls(step=step, cum_tokens=scalars["cum_tokens"], cum_flops=scalars["cum_flops"],
                   bad_steps=scalars["bad_steps"], peak_reward=scalars["peak_reward"],
                   rows=keep(rows), layer_rows=keep(layer_rows), eval_rows=keep(eval_rows),
                   waiting={sampled.step: sampled for sampled in waiting})


def budget_spent(budget: BudgetConfig, state: RunState) -> bool:
    """Whether the run has spent its budget (or reached the step cap)."""
    if state.step >= budget.max_steps:
        return True
    spent = {"steps": state.step, "tokens": state.cum_tokens, "flops": state.cum_flops}[budget.kind]
    return spent >= budget.value


def collapse_reason(cfg: CollapseConfig, state: RunState, *, rollout_finite: bool, params_finite: bool) -> str | None:
    """Why the run has collapsed after the step just added to `state.rows`, or None. Updates the
    counters it keeps in `state` (consecutive non-finite steps, windowed reward peak)."""
    row = state.rows[-1]
    state.bad_steps = state.bad_steps + 1 if row["nonfinite/minibatches"] else 0
    if not rollout_finite:
        return f"rollout at step {state.step}: the policy produced NaN or +inf logits while sampling"
    if state.bad_steps >= cfg.nonfinite_patience:
        return f"non-finite loss or gradients in {state.bad_steps} consecutive steps"
    if not params_finite:
        return "non-finite parameters"
    if cfg.reward_floor is not None and len(state.rows) >= cfg.reward_window:
        window = sum(r["reward/mean"] for r in state.rows[-cfg.reward_window:]) / cfg.reward_window
        state.peak_reward = max(state.peak_reward, window)
        if state.peak_reward >= 2 * cfg.reward_floor and window <= cfg.reward_floor:
            return f"reward collapsed to {window:.3f} (windowed peak {state.peak_reward:.3f})"
    return None
