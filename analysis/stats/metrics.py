"""Point estimates over seeds and over steps (rliable's metrics.py): a run's final and first value,
per-run arrays, the mean and the interquartile mean, the probability of improvement, areas under
curves, smoothing. Intervals and tests are in analysis.stats.library."""

from __future__ import annotations

from collections.abc import Callable
from typing import overload

import numpy as np
import pandas as pd
from numpy.typing import ArrayLike
from scipy import stats
from scipy.stats import trim_mean

# A run's final value is the mean over its last quarter of steps: on CPU-sized runs of 50-100 steps
# of 32-64 responses, fewer steps leave the per-step sampling noise of the reward in the number.
FINAL_FRACTION = 0.25


@overload
def iqm(values: ArrayLike, axis: None = None) -> float: ...


@overload
def iqm(values: ArrayLike, axis: int) -> np.ndarray: ...


def iqm(values: ArrayLike, axis: int | None = None) -> float | np.ndarray:
    """Interquartile mean: the mean of the middle 50% (rliable's IQM, scipy's 25% trimmed mean)."""
    x = np.asarray(values, dtype=float)
    if axis is None:
        x = x.ravel()
        return float(trim_mean(x, 0.25)) if len(x) else float("nan")
    return trim_mean(x, 0.25, axis=axis)


@overload
def mean(values: ArrayLike, axis: None = None) -> float: ...


@overload
def mean(values: ArrayLike, axis: int) -> np.ndarray: ...


def mean(values: ArrayLike, axis: int | None = None) -> float | np.ndarray:
    x = np.asarray(values, dtype=float)
    if axis is None:
        return float(x.mean()) if x.size else float("nan")
    return x.mean(axis=axis)


def probability_of_improvement(x: np.ndarray, y: np.ndarray) -> float:
    """rliable's P(X > Y): over all n m pairs of a run of X and a run of Y, the share where X is higher,
    ties counting one half (the Mann-Whitney U statistic of x, divided by n m)."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if not len(x) or not len(y):
        return float("nan")
    return float(stats.mannwhitneyu(x, y).statistic / (len(x) * len(y)))


def ema(values: pd.Series | np.ndarray, alpha: float = 0.2) -> np.ndarray:
    """Exponential moving average, bias-corrected so the first point is the first value (pandas'
    `ewm(adjust=True)`)."""
    return pd.Series(np.asarray(values, dtype=float)).ewm(alpha=alpha, adjust=True).mean().to_numpy()


def auc(x: ArrayLike, y: ArrayLike, x_max: float | None = None) -> float:
    """Area under y(x) by the trapezoid rule from x=0 (y held at its first value), divided by the
    x range: the mean of y over compute, comparable across runs with the same budget."""
    x = np.asarray(x, dtype=float)
    y = np.asarray(y, dtype=float)
    if len(x) == 0:
        return float("nan")
    xs = np.concatenate([[0.0], x])
    ys = np.concatenate([[y[0]], y])
    end = x_max if x_max is not None else xs[-1]
    keep = xs <= end
    xs, ys = xs[keep], ys[keep]
    if end <= 0:
        return float("nan")
    return float(np.trapezoid(ys, xs) / xs[-1]) if xs[-1] > 0 else float(ys[0])


def final_value(frame: pd.DataFrame, column: str) -> float:
    """A run's final value of `column`: the mean over its last FINAL_FRACTION of steps (at least one)."""
    n = max(1, int(np.ceil(len(frame) * FINAL_FRACTION)))
    return float(frame.sort_values("step")[column].tail(n).mean())


def first_value(frame: pd.DataFrame, column: str) -> float:
    """The mean of `column` over a run's first FINAL_FRACTION of steps (where `final_value` starts from)."""
    n = max(1, int(np.ceil(len(frame) * FINAL_FRACTION)))
    return float(frame.sort_values("step")[column].head(n).mean())


def per_run(metrics: pd.DataFrame, fn: Callable[[pd.DataFrame], float]) -> dict[str, np.ndarray]:
    """`objective label -> array over seeds` of `fn(run's metrics)`."""
    out: dict[str, list[float]] = {}
    for (label, _seed), frame in metrics.groupby(["label", "seed"], sort=False):
        out.setdefault(str(label), []).append(fn(frame.sort_values("step")))
    return {k: np.array(v) for k, v in out.items()}
