"""The stability map in the report (analysis.figures.stability, stability_interactive, stability_text and
their wiring in analysis.report.sections and analysis.report): the cells grid, every figure and the answer's
sentences on a swept synthetic suite, the collapsed runs it draws, no map without a sweep, and the rules
in the docs word for word."""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import pytest

from analysis.data.load import finished, load_results
from analysis.evidence.stability import COLLAPSED, DEGRADED, FLAT, LEARNED, run_classes, stability_map
from analysis.figures.stability import cell_grid
from analysis.report import anchors
from analysis.report.sections import Context
from analysis.report.stability_text import RULES, bound_text, stability_sentences
from analysis.report.writer import write_report
from tests.helpers.results import make_run
from tests.helpers.stability import FALLING, set_router_lr_scale, swept_run

ROOT = Path(__file__).resolve().parent.parent


def test_the_cells_grid_has_a_row_per_first_knob_value_and_a_column_per_other():
    o = pd.DataFrame({"outcome": [COLLAPSED, LEARNED, DEGRADED, DEGRADED, FLAT],
                      "sweep/router_noise": [0.0, 0.0, 1.0, 1.0, 0.0], "sweep/router_lr_scale": [0.0, 0.0, 0.0, 1.0, 1.0],
                      "cell": "x"})
    share, text = cell_grid(o)
    assert list(share.index) == ["router_noise=0", "router_noise=1"]
    assert list(share.columns) == ["router_lr_scale=0", "router_lr_scale=1"]
    assert share.to_numpy().tolist() == [[0.5, 0.0], [1.0, 1.0]] and text.to_numpy().tolist() == [["1/2", "0/1"],
                                                                                                ["1/1", "1/1"]]


def test_a_grid_with_a_combination_never_run_leaves_that_cell_empty():
    """A 2-D sweep that ran (noise 0, scale 0), (0, 1) and (1, 0) but never (1, 1): the report drew this
    grid and died casting the missing cell's NaN count to int (results/regime/drift)."""
    o = pd.DataFrame({"outcome": [COLLAPSED, LEARNED, DEGRADED], "sweep/router_noise": [0.0, 0.0, 1.0],
                      "sweep/router_lr_scale": [0.0, 1.0, 0.0], "cell": "x"})
    share, text = cell_grid(o)
    assert text.to_numpy().tolist() == [["1/1", "0/1"], ["1/1", ""]]
    assert share.iloc[0].tolist() == [1.0, 0.0] and share.iloc[1, 0] == 1.0 and np.isnan(share.iloc[1, 1])


# ------------------------------------------------------------------------------ the report


@pytest.fixture(scope="module")
def swept(tmp_path_factory) -> Path:
    """grpo and gspo, 2 seeds, at router_noise 0 / 1 x router_lr_scale 0 / 1: grpo falls at noise 1 and
    at noise 0 with scale 1 on seed 0; one more grpo run at noise 1 stopped by the harness at step 6."""
    root = tmp_path_factory.mktemp("stability")
    for noise, kl in ((0.0, 0.002), (1.0, 0.2)):
        for scale in (0.0, 1.0):
            for seed in range(2):
                for label in ("grpo", "gspo"):
                    falls = label == "grpo" and (noise == 1.0 or (scale == 1.0 and seed == 0))
                    columns = {"mismatch/k3_kl": kl * (1 + 0.2 * seed + scale), "moe/drift_expert_1": 0.02 + 0.1 * scale,
                               **({"reward/mean": FALLING} if falls else {})}
                    run = swept_run(root, label, seed, {"router_noise": noise, "router_lr_scale": scale}, columns)
                    set_router_lr_scale(run, scale)
    stopped = swept_run(root, "grpo", 2, {"router_noise": 1.0, "router_lr_scale": 1.0}, {"mismatch/k3_kl": 0.3},
                        steps=6, status="collapsed", message="non-finite loss or gradients in 2 consecutive steps")
    set_router_lr_scale(stopped, 1.0)
    return root / "synth"


