"""The stability map's dose axis (analysis.evidence.dose): a level's dose is its first steps' KL pooled
over every run there, so a run that fails later cannot move it; the per-response dose is the sum of the
response's token k3; failure rates are bounded per level by the exact interval, never pooled. Every
expected number is worked out by hand in its test."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
import torch
from scipy import optimize

from analysis.data.load import load_results
from analysis.evidence.dose import DOSE_STEPS, first_steps, level_bounds, level_doses, with_doses
from analysis.evidence.stability import arm_fit, failed, kl_axis, run_classes
from gspo_bench.rollout.mismatch import logprob_mismatch
from tests.helpers.stability import swept_run

K3_LN2 = 1.0 - math.log(2.0)  # k3 at r = 2: r - 1 - log r


def steps(label: str, k3: list[float], length: float, suite: str = "s", seed: int = 0) -> pd.DataFrame:
    """One run's metrics rows: its k3 per step and one mean response length throughout."""
    return pd.DataFrame({"suite": suite, "label": label, "seed": seed, "step": np.arange(1, len(k3) + 1),
                         "mismatch/k3_kl": k3, "response/len_mean": length})


LEVELS = pd.DataFrame({"suite": ["s", "s", "s"], "label": ["a", "b", "c"], "seed": [0, 0, 0],
                       "cell": ["noise=1", "noise=1", "noise=3"]})


def test_a_level_dose_is_the_median_of_its_runs_first_steps_pooled():
    """noise=1: a's first five k3 0.1..0.5 (length 4), b's 0.6..1.0 (length 10): pooled median
    (0.5 + 0.6) / 2 = 0.55; per response a 0.4..2.0, b 6..10: (2.0 + 6.0) / 2 = 4.0. noise=3: c alone."""
    assert DOSE_STEPS == 5
    metrics = pd.concat([steps("a", [0.1, 0.2, 0.3, 0.4, 0.5, 5, 5, 5], 4), steps("b", [0.6, 0.7, 0.8, 0.9, 1.0], 10),
                         steps("c", [2.0] * 6, 3)])
    doses = level_doses(first_steps(metrics), LEVELS).set_index("cell")
    assert doses.loc["noise=1", "dose"] == pytest.approx(0.55)
    assert doses.loc["noise=1", "dose_response"] == pytest.approx(4.0)
    assert doses.loc["noise=1", "dose_steps"] == 10
    assert doses.loc["noise=3", "dose"] == pytest.approx(2.0)
    assert doses.loc["noise=3", "dose_response"] == pytest.approx(6.0)


def test_a_run_that_fails_later_does_not_move_its_levels_dose():
    """Run a's KL from step 6 on grows a thousandfold (its run median moves from 0.5 to 500): the
    level's dose stays 0.55."""
    calm = pd.concat([steps("a", [0.1, 0.2, 0.3, 0.4, 0.5] + [0.5] * 10, 4), steps("b", [0.6, 0.7, 0.8, 0.9, 1.0], 10)])
    failing = pd.concat([steps("a", [0.1, 0.2, 0.3, 0.4, 0.5] + [500.0] * 10, 4),
                         steps("b", [0.6, 0.7, 0.8, 0.9, 1.0], 10)])
    for metrics in (calm, failing):
        doses = level_doses(first_steps(metrics), LEVELS).set_index("cell")
        assert doses.loc["noise=1", "dose"] == pytest.approx(0.55)


def test_a_lag_levels_dose_is_measured_from_the_first_step_at_its_lag():
    """A lag-3 run trains steps 1-3 at lags 0, 1, 2 (k3 0.01 each), then at lag 3 (k3 1..6): its window is steps
    4-8, k3 1..5, median 3 (its warm-up would give 0.01). A uniform lag's run reaches its largest lag (2) at
    step 3: its window is steps 3-7 whatever their lags, median of 0.3, 0.4, 0.5, 0.6, 0.7 = 0.5. A run without
    the column keeps its first five."""
    fixed = steps("a", [0.01, 0.01, 0.01, 1, 2, 3, 4, 5, 6], 1).assign(**{"lag/max": [0, 1, 2, 3, 3, 3, 3, 3, 3]})
    uniform = steps("b", [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8], 1).assign(**{"lag/max": [0, 1, 2, 0, 1, 2, 0, 1]})
    levels = pd.DataFrame({"suite": "s", "label": ["a", "b"], "seed": 0, "cell": ["lag=3", "lag=u2"]})
    doses = level_doses(first_steps(pd.concat([fixed, uniform])), levels).set_index("cell")
    assert doses.loc["lag=3", "dose"] == pytest.approx(3.0) and doses.loc["lag=3", "dose_steps"] == 5
    assert doses.loc["lag=u2", "dose"] == pytest.approx(0.5)
    assert first_steps(fixed.drop(columns="lag/max"))["step"].tolist() == [1, 2, 3, 4, 5]


