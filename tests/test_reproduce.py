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
