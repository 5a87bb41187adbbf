"""Tiny suites (tiny_suite, signal_suite) and their runs, one after another or interrupted, and their metrics."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from gspo_bench.config import parse_suite
from gspo_bench.rundir.folder import TIMING_COLUMNS
from gspo_bench.suite.runner import plan_runs, starting_weights
from gspo_bench.train.loop import RunSpec, train_run

TIME_COLUMNS = set(TIMING_COLUMNS)


def tiny_suite(cache: Path, **changes) -> dict:
    suite = {
        "name": "tiny",
        "model": {"num_layers": 2, "hidden_size": 32, "expert_hidden": 32, "num_experts": 4, "top_k": 2},
        "task": {"name": "sort", "params": {"max_len": 3}},
        # a short warm start so that rewards (and so gradients) are not all zero
        "warm_start": {"cache_dir": str(cache), "band": [0.1, 1.0], "eval_every": 20, "eval_examples": 32},
        "rollout": {"prompts_per_step": 2, "group_size": 4, "max_new_tokens": 8},
        "train": {"lr": 1e-3, "minibatches": 2, "threads": 1},
        "budget": {"kind": "steps", "value": 3},
        "objectives": [{"name": "grpo"}, {"name": "grpo_rr"}, {"name": "gspo"}],
    }
    for key, value in changes.items():
        suite[key] = {**suite[key], **value} if isinstance(value, dict) and key in suite else value
    return suite


def signal_suite(cache: Path, steps: int = 1, **changes) -> dict:
    """`tiny_suite`, warm-started further and with 16 responses a step, so that every step has rewards
    that differ within groups (non-zero advantages: every update is a real one)."""
    base = tiny_suite(cache, warm_start={"band": [0.4, 0.9]}, rollout={"prompts_per_step": 4},
                      budget={"kind": "steps", "value": steps})
    for key, value in changes.items():
        base[key] = {**base[key], **value} if isinstance(value, dict) and key in base else value
    return base


def run_suite(data: dict, out: Path, resume: bool = False, on_step=None) -> dict[str, dict]:
    suite = parse_suite(data)
    statuses = {}
    for planned in plan_runs(suite, out):
        weights = starting_weights(planned.suite, suite.seeds[0], log=lambda m: None)  # cached after the first
        spec = RunSpec(suite=planned.suite, entry=planned.entry, seed=planned.seed, run_dir=planned.run_dir,
                       init_weights=weights, sweep=planned.sweep, arm=planned.arm)
        statuses[planned.name] = train_run(spec, resume=resume, on_step=on_step)
    return statuses


def run_interrupted(data: dict, out: Path, at_step: int) -> None:
    """Run `data` into `out`, interrupted (KeyboardInterrupt) after step `at_step`'s row is written,
    before its checkpoint."""

    def interrupt(row):
        if row["step"] == at_step:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_suite(data, out, on_step=interrupt)


def metrics(out: Path, suite: str, run: str) -> pd.DataFrame:
    return pd.read_parquet(out / suite / run / "metrics.parquet")


def assert_same_metrics(a: pd.DataFrame, b: pd.DataFrame) -> None:
    cols = [c for c in a.columns if c not in TIME_COLUMNS]
    pd.testing.assert_frame_equal(a[cols].reset_index(drop=True), b[cols].reset_index(drop=True))


class _ShiftedRoutingEngine:
    """The hf engine, but it reports every generated token as routed to the next expert (mod E):
    a rollout engine whose routing disagrees with the trainer's, as a different kernel would."""

    name = "shifted_routing"
    returns_routing = True

    def __init__(self, pad_id, eos_id, **_):
        from gspo_bench.rollout.hf import HFEngine

        self.inner = HFEngine(pad_id=pad_id, eos_id=eos_id)

    def sync_weights(self, model):
        return None

    def generate(self, model, prompts, params):
        import dataclasses

        rollout = self.inner.generate(model, prompts, params)
        n_experts = model.config.num_experts
        return dataclasses.replace(rollout, routing=(rollout.routing + 1) % n_experts)


def register_shifted_engine():
    from gspo_bench.rollout import list_engines, register_engine

    if "shifted_routing" not in list_engines():
        register_engine("shifted_routing")(_ShiftedRoutingEngine)

