from __future__ import annotations

import math
import subprocess
import sys

from typer.testing import CliRunner

from gspo_bench.cli import app
from gspo_bench.probe import ProbeConfig, run_probe


def test_probe_one_step_per_objective():
    cfg = ProbeConfig(objectives=("grpo", "gspo", "gspo_token"), num_layers=2, prompts=2, group_size=4,
                      max_new_tokens=8, minibatches=2)
    rows = {r["objective"]: r for r in run_probe(cfg)}
    for row in rows.values():
        assert all(math.isfinite(v) for k, v in row.items() if k != "objective")
        assert 0.0 <= row["clip/frac"] <= 1.0
        assert 0.0 < row["moe/drift"] < 1.0  # after an update some, not all, routing changes
        assert row["moe/drift_expert"] <= row["moe/drift"]
    # GSPO-token with per-response advantages is GSPO: identical updates, identical measurements
    for key in ("loss", "clip/frac", "ratio/token_var", "ratio/seq_var", "grad/norm"):
        assert rows["gspo"][key] == rows["gspo_token"][key], key
    # The first minibatch is on-policy, where GRPO's and GSPO's gradients are equal: both take the same
    # first update, so the ratios measured on minibatch 2 agree; the losses there do not.
    for key in ("ratio/token_var", "ratio/seq_var", "kl/old_new", "moe/drift"):
        assert math.isclose(rows["grpo"][key], rows["gspo"][key], rel_tol=1e-5), key
    assert rows["grpo"]["loss"] != rows["gspo"]["loss"]


def test_cli_ls_lists_objectives_with_clip_ranges():
    result = CliRunner().invoke(app, ["ls"])
    assert result.exit_code == 0
    for name in ("grpo", "gspo", "gspo_token", "dapo", "dr_grpo", "gmpo", "sapo", "cispo"):
        assert name in result.output
    assert "0.0003" in result.output and "0.27" in result.output


def test_cli_unknown_objective_is_a_usage_error():
    result = CliRunner().invoke(app, ["probe", "--objectives", "gpso"])
    assert result.exit_code == 2
    assert "unknown objective" in result.output


def test_analysis_never_imports_torch():
    code = "import sys, analysis; assert 'torch' not in sys.modules, 'analysis imported torch'"
    subprocess.run([sys.executable, "-c", code], check=True)
