"""`gspo-bench regress`: tolerances, invariants, and a deliberately broken GSPO caught by name."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from analysis.load import load_results
from analysis.regress import compare, load_tolerances, within
from gspo_bench.cli import app
from gspo_bench.objectives.inputs import PolicyBatch

sys.path.insert(0, str(Path(__file__).parent))
from test_harness import run_suite, tiny_suite  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
TOLERANCES = ROOT / "experiments" / "regress_tolerances.yaml"


@pytest.fixture(scope="module")
def baseline(tmp_path_factory):
    cache = tmp_path_factory.mktemp("ws")
    out = tmp_path_factory.mktemp("baseline")
    data = tiny_suite(cache, objectives=[{"name": "grpo"}, {"name": "gspo"}], budget={"kind": "steps", "value": 4})
    run_suite(data, out)
    return data, out / "tiny"


def test_same_code_same_seed_passes(baseline, tmp_path):
    data, base = baseline
    run_suite(data, tmp_path)
    checks = compare(load_results(tmp_path / "tiny"), load_results(base), load_tolerances(TOLERANCES))
    assert all(c.ok for c in checks), [c for c in checks if not c.ok]
    assert {c.metric for c in checks} >= {"final_reward", "clip/frac", "ratio/seq_var", "invariant: gspo clips more",
                                          "invariant: compute matched", "invariant: 0 < drift < 1"}


def test_broken_gspo_length_normalisation_is_caught_by_name(baseline, tmp_path, monkeypatch):
    data, base = baseline
    # the bug: s_i = exp(sum_t log w_it) instead of exp(mean_t log w_it)
    monkeypatch.setattr(PolicyBatch, "seq_log_ratio", lambda self: self.log_ratio.sum(-1))
    run_suite(data, tmp_path)
    result = CliRunner().invoke(app, ["regress", str(tmp_path / "tiny"), "--baseline", str(base),
                                      "--tolerances", str(TOLERANCES)])
    assert result.exit_code == 1, result.output
    assert "REGRESSION" in result.output
    summary = result.output.split("regression(s):")[1]
    assert "gspo ratio/seq_var" in summary


def test_update_rewrites_the_baseline_and_says_so(baseline, tmp_path):
    _, base = baseline
    target = tmp_path / "new-baseline"
    result = CliRunner().invoke(app, ["regress", str(base), "--baseline", str(target), "--update"])
    assert result.exit_code == 0 and "baseline updated" in result.output
    assert sorted(p.name for p in target.iterdir()) == ["grpo-s0", "gspo-s0"]
    assert not any(p.name == "checkpoint" for p in target.rglob("*"))
    assert len(load_results(target).runs) == 2


def test_tolerance_rules():
    assert within(0.5, 0.64, {"absolute": 0.15}, 0.0) and not within(0.5, 0.7, {"absolute": 0.15}, 0.0)
    assert within(0.01, 0.029, {"factor": 3}, 0.0) and not within(0.01, 0.031, {"factor": 3}, 0.0)
    assert within(0.0, 1e-9, {"factor": 3}, 1e-6) and not within(0.0, 0.01, {"factor": 3}, 1e-6)
    assert not within(float("nan"), 1.0, {"factor": 3}, 0.0)


def test_bad_tolerance_file(tmp_path):
    bad = tmp_path / "t.yaml"
    bad.write_text("metrics:\n  clip/frac: {factor: 3, absolute: 0.1}\n")
    with pytest.raises(ValueError, match="exactly one"):
        load_tolerances(bad)
