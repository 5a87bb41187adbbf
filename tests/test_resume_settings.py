"""What --resume refuses before anything is written (gspo_bench.suite.runner.check_outputs): a run
started with frozen routers (`train.router_lr_scale: 0`) resumed at 1 failed with KeyError
'param_groups.0.name' once its optimizer state was loaded, after suite.yaml had been rewritten; now it
is refused by name, even with --allow-changed, at the check that runs before any write."""

from __future__ import annotations

import pytest

from gspo_bench.config.load import parse_suite
from gspo_bench.rundir.folder import RunDir
from gspo_bench.suite.runner import check_outputs, plan_runs
from gspo_bench.train.setup import resolved_config


def planned(tmp_path, scale: float):
    suite = parse_suite({"name": "t", "task": {"name": "sort", "params": {"max_len": 3}},
                         "budget": {"kind": "steps", "value": 2}, "objectives": [{"name": "grpo"}],
                         "train": {"router_lr_scale": scale}})
    [run] = plan_runs(suite, tmp_path)
    return run


def started(tmp_path, scale: float):
    """A run that started at `scale` and failed: its status and config.yaml as a run writes them."""
    run = planned(tmp_path, scale)
    folder = RunDir(run.run_dir)
    folder.write_text("config.yaml", resolved_config(run, lr=run.suite.train.lr))
    folder.write_status("failed", "stopped")
    return run


@pytest.mark.parametrize(("before", "now"), [(0.0, 1.0), (1.0, 0.0), (3.0, 1.0)])
def test_a_resume_across_router_lr_scale_1_is_refused_even_when_changes_are_allowed(tmp_path, before, now):
    started(tmp_path, before)
    with pytest.raises(ValueError, match=rf"train.router_lr_scale {before:g} -> {now:g} changes the optimizer's "
                                         r"parameter groups.*resume it at router_lr_scale"):
        check_outputs([planned(tmp_path, now)], resume=True, allow_changed=True)
    assert not (tmp_path / "t" / "suite.yaml").exists()  # refused before the suite file is written


def test_a_resume_that_keeps_the_groups_is_allowed(tmp_path):
    started(tmp_path, 0.0)
    assert len(check_outputs([planned(tmp_path, 3.0)], resume=True, allow_changed=True)) == 1
    assert len(check_outputs([planned(tmp_path, 0.0)], resume=True)) == 1
