"""Statistics across seeds, after rliable (Agarwal et al. 2021): small aggregate functions, bootstrap
confidence intervals with an explicit `numpy.random.Generator`, area under the curve, EMA smoothing,
and the one definition of a run's final value that the report and the regression check share.

Data are `objective -> array[runs]` (one value per seed) unless stated otherwise.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pandas as pd
from scipy.stats import trim_mean

# A run's final value is the mean over its last quarter of steps: on CPU-sized runs of 50-100 steps
# of 32-64 responses, fewer steps leave the per-step sampling noise of the reward in the number.
FINAL_FRACTION = 0.25


def iqm(values: np.ndarray, axis: int | None = None) -> float | np.ndarray:
    """Interquartile mean: the mean of the middle 50% (rliable's IQM, scipy's 25% trimmed mean)."""
    x = np.asarray(values, dtype=float)
    if axis is None:
        x = x.ravel()
        return float(trim_mean(x, 0.25)) if len(x) else float("nan")
    return trim_mean(x, 0.25, axis=axis)


def mean(values: np.ndarray, axis: int | None = None) -> float | np.ndarray:
    x = np.asarray(values, dtype=float)
    if axis is None:
        return float(x.mean()) if x.size else float("nan")
    return x.mean(axis=axis)


def bootstrap_ci(values: np.ndarray, rng: np.random.Generator, statistic: Callable = mean, reps: int = 2000,
                 level: float = 0.95) -> tuple:
    """Percentile bootstrap CI of `statistic` over runs: `values` [runs, ...] are resampled along the
    first axis (seeds, with replacement); `statistic(x, axis=...)` must reduce an axis. Returns
    (low, high), floats for [runs] data, arrays of the trailing shape otherwise (e.g. a curve's points).
    One run: its value as both ends."""
    x = np.asarray(values, dtype=float)
    if len(x) == 0:
        return float("nan"), float("nan")
    if len(x) == 1:
        return (float(x[0]), float(x[0])) if x.ndim == 1 else (x[0], x[0])
    resampled = x[rng.integers(0, len(x), size=(reps, len(x)))]  # [reps, runs, ...]
    stats = statistic(resampled, axis=1)  # [reps, ...]
    alpha = (1.0 - level) / 2.0
    low, high = np.quantile(stats, alpha, axis=0), np.quantile(stats, 1.0 - alpha, axis=0)
    return (float(low), float(high)) if x.ndim == 1 else (low, high)


def ema(values: pd.Series | np.ndarray, alpha: float = 0.2) -> np.ndarray:
    """Exponential moving average, bias-corrected so the first point is the first value (pandas'
    `ewm(adjust=True)`)."""
    return pd.Series(np.asarray(values, dtype=float)).ewm(alpha=alpha, adjust=True).mean().to_numpy()


def auc(x: np.ndarray, y: np.ndarray, x_max: float | None = None) -> float:
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
        out.setdefault(label, []).append(fn(frame.sort_values("step")))
    return {k: np.array(v) for k, v in out.items()}
