"""A tuned suite end to end through `gspo-bench run`: the trials first (on trial seeds, scored on the
validation split), the choice in chosen.json, then the comparison with the chosen settings; the report
reads the trials apart. It trains, at the smallest settings (2 layers, 1-2 steps, 4 validation
problems, no warm start), because what it guards is the order and the hand-over between the phases."""

from __future__ import annotations

import json

import pandas as pd
import yaml

from analysis.checks.reproduce import compare_results
from analysis.data.load import load_results
from analysis.data.tuning import trial_points
from analysis.figures.tuning import sensitivity_figure, sensitivity_interactive
from analysis.report.tuning import tuning_table


def tiny_tuned_suite(cache: str) -> dict:
    return {
        "name": "tq", "task": {"name": "countdown", "params": {"count": 3}},
        "model": {"num_layers": 2, "hidden_size": 32, "expert_hidden": 32, "num_experts": 4, "top_k": 2},
        "warm_start": {"enabled": False, "cache_dir": cache}, "rollout": {"prompts_per_step": 2, "group_size": 2, "max_new_tokens": 4},
        "train": {"lr": 2e-4, "minibatches": 1, "threads": 1}, "budget": {"kind": "steps", "value": 2},
        "objectives": [{"name": "grpo"}, {"name": "gspo"}], "seeds": [0],
        "eval": {"tasks": ["countdown"], "every": 1, "limit": 4, "engine": "rollout"},
        "tuning": {"trials": 2, "budget_share": 0.5, "seeds": [10], "select": {"metric": "countdown", "rule": "auc"},
                   "spaces": {"all": {"lr": {"log_uniform": [1e-4, 1e-3]}},
                              "gspo": {"clip_high": {"log_uniform": [4e-4, 4e-2]}}}},
    }


def test_a_tuned_suite_runs_its_trials_then_compares_with_the_chosen_settings(tmp_path, cli):
    path = tmp_path / "tq.yaml"
    path.write_text(yaml.safe_dump(tiny_tuned_suite(str(tmp_path / "cache"))))
    result = cli("run", path, "--out", tmp_path / "out")
    assert result.exit_code == 0, result.output
    suite_dir = tmp_path / "out" / "tq"
    chosen = json.loads((suite_dir / "tuning" / "chosen.json").read_text())
    assert sorted(t["label"] for t in chosen["trials"]) == ["grpo.t00", "grpo.t01", "gspo.t00", "gspo.t01"]
    for label in ("grpo.t00", "gspo.t01"):  # trials on the trial seed, scored on the validation split
        run = suite_dir / "tuning" / f"{label}-s10"
        assert yaml.safe_load((run / "config.yaml").read_text())["suite"]["task"]["params"]["held_out"] == "validation"
        assert set(pd.read_parquet(run / "eval.parquet")["step"]) == {0, 1}  # budget_share 0.5 of 2 steps
    for arm in ("grpo", "gspo"):  # the comparison runs carry their arm's chosen settings, on seed 0
        run = yaml.safe_load((suite_dir / f"{arm}-s0" / "config.yaml").read_text())
        settings = chosen["chosen"][arm]["settings"]
        assert run["run"]["lr"] == settings["lr"] and run["suite"]["task"]["params"] == {"count": 3}
        if arm == "gspo":
            assert run["run"]["clip_high"] == settings["clip_high"]
    results = load_results(suite_dir)
    assert sorted(results.runs["label"]) == ["grpo", "gspo"]  # the trials are not compared
    table = tuning_table(results)
    assert list(table["ruleset"]) == ["tuned", "tuned"] and list(table["trials"]) == [2, 2]
    assert (table["tuning FLOPs"] > 0).all() and (table["comparison FLOPs"] > 0).all()
    assert trial_points(results)["chosen"].sum() == 3  # grpo's lr; gspo's lr and clip_high
    figure = sensitivity_figure(results)  # a row per arm, a panel per setting (grpo's second one off)
    assert [ax.get_xlabel() for ax in figure.axes if ax.axison] == ["lr", "clip_high", "lr"]
    stars = [t for f in sensitivity_interactive(results) for t in f.data if t.name == "chosen"]
    picked = {arm: (c["label"], c["score"]) for arm, c in chosen["chosen"].items()}
    assert [(t.text[0], t.y[0]) for t in stars] == [picked["grpo"], picked["gspo"], picked["gspo"]]
    names = [r.run for r in compare_results(suite_dir, suite_dir)]  # reproduce knows the trials and the choice
    assert "tuning/gspo.t01-s10" in names and "tuning/chosen.json" in names and "gspo-s0" in names
    again = cli("run", path, "--out", tmp_path / "out", "--resume")
    assert again.exit_code == 0 and "nothing to do" in again.output
