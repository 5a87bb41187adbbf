"""gspo_bench.config.changes: the one rule of which settings change a run's results, as `--resume`
(config.run.config_changes, suite.folder_checks.check_suite_folder) and the report's suite grouping
(analysis.data.suites, fed as analysis.data.load feeds it) apply it. Hand-made configs only: nothing trains."""

from __future__ import annotations

import copy
from pathlib import Path

import pandas as pd
import pytest
import yaml

from analysis.data.suites import MixedSuitesError, check_not_mixed, shared_settings, suite_settings
from gspo_bench.config import parse_suite
from gspo_bench.config.changes import NOT_RESULTS, changed_settings, flatten, run_settings, settings_changes
from gspo_bench.config.run import config_changes, resolved_config
from gspo_bench.suite.folder_checks import check_suite_folder
from gspo_bench.suite.runner import plan_runs, write_suite_file

SUITE = {
    "name": "tiny",
    "description": "two arms, two seeds",
    "model": {"num_layers": 2, "hidden_size": 32, "expert_hidden": 32, "num_experts": 4, "top_k": 2},
    "task": {"name": "sort", "params": {"max_len": 3}},
    "warm_start": {"cache_dir": "/tmp/cache-a", "band": [0.1, 1.0]},
    "rollout": {"prompts_per_step": 2, "group_size": 4, "max_new_tokens": 8},
    "train": {"lr": 1e-3, "minibatches": 2},
    "budget": {"kind": "steps", "value": 3},
    "seeds": [0, 1],
    "objectives": [{"name": "grpo"}, {"name": "gspo"}],
}

# each an edit of SUITE by dotted path, and whether it changes what a run computes
EDITS = {
    "a seed added": ("seeds", [0, 1, 2], False),
    "description": ("description", "other words", False),
    "output_dir": ("output_dir", "elsewhere", False),
    "tracking": ("tracking.tensorboard", True, False),
    "warm-start cache folder": ("warm_start.cache_dir", "/tmp/cache-b", False),
    "learning rate": ("train.lr", 2e-3, True),
    "warm-start seeds": ("warm_start.seeds", [0, 1], True),
    "a task param": ("task.params.max_len", 4, True),
    "an objective's params": ("objectives.0.params", {"dual_clip": 3.0}, True),
}


def edited(path: str, value) -> dict:
    data = copy.deepcopy(SUITE)
    *parents, name = path.split(".")
    node = data
    for part in parents:
        node = node[int(part)] if isinstance(node, list) else node.setdefault(part, {})
    node[name] = value
    return data


def resume_changes(tmp_path: Path, before: dict, after: dict) -> list[str]:
    """What `--resume` names for run grpo-s0, started with suite `before`, resumed with `after`."""
    run = {r.name: r for r in plan_runs(parse_suite(before), tmp_path / "a")}["grpo-s0"]
    run.run_dir.mkdir(parents=True, exist_ok=True)
    (run.run_dir / "config.yaml").write_text(resolved_config(run))
    now = {r.name: r for r in plan_runs(parse_suite(after), tmp_path / "a")}["grpo-s0"]
    return config_changes(run.run_dir, now)


def suite_folder_refusal(tmp_path: Path, before: dict, after: dict) -> str | None:
    """What `run` says of suite `after` run into the folder suite `before` ran in (None: accepted)."""
    write_suite_file(parse_suite(before), tmp_path / "b")
    try:
        check_suite_folder(parse_suite(after), tmp_path / "b")
    except ValueError as err:
        return str(err)
    return None


def report_record(tmp_path: Path, data: dict, name: str) -> dict:
    """The columns analysis.data.load gives a run of suite `data` that grouping reads (its config.yaml as
    the run writes it)."""
    run = {r.name: r for r in plan_runs(parse_suite(data), tmp_path / "c")}[name]
    config = yaml.safe_load(resolved_config(run))
    settings = suite_settings(config["suite"])
    return {"suite": "tiny", "label": run.entry.run_label, "seed": run.seed, "path": str(run.run_dir),
            "changed": False, "settings": settings, "shared": shared_settings(settings, config["run"])}


def report_refusal(tmp_path: Path, before: dict, after: dict) -> str | None:
    """What the report says of a folder holding run grpo-s0 of `before` and gspo-s1 of `after` (None:
    one suite, pooled)."""
    runs = pd.DataFrame([report_record(tmp_path, before, "grpo-s0"), report_record(tmp_path, after, "gspo-s1")])
    try:
        check_not_mixed(runs)
    except MixedSuitesError as err:
        return str(err)
    return None


