"""The lag x learning-rate law read off a grid of runs (issue #59 item 5; experiments/lag/README.md, "The grid's
reading, in detail"): arXiv 2607.01083 bounds a lagged update's bias by lag x lr, which predicts a failure
boundary on lag x lr = const, a line of slope -1 in (log lag, log lr).

- **Off the law**: a treatment's learning rate at which at least `OFF_LAW_FAILED` of its lag-0 runs failed (its
  failure is not the lag's); its cells leave the fit.
- **The fit**: per treatment, logit P(fail) = a + b log lag + c log lr by maximum likelihood over the runs at
  lags > 0 on the law; the boundary P = 0.5 is b log lag + c log lr = -a, of slope -b/c in (log lag, log lr),
  with Fieller's interval. No slope where the outcomes are separated (no maximum-likelihood fit exists).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from analysis.evidence.stability import FAILED
from analysis.stats.logistic import fieller_ratio, fit_logistic_design

OFF_LAW_FAILED = 2  # of a learning rate's lag-0 runs failed: off the law (of 4 seeds in the grid: half)
LAW_SLOPE = -1.0  # the constant-product line's slope in (log lag, log lr)


def grid_runs(classes: pd.DataFrame) -> pd.DataFrame:
    """One row per judged run of the grid's classes (analysis.evidence.stability.class_rows): arm, lr, lag, seed,
    failed (degraded or collapsed)."""
    return pd.DataFrame({"arm": classes["arm"].to_numpy(), "lr": classes["sweep/lr"].astype(float).to_numpy(),
                         "lag": classes["sweep/lag"].astype(int).to_numpy(), "seed": classes["seed"].to_numpy(),
                         "failed": classes["outcome"].isin(FAILED).to_numpy()})


def cells(runs: pd.DataFrame) -> pd.DataFrame:
    """Per arm, lr and lag: runs, failed, and `off_law` (the arm's lag-0 runs at that lr failed on at least
    OFF_LAW_FAILED seeds)."""
    table = runs.groupby(["arm", "lr", "lag"])["failed"].agg(runs="count", failed="sum").reset_index()
    at_zero = table[table["lag"] == 0].set_index(["arm", "lr"])["failed"]
    off = {key for key, failed in at_zero.items() if failed >= OFF_LAW_FAILED}
    table["off_law"] = [(arm, lr) in off for arm, lr in zip(table["arm"], table["lr"], strict=True)]
    return table


@dataclass(frozen=True)
class LawFit:
    """One treatment's fit: the runs it rests on, its coefficients (a, b on log lag, c on log lr) and the
    boundary's slope -b/c with its interval; `why` where there is no fit (then the numbers are NaN)."""

    arm: str
    runs: int
    failed: int
    learning_rates: tuple[float, ...]  # on the law
    coef: tuple[float, float, float]
    slope: float
    low: float
    high: float
    why: str = ""

    @property
    def consistent(self) -> bool | None:
        """Whether the slope's interval holds the law's -1 (None without a fit)."""
        return None if self.why else bool(self.low <= LAW_SLOPE <= self.high)

    def boundary_lr(self, lag: np.ndarray) -> np.ndarray:
        """The fitted boundary's lr at `lag`: log lr = -(a + b log lag) / c."""
        a, b, c = self.coef
        return np.exp(-(a + b * np.log(np.asarray(lag, dtype=float))) / c)


def law_fit(runs: pd.DataFrame, arm: str, table: pd.DataFrame) -> LawFit:
    """`arm`'s fit over its runs at lags > 0 at the learning rates `table` (cells) keeps on the law."""
    keep = table[(table["arm"] == arm) & ~table["off_law"]]
    on_law = tuple(sorted(keep["lr"].unique()))
    own = runs[(runs["arm"] == arm) & (runs["lag"] > 0) & runs["lr"].isin(on_law)]
    failed, nan = int(own["failed"].sum()), math.nan
    why = f"{len(on_law)} learning rate(s) on the law: no slope in lr" if len(on_law) < 2 else ""
    if not why:
        design = np.column_stack([np.ones(len(own)), np.log(own["lag"].to_numpy(float)),
                                  np.log(own["lr"].to_numpy(float))])
        try:
            fit = fit_logistic_design(design, own["failed"].to_numpy())
        except ValueError as error:
            why = str(error)
    if why:
        return LawFit(arm, len(own), failed, on_law, (nan, nan, nan), nan, nan, nan, why)
    a, b, c = (float(v) for v in fit.coef)
    slope, low, high = fieller_ratio(-b, c, fit.cov[1, 1], -fit.cov[1, 2], fit.cov[2, 2])
    return LawFit(arm, len(own), failed, on_law, (a, b, c), slope, low, high)


def law_fits(runs: pd.DataFrame) -> list[LawFit]:
    """Every arm's fit, in the runs' order of arms."""
    table = cells(runs)
    return [law_fit(runs, arm, table) for arm in dict.fromkeys(runs["arm"])]
