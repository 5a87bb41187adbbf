"""The sampler against the learner under `rollout.lag` (`gspo_bench.train.lag`): per run, how far apart the
policy that sampled each batch and the one that learned from it were, past the lag's warm-up, against its
lag. The GSPO paper's case for Routing Replay rests on ~10% of activated experts changing per update on its
MoE (PAPER_ROUTE_SHARE); on a small model one update changes ~1%, and a lag of S updates accumulates S of
them: `route_crossing` names the lag at which the share of activated experts that differ reaches the
paper's.

From the run folders alone: the steps' `lag/max`, `lag/route_diff`, `lag/k3_response` and `lag/ess`."""

from __future__ import annotations

import numpy as np
import pandas as pd

PAPER_ROUTE_SHARE = 0.10  # activated experts that change per update on the GSPO paper's MoE (its Figure 3 claim)
LAG, ROUTES, K3, ESS = "lag/max", "lag/route_diff", "lag/k3_response", "lag/ess"
RUN = ["suite", "label", "seed"]


def lagged(metrics: pd.DataFrame) -> bool:
    """Whether any run trained on lagged batches (a step whose sampler was an update or more old)."""
    return LAG in metrics and bool((metrics[LAG].fillna(0.0) > 0).any())


def at_full_lag(metrics: pd.DataFrame) -> pd.DataFrame:
    """Each run's steps from the first at its largest lag (`lag/max`'s maximum over the run: step S + 1 at a fixed
    lag S); the warm-up's steps, at lags 0, 1, ..., are left out. A run without the column keeps every step."""
    if LAG not in metrics:
        return metrics
    lag = metrics[LAG].fillna(0.0)
    keys = [metrics[k] for k in RUN]
    reached = (lag >= lag.groupby(keys, sort=False).transform("max")).groupby(keys, sort=False).cummax()
    return metrics[reached.to_numpy()]


def lag_runs(metrics: pd.DataFrame) -> pd.DataFrame:
    """One row per run: suite, label, arm, seed, `lag` (its largest, in updates) and the medians over its steps
    at that lag of `route_diff`, `k3_response` and `ess` (NaN where the run logged none)."""
    steps = at_full_lag(metrics.sort_values([*RUN, "step"], kind="stable"))
    arm = steps["arm"] if "arm" in steps else steps["label"]
    steps = steps.assign(arm=arm)
    named = {"lag": (LAG, "max")} | {name: (column, "median") for name, column in
                                     (("route_diff", ROUTES), ("k3_response", K3), ("ess", ESS)) if column in steps}
    runs = steps.groupby([*RUN, "arm"], sort=False).agg(**named).reset_index()
    for name in ("route_diff", "k3_response", "ess"):
        if name not in runs:
            runs[name] = np.nan
    return runs


def route_curve(runs: pd.DataFrame) -> pd.DataFrame:
    """Per arm and lag: the median over seeds of the runs' `route_diff` (lag_runs' rows), and how many runs."""
    return runs.groupby(["arm", "lag"], sort=True).agg(route_diff=("route_diff", "median"),
                                                       runs=("route_diff", "count")).reset_index()


def route_crossing(curve: pd.Series, share: float = PAPER_ROUTE_SHARE) -> float | None:
    """The lag at which `curve` (a share by lag) first reaches `share`, linear in log lag between the two lags
    around it (the first lag above 0 itself where it is already there); None where no lag reaches it."""
    levels = curve[curve.index > 0].dropna().sort_index()
    above = np.flatnonzero(levels.to_numpy() >= share)
    if not len(above):
        return None
    i = int(above[0])
    if i == 0:
        return float(levels.index[0])
    x0, x1 = np.log(float(levels.index[i - 1])), np.log(float(levels.index[i]))
    y0, y1 = float(levels.iloc[i - 1]), float(levels.iloc[i])
    return float(np.exp(x0 + (share - y0) * (x1 - x0) / (y1 - y0)))
