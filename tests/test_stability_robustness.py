"""The stability map always reports (analysis.stability, stability_text): the logistic fit converges on
every outcome pattern that has a fit, a flat fit or one with a slope near 0 gives a sentence instead of a
division error, runs without a measured mismatch are said to be so, and short pilots are not judged.
The boundary sentence's numbers are checked against the fit they come from."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy import special

from analysis.data.load import load_results
from analysis.evidence.stability import COLLAPSED, DEGRADED, FLAT, LEARNED, boundaries, stability_map
from analysis.figures.curves import curve_with_band
from analysis.figures.curves import curves as plot_curves
from analysis.report.stability_text import boundary_sentence, stability_sentences
from analysis.stats.logistic import fit_logistic, no_fit_reason
from tests.helpers.stability import FALLING, swept_run


def outcomes(cells: list[tuple[float, list[str]]], arm: str = "grpo") -> pd.DataFrame:
    """One arm's runs: per cell its dose and each seed's class (a run's median KL: its cell's dose)."""
    rows = [{"arm": arm, "cell": f"kl={kl:g}", "kl": kl, "dose": kl, "outcome": outcome, "step": 5.0, "last_step": 20.0}
            for kl, classes in cells for outcome in classes]
    return pd.DataFrame(rows)


def sentence(cells: list[tuple[float, list[str]]]) -> str:
    return boundary_sentence(boundaries(outcomes(cells))[0], ()).text


def score(x: np.ndarray, y: np.ndarray, fit) -> np.ndarray:
    """The log-likelihood's gradient at the fit: (sum(p - y), sum(x (p - y))), 0 at the maximum."""
    residual = special.expit(fit.intercept + fit.slope * x) - y
    return np.array([residual.sum(), (x * residual).sum()])


def test_the_logistic_fit_converges_wherever_a_fit_exists():
    """scipy's trust-exact gave up on about 1 in 11 random fittable patterns of 4-12 runs (this one
    first): the fit now reaches the maximum (score 0) on every one of them."""
    x = np.array([-1.5, -1.6, -2.3, -1.0, -2.9, -2.9, -0.5, -1.7, -2.0, -2.3])
    y = np.array([1, 1, 0, 1, 1, 0, 0, 0, 1, 1], dtype=bool)
    assert np.abs(score(x, y, fit_logistic(x, y))).max() < 1e-8
    rng = np.random.default_rng(0)
    fitted = 0
    for _ in range(400):
        n = int(rng.integers(4, 13))
        x, y = np.round(rng.uniform(-3, 0, n), int(rng.integers(0, 3))), rng.random(n) < rng.uniform(0.1, 0.9)
        if no_fit_reason(x, y) is None:
            assert np.abs(score(x, y, fit_logistic(x, y))).max() < 1e-8, (x.tolist(), y.tolist())
            fitted += 1
    assert fitted > 250


def test_the_same_failure_rate_at_every_kl_is_a_flat_fit_that_crosses_nowhere():
    """1 of 2 seeds failed at each of two KLs: the slope is exactly 0 (a ZeroDivisionError before)."""
    text = sentence([(0.1, [DEGRADED, LEARNED]), (1.0, [COLLAPSED, FLAT])])
    assert "**grpo: P(degraded or collapsed) does not change with the level dose**" in text
    assert "flat at 0.5 and crosses 0.5 nowhere" in text


def test_a_slope_near_0_gives_a_crossing_beyond_a_floats_range_in_words():
    """1 of 3 failed at each of two KLs, the failed run's KL 0.1% higher: slope 8.7e-4, crossing at log10
    KL ~ 798 (10 ** it overflowed before)."""
    cells = [(0.1001, [DEGRADED]), (0.1, [FLAT, LEARNED]), (1.0, [COLLAPSED, FLAT, LEARNED])]
    found = boundaries(outcomes(cells))[0]
    center = found.fit.crossing()[0]
    assert abs(center) > 308  # 10 ** center is not a float
    text = boundary_sentence(found, ()).text
    assert "**grpo: no stability boundary placed**: the fit's slope is not distinguishable from 0 at 5%" in text
    assert f"the fitted curve crosses 0.5 at level dose 10^{center:.4g} per token, outside" in text
    assert "an extrapolation" in text


