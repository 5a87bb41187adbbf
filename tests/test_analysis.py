"""Analysis on a synthetic results directory built here: loading, statistics, figures, report."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from analysis.data.load import NotResultsError, SchemaVersionError, load_results
from analysis.data.matching import UnmatchedComputeError, check_matched
from analysis.report.writer import write_figures, write_report
from analysis.stats.library import bootstrap_ci
from analysis.stats.metrics import auc, ema, final_value, first_value, iqm
from gspo_bench.cli import app
from tests.helpers.results import LABELS, make_run


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


def test_a_quarter_of_the_steps_rounds_up():
    """10 steps: the last (and first) ceil(2.5) = 3 steps, not 2."""
    frame = pd.DataFrame({"step": range(1, 11), "reward/mean": [s / 10 for s in range(1, 11)]})
    assert final_value(frame, "reward/mean") == pytest.approx(0.9)  # steps 8, 9, 10
    assert first_value(frame, "reward/mean") == pytest.approx(0.2)  # steps 1, 2, 3


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
    by_arm = md.split("## Compute matching per arm")[1].split("<a id=")[0]
    every_run = md.split("## Compute matching, every run")[1].split("<a id=")[0]
    assert by_arm.count("| synth ") == 3 and every_run.count("| synth ") == 9  # one row per arm, then per run
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
    assert "s0 collapsed at step 7: reward collapsed to 0.01" in md  # the summary's "unfinished runs" column
    unfinished = md.split("## Unfinished runs")[1].split("<a id=")[0]
    assert "grpo_rr" in unfinished and "collapsed" in unfinished and "reward collapsed to 0.01" in unfinished
    answer = md.split("## Every claim, with its numbers")[1].split("<a id=")[0]
    assert "**1 run(s) did not finish**" in answer and "grpo_rr s0 (collapsed at step 7: reward collapsed to 0.01)" in answer


def test_cli_figures_and_not_results(results_dir, tmp_path):
    runner = CliRunner()
    ok = runner.invoke(app, ["figures", str(results_dir), "--out", str(tmp_path / "f")])
    assert ok.exit_code == 0 and (tmp_path / "f" / "fig2_clip_fraction.pdf").is_file()
    bad = runner.invoke(app, ["report", str(tmp_path / "f")])
    assert bad.exit_code == 2 and "holds no gspo-bench results" in bad.output
    assert "NotResultsError" not in bad.output and "--debug" not in bad.output  # the face's ResultsError, caught


def test_every_error_for_unanalysable_results_is_the_faces_one():
    """The command line catches the analysis face's ResultsError alone: each error the analysis raises for
    results it cannot analyse as asked is one."""
    import analysis
    from analysis.data.load import NotResultsError, SchemaVersionError
    from analysis.data.suites import MixedSuitesError
    from analysis.evidence.primary import DeclarationError

    for error in (NotResultsError, SchemaVersionError, MixedSuitesError, DeclarationError,
                  analysis.UnmatchedComputeError):
        assert issubclass(error, analysis.ResultsError) and issubclass(error, ValueError), error


def test_reward_curve_band_is_the_range_of_few_seeds(tmp_path):
    """4 seeds (offsets 0, 0.03, 0.06, 0.09): the band is their range, not a bootstrap interval (which
    would be narrower: all four resampled from one seed has probability 4 x (1/4)^4 = 1.6% < 2.5%)."""
    from analysis.figures.curves import band_words, curve_with_band

    for seed in range(4):
        make_run(tmp_path, "gspo", seed)
    metrics = load_results(tmp_path / "synth").metrics
    band = curve_with_band(metrics, "reward/mean", smooth=None, points=5)
    end = 0.2 + 0.01 * 20 + 0.1
    assert len(band) == 5 and band["mean"].iloc[-1] == pytest.approx(end + 0.045)
    assert (band["low"].iloc[-1], band["high"].iloc[-1]) == pytest.approx((end, end + 0.09))
    assert band_words(metrics) == "band: range over seeds"


def test_mechanism_table_splits_ratio_variance_by_rerouting(tmp_path):
    """Exact small case: 25% rerouted tokens with 9x the stable tokens' variance hold 75% of it; one step
    of rerouted variance 1 moves the means, not the medians."""
    rerouted = [9e-3, 9e-3, 9e-3, 1.0]
    make_run(tmp_path, "grpo", 0, steps=4, columns={"moe/rerouted_token_frac": 0.25, "ratio/token_var_rerouted": rerouted,
                                                    "ratio/token_var_stable": 1e-3})
    from analysis.report.tables import mechanism_table

    table = mechanism_table(load_results(tmp_path / "synth")).set_index("objective")
    assert table.loc["grpo", "rerouted / stable (medians)"] == pytest.approx(9.0)
    assert table.loc["grpo", "rerouted share of variance (median over steps)"] == pytest.approx(0.75)  # .25*9 / (.25*9 + .75)
    assert table.loc["grpo", "ratio var, rerouted (mean)"] == pytest.approx((3 * 9e-3 + 1.0) / 4)
    assert table.loc["grpo", "rerouted / stable (means)"] == pytest.approx((3 * 9e-3 + 1.0) / 4 / 1e-3)


def evidence_of(root):
    from analysis.data.load import finished
    from analysis.evidence.gather import gather

    return gather(finished(load_results(root)))


def paper_table(root) -> pd.DataFrame:
    from analysis.report.paper_checks import paper_vs_run

    evidence = evidence_of(root)
    (group,) = evidence.groups
    return paper_vs_run(evidence.subset(group), evidence.learnings[group], evidence.family).set_index("quantity")


FIG1 = "final reward at equal compute, GSPO minus GRPO (Figure 1)"
FIG3 = "final reward, GRPO with Routing Replay minus without (Figure 3)"
DEPTH = "drift of the last MoE layer minus the first, GRPO (moe/drift)"


def test_paper_vs_run_on_a_known_case(tmp_path):
    """6 seeds: GSPO clips 0.15 vs GRPO 0.0013 and ends 0.1 higher (per seed 0.09..0.11); GRPO with and
    without replay differ by +-0.01; drift grows by 0.01 per layer. The family: three reward pairs, the
    clip and the depth tests (no drift after one update here): 5 tests, four at p = 2/64 -> Holm 5 x 2/64."""
    from tests.helpers.reports import synth

    root = synth(tmp_path, {"grpo": [0.0] * 6, "grpo_rr": [0.01, -0.01, 0.01, -0.01, 0.01, -0.01],
                            "gspo": [0.1, 0.09, 0.11, 0.1, 0.09, 0.11]})
    table = paper_table(root)
    assert table.loc[FIG1, "this run"].startswith("+0.1 [+0.0906, +0.109] (s0 +0.1, s1 +0.09, s2 +0.11,")
    assert table.loc[FIG1, "p (sign-flip)"] == "0.031" and table.loc[FIG1, "Holm p"] == "0.16"
    assert table.loc[FIG1, "agrees"] == "too few seeds (8 paired seeds needed)"  # 5 tests: 5 x 2/2^n < 0.05 from n = 8
    assert table.loc[FIG3, "p (sign-flip)"] == "1" and table.loc[FIG3, "Holm p"] == "1"
    assert table.loc[DEPTH, "this run"].startswith("0.03 [0.03, 0.03] (s0 0.03,")
    assert table.loc["clipped-token fraction, GSPO (Figure 2)", "this run"].startswith("0.15 [0.15, 0.15] (s0 0.15,")
    assert evidence_of(root).family.size == 5


def test_paper_vs_run_says_how_many_seeds_a_verdict_needs(tmp_path):
    """Two seeds: p >= 0.5 whatever the data; the family (the pair, clip, depth: 3 tests) needs 7 paired seeds."""
    for label in ("grpo", "gspo"):
        for seed in range(2):
            make_run(tmp_path, label, seed)
    table = paper_table(tmp_path / "synth")
    assert table.loc[FIG1, "agrees"] == "too few seeds (7 paired seeds needed)"
    assert table.loc["clipped-token fraction, GSPO (Figure 2)", "this run"] == "0.15 [0.15, 0.15] (s0 0.15, s1 0.15)"
    assert table.loc[FIG1, "p (sign-flip)"] == "0.5"


def test_objectives_are_paired_with_grpo_by_seed_within_each_sweep_point(tmp_path):
    """Two sweep points; at k=1 grpo_rr gains 0.1, -0.1, 0.3 on seeds 0, 1, 2, at k=2 0.05 on every seed:
    each point pairs by seed within itself (labels grpo_rr@k=1, grpo@k=1). Sign flips of 0.1, -0.1, 0.3:
    3 of 8 sums >= 0.3 -> p 0.75; of 0.05 x 3: p 0.25; Holm over the 2: 0.5 and 0.75."""
    from analysis.report.tables import paired_against

    for k, gains in ((1, [0.1, -0.1, 0.3]), (2, [0.05, 0.05, 0.05])):
        for seed, gain in enumerate(gains):
            make_run(tmp_path, "grpo", seed, sweep={"k": k})
            make_run(tmp_path, "grpo_rr", seed, sweep={"k": k}, bonus=gain)
    table = paired_against(evidence_of(tmp_path / "synth")).set_index(["group", "objective"])
    row = table.loc[("k=1", "grpo_rr")]
    half = 4.302653 * 0.2 / np.sqrt(3)  # differences 0.1, -0.1, 0.3: mean 0.1, sd 0.2
    assert row["minus GRPO (per seed)"] == (f"+0.1000 [{0.1 - half:+.4f}, {0.1 + half:+.4f}] "
                                            "(s0 +0.1000, s1 -0.1000, s2 +0.3000)")
    assert row["p (sign-flip)"] == "0.75" and row["Holm p"] == "0.75" and row["GRPO"] == "grpo" and row["seeds"] == 3
    assert table.loc[("k=2", "grpo_rr"), "minus GRPO (per seed)"].startswith("+0.0500 [+0.0500, +0.0500]")
    assert table.loc[("k=2", "grpo_rr"), "Holm p"] == "0.5"  # 0.25 x 2 comparisons


def test_objectives_are_paired_with_grpo_within_each_suite(tmp_path):
    """Two suites, each with grpo and grpo_rr (labels alpha/grpo, beta/grpo_rr): one row per suite."""
    from analysis.report.tables import paired_against

    for suite, gain in (("alpha", 0.02), ("beta", -0.02)):
        for seed in range(3):
            make_run(tmp_path / suite, "grpo", seed, suite=suite)
            make_run(tmp_path / suite, "grpo_rr", seed, suite=suite, bonus=gain + 0.01 * seed)
    table = paired_against(gather_of(tmp_path / "alpha" / "alpha", tmp_path / "beta" / "beta")).set_index("objective")
    assert list(table.index) == ["alpha/grpo_rr", "beta/grpo_rr"]
    assert table.loc["alpha/grpo_rr", "GRPO"] == "alpha/grpo" and table.loc["alpha/grpo_rr", "group"] == "suite alpha"
    assert table.loc["beta/grpo_rr", "minus GRPO (per seed)"].startswith("-0.0100 [")


def gather_of(*roots):
    from analysis.data.load import finished
    from analysis.evidence.gather import gather

    return gather(finished(load_results(*roots)))


def test_the_step_from_which_an_objective_stays_ahead_on_every_seed():
    from analysis.report.tables import apart_from

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


def test_the_windows_start_at_step_one():
    """Windows of 2 steps: 1-2, 3-4, 5-6. Ahead from step 3 on: the gap is -1 at steps 1-2 and +1 after.
    Windows one step late (2-3, 4-5, 6) would mix step 2's -1 into the first window past it."""
    from analysis.report.tables import apart_from

    gap = {1: -1.0, 2: -1.0, 3: 0.5, 4: 0.5, 5: 0.5, 6: 0.5}
    rows = [{"label": label, "seed": 0, "step": step, "reward/mean": g if label == "a" else 0.0}
            for step, g in gap.items() for label in ("a", "b")]
    rows[2]["reward/mean"] = -2.0  # step 2 of a: -2 outweighs step 3's +0.5 in a window of steps 2-3
    assert apart_from(pd.DataFrame(rows), "a", "b", window=2) == (3, "-")


