"""The stability map's fitted axis is the level dose (analysis.evidence.stability.AXIS): its fits,
boundaries, brackets and figures place a run at its level's dose per token, which a run that fails later
with a huge late KL cannot move; the run's own median KL stays beside it as the secondary view, never
fitted. Every expected number is worked out by hand in its test."""

from __future__ import annotations

import math

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import pytest
from matplotlib.collections import PathCollection

from analysis.data.load import finished, load_results, unfinished
from analysis.evidence.gather import gather
from analysis.evidence.stability import AXIS, RUN_MEDIAN, arm_fit, boundaries, kl_axis, stability_map
from analysis.figures import stability as SF
from analysis.figures import stability_interactive as SI
from analysis.report.sections import console_answer, plain_answer
from analysis.report.stability_text import boundary_sentence, class_table
from tests.helpers.stability import FALLING, swept_run

LATE_KL = 1000.0  # the failing run's KL from step 6 on: its run median, far off its level's dose
LENGTH = 5.0  # every run's mean response length: per-response dose = 5 x per-token


def map_of(root, late: float):
    """grpo at noise 1 (seeds' first five k3 0.1 and 0.3: dose 0.2, per response 1.0) and at noise 3 (first
    five k3 1.0 and 3.0: dose 2.0, per response 10.0), both noise-3 seeds falling (failed), seed 1's KL
    `late` from step 6 on; 20 steps each."""
    for noise, firsts in ((1.0, (0.1, 0.3)), (3.0, (1.0, 3.0))):
        for seed, first in enumerate(firsts):
            k3 = [first] * 5 + [late if (noise, seed) == (3.0, 1) else first] * 15
            swept_run(root, "grpo", seed, {"router_noise": noise},
                      {"mismatch/k3_kl": k3, "response/len_mean": LENGTH,
                       **({"reward/mean": FALLING} if noise == 3.0 else {})})
    found = stability_map(load_results(root / "synth"))
    assert found is not None
    return found


@pytest.fixture(scope="module")
def maps(tmp_path_factory):
    """The same runs twice: the failing noise-3 run calm (k3 3.0 throughout) and with a huge late KL."""
    return {late: map_of(tmp_path_factory.mktemp(f"late{late:g}"), late) for late in (3.0, LATE_KL)}


def test_a_run_that_fails_later_does_not_move_its_levels_place_on_the_axis(maps):
    """With its late KL 1000 the failing run's own median is 1000 (15 of its 20 steps), yet every run
    sits at its level's dose, 0.2 or 2.0, as when it stayed calm; the boundary's range and bracket are
    the levels': held up to 0.2 per token (1 per response), most failed from 2 (10 per response)."""
    assert AXIS == "dose"
    calm, late = maps[3.0], maps[LATE_KL]
    assert sorted(late.classes["kl"]) == pytest.approx([0.1, 0.3, 1.0, LATE_KL])
    for found in (calm, late):
        assert 10 ** kl_axis(found.classes)["log_kl"].sort_values().to_numpy() == pytest.approx([0.2, 0.2, 2, 2])
        (bound,) = found.bounds
        assert (bound.axis, bound.failures, bound.fit) == ("dose", 2, None)  # separated by dose: no fit
        assert (bound.kl_low, bound.kl_high) == pytest.approx((0.2, 2.0))
        assert (bound.response_low, bound.response_high) == pytest.approx((1.0, 10.0))
        assert (bound.largest_held, bound.smallest_majority) == pytest.approx((0.2, 2.0))
        assert (bound.response_held, bound.response_majority) == pytest.approx((1.0, 10.0))
    text = boundary_sentence(late.bounds[0], ()).text
    assert ("the largest level dose with no degraded or collapsed seed is 0.2 per token (1 per response); the "
            "smallest level dose where most seeds degraded or collapsed is 2 per token (10 per response) (level dose "
            "measured 0.2 to 2 per token (1 to 10 per response))") in text


