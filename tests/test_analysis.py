"""Analysis on a synthetic results directory built here: loading, statistics, figures, report."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
import yaml
from typer.testing import CliRunner

from analysis.load import NotResultsError, SchemaVersionError, load_results
from analysis.matching import UnmatchedComputeError, check_matched
from analysis.report import write_figures, write_report
from analysis.stats import auc, bootstrap_ci, ema, final_value, first_value, iqm
from gspo_bench.cli import app
from gspo_bench.rundir.folder import REQUIRED_COLUMNS, RunDir

LABELS = {"grpo": ("grpo", False), "grpo_rr": ("grpo", True), "gspo": ("gspo", False)}


def make_run(root, label, seed, steps=20, flops_per_step=1e9, status="done", message="", bonus=None, sweep=None):
    """A synthetic run: reward 0.2 + 0.01 step + `bonus` (default 0.1 for GSPO, 0 otherwise); `sweep`
    ({field: value}) makes it a run of that sweep point."""
    objective, replay = LABELS[label]
    rng = np.random.default_rng(seed + 10 * len(label))
    bonus = (0.1 if objective == "gspo" else 0.0) if bonus is None else bonus
    algorithm, label = label, label + ("@" + ",".join(f"{k}={v}" for k, v in sweep.items()) if sweep else "")
    run = RunDir(root / "synth" / f"{label}-s{seed}")
    rows, layers = [], []
    for step in range(1, steps + 1):
        row = {c: float(rng.uniform(0.01, 0.2)) for c in REQUIRED_COLUMNS}
        row.update({
            "step": step, "objective": objective, "label": label, "seed": seed,
            "reward/mean": 0.2 + 0.01 * step + bonus,
            "clip/frac": 0.15 if objective == "gspo" else 0.0013,
            "compute/flops": flops_per_step, "compute/cum_flops": flops_per_step * step,
            "compute/cum_tokens": 100.0 * step,
            "count/tokens_len4-7": 40.0, "count/clipped_len4-7": 6.0 if objective == "gspo" else 0.0,
            "count/tokens_len8-15": 60.0, "count/clipped_len8-15": 9.0 if objective == "gspo" else 0.1,
        })
        rows.append(row)
        layers += [{"step": step, "label": label, "seed": seed, "layer": i, "moe/drift": 0.01 * (i + 1)}
                   for i in range(4)]
    run.write_rows("metrics.parquet", rows)
    run.write_rows("layers.parquet", layers)
    config = {"run": {"label": label, "algorithm": algorithm, "objective": objective, "replay": replay, "seed": seed,
                      "sweep": sweep or {}},
              "suite": {"name": "synth", "budget": {"kind": "flops", "value": flops_per_step * steps}}}
    run.write_text("config.yaml", yaml.safe_dump(config))
    run.write_json("provenance.json", {"git": {"commit": "abc", "dirty": False}, "packages": {"torch": "x"},
                                       "device": "cpu", "start": "s", "end": "e"})
    run.write_status(status, message, step=steps)
    return run


@pytest.fixture()
def results_dir(tmp_path):
    for label in LABELS:
        for seed in range(3):
            make_run(tmp_path, label, seed)
    return tmp_path / "synth"


def test_load_tidy_tables(results_dir):
    results = load_results(results_dir)
    assert len(results.runs) == 9 and results.objectives == ["grpo", "grpo_rr", "gspo"]
    assert len(results.metrics) == 9 * 20
    assert {"suite", "label", "objective", "seed", "replay"} <= set(results.metrics.columns)
    assert results.runs.set_index("label").loc["grpo_rr", "replay"].all()
    assert len(results.layers) == 9 * 20 * 4
    # a root of suites and a single run directory load too
    assert len(load_results(results_dir.parent).runs) == 9
    assert len(load_results(results_dir / "gspo-s1").runs) == 1


def test_load_rejects_non_results_and_other_schema(tmp_path, results_dir):
    (tmp_path / "empty").mkdir()
    with pytest.raises(NotResultsError, match="holds no gspo-bench results"):
        load_results(tmp_path / "empty")
    with pytest.raises(NotResultsError, match="no such directory"):
        load_results(tmp_path / "missing")
    status = results_dir / "grpo-s0" / "status.json"
    status.write_text(json.dumps({**json.loads(status.read_text()), "schema_version": 99}))
    with pytest.raises(SchemaVersionError, match="schema version 99"):
        load_results(results_dir)


def test_final_value_is_the_mean_of_the_last_quarter_of_steps():
    frame = pd.DataFrame({"step": [3, 1, 2, 4, 5, 6, 7, 8], "reward/mean": [0.3, 0.1, 0.2, 0.4, 0.5, 0.6, 0.7, 0.8]})
    assert final_value(frame, "reward/mean") == pytest.approx((0.7 + 0.8) / 2)  # steps 7, 8 of 8
    assert first_value(frame, "reward/mean") == pytest.approx((0.1 + 0.2) / 2)
    assert final_value(frame.head(1), "reward/mean") == 0.3  # at least one step


def test_statistics_small_cases():
    assert iqm(np.array([1, 2, 3, 4, 5, 6, 7, 100])) == pytest.approx(np.mean([3, 4, 5, 6]))
    assert iqm(np.array([2.0, 4.0])) == 3.0
    assert auc(np.array([1.0, 2.0]), np.array([1.0, 3.0])) == pytest.approx((1.0 + 2.0) / 2)  # (0..1: 1), (1..2: 2)
    assert ema(np.array([1.0, 1.0, 1.0]), 0.3).tolist() == pytest.approx([1.0, 1.0, 1.0])
    assert ema(np.array([0.0, 10.0]), 0.5)[1] == pytest.approx(10 * 0.5 / 0.75)


def test_bootstrap_ci_covers_the_true_mean_at_about_the_stated_rate():
    rng = np.random.default_rng(1234)
    trials, covered = 300, 0
    for _ in range(trials):
        sample = rng.normal(0.5, 0.2, size=20)
        low, high = bootstrap_ci(sample, rng, reps=400)
        covered += low <= 0.5 <= high
    assert 0.89 <= covered / trials <= 0.99  # nominal 95%; the percentile bootstrap runs a little narrow


def test_bootstrap_ci_is_reproducible_with_an_explicit_generator():
    x = np.arange(10.0)
    assert bootstrap_ci(x, np.random.default_rng(7)) == bootstrap_ci(x, np.random.default_rng(7))


def test_bootstrap_ci_of_curves_is_the_ci_of_each_point():
    """[runs, points] data: every point's band is that point's own bootstrap (same resampled seeds)."""
    curves = np.array([[0.0, 10.0], [1.0, 30.0], [2.0, 20.0], [4.0, 40.0]])
    low, high = bootstrap_ci(curves, np.random.default_rng(3), reps=300)
    for point in range(2):
        alone = bootstrap_ci(curves[:, point], np.random.default_rng(3), reps=300)
        assert (low[point], high[point]) == pytest.approx(alone)
    skewed = np.array([1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 100.0])
    iqm_low, _ = bootstrap_ci(skewed, np.random.default_rng(0), statistic=iqm)
    mean_low, _ = bootstrap_ci(skewed, np.random.default_rng(0))
    assert iqm_low < mean_low  # the same resamples, reduced by the statistic given: IQM trims the outlier


def test_every_figure_file_is_written(results_dir, tmp_path):
    paths = write_figures(load_results(results_dir), tmp_path / "figs")
    names = {p.stem for p in paths}
    assert {"fig1_reward_vs_compute", "fig2_clip_fraction", "fig3_routing_replay", "ratio_variance", "drift",
            "clip_by_length", "kl_entropy", "drift_layers_gspo"} <= names
    assert {p.suffix for p in paths} == {".png", ".pdf"}
    for path in paths:
        assert path.stat().st_size > 1000, path


def test_report_sections_and_compute_table(results_dir, tmp_path):
    paths = write_report(load_results(results_dir), tmp_path / "report")
    md = paths["md"].read_text()
    for section in ("## Suite summary", "## Compute matching", "## Summary per objective",
                    "## Clip fraction by response length", "## Provenance", "## Figures"):
        assert section in md
    assert md.count("| synth ") == 9  # one compute row per run
    html = paths["html"].read_text()
    assert "<table" in html and html.count("class=\"plotly-graph-div\"") >= 8 and "src='figures/" not in html
    summary = md.split("## Summary per objective")[1].split("##")[0]
    gspo_row = next(line for line in summary.splitlines() if line.startswith("| gspo "))
    assert "0.15" in gspo_row  # clip fraction of the synthetic GSPO runs


def test_unmatched_compute_is_refused_without_the_flag(tmp_path):
    for label in ("grpo", "gspo"):
        make_run(tmp_path, label, 0, flops_per_step=1e9 if label == "grpo" else 1.1e9)
    results = load_results(tmp_path / "synth")
    with pytest.raises(UnmatchedComputeError, match="differs by 10.0%"):
        write_report(results, tmp_path / "r")
    assert check_matched(results, allow_unmatched=True) == pytest.approx(0.1)
    write_report(results, tmp_path / "r", allow_unmatched=True)
    runner = CliRunner()
    refused = runner.invoke(app, ["report", str(tmp_path / "synth"), "--out", str(tmp_path / "r2")])
    assert refused.exit_code == 2 and "--allow-unmatched" in refused.output
    allowed = runner.invoke(app, ["report", str(tmp_path / "synth"), "--out", str(tmp_path / "r2"), "--allow-unmatched"])
    assert allowed.exit_code == 0 and (tmp_path / "r2" / "report.html").is_file()


def test_collapsed_runs_are_reported_with_step_and_reason(tmp_path):
    make_run(tmp_path, "grpo", 0, steps=20)
    make_run(tmp_path, "gspo", 0, steps=20)
    make_run(tmp_path, "grpo_rr", 0, steps=7, status="collapsed", message="reward collapsed to 0.01")
    md = write_report(load_results(tmp_path / "synth"), tmp_path / "r")["md"].read_text()
    assert "s0 collapsed at step 7: reward collapsed to 0.01" in md


def test_cli_figures_and_not_results(results_dir, tmp_path):
    runner = CliRunner()
    ok = runner.invoke(app, ["figures", str(results_dir), "--out", str(tmp_path / "f")])
    assert ok.exit_code == 0 and (tmp_path / "f" / "fig2_clip_fraction.pdf").is_file()
    bad = runner.invoke(app, ["report", str(tmp_path / "f")])
    assert bad.exit_code == 2 and "holds no gspo-bench results" in bad.output


def test_reward_curve_band_uses_every_seed(results_dir):
    from analysis.figures import curve_with_band

    metrics = load_results(results_dir).metrics
    band = curve_with_band(metrics, "reward/mean", smooth=None, points=5)
    gspo = band[band["label"] == "gspo"]
    assert len(gspo) == 5 and (gspo["low"] <= gspo["mean"]).all() and (gspo["mean"] <= gspo["high"]).all()
    assert gspo["mean"].iloc[-1] == pytest.approx(0.2 + 0.01 * 20 + 0.1)
    assert isinstance(band, pd.DataFrame)


def test_mechanism_table_splits_ratio_variance_by_rerouting(tmp_path):
    """Exact small case: 25% rerouted tokens with 9x the stable tokens' variance hold 75% of it."""
    run = make_run(tmp_path, "grpo", 0, steps=4)
    frame = pd.read_parquet(run.path / "metrics.parquet")
    frame["moe/rerouted_token_frac"], frame["ratio/token_var_rerouted"], frame["ratio/token_var_stable"] = 0.25, 9e-3, 1e-3
    frame.to_parquet(run.path / "metrics.parquet")
    from analysis.tables import mechanism_table

    table = mechanism_table(load_results(tmp_path / "synth")).set_index("objective")
    assert table.loc["grpo", "rerouted / stable"] == pytest.approx(9.0)
    assert table.loc["grpo", "rerouted share of variance"] == pytest.approx(0.75)  # .25*9 / (.25*9 + .75*1)