def test_the_zero_failure_bound_in_words():
    """1 - 0.05^(1/60) = 0.048703 and 1 - 0.05^(1/8) = 0.31234, in 3 significant digits."""
    assert "0 of 60 runs degraded or collapsed: the rate is at most 4.87% at 95%" in bound_text(60)
    assert "at most 31.2% at 95% (exact one-sided Clopper-Pearson, 1 - 0.05^(1/8))" in bound_text(8)


MAP_FIGURES = [anchors.CHANGE_VS_KL, anchors.CELLS, anchors.COLLAPSE_PROBABILITY, anchors.DRIFT_VS_ROUTER_LR,
               anchors.SURVIVAL]


def map_figures(results) -> list:
    """The stability map's figures among the report's (analysis.report.figure_table), of every run."""
    return [f for f in Context(results, float("nan"), False).figures_shown if f.name.startswith("stability_")]


def test_the_map_of_a_swept_suite_has_its_figures_and_says_where_each_arm_breaks(swept):
    """The map's pieces of the report, without the rest of it: every figure (static and plotly), and the
    answer's sentences. gspo never failed in 8 runs, 2 in each of 4 cells: per cell 1 - 0.05^(1/2) = 0.77639
    (never the pooled 1 - 0.05^(1/8)), up to its largest level dose, noise 1 x scale 1's: the median of the
    first 5 steps of the 5 runs there (k3 0.4 x 10, 0.44 x 10, the stopped run's 0.3 x 5) = 0.4, not its own
    runs' largest KL 0.44. grpo: 6 of 9 failed (4 at noise 1, seed 0 at noise 0 scale 1, the stopped run)."""
    results = load_results(swept)
    specs = map_figures(results)
    assert [spec.name for spec in specs] == MAP_FIGURES
    for spec in specs:  # drawn, not saved (the slow report test saves them)
        figure = spec.static()
        try:
            assert figure.axes and all(ax.has_data() for ax in figure.axes if ax.get_title())
        finally:
            plt.close(figure)
    assert [len(spec.interactive()) for spec in specs] == [1, 2, 1, 1, 1]  # (b): one heatmap per arm
    found = stability_map(results)
    assert found is not None and [b.arm for b in found.bounds] == ["grpo", "gspo"]
    texts = [s.text for s in stability_sentences(found, set(MAP_FIGURES))]
    assert texts[0].startswith("**Stability map** over 17 runs (finished or collapsed) in 4 cells")
    assert "grpo 6 collapsed, 0 degraded, 3 learned, 0 flat; gspo 0 collapsed, 0 degraded, 8 learned, 0 flat" in texts[0]
    # grpo's level doses 0.0022 (noise 0, scale 0: held), 0.0042 (held on seed 1, failed on seed 0), 0.22 and 0.4
    # (all failed): separated but for the tie at 0.0042, so no fit; the bracket is read off the cells
    assert texts[1].startswith("**grpo: 6 of 9 runs degraded or collapsed**, no logistic fit (the outcomes are "
                               "separated")
    assert ("the largest level dose with no degraded or collapsed seed is 0.0022 per token (" in texts[1]
            and "the smallest level dose where most seeds degraded or collapsed is 0.22 per token (" in texts[1])
    assert texts[2].startswith("**gspo: no stability boundary reached** up to the largest level dose measured, 0.4 per "
                               "token (")  # then its per-response dose: x the synthetic runs' random response lengths
    assert texts[2].endswith(" per response): 0 of 8 runs degraded or collapsed: in each of its 4 cells the rate is at "
                             "most 77.6% at 95% (exact one-sided Clopper-Pearson per cell, 1 - 0.05^(1/2) at its fewest "
                             "runs in a cell; cells are not pooled).")
    assert texts[3].startswith("Runs collapsed: grpo 6 of 9 (s2 at router_lr_scale=1,router_noise=1 at step 6, ")
    assert texts[4] == ("Drift after one update (moe/drift_expert_1, median over steps, mean over runs) by "
                        "train.router_lr_scale: grpo 0.02 at 0, 0.12 at 1; gspo 0.02 at 0, 0.12 at 1.")


