"""The sampler against the learner under rollout lag (analysis.evidence.lag): each run read at its full lag,
the warm-up left out; the lag at which experts apart cross the paper's 10%, by hand; the report's lag figure
where runs lagged, and only there."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from analysis.evidence.lag import at_full_lag, lag_runs, lagged, route_crossing, route_curve
from analysis.figures.lag import lag_routes, lag_routes_interactive


def run(label: str, lags: list[int], routes: list[float], seed: int = 0, k3: float = 0.5) -> pd.DataFrame:
    return pd.DataFrame({"suite": "s", "label": f"{label}@lag={max(lags)}", "arm": label, "seed": seed,
                         "step": range(1, len(lags) + 1), "lag/max": [float(v) for v in lags],
                         "lag/route_diff": routes, "lag/k3_response": k3, "lag/ess": 0.9})


def test_a_run_is_read_from_its_first_step_at_its_largest_lag():
    """Lag 3: steps 1-3 train at lags 0, 1, 2 (routes apart 0.9, left out), steps 4-6 at 3 (0.1, 0.2, 0.3):
    median 0.2. A uniform lag reaching 2 at step 3 keeps steps 3 on, whatever their lags. No column: every step."""
    fixed = run("grpo", [0, 1, 2, 3, 3, 3], [0.9, 0.9, 0.9, 0.1, 0.2, 0.3])
    uniform = run("gspo", [0, 1, 2, 0, 1], [0.9, 0.9, 0.1, 0.2, 0.3])
    runs = lag_runs(pd.concat([fixed, uniform])).set_index("arm")
    assert runs.loc["grpo", "lag"] == 3 and runs.loc["grpo", "route_diff"] == pytest.approx(0.2)
    assert runs.loc["gspo", "lag"] == 2 and runs.loc["gspo", "route_diff"] == pytest.approx(0.2)
    assert at_full_lag(fixed)["step"].tolist() == [4, 5, 6]
    assert at_full_lag(fixed.drop(columns="lag/max"))["step"].tolist() == [1, 2, 3, 4, 5, 6]


def test_the_lag_where_experts_apart_cross_ten_percent_by_hand():
    """0.08 at lag 2 and 0.12 at lag 4: 10% lies half-way in log lag, at 2 sqrt(2); already at the first lag
    above 0: that lag; never reached: None. Lag 0 (the synchronous control) never counts."""
    assert route_crossing(pd.Series({0: 0.0, 1: 0.05, 2: 0.08, 4: 0.12})) == pytest.approx(2 * math.sqrt(2))
    assert route_crossing(pd.Series({0: 0.5, 1: 0.11, 2: 0.2})) == 1.0
    assert route_crossing(pd.Series({0: 0.0, 1: 0.02, 8: 0.09})) is None


def test_the_curve_is_the_median_over_seeds_and_the_figure_draws_only_where_runs_lagged():
    metrics = pd.concat([run("grpo", [0, 1, 2, 2], [0, 0, s / 10, s / 10], seed=s) for s in (1, 2, 4)]
                        + [run("grpo", [0, 0, 0], [0, 0, 0], seed=s) for s in (1, 2, 4)])
    curve = route_curve(lag_runs(metrics)).set_index("lag")
    assert curve.loc[2, "route_diff"] == pytest.approx(0.2) and curve.loc[2, "runs"] == 3
    assert curve.loc[0, "route_diff"] == 0.0
    assert lagged(metrics) and not lagged(metrics.assign(**{"lag/max": 0.0})) and not lagged(metrics.drop(columns="lag/max"))
    assert len(lag_routes(lag_runs(metrics)).axes) == 2 and len(lag_routes_interactive(lag_runs(metrics))) == 2


def test_the_reports_reading_names_each_arms_crossing_or_its_largest_share():
    """grpo: 0.08 at lag 2, 0.12 at 4 (seeds' medians): 10% at 2 sqrt(2) = 2.83; sapo never past 0.05 (at lag 4)."""
    from analysis.report.lag_text import crossing_text, lag_table

    metrics = pd.concat([run("grpo", [0, 1, 2, 2], [0, 0, 0.08, 0.08], seed=0), run("grpo", [0, 1, 2, 3, 4, 4],
                         [0, 0, 0, 0, 0.12, 0.12], seed=1), run("sapo", [0, 1, 2, 3, 4], [0, 0, 0, 0, 0.05])])
    runs = lag_runs(metrics)
    text = crossing_text(runs)
    assert "- **grpo**: at lag 2.83" in text and "- **sapo**: not reached; largest 0.05 at lag 4" in text
    table = lag_table(runs)
    assert table[["arm", "lag", "runs"]].values.tolist() == [["grpo", 2, 1], ["grpo", 4, 1], ["sapo", 4, 1]]