def test_paper_vs_run_verdicts_on_a_known_case(results_dir):
    """Synthetic runs: GSPO clips 0.15 vs GRPO 0.0013 and ends 0.1 higher; GRPO with and without replay
    have the same rewards; drift per layer grows with depth (0.01 per layer)."""
    from analysis.paper import paper_vs_run

    table = paper_vs_run(load_results(results_dir)).set_index("quantity")
    agrees = table["agrees"]
    assert agrees["clipped-token fraction, GRPO (Figure 2)"] == "yes (GSPO clips more)"
    assert agrees["final reward at equal compute, GSPO minus GRPO (Figure 1)"] == "yes"
    assert table.loc["final reward at equal compute, GSPO minus GRPO (Figure 1)", "this run"].startswith("0.1 [")
    assert agrees["final reward, GRPO with Routing Replay minus without (Figure 3)"] == "not distinguishable"
    assert agrees["drift of the last MoE layer minus the first, GRPO (moe/drift)"] == "yes"
    assert table.loc["drift of the last MoE layer minus the first, GRPO (moe/drift)", "this run"].startswith("0.03 [")


def test_paper_vs_run_gives_no_verdict_below_three_seeds(tmp_path):
    for label in ("grpo", "gspo"):
        for seed in range(2):
            make_run(tmp_path, label, seed)
    table = paper_vs_run_table(tmp_path / "synth")
    assert table.loc["final reward at equal compute, GSPO minus GRPO (Figure 1)", "agrees"] == "2 seed(s): too few to tell"
    assert table.loc["clipped-token fraction, GSPO (Figure 2)", "this run"] == "0.15 (2 seeds, no CI)"