def test_the_collapsed_run_is_in_the_reports_map_though_no_comparison_reads_it(swept):
    """The report's map figures are those of every run: of the finished ones only, the stopped run is gone
    (grpo: 5 of 8 collapsed instead of 6 of 9)."""
    results = load_results(swept)
    survival = next(spec for spec in map_figures(results) if spec.name == anchors.SURVIVAL)
    assert [t.name for t in survival.interactive()[0].data] == ["grpo (6 of 9 collapsed)",
                                                                                  "gspo (0 of 8 collapsed)"]
    assert len(run_classes(finished(results))) == 16


def test_without_a_sweep_there_is_no_map(tmp_path):
    make_run(tmp_path, "grpo", 0)
    make_run(tmp_path, "gspo", 0)
    results = load_results(tmp_path / "synth")
    assert stability_map(results) is None and map_figures(results) == []


@pytest.mark.slow
def test_the_report_of_a_swept_suite_shows_the_map(swept, tmp_path):
    paths = write_report(load_results(swept), tmp_path / "r")
    md, html = paths["md"].read_text(), paths["html"].read_text()
    for name in MAP_FIGURES:
        assert (paths["figures"] / f"{name}.png").stat().st_size > 0 and (paths["figures"] / f"{name}.pdf").is_file()
        assert f'<div id="plot-{name}-0" class="plotly-graph-div"' in html and f"(figures/{anchors.link(name)}.png)" in md
    answer = md.split("## The answer")[1].split("<a id=")[0]  # the plain answer: per arm, before any sweep point
    assert "- Stability per arm on the level dose" in answer and "At router_noise" not in answer
    assert "\n  - **grpo** (" in answer and "\n  - **gspo** (0 of" in answer  # one nested item per arm
    detail = md.split("## Every claim, with its numbers")[1].split("<a id=")[0]
    assert "**gspo: no stability boundary reached**" in detail and "Runs collapsed: grpo 6 of 9" in detail
    assert f"](#{anchors.STABILITY})" in answer and f'<a id="{anchors.STABILITY}"></a>' in md
    assert f'<a id="{anchors.STABILITY_RULES}"></a>' in md and f"<h2 id='{anchors.STABILITY_RULES}'>" in html


def test_the_rules_in_the_report_are_the_rules_in_the_docs():
    """The classes are declared before any run: docs/report.md holds the report's rules word for word."""
    assert RULES in (ROOT / "docs" / "report.md").read_text()


def test_the_early_warnings_section_reads_the_failed_runs_and_only_where_some_failed(swept, tmp_path):
    """The swept suite's 6 failed grpo runs are each listed with their first alarm ahead (or none) under the
    package's rules, ranked by held-out AUC; a suite whose runs all held (no map) has no such section."""
    from analysis.evidence.early_warnings import load_rules
    from analysis.report.sections import build_sections

    results = load_results(swept)
    found = {s.anchor: s for s in build_sections(Context(results, 0.0, False))}
    assert found["early-warnings"].body.startswith("Exploratory. Each rule is an alarm on one logged signal")
    assert "These runs took no part in choosing the rules" in found["early-warnings"].body
    assert "Of the 6 failed runs, " in found["early-warnings"].body
    ranked = found["early-warning-rules"].body
    aucs = [float(v.split()[0]) for v in ranked["held out: AUC [95%]"]]
    assert len(ranked) == len(load_rules()) and aucs == sorted(aucs, reverse=True)
    runs = found["early-warning-runs"].body
    assert len(runs) == 6 and set(runs["outcome"]) <= {COLLAPSED, DEGRADED} and runs["label"].str.startswith("grpo").all()
    make_run(tmp_path, "grpo", 0)
    held = {s.anchor for s in build_sections(Context(load_results(tmp_path / "synth"), 0.0, False))}
    assert "early-warnings" not in held
