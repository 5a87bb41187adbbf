"""`gspo-bench reproduce`'s rules (analysis.reproduce) that a review's planted breaks got past: eval.parquet
compared too, the status's step, a table only the fresh run has; and a damaged status.json named by
file (and so by run) instead of a bare JSON error."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from analysis.checks.reproduce import compare_results
from tests.helpers.reproduce import write_run


def pair(tmp_path: Path) -> tuple[Path, Path]:
    for side in ("ref", "new"):
        write_run(tmp_path / side, "grpo-s0", [0.5, 0.4, 0.3], [1.0] * 3)
    return tmp_path / "ref", tmp_path / "new"


def evals(run: Path, scores: list[float]) -> None:
    pd.DataFrame({"step": [0, 3], "task": "gspo_sort", "score": scores}).to_parquet(run / "eval.parquet")


def test_eval_tables_are_compared(tmp_path):
    ref, new = pair(tmp_path)
    evals(ref / "grpo-s0", [0.2, 0.5])
    evals(new / "grpo-s0", [0.2, 0.55])
    [run] = compare_results(ref, new)
    assert run.difference == "eval.parquet: score at step 3: 0.55, the reference 0.5 (1 of 2 differ)"


def test_a_table_only_the_fresh_run_has_is_a_difference(tmp_path):
    ref, new = pair(tmp_path)
    evals(new / "grpo-s0", [0.2, 0.5])
    assert compare_results(ref, new)[0].difference == "eval.parquet: only in the fresh run"


def test_the_status_step_is_compared(tmp_path):
    ref, new = pair(tmp_path)
    (new / "grpo-s0" / "status.json").write_text(json.dumps({"status": "done", "step": 2}))
    assert compare_results(ref, new)[0].difference == "status.json: ('done', 2), the reference ('done', 3)"


@pytest.mark.parametrize(("body", "why"), [("{\"status\": \"do", "JSONDecodeError"), ("[1]", "expected a dict"),
                                           ("{\"step\": 3}", "no status")])
def test_a_damaged_status_json_is_named_by_file(tmp_path, body, why):
    ref, new = pair(tmp_path)
    damaged = new / "grpo-s0" / "status.json"
    damaged.write_text(body)
    with pytest.raises(ValueError, match=f"^{damaged}: .*{why}"):
        compare_results(ref, new)


def test_measurements_added_since_the_reference_are_named_and_not_a_difference(tmp_path):
    """A fresh run recording a column the reference predates (a measurement added since) reproduces the
    reference when every column the reference records is equal; the added one is named. A column the
    reference has and the fresh run lacks stays a difference, and so does a changed value beside an added
    column."""
    ref, new = pair(tmp_path)
    metrics = pd.read_parquet(new / "grpo-s0" / "metrics.parquet")
    metrics.assign(**{"clip/grad_weak_frac": 0.1}).to_parquet(new / "grpo-s0" / "metrics.parquet")
    [run] = compare_results(ref, new)
    assert run.identical and run.added == ("metrics.parquet: clip/grad_weak_frac",)
    metrics.assign(**{"clip/grad_weak_frac": 0.1, "loss": [0.5, 0.4, 0.31]}).to_parquet(new / "grpo-s0" / "metrics.parquet")
    assert compare_results(ref, new)[0].difference.startswith("metrics.parquet: loss at step 3")
    metrics.drop(columns="loss").to_parquet(new / "grpo-s0" / "metrics.parquet")
    assert compare_results(ref, new)[0].difference == "metrics.parquet: columns differ (missing ['loss'])"
