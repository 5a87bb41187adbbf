"""The lag x learning-rate law (analysis.evidence.lag_law) and the fits it rests on (analysis.stats.logistic):
Fieller's ratio interval by hand, the two-variable logistic fit against the one-variable one and under rescaling,
separation found by its linear program, the off-law cells, and the boundary's slope recovered from grids made on
a known law."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from scipy import special

from analysis.evidence.lag_law import cells, law_fit, law_fits
from analysis.figures.lag import lag_lr_law
from analysis.stats.logistic import fieller_ratio, fit_logistic, fit_logistic_design, separated


def test_fieller_ratio_by_hand():
    """Known den exactly (v_den 0, cov 0): theta = num/den -+ z sqrt(v_num)/|den|; den within noise of 0:
    unbounded; the center is num/den."""
    center, low, high = fieller_ratio(2.0, 4.0, 1.0, 0.0, 0.0)
    assert center == 0.5 and low == pytest.approx(0.5 - 1.959964 / 4, abs=1e-6)
    assert high == pytest.approx(0.5 + 1.959964 / 4, abs=1e-6)
    assert fieller_ratio(1.0, 0.5, 0.1, 0.0, 1.0)[1:] == (-math.inf, math.inf)


def test_the_design_fit_is_the_one_variable_fit_and_rescales():
    """With [1, x] it is fit_logistic (coefficients and covariance); x scaled by 10 gives the slope / 10 and
    its variance / 100; a design without an intercept is not centred (its coefficient is the model's)."""
    rng = np.random.default_rng(3)
    x = rng.normal(size=300)
    y = rng.random(300) < special.expit(0.4 + 1.5 * x)
    one, two = fit_logistic(x, y), fit_logistic_design(np.column_stack([np.ones(300), x]), y)
    assert two.coef == pytest.approx([one.intercept, one.slope], rel=1e-8)
    assert two.cov == pytest.approx(one.cov, rel=1e-6)
    scaled = fit_logistic_design(np.column_stack([np.ones(300), 10 * x]), y)
    assert scaled.coef[1] == pytest.approx(one.slope / 10, rel=1e-8)
    assert scaled.cov[1, 1] == pytest.approx(one.cov[1, 1] / 100, rel=1e-6)
    shifted = x + 3.0  # eta = b x' with no intercept: the fit must not move b by centring x'
    alone = fit_logistic_design(shifted[:, None], rng.random(300) < special.expit(0.7 * shifted))
    assert alone.coef[0] == pytest.approx(0.7, abs=0.25)


def test_separation_by_hand():
    """x parts the outcomes (complete), touches at one point (quasi-complete), one outcome alone: separated;
    overlapping outcomes: not, and the fit refuses the separated ones."""
    ones = np.ones(4)
    assert separated(np.column_stack([ones, [1, 2, 3, 4]]), np.array([0, 0, 1, 1], bool))
    assert separated(np.column_stack([np.ones(5), [1, 2, 2, 3, 4]]), np.array([0, 0, 1, 1, 1], bool))
    assert separated(np.column_stack([ones, [1, 2, 3, 4]]), np.ones(4, bool))
    assert not separated(np.column_stack([ones, [1, 2, 3, 4]]), np.array([0, 1, 0, 1], bool))
    with pytest.raises(ValueError, match="separated"):
        fit_logistic_design(np.column_stack([ones, [1, 2, 3, 4]]), np.array([0, 0, 1, 1], bool))


def grid(slope_lr: float, arm: str = "grpo", per_cell: int = 200, lag0_failed: int = 0) -> pd.DataFrame:
    """A grid whose cells fail at the share expit(2 (log lag + slope_lr log(lr / 3e-4))), made exact per cell
    (round(share x per_cell) of its runs failed), lags 2-16 and lr 1e-4 .. 1e-3; lag 0 with `lag0_failed`
    failures at lr 1e-3."""
    rows = []
    for lr in (1e-4, 3e-4, 1e-3):
        for lag in (0, 2, 4, 8, 16):
            share = 0.0 if lag == 0 else special.expit(2 * (np.log(lag / 4) + slope_lr * np.log(lr / 3e-4)))
            failed = lag0_failed if (lag == 0 and lr == 1e-3) else round(share * per_cell)
            rows += [{"arm": arm, "lr": lr, "lag": lag, "seed": s, "failed": s < failed} for s in range(per_cell)]
    return pd.DataFrame(rows)


def test_the_law_slope_is_recovered_from_known_grids():
    """On lag x lr = const (slope_lr 1: logit = 2 log(lag lr / const)) the boundary's slope is -1 and its
    interval holds it; on lag x lr^2 = const the slope is -1/2 and the interval leaves -1 out."""
    law = law_fit(grid(1.0), "grpo", cells(grid(1.0)))
    assert law.slope == pytest.approx(-1.0, abs=0.02) and law.consistent
    steeper = law_fit(grid(2.0), "grpo", cells(grid(2.0)))
    assert steeper.slope == pytest.approx(-0.5, abs=0.02) and steeper.consistent is False
    assert law.boundary_lr(np.array([4.0]))[0] == pytest.approx(3e-4, rel=0.05)


def test_off_law_cells_leave_the_fit():
    """A learning rate whose lag-0 runs failed on 2 seeds is off the law (1 failure is not): its cells are
    marked and its runs leave the fit, whose learning rates are then the other two."""
    marked = cells(grid(1.0, per_cell=4, lag0_failed=2))
    assert marked.loc[marked["lr"] == 1e-3, "off_law"].all() and not marked.loc[marked["lr"] < 1e-3, "off_law"].any()
    assert not cells(grid(1.0, per_cell=4, lag0_failed=1))["off_law"].any()
    fit = law_fit(grid(1.0, lag0_failed=2), "grpo", cells(grid(1.0, lag0_failed=2)))
    assert fit.learning_rates == (1e-4, 3e-4) and fit.runs == 2 * 4 * 200


def test_no_fit_is_said_and_the_figure_draws_both():
    """A treatment that never fails has no fit, and says why; the figure draws a panel per treatment, the fitted
    one with its boundary and the constant-product line."""
    held = grid(1.0, arm="naive").assign(failed=False)
    both = pd.concat([grid(1.0), held], ignore_index=True)
    fits = law_fits(both)
    assert [f.arm for f in fits] == ["grpo", "naive"] and "separated" in fits[1].why and fits[1].consistent is None
    figure = lag_lr_law(cells(both), fits)
    assert len(figure.axes[0].lines) == 2 and len(figure.axes[1].lines) == 0
