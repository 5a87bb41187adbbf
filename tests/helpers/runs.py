"""Tiny suites (tiny_suite, signal_suite, baseline_suite, parallel_suite: experiments/tiny_suites.py, their
one source, which the experiments run too) and their runs, one after another or interrupted, and their metrics."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from gspo_bench.rundir.folder import TIMING_COLUMNS
from tests.helpers.scripts import script

TIME_COLUMNS = set(TIMING_COLUMNS)
_SUITES = script("tiny_suites.py")
tiny_suite, signal_suite, baseline_suite, parallel_suite = (
    _SUITES.tiny_suite, _SUITES.signal_suite, _SUITES.baseline_suite, _SUITES.parallel_suite)
run_suite = _SUITES.run_suite  # every run one after another, each from the first seed's starting weights


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