def test_the_run_median_kl_is_the_secondary_view_never_the_fitted_one(maps):
    """On the run-median KL (asked for by name) the late run moves the range to 1000 and the bracket to
    the noise-3 cell's median, (1 + 1000) / 2; the table shows that KL beside the dose, labelled not fitted."""
    classes = maps[LATE_KL].classes
    (secondary,) = boundaries(classes, RUN_MEDIAN)
    assert secondary.axis == "kl" and secondary.kl_high == pytest.approx(LATE_KL)
    assert secondary.smallest_majority == pytest.approx(500.5)
    table = class_table(classes).set_index(["cell", "seed"])
    row = table.loc[("router_noise=3", 1)]
    assert row["run-median mismatch KL (not fitted)"] == pytest.approx(LATE_KL)
    assert (row["level dose per token"], row["level dose per response"]) == pytest.approx((2.0, 10.0))


def test_the_default_fit_is_the_fit_on_the_dose():
    """Four runs whose own median KLs (0.2, 0.9, 3, 8) differ from their levels' doses (0.1, 0.1, 1, 1); one
    failure at each dose: on the dose the fit is flat at 1/2 (intercept and slope 0); on the run medians,
    where each level's failure has the larger KL, it rises."""
    outcomes = pd.DataFrame({"kl": [0.2, 0.9, 3.0, 8.0], "dose": [0.1, 0.1, 1.0, 1.0],
                             "outcome": ["learned", "degraded", "learned", "collapsed"], "cell": ["a", "a", "b", "b"],
                             "arm": "grpo"})
    fit, on_median = arm_fit(outcomes), arm_fit(outcomes, RUN_MEDIAN)
    assert not isinstance(fit, str) and (fit.intercept, fit.slope) == pytest.approx((0.0, 0.0), abs=1e-9)
    assert not isinstance(on_median, str) and on_median.slope > 0.1
    found = boundaries(outcomes)[0].fit
    assert found is not None and (found.intercept, found.slope) == (fit.intercept, fit.slope)


def xs_of(ax: plt.Axes) -> set[float]:
    """Every x a figure's scatter points sit at."""
    return {round(float(x), 9) for c in ax.collections if isinstance(c, PathCollection)
            for x in np.asarray(c.get_offsets()).reshape(-1, 2)[:, 0]}


def test_the_figures_place_runs_at_their_levels_dose(maps):
    """(a) and (c), static and interactive: every run point at 0.2 or 2.0, never at the late run's 1000;
    the x axis says it is the level dose; report.html's hover gives the run median beside."""
    classes = maps[LATE_KL].classes
    for draw in (SF.change_vs_kl, SF.collapse_probability):
        ax = draw(classes)
        try:
            assert xs_of(ax) == {0.2, 2.0}
            assert ax.get_xlabel().startswith("level dose per token")
        finally:
            plt.close(ax.figure)
    for draw in (SI.change_vs_kl, SI.collapse_probability):
        (fig,) = draw(classes)
        points = [t for t in fig.data if t.mode == "markers"]
        assert {round(float(x), 9) for t in points for x in t.x} == {0.2, 2.0}
        assert fig.layout.xaxis.title.text.startswith("level dose per token")
        assert any("run-median KL 1e+03 (not fitted)" in text for t in points for text in t.text)


NAN = float("nan")


def collapsing_map(root, first_k3: list[float]):
    """grpo at noise 0 (3 seeds finished, k3 0: float rounding, no mismatch) and at noise 3 (3 seeds the
    harness stopped as collapsed at step 3, their k3 `first_k3` over those 3 steps: inside the dose's
    first-5-step window); mean response length 5."""
    for seed in range(3):
        swept_run(root, "grpo", seed, {"router_noise": 0.0}, {"mismatch/k3_kl": 0.0, "response/len_mean": LENGTH})
        swept_run(root, "grpo", seed, {"router_noise": 3.0}, {"mismatch/k3_kl": first_k3, "response/len_mean": LENGTH},
                  steps=3, status="collapsed", message="non-finite loss")
    results = load_results(root / "synth")
    return results, stability_map(results)