def test_a_monte_carlo_p_says_so_in_every_table_and_in_the_summary(tmp_path):
    """17 paired seeds (above EXACT_PAIRS): GRPO + RR gains 0.05 on every seed; its p is the Monte Carlo
    estimate, marked where it is shown, and the summary names the method and the number of draws. Six
    seeds in the same report would keep the plain text (test_report_html's cases)."""
    from analysis.data.load import finished
    from analysis.report.tables import comparisons_table, paired_against, suite_summary
    from analysis.stats.library import MONTE_CARLO_DRAWS

    for seed in range(17):
        make_run(tmp_path, "grpo", seed, steps=8)
        make_run(tmp_path, "grpo_rr", seed, steps=8, bonus=0.05)
    evidence = evidence_of(tmp_path / "synth")
    p = comparisons_table(evidence).loc[0, "p (sign-flip)"]
    assert p.endswith(" (Monte Carlo)") and float(p.split()[0]) < 1e-3  # 2^-17 of the patterns reach 17 x +0.05
    assert paired_against(evidence).loc[0, "p (sign-flip)"] == p
    summary = suite_summary(finished(load_results(tmp_path / "synth")), 0.0, False, evidence)
    assert f"above 16 paired seeds a Monte Carlo estimate from {MONTE_CARLO_DRAWS} random sign patterns" in summary
