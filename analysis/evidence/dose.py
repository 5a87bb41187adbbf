"""The stability map's dose axis: a sweep level's mismatch measured where the policies have not yet
parted, so that no run's outcome can move it.

A run's median `mismatch/k3_kl` over all its steps grows as the run fails (a collapsing policy drifts
from the engine's), so failure fitted on it mixes cause and effect. The **dose** of a level (a suite's
sweep point, the map's `cell`) is instead the median, over the first DOSE_STEPS steps of every judged
run at that level pooled across arms, of the step's engine-vs-trainer KL:

- **per token** (`dose`): the step's `mismatch/k3_kl`, the mean k3 over the batch's response tokens;
- **per response** (`dose_response`): the step's mean over responses of the k3 summed over the response,
  which is `mismatch/k3_kl` x `response/len_mean` exactly (both are over the same response mask:
  sum k3 / tokens x tokens / responses = sum k3 / responses). Published mismatch figures (k3 ~1e-3 per
  token over ~10^4 tokens) are compared with this one only.

A run's later steps never enter its level's dose, so a run that fails later leaves it where it was.
Failure rates are bounded per level (`level_bounds`, Clopper-Pearson), never pooled across levels.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from scipy import stats

from analysis.evidence.lag import at_full_lag
from analysis.stats.library import ALPHA
from analysis.stats.logistic import zero_event_bound

DOSE_STEPS = 5  # the first steps of a run, before its policy has parted from where it started
KL_COLUMN, LENGTH_COLUMN = "mismatch/k3_kl", "response/len_mean"
DOSE, DOSE_RESPONSE = "dose", "dose_response"  # the outcome table's columns
RUN_KEY = ["suite", "label", "seed"]
LEVEL_KEY = ["suite", "cell"]


def first_steps(metrics: pd.DataFrame, n: int = DOSE_STEPS) -> pd.DataFrame:
    """Per run (suite, label, seed) its first `n` steps by step number past its lag's warm-up, with
    `per_token` (the step's k3) and `per_response` (k3 x mean response length): one row per step. Under
    `rollout.lag` the first steps train on the starting policy's batches at lags 0, 1, ...: a run's window
    starts at the first step at its largest lag (`analysis.evidence.lag.at_full_lag`: step S + 1 at a fixed
    lag S; under a uniform lag the steps from there on mix its lags as the rest of the run does), so a lag
    level's dose is measured at that lag (the warm-up's steps would give every level the dose of the
    smallest lags)."""
    if not len(metrics) or KL_COLUMN not in metrics:
        return pd.DataFrame(columns=[*RUN_KEY, "step", "per_token", "per_response"])
    ordered = at_full_lag(metrics.sort_values([*RUN_KEY, "step"], kind="stable"))
    first = ordered.groupby(RUN_KEY, sort=False).head(n)
    per_token = first[KL_COLUMN].to_numpy(dtype=float)
    length = first[LENGTH_COLUMN].to_numpy(dtype=float) if LENGTH_COLUMN in first else np.full(len(first), np.nan)
    return first[[*RUN_KEY, "step"]].assign(per_token=per_token, per_response=per_token * length)


def level_doses(first: pd.DataFrame, levels: pd.DataFrame) -> pd.DataFrame:
    """Per level (suite, cell): `dose` and `dose_response`, the medians over the pooled finite first-step
    values of every run `levels` (rows suite, label, seed, cell) places there: the steps that exist (a run
    stopped within the window gives the steps it ran) and measured a finite KL (a step whose policy had
    already collapsed to non-finite values measures none); `dose_steps`, how many values the per-token
    dose pooled, `dose_runs`, how many runs gave one, and `level_runs`, the runs at the level. A level
    where no run measured a finite first-step KL has no dose (NaN): it is unmeasured, not float rounding.
    `first`: first_steps' rows."""
    placed = levels[[*RUN_KEY, "cell"]].drop_duplicates(RUN_KEY)
    pooled = first.merge(placed, on=RUN_KEY, how="inner")

    def finite_median(values: pd.Series) -> float:
        kept = values.to_numpy(dtype=float)
        kept = kept[np.isfinite(kept)]
        return float(np.median(kept)) if len(kept) else float("nan")

    def finite(values: pd.Series) -> int:
        return int(np.isfinite(values.to_numpy(dtype=float)).sum())

    measured = pooled[np.isfinite(pooled["per_token"].to_numpy(dtype=float))]
    doses = pooled.groupby(LEVEL_KEY, sort=False).agg(
        **{DOSE: ("per_token", finite_median), DOSE_RESPONSE: ("per_response", finite_median),
           "dose_steps": ("per_token", finite)}).reset_index()
    runs = measured.drop_duplicates(RUN_KEY).groupby(LEVEL_KEY, sort=False).size().rename("dose_runs").reset_index()
    every = placed.groupby(LEVEL_KEY, sort=False).size().rename("level_runs").reset_index()
    found = every.merge(doses, on=LEVEL_KEY, how="left").merge(runs, on=LEVEL_KEY, how="left")
    return found.fillna({"dose_steps": 0, "dose_runs": 0}).astype({"dose_steps": int, "dose_runs": int})


def with_doses(outcomes: pd.DataFrame, metrics: pd.DataFrame, n: int = DOSE_STEPS,
               pooled: pd.DataFrame | None = None) -> pd.DataFrame:
    """`outcomes` (rows of the map's outcome table: suite, label, seed, cell, ...) with its level's
    `dose`, `dose_response`, `dose_steps`, `dose_runs` and `level_runs` (level_doses) on every row. `pooled`: the rows whose runs' first steps
    make the doses (the runs the map judges: a run it leaves off must not move its level's dose);
    every row of `outcomes` where not given."""
    if not len(outcomes):
        return outcomes
    doses = level_doses(first_steps(metrics, n), outcomes if pooled is None else pooled)
    return outcomes.merge(doses, on=LEVEL_KEY, how="left")


def failure_interval(failures: int, runs: int) -> tuple[float, float]:
    """The exact (Clopper-Pearson) two-sided 1 - ALPHA interval of a failure rate."""
    ci = stats.binomtest(failures, runs).proportion_ci(confidence_level=1 - ALPHA, method="exact")
    return float(ci.low), float(ci.high)


def level_bounds(outcomes: pd.DataFrame, failed: pd.Series) -> pd.DataFrame:
    """Per arm and level (suite, arm, cell): runs, failures, the failure rate with its exact
    two-sided interval (`low`, `high`), the one-sided zero-failure bound (`bound`, NaN where a run
    failed) and the level's doses. One row per level: runs of different levels are never pooled.
    `failed`: per row of `outcomes`, whether the run failed."""
    rows = []
    keyed = outcomes.assign(failed=failed.to_numpy(dtype=bool))
    for (suite, arm, cell), frame in keyed.groupby(["suite", "arm", "cell"], sort=False):
        runs, failures = len(frame), int(frame["failed"].sum())
        low, high = failure_interval(failures, runs)
        rows.append({"suite": suite, "arm": arm, "cell": cell, "runs": runs, "failures": failures,
                     "rate": failures / runs, "low": low, "high": high,
                     "bound": zero_event_bound(runs) if failures == 0 else float("nan"),
                     DOSE: frame[DOSE].iloc[0] if DOSE in frame else float("nan"),
                     DOSE_RESPONSE: frame[DOSE_RESPONSE].iloc[0] if DOSE_RESPONSE in frame else float("nan")})
    return pd.DataFrame(rows)
