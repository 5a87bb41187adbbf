"""Suites stopped part way, for resume and run-file tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from gspo_bench.rundir.folder import RunDir
from tests.helpers.runs import signal_suite


def quick_suite(cache: Path, **changes) -> dict:
    """One gspo run of 3 steps whose weights change (rewards that differ within groups)."""
    return signal_suite(cache, steps=3, objectives=[{"name": "gspo"}], **changes)


def interrupted(cache: Path, out: Path, at_step: int = 2, **changes) -> tuple[dict, Path]:
    """A 3-step run (`quick_suite` with `changes`) stopped after its step-`at_step` row, before that
    step's checkpoint: its checkpoint is the step before's; status.json as a kill -9 would leave it
    (running)."""
    from tests.helpers.runs import run_suite

    data = quick_suite(cache, **changes)

    def stop(row):
        if row["step"] == at_step:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_suite(data, out, on_step=stop)
    run_dir = out / "tiny" / "gspo-s0"
    RunDir(run_dir).write_status("running", step=at_step)
    rows = RunDir(run_dir).read_rows("metrics.parquet")
    assert any(row["grad/norm"] > 0 for row in rows), rows  # the weights change: a resume from a wrong state shows
    return data, run_dir