def test_a_level_whose_runs_collapse_inside_the_window_is_dosed_on_the_finite_steps_they_ran(tmp_path):
    """The noise-3 runs stopped at step 3 with k3 2.0 at step 1 and NaN after (their policy non-finite): the
    level's dose is the median of the 3 finite values, 2.0 (10 per response), pooled from 3 of 3 runs; the
    answer's lead says the dose there is from the steps they ran, and a row gives what was pooled."""
    results, found = collapsing_map(tmp_path, [2.0, NAN, NAN])
    assert found is not None
    level = found.classes[found.classes["cell"] == "router_noise=3"].iloc[0]
    assert (level["dose"], level["dose_response"]) == pytest.approx((2.0, 10.0))
    assert (level["dose_steps"], level["dose_runs"], level["level_runs"]) == (3, 3, 3)
    lines = console_answer(results)
    (lead,) = [line for line in lines if line.startswith("Stability per arm")]
    assert "the first 5 steps of its runs, or at 1 level the finite steps they ran, as runs stopped within them" in lead
    assert "most failed at dose 2 per token (3 of 3)" in lead and "float rounding" not in lead
    rows = plain_answer(gather(finished(results)), unfinished(results), found).numbers
    (row,) = rows[rows["what"] == "level dose at router_noise=3: the first-step values pooled"].to_dict("records")
    assert (row["value"], row["result"]) == ("3 finite of the first 5 steps of 3 runs (3 with one or more)", "2 per token")


def test_a_level_whose_runs_never_measured_a_finite_mismatch_is_unmeasured_not_float_rounding(tmp_path):
    """The noise-3 runs' k3 NaN at each of the 3 steps they ran: that level has no dose (NaN, 0 values
    pooled), the noise-0 level's is float rounding; no level is on the axis, and the lead says the noise-3
    level never measured a finite mismatch instead of calling every level's dose float rounding."""
    results, found = collapsing_map(tmp_path, [NAN, NAN, NAN])
    assert found is not None
    level = found.classes[found.classes["cell"] == "router_noise=3"].iloc[0]
    assert math.isnan(level["dose"]) and (level["dose_steps"], level["dose_runs"]) == (0, 0)
    (lead,) = [line for line in console_answer(results) if line.startswith("No level of this sweep")]
    assert lead.startswith("No level of this sweep has a dose on the axis: at 1 level no run measured a finite mismatch "
                           "in the first 5 steps it ran")
    assert "every level dose is float rounding" not in lead
    rows = plain_answer(gather(finished(results)), unfinished(results), found).numbers
    (row,) = rows[rows["what"] == "level dose at router_noise=3: the first-step values pooled"].to_dict("records")
    assert row["result"] == "no dose: never finite (off the axis, not float rounding)"


@pytest.mark.parametrize("first_k3", [[0.5, 0.5], [NAN, NAN]])
def test_when_every_run_collapsed_the_map_still_answers_that_every_level_failed(tmp_path, first_k3):
    """Every run stopped as collapsed at step 2, at noise 1 (k3 `first_k3`) and noise 3 (k3 3 x that): no
    run finished, yet the map judges them all. The answer says so and that every level failed for every
    arm, with the doses measured (0.5 to 1.5 per token, 2.5 to 7.5 per response), or that none was finite."""
    for noise in (1.0, 3.0):
        for seed in range(3):
            swept_run(tmp_path, "grpo", seed, {"router_noise": noise},
                      {"mismatch/k3_kl": [noise * k for k in first_k3], "response/len_mean": LENGTH},
                      steps=2, status="collapsed", message="non-finite loss")
    lines = console_answer(load_results(tmp_path / "synth"))
    assert lines[0] == ("No run finished: the stability map judges the 6 runs the harness stopped as collapsed, and "
                        "nothing is compared on a reward.")
    doses = ("at level doses 0.5 to 1.5 per token (2.5 to 7.5 per response)" if first_k3[0] == 0.5 else
             "where no run measured a finite mismatch in the first 5 steps it ran (no level has a dose)")
    assert lines[1].startswith(f"Every run of every arm failed (degraded or collapsed) at every level, {doses}: no arm "
                               "held at any dose measured")
    assert "6 of 6 runs failed" in lines[1]