@pytest.mark.parametrize("edit", list(EDITS), ids=list(EDITS))
def test_resume_the_suite_folder_and_the_report_agree_on_each_setting(tmp_path, edit):
    """Every caller names an edit that changes results, by the same key, and lets every other pass."""
    path, value, changes_results = EDITS[edit]
    after = edited(path, value)
    rule = [key for key, _, _ in changed_settings(run_settings(SUITE, "suite"), run_settings(after, "suite"), "suite")]
    assert bool(rule) == changes_results
    resumed, folder, report = (resume_changes(tmp_path, SUITE, after), suite_folder_refusal(tmp_path, SUITE, after),
                               report_refusal(tmp_path, SUITE, after))
    assert [line.split(":")[0] for line in resumed if line.startswith("suite.")] == [f"suite.{key}" for key in rule]
    assert bool(resumed) == changes_results  # (the run's own section repeats some: `run.lr`)
    assert (folder is None, report is None) == (not changes_results, not changes_results)
    for key in rule:
        assert f"{key}: " in str(folder) and f"{key}: " in str(report)


def test_a_seed_added_to_a_suite_resumes_its_runs_and_stays_one_suite_in_the_report(tmp_path):
    """The question the rule settles: a run's own seed matters, the suite's list of seeds does not."""
    more_seeds = edited("seeds", [0, 1, 2])
    assert resume_changes(tmp_path, SUITE, more_seeds) == []
    assert suite_folder_refusal(tmp_path, SUITE, more_seeds) is None
    assert report_refusal(tmp_path, SUITE, more_seeds) is None
    run_of_seed_1 = {r.name: r for r in plan_runs(parse_suite(SUITE), tmp_path / "d")}["grpo-s1"]
    (tmp_path / "config.yaml").write_text(resolved_config(run_of_seed_1))
    as_seed_0 = {r.name: r for r in plan_runs(parse_suite(more_seeds), tmp_path / "d")}["grpo-s0"]
    assert config_changes(tmp_path, as_seed_0) == ["run.seed: 1 -> 0"]


def test_a_setting_one_record_lacks_reads_as_its_default_for_both_callers():
    """An older run did not write train.router_lr_scale: no change at its default (1.0), a change at 2.0;
    a free-form key (an objective's params) has no default, so its absence differs from any value."""
    old = run_settings(SUITE, "suite")
    assert "train.router_lr_scale" not in old
    assert changed_settings(old, run_settings(edited("train.router_lr_scale", 1.0), "suite"), "suite") == []
    assert changed_settings(old, run_settings(edited("train.router_lr_scale", 2.0), "suite"), "suite") == [
        ("train.router_lr_scale", None, 2.0)]
    assert settings_changes({"suite": SUITE}, {"suite": edited("train.router_lr_scale", 2.0)}) == [
        "suite.train.router_lr_scale: None -> 2.0"]
    params = run_settings(edited("objectives.0.params", {"beta": 0.0}), "suite")
    assert changed_settings(old, params, "suite") == [("objectives.0.params.beta", None, 0.0)]


def test_a_field_added_since_reads_as_its_default_through_a_factory_and_an_optional_section():
    """Runs recorded before eval.lm_eval_tasks (a list, default_factory) and analysis.rules (inside the
    optional analysis: section) existed resume and pool with today's resolved config: results/paper_cpu
    and results/stability_cpu/stage2 were refused (None -> [], None -> 'v1'); a real edit still is."""
    declared = edited("analysis", {"primary": {"each_vs": "grpo"}})
    old = run_settings(declared, "suite")
    now = run_settings(parse_suite(declared).model_dump(mode="json"), "suite")
    assert now["eval.lm_eval_tasks"] == [] and now["analysis.rules"] == "v1"
    recorded = {k: v for k, v in now.items() if k not in ("eval.lm_eval_tasks", "analysis.rules")}
    assert changed_settings(recorded, now, "suite") == []
    assert changed_settings(recorded, {**now, "analysis.rules": "v2", "eval.lm_eval_tasks": ["gsm8k"]}, "suite") == [
        ("analysis.rules", None, "v2"), ("eval.lm_eval_tasks", None, ["gsm8k"])]
    assert old.get("analysis.rules") is None


def test_flatten_names_every_leaf_and_the_ignored_settings_are_the_documented_ones():
    assert flatten({"a": {"b": 1, "c": [1, 2]}, "o": [{"n": "x"}], "e": {}}) == {"a.b": 1, "a.c": [1, 2], "o.0.n": "x"}
    config = {"run": {"seed": 3, "overrides": {"train.lr": 1.0}}, "suite": edited("tracking.wandb", True)}
    kept = run_settings(config)
    assert "run.seed" in kept and "suite.train.lr" in kept and "suite.warm_start.band" in kept
    assert not [key for key in kept if any(key == n or key.startswith(f"{n}.") for n in NOT_RESULTS)]
    docs = (Path(__file__).resolve().parents[1] / "docs" / "suites.md").read_text()
    assert all(f"`{name}`" in docs for name in NOT_RESULTS)
