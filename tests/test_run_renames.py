"""A run folder's config.yaml keys renamed since an older release (`run.algorithm` -> `run.arm`):
such a folder still loads in the report, under today's column name, and still resumes."""

from __future__ import annotations

import shutil
from pathlib import Path

import yaml

from analysis.data.load import load_results
from gspo_bench.rundir.renames import current_run_keys

ROOT = Path(__file__).resolve().parent.parent
# a quickstart run as a release before the rename wrote it (its config says `algorithm`), kept as test data
OLD_RUN = ROOT / "tests" / "data" / "old_release" / "grpo-s0"


def copied_run(out: Path, run_keys: dict) -> Path:
    """The committed quickstart run copied under `out`/quickstart, its config.yaml's `run` section
    updated with `run_keys` (a key set to None is removed)."""
    folder = out / "quickstart" / OLD_RUN.name
    shutil.copytree(OLD_RUN, folder)
    config = yaml.safe_load((folder / "config.yaml").read_text())
    config["run"].update(run_keys)
    config["run"] = {k: v for k, v in config["run"].items() if v is not None}
    (folder / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    return out / "quickstart"


def test_the_old_key_is_mapped_to_todays_and_todays_wins_where_both_are_recorded():
    assert current_run_keys({"run": {"label": "a@x=1", "algorithm": "a"}}) == {"run": {"arm": "a", "label": "a@x=1"}}
    assert current_run_keys({"run": {"algorithm": "old", "arm": "new"}})["run"] == {"arm": "new"}
    config = {"run": {"arm": "a"}, "suite": {}}
    assert current_run_keys(config) is config and current_run_keys({}) == {}


def test_a_folder_of_an_older_release_loads_its_arm_under_todays_column(tmp_path):
    assert "algorithm" in yaml.safe_load((OLD_RUN / "config.yaml").read_text())["run"]
    old = load_results(copied_run(tmp_path / "old", {"algorithm": "grpo_arm"}))
    new = load_results(copied_run(tmp_path / "new", {"algorithm": None, "arm": "grpo_arm"}))
    for results in (old, new):
        assert "algorithm" not in results.runs.columns and "algorithm" not in results.metrics.columns
        assert results.runs["arm"].tolist() == ["grpo_arm"] and set(results.metrics["arm"]) == {"grpo_arm"}
    assert old.metrics.equals(new.metrics)


def test_a_run_recorded_with_the_old_key_resumes_without_a_change(tmp_path):
    import dataclasses

    from gspo_bench.config import load_suite
    from gspo_bench.config.run import RunSpec, config_changes, resolved_config

    suite = load_suite(ROOT / "experiments" / "quickstart.yaml")
    spec = RunSpec(suite=suite, entry=suite.objectives[0], seed=0, run_dir=Path("unused"), arm="grpo")
    recorded = yaml.safe_load(resolved_config(spec))
    assert recorded["run"]["arm"] == "grpo" and "algorithm" not in recorded["run"]
    recorded["run"]["algorithm"] = recorded["run"].pop("arm")  # as an older release wrote it
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(recorded, sort_keys=False))
    assert config_changes(tmp_path, spec) == []
    assert config_changes(tmp_path, dataclasses.replace(spec, arm="other")) == ["run.arm: 'grpo' -> 'other'"]