def paper_vs_run_table(root):
    from analysis.paper import paper_vs_run

    return paper_vs_run(load_results(root)).set_index("quantity")


def test_objectives_are_paired_with_grpo_by_seed():
    from types import SimpleNamespace

    from analysis.tables import paired_against

    rows = []
    finals = {"grpo": {0: 0.5, 1: 0.4, 2: 0.6}, "grpo_r3": {0: 0.6, 1: 0.3, 2: 0.9}, "gspo": {1: 0.5}}
    for label, by_seed in finals.items():
        for seed, final in by_seed.items():  # 4 steps: the final value is the last step's (25%)
            rows += [{"label": label, "seed": seed, "step": step, "reward/mean": 0.0 if step < 4 else final}
                     for step in (4, 3, 2, 1)]
    table = paired_against(SimpleNamespace(metrics=pd.DataFrame(rows))).set_index("objective")
    assert table.loc["grpo_r3", "minus grpo"] == pytest.approx((0.1 - 0.1 + 0.3) / 3)
    assert table.loc["grpo_r3", "per seed"] == "s0: +0.1000, s1: -0.1000, s2: +0.3000"
    assert table.loc["grpo_r3", "CI low"] < table.loc["grpo_r3", "minus grpo"] < table.loc["grpo_r3", "CI high"]
    assert table.loc["gspo", "seeds"] == 1 and table.loc["gspo", "minus grpo"] == pytest.approx(0.1)
    assert np.isnan(table.loc["gspo", "CI low"])  # one seed: no CI
    assert "No grpo runs" in paired_against(SimpleNamespace(metrics=pd.DataFrame(rows[12:])))


def test_the_step_from_which_an_objective_stays_ahead_on_every_seed():
    from analysis.tables import apart_from

    rows = []
    # windows of 10 steps: r3 - grpo per window and seed; from window 2 (step 21) on every seed ahead
    gaps = {0: [-0.1, 0.2, 0.1, 0.1], 1: [0.1, -0.1, 0.2, 0.3]}
    for seed, by_window in gaps.items():
        for w, gap in enumerate(by_window):
            for step in range(10 * w + 1, 10 * w + 11):
                rows += [{"label": "grpo", "seed": seed, "step": step, "reward/mean": 0.5},
                         {"label": "grpo_r3", "seed": seed, "step": step, "reward/mean": 0.5 + gap}]
    rows.append({"label": "grpo", "seed": 0, "step": 41, "reward/mean": 0.0})  # a window one run has not reached
    metrics = pd.DataFrame(rows)
    assert apart_from(metrics, "grpo_r3", "grpo") == (21, "-")
    assert apart_from(metrics, "grpo", "grpo_r3") == ("-", 21)
    assert apart_from(metrics, "grpo_r3", "grpo", window=40) == (1, "-")  # one window: 0.075 and 0.125 ahead
