from __future__ import annotations

import math

from typer.testing import CliRunner

from gspo_bench.cli import app
from gspo_bench.suite.probe import ProbeConfig, run_probe


def test_probe_one_step_per_objective():
    cfg = ProbeConfig(objectives=("grpo", "gspo", "gspo_token", "rspo"), num_layers=2, prompts=2, group_size=4,
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
    # first update, so the ratios measured on minibatch 2 agree (to fp32 summation order: a variance
    # of ratios near 1 cancels digits, rel. 1.3e-5 seen with a single thread); the losses there do not.
    for key in ("ratio/token_var", "ratio/seq_var", "kl/old_new", "moe/drift"):
        assert math.isclose(rows["grpo"][key], rows["gspo"][key], rel_tol=1e-4), key
    assert rows["grpo"]["loss"] != rows["gspo"]["loss"]
    assert rows["rspo"]["rspo/shift_mean"] > 0  # the probe's old pass records the gate scores RSPO reads


def test_cli_ls_lists_objectives_with_clip_ranges():
    result = CliRunner().invoke(app, ["ls"])
    assert result.exit_code == 0
    for name in ("grpo", "gspo", "gspo_token", "dapo", "dr_grpo", "gmpo", "sapo", "cispo"):
        assert name in result.output
    assert "0.0003" in result.output and "0.27" in result.output


def test_cli_ls_lists_new_objectives_with_their_params_and_inputs_corrections_and_families():
    result = CliRunner(env={"COLUMNS": "300"}).invoke(app, ["ls"])
    assert result.exit_code == 0
    for name in ("rspo", "m2po", "dppo_binary_tv", "luspo", "kl_cov", "clip_cov"):
        assert name in result.output
    assert "gamma_min=0.7, router_shift" in result.output and "delta=0.15, sampling_logp" in result.output
    for kind in ("tis", "mis", "icepop", "opsm"):
        assert f"│ {kind} " in result.output
    assert "cap=2.0, level='token'" in result.output
    for family in ("deepseek_v3", "gpt_oss", "llama4_text", "dbrx"):
        assert family in result.output
    assert "top-k over the logits, softmax over the k" in result.output


def test_cli_unknown_objective_is_a_usage_error():
    result = CliRunner().invoke(app, ["probe", "--objectives", "gpso"])
    assert result.exit_code == 2
    assert "unknown objective" in result.output


# ---------------------------------------------------------------------------- dry run / GPU suites
EXPERIMENTS = __import__("pathlib").Path(__file__).resolve().parent.parent / "experiments"


def test_dry_run_plans_the_paper_suite_without_gpu_or_weights():
    """Qwen3-30B-A3B from its shipped config.json on the meta device: the public parameter counts."""
    from gspo_bench.config import load_suite
    from gspo_bench.suite.plan import plan_suite

    plan = plan_suite(load_suite(EXPERIMENTS / "qwen3_30b_a3b.yaml"))
    assert 30.0e9 < plan.params_total < 31.0e9  # "30.5B total"
    assert 3.0e9 < plan.params_active < 3.6e9  # "3.3B activated"
    assert plan.sequences_per_step == 64 * 8 and plan.response_tokens_per_step == 64 * 8 * 8192
    # generation + old-policy pass at 2 N_active per token, one trained pass at 6 N_active
    assert plan.flops_per_step == (2 * 2 + 6) * plan.params_active * plan.response_tokens_per_step
    assert plan.state_bytes == 16 * plan.params_total  # fp32 master weights, grads, two AdamW moments
    assert not plan.fit.fits  # not on one GPU, whatever the settings: FSDP2 over several
    olmoe = plan_suite(load_suite(EXPERIMENTS / "olmoe_1b_7b.yaml"))
    assert 6.5e9 < olmoe.params_total < 7.2e9 and 1.0e9 < olmoe.params_active < 1.5e9  # "7B total, 1B active"


def test_cli_dry_run_prints_the_plan_and_runs_nothing(tmp_path):
    for suite in ("qwen3_30b_a3b.yaml", "olmoe_1b_7b.yaml", "gpu_tiny.yaml", "quickstart.yaml"):
        result = CliRunner().invoke(app, ["run", str(EXPERIMENTS / suite), "--dry-run", "--out", str(tmp_path)])
        assert result.exit_code == 0, result.output
        assert "FLOPs per step" in result.output and "one GPU of" in result.output
    assert not any(tmp_path.iterdir())


def test_dry_run_without_weights_or_architecture_says_what_to_set(tmp_path):
    suite = tmp_path / "s.yaml"
    suite.write_text("name: s\nmodel: {path: /nowhere/model}\ntask: {name: sort}\nwarm_start: {enabled: false}\n"
                     "budget: {kind: steps, value: 1}\nobjectives: [{name: gspo}]\n")
    result = CliRunner().invoke(app, ["run", str(suite), "--dry-run"])
    assert result.exit_code != 0 and "model.architecture" in result.output


def test_probe_with_one_minibatch_runs_and_says_why_it_shows_no_drift():
    """K = 1 (--minibatches' minimum) once crashed: the drift is measured on minibatches 2..K, of which
    there are none. The table shows "-" there and says why."""
    result = CliRunner().invoke(app, ["probe", "--objectives", "grpo", "--prompts", "2", "--group-size", "4",
                                      "--max-new-tokens", "8", "--minibatches", "1"])
    assert result.exit_code == 0, result.output
    assert "moe/drift: - with K=1 (measured on minibatches 2..K)" in " ".join(result.output.split())


def test_probe_with_more_minibatches_than_responses_is_refused_naming_the_option():
    result = CliRunner().invoke(app, ["probe", "--objectives", "grpo", "--prompts", "2", "--group-size", "4",
                                      "--minibatches", "9"])
    assert result.exit_code == 2 and "Traceback" not in result.output
    text = " ".join(result.output.split())
    assert "--minibatches" in text and "more than the 8 responses of the step" in text, text