@pytest.mark.parametrize("kl", [np.nan, 0.0, 4.07e-14])
def test_runs_without_a_measured_mismatch_are_said_to_be_so(kl):
    """An lr sweep with a noise-free engine (KL 0, NaN, or float rounding such as 4.07e-14): one of three
    runs degraded; there is no KL to read a boundary off, and no cell is said to have failed."""
    text = sentence([(kl, [DEGRADED]), (kl, [LEARNED]), (kl, [FLAT])])
    assert "**grpo: 1 of 3 runs degraded or collapsed**" in text
    assert "no cell has a level dose to read a boundary off" in text and "every cell had" not in text
    assert "no run has a level dose above 1e-08" in text and "3 runs without a level dose above 1e-08" in text
    assert "4.07e-14" not in text


def test_the_fits_crossing_and_its_interval_are_printed_as_kls_in_order():
    """Failures rising with KL over 10^-3 .. 10: the crossing inside the range, no extrapolation note; the
    interval's ends are 10 ** Fieller's ends, low first."""
    cells = [(0.001, [FLAT] * 4), (0.01, [DEGRADED] + [FLAT] * 3), (0.1, [DEGRADED] * 2 + [FLAT] * 2),
             (1.0, [COLLAPSED] * 3 + [FLAT]), (10.0, [COLLAPSED] * 4)]
    found = boundaries(outcomes(cells))[0]
    center, low, high = found.fit.crossing()
    assert -3 < low < center < high < 1
    text = boundary_sentence(found, ()).text
    assert f"crosses 0.5 at level dose {10 ** center:.3g} per token** (95% Fieller interval [{10 ** low:.3g}, {10 ** high:.3g}]" \
        in text
    assert "extrapolation" not in text and "over 20 runs, 10 degraded or collapsed" in text


def test_a_crossing_past_the_largest_kl_is_an_extrapolation():
    """1 of 4 failed at the two largest of four doses: the slope is not told from 0 and the crossing lies past
    the largest dose; 0, 0, 2 and 5 of 12: the slope is told from 0, the crossing still past it. Neither
    is a boundary; each says the crossing is an extrapolation."""
    cells = [(0.001, [FLAT] * 4), (0.01, [FLAT] * 4), (0.1, [DEGRADED] + [FLAT] * 3), (1.0, [FLAT] * 3 + [DEGRADED])]
    found = boundaries(outcomes(cells))[0]
    assert found.fit.crossing()[0] > 0  # above log10 of the largest KL, 1
    text = boundary_sentence(found, ()).text
    assert "no stability boundary placed" in text and "outside the level doses measured (an extrapolation)" in text
    steep = [(dose, [DEGRADED] * k + [FLAT] * (12 - k)) for dose, k in ((0.1, 0), (0.3, 0), (1.0, 2), (3.0, 5))]
    text = boundary_sentence(boundaries(outcomes(steep))[0], ()).text
    assert text.startswith("**grpo: no stability boundary placed**: the fit crosses 0.5 at level dose 3.45 per token, "
                           "outside the level doses measured (an extrapolation) (95% Fieller interval [1.95, 59.7];")


def test_degraded_runs_without_a_collapse_are_a_boundary_reached():
    text = sentence([(0.01, [FLAT, LEARNED]), (1.0, [DEGRADED, DEGRADED])])
    assert "no stability boundary reached" not in text and "**grpo: 2 of 4 runs degraded or collapsed**" in text


def test_a_three_step_pilot_is_not_judged(tmp_path):
    """A report over a long sweep and a 3-step pilot of the same knob: the pilot's falling reward is too
    short for the gate, so it is not put on the map as degraded; the answer counts it."""
    for lr in (1e-4, 3e-4):
        swept_run(tmp_path, "grpo", 0, {"lr": lr}, {"mismatch/k3_kl": 0.01})
    swept_run(tmp_path, "grpo", 0, {"lr": 1e-3}, {"mismatch/k3_kl": 0.01, "reward/mean": FALLING[::6][:3]},
              steps=3, suite="pilot")
    results = load_results(tmp_path)
    found = stability_map(results)
    assert found is not None and len(found.classes) == 2 and found.too_short == 1
    assert set(found.classes["outcome"]) == {LEARNED}
    text = stability_sentences(found, set())[0].text
    assert "1 finished run too short for the learnability gate" in text


def test_a_reward_that_is_nan_in_every_row_draws_no_curve_and_no_error():
    metrics = pd.DataFrame({"label": ["grpo"] * 3, "seed": [0] * 3, "step": [1, 2, 3], "reward/mean": [np.nan] * 3,
                            "compute/cum_flops": [1.0, 2.0, 3.0]})
    curves = curve_with_band(metrics, "reward/mean")
    assert curves.empty and list(curves.columns) == ["label", "x", "mean", "low", "high"]
    assert plot_curves(metrics, "reward/mean").get_lines() == []
