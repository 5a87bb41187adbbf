"""What --resume refuses before anything is written (gspo_bench.suite.folder_checks.check_outputs): a run
started with frozen routers (`train.router_lr_scale: 0`) resumed at 1 failed with KeyError
'param_groups.0.name' once its optimizer state was loaded, after suite.yaml had been rewritten; now it
is refused by name, even with --allow-changed, at the check that runs before any write."""

from __future__ import annotations

import pytest
import yaml

from gspo_bench.config.load import parse_suite
from gspo_bench.config.run import resolved_config
from gspo_bench.rundir.folder import RunDir
from gspo_bench.suite.folder_checks import check_outputs
from gspo_bench.suite.runner import plan_runs


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
    folder.write_text("config.yaml", resolved_config(run))
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


def suite_file(tmp_path, lr: float):
    """A suite file (2 seeds) at `lr`."""
    path = tmp_path / f"suite-{lr:g}.yaml"
    path.write_text(yaml.safe_dump({"name": "t", "task": {"name": "sort", "params": {"max_len": 3}},
                                    "budget": {"kind": "steps", "value": 2}, "objectives": [{"name": "grpo"}],
                                    "seeds": [0, 1], "train": {"lr": lr}}))
    return path


def test_allow_changed_never_starts_a_run_under_the_new_settings(tmp_path):
    """Seed 0 started (failed) at lr 3e-4 and the folder's suite.yaml records that suite; seed 1 never
    started. --resume --allow-changed --set train.lr=1e-3 would have trained seed 1 at 1e-3 beside seed 0's
    settings: refused by name before anything is written. Seed 0 alone (--seeds 0) is continued."""
    from gspo_bench.suite.runner import write_suite_file
    from gspo_bench.suite.session import plan_session

    old = plan_session(suite_file(tmp_path, 3e-4), None, out=tmp_path / "out")
    write_suite_file(old.suite, tmp_path / "out")
    first = old.todo[0]
    RunDir(first.run_dir).write_text("config.yaml", resolved_config(first))
    RunDir(first.run_dir).write_status("failed", "stopped")
    before = (tmp_path / "out" / "t" / "suite.yaml").read_text()
    with pytest.raises(ValueError, match=r"1 run\(s\) have not started \(grpo-s1\) and would start under them"):
        plan_session(suite_file(tmp_path, 3e-4), ["train.lr=1e-3"], out=tmp_path / "out", resume=True,
                     allow_changed=True)
    assert (tmp_path / "out" / "t" / "suite.yaml").read_text() == before
    continued = plan_session(suite_file(tmp_path, 3e-4), ["train.lr=1e-3"], out=tmp_path / "out", seeds=[0],
                             resume=True, allow_changed=True)
    assert [run.run_dir.name for run in continued.todo] == ["grpo-s0"]


def test_a_failed_resume_with_new_settings_leaves_suite_yaml_as_it_was(tmp_path, monkeypatch):
    """Every continued run failed (its checkpoint refused the new settings): suite.yaml still records
    the settings the runs ran with; one that went on rewrites it."""
    from gspo_bench.suite import runner

    session = planned(tmp_path, 0.0)
    runner.write_suite_file(session.suite, tmp_path)
    before = (tmp_path / "t" / "suite.yaml").read_text()
    new = planned(tmp_path, 0.5)
    monkeypatch.setattr(runner, "starting_weights", lambda *a, **k: tmp_path)
    for status, rewritten in (("failed", False), ("done", True)):
        monkeypatch.setattr(runner, "run_sequential", lambda specs, mode, observer, s=status: [{"status": s}] * len(specs))
        runner.run_suite(new.suite, [new], tmp_path, resume=True, allow_changed=True, log=lambda line: None)
        assert ((tmp_path / "t" / "suite.yaml").read_text() != before) is rewritten


@pytest.mark.parametrize("allow_changed", [False, True])
def test_a_damaged_suite_yaml_in_the_folder_is_refused_by_name(tmp_path, allow_changed):
    """A suite folder whose suite.yaml holds no mapping of a suite's fields says nothing of the settings its
    runs ran: refused naming the file and what it holds, with --resume --allow-changed too (which skips the
    other-suite check but compares unstarted runs with suite.yaml)."""
    from gspo_bench.suite.session import plan_session

    path = suite_file(tmp_path, 3e-4)
    (tmp_path / "out" / "t").mkdir(parents=True)
    (tmp_path / "out" / "t" / "suite.yaml").write_text("- just\n- a list\n")
    with pytest.raises(ValueError, match=r"suite.yaml: expected the mapping of a suite's fields, found a list"):
        plan_session(path, None, out=tmp_path / "out", resume=allow_changed, allow_changed=allow_changed)
