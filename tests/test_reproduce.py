"""`gspo-bench reproduce`: fresh results against reference results, run by run, value for value."""

from __future__ import annotations

import shutil

import pandas as pd

from analysis.checks.reproduce import compare_results, first_difference
from tests.helpers.reproduce import write_run


def test_equal_runs_reproduce_whatever_their_wall_times(tmp_path):
    write_run(tmp_path / "ref", "grpo-s0", [0.5, float("nan"), 0.25], [1.0, 2.0, 3.0])
    write_run(tmp_path / "new", "grpo-s0", [0.5, float("nan"), 0.25], [9.0, 9.0, 9.0])
    [run] = compare_results(tmp_path / "ref", tmp_path / "new")
    assert run.identical and run.difference == ""
    assert run.kernels == ("AVX2/COMPATIBLE/1 threads", "AVX2/COMPATIBLE/1 threads")


def test_the_first_difference_is_named_by_table_column_step_and_values(tmp_path):
    write_run(tmp_path / "ref", "grpo-s0", [0.5, 0.4, 0.25], [1.0] * 3)
    write_run(tmp_path / "new", "grpo-s0", [0.5, 0.4000001, 0.3], [1.0] * 3)
    [run] = compare_results(tmp_path / "ref", tmp_path / "new")
    assert not run.identical
    assert run.difference == "metrics.parquet: loss at step 2: 0.4000001, the reference 0.4 (2 of 3 differ)"


def test_a_missing_run_another_status_or_a_missing_table_are_differences(tmp_path):
    write_run(tmp_path / "ref", "grpo-s0", [0.5], [1.0])
    write_run(tmp_path / "ref", "gspo-s0", [0.5], [1.0])
    write_run(tmp_path / "new", "grpo-s0", [0.5], [1.0], status="collapsed")
    grpo, gspo = compare_results(tmp_path / "ref", tmp_path / "new")
    assert grpo.difference == "status.json: ('collapsed', 1), the reference ('done', 1)"
    assert gspo.difference == f"no run gspo-s0 in {tmp_path / 'new'}"
    shutil.rmtree(tmp_path / "new")
    write_run(tmp_path / "new", "grpo-s0", [0.5], [1.0])
    (tmp_path / "new" / "grpo-s0" / "layers.parquet").unlink()
    assert compare_results(tmp_path / "ref", tmp_path / "new")[0].difference == "layers.parquet: only in the reference"


def test_tables_of_another_shape_are_named():
    a = pd.DataFrame({"step": [1, 2], "loss": [0.1, 0.2]})
    assert first_difference(a, a.iloc[:1], "metrics.parquet") == "metrics.parquet: 1 rows, the reference 2"
    assert "missing ['loss']" in first_difference(a, a.drop(columns="loss"), "metrics.parquet")


def test_the_command_exits_1_on_a_difference_and_0_on_none(tmp_path, cli):
    write_run(tmp_path / "ref", "grpo-s0", [0.5], [1.0])
    write_run(tmp_path / "new", "grpo-s0", [0.5], [2.0])
    result = cli("reproduce", tmp_path / "ref", tmp_path / "new")
    assert result.exit_code == 0 and "all 1 runs identical" in result.output
    write_run(tmp_path / "other", "grpo-s0", [0.6], [1.0])
    result = cli("reproduce", tmp_path / "ref", tmp_path / "other")
    assert result.exit_code == 1 and "1 of 1 runs differ" in result.output
    result = cli("reproduce", tmp_path / "nothing", tmp_path / "new")
    assert result.exit_code == 2 and "no run folders" in result.output


def test_a_changed_chosen_json_is_a_difference_named_by_its_key(tmp_path, cli):
    """A tuned suite's choice is part of its results: the same trials must choose the same settings. A
    fresh chosen.json with another chosen value (or another trial score), or one that only one side has,
    is a difference, named by its key and both values, and the command exits 1."""
    import json

    chosen = {"metric": "countdown", "rule": "final", "chosen": {"gspo": {"trial": 1, "settings": {"lr": 3e-4}}},
              "trials": [{"label": "gspo.t00", "score": 0.25}, {"label": "gspo.t01", "score": 0.5}]}
    for side in ("ref", "new"):
        write_run(tmp_path / side, "gspo-s0", [0.5], [1.0])
        (tmp_path / side / "tuning").mkdir()
        (tmp_path / side / "tuning" / "chosen.json").write_text(json.dumps(chosen))
    run, choice = compare_results(tmp_path / "ref", tmp_path / "new")
    assert run.identical and choice.run == "tuning/chosen.json" and choice.identical
    changed = {**chosen, "chosen": {"gspo": {"trial": 1, "settings": {"lr": 5e-4}}}}
    (tmp_path / "new" / "tuning" / "chosen.json").write_text(json.dumps(changed))
    _, choice = compare_results(tmp_path / "ref", tmp_path / "new")
    assert not choice.identical
    assert choice.difference == "tuning/chosen.json: chosen.gspo.settings.lr: 0.0005, the reference 0.0003"
    result = cli("reproduce", tmp_path / "ref", tmp_path / "new")
    assert result.exit_code == 1 and "1 of 2 runs differ" in result.output
    rescored = {**chosen, "trials": [{"label": "gspo.t00", "score": 0.25}, {"label": "gspo.t01", "score": 0.75}]}
    (tmp_path / "new" / "tuning" / "chosen.json").write_text(json.dumps(rescored))
    assert compare_results(tmp_path / "ref", tmp_path / "new")[1].difference == \
        "tuning/chosen.json: trials.1.score: 0.75, the reference 0.5"
    (tmp_path / "ref" / "tuning" / "chosen.json").unlink()
    only_fresh = compare_results(tmp_path / "ref", tmp_path / "new")[1]
    assert not only_fresh.identical and only_fresh.difference == f"no tuning/chosen.json in {tmp_path / 'ref'}"