def test_the_per_response_dose_is_the_sum_of_the_responses_token_k3():
    """Two responses, log r = ln 2 (k3 = 1 - ln 2) or 0 per token: the first [ln2, 0] sums to
    1 - ln 2, the second [ln2, ln2, ln2, 0] to 3 (1 - ln 2); their mean 2 (1 - ln 2). The step's
    `mismatch/k3_kl` (4 (1 - ln 2) / 6 tokens) x its mean length (3) gives it exactly."""
    ln2 = math.log(2.0)
    log_r = torch.tensor([[ln2, 0.0, 0.0, 0.0], [ln2, ln2, ln2, 0.0]], dtype=torch.float64)
    mask = torch.tensor([[1, 1, 0, 0], [1, 1, 1, 1]], dtype=torch.bool)
    k3 = float(logprob_mismatch(log_r, torch.zeros_like(log_r), mask)["mismatch/k3_kl"])
    assert k3 == pytest.approx(4 * K3_LN2 / 6)
    row = first_steps(steps("a", [k3], float(mask.sum(-1).double().mean())))
    assert float(row["per_response"].iloc[0]) == pytest.approx(2 * K3_LN2)


def clopper_pearson_high(failures: int, runs: int) -> float:
    """The upper end by its definition: the rate p at which P(X <= failures | p) = 0.025."""
    def tail(p: float) -> float:
        return sum(math.comb(runs, i) * p**i * (1 - p) ** (runs - i) for i in range(failures + 1)) - 0.025
    return float(optimize.brentq(tail, 1e-9, 1 - 1e-9))


def test_failure_rates_are_bounded_per_level_never_pooled():
    """GRPO: 0 of 6 failed at noise=1, 3 of 3 at noise=3. Per level: 0/6 gives [0, 1 - 0.025^(1/6)]
    and the one-sided bound 1 - 0.05^(1/6); 3/3 gives [0.025^(1/3), 1]. Pooled (3/9) is never a row."""
    outcomes = pd.DataFrame({"suite": "s", "arm": "grpo", "cell": ["noise=1"] * 6 + ["noise=3"] * 3,
                             "outcome": ["learned"] * 6 + ["collapsed"] * 3, "dose": [0.1] * 6 + [2.0] * 3})
    bounds = level_bounds(outcomes, failed(outcomes)).set_index("cell")
    assert list(bounds.index) == ["noise=1", "noise=3"]
    assert bounds.loc["noise=1", ["runs", "failures"]].tolist() == [6, 0]
    assert bounds.loc["noise=1", "low"] == pytest.approx(0.0)
    assert bounds.loc["noise=1", "high"] == pytest.approx(1 - 0.025 ** (1 / 6))  # 0.459
    assert bounds.loc["noise=1", "bound"] == pytest.approx(1 - 0.05 ** (1 / 6))  # 0.393
    assert bounds.loc["noise=3", "low"] == pytest.approx(0.025 ** (1 / 3))  # 0.292
    assert bounds.loc["noise=3", "high"] == pytest.approx(1.0)
    assert math.isnan(bounds.loc["noise=3", "bound"])
    assert bounds.loc["noise=3", "dose"] == 2.0


def test_one_failure_in_four_has_the_exact_interval():
    """1 of 4: the low end 1 - 0.975^(1/4) (P(X >= 1 | p) = 0.025), the high end where P(X <= 1) = 0.025."""
    outcomes = pd.DataFrame({"suite": "s", "arm": "grpo", "cell": "x", "outcome": ["degraded"] + ["flat"] * 3})
    row = level_bounds(outcomes, failed(outcomes)).iloc[0]
    assert row["low"] == pytest.approx(1 - 0.975 ** 0.25)
    assert row["high"] == pytest.approx(clopper_pearson_high(1, 4), rel=1e-6)


def test_the_fit_places_runs_at_their_levels_dose_when_asked():
    """Run-median KL and dose differ per run: the dose axis puts each run at log10 of its level's dose.
    One failure of two at each dose: the maximum-likelihood fit is P = 1/2 everywhere (intercept and
    slope 0), which the runs' own KLs (failures at 0.9 and 8) would not give."""
    outcomes = pd.DataFrame({"kl": [0.2, 0.9, 3.0, 8.0], "dose": [0.1, 0.1, 1.0, 1.0],
                             "outcome": ["learned", "degraded", "learned", "collapsed"], "cell": ["a", "a", "b", "b"]})
    assert kl_axis(outcomes, "dose")["log_kl"].tolist() == pytest.approx([-1, -1, 0, 0])
    assert kl_axis(outcomes, "kl")["log_kl"].tolist() == pytest.approx(np.log10([0.2, 0.9, 3.0, 8.0]))
    fit = arm_fit(outcomes, "dose")
    assert not isinstance(fit, str)
    assert (fit.intercept, fit.slope) == pytest.approx((0.0, 0.0), abs=1e-9)


def test_the_outcome_table_carries_each_levels_dose(tmp_path):
    """Two runs at noise=1 whose first five k3 are 0.1 and 0.3 (dose 0.2) but whose later steps differ
    (run medians 0.1 and 4): both rows carry dose 0.2; with response length 5 per response 1.0."""
    for seed, later in ((0, 0.1), (1, 4.0)):
        k3 = [0.1 if seed == 0 else 0.3] * 5 + [later] * 15
        swept_run(tmp_path, "grpo", seed, {"router_noise": 1.0},
                  columns={"mismatch/k3_kl": k3, "response/len_mean": 5.0})
    outcomes = run_classes(load_results(tmp_path / "synth"))
    assert outcomes["dose"].tolist() == pytest.approx([0.2, 0.2])
    assert outcomes["dose_response"].tolist() == pytest.approx([1.0, 1.0])
    assert sorted(outcomes["kl"].tolist()) == pytest.approx([0.1, 4.0])
    assert with_doses(outcomes.iloc[:0], pd.DataFrame()).empty
