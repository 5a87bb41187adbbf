"""Statistics across seeds, after rliable (Agarwal et al. 2021): small aggregate functions, bootstrap
confidence intervals with an explicit `numpy.random.Generator`, area under the curve, EMA smoothing.

Data are `objective -> array[runs]` (one value per seed) unless stated otherwise.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pandas as pd


def iqm(values: np.ndarray) -> float:
    """Interquartile mean: the mean of the middle 50% (rliable's IQM; trims 25% each side)."""
    x = np.sort(np.asarray(values, dtype=float).ravel())
    n = len(x)
    if n == 0:
        return float("nan")
    if n < 4:  # nothing to trim
        return float(x.mean())
    lo, hi = int(np.floor(0.25 * n)), int(np.ceil(0.75 * n))
    return float(x[lo:hi].mean())


def mean(values: np.ndarray) -> float:
    x = np.asarray(values, dtype=float).ravel()
    return float(x.mean()) if len(x) else float("nan")


def bootstrap_ci(
    values: np.ndarray, statistic: Callable[[np.ndarray], float], rng: np.random.Generator,
    reps: int = 2000, level: float = 0.95,
) -> tuple[float, float]:
    """Percentile bootstrap CI of `statistic` over runs (resampling seeds with replacement)."""
    x = np.asarray(values, dtype=float).ravel()
    if len(x) == 0:
        return float("nan"), float("nan")
    if len(x) == 1:
        return float(x[0]), float(x[0])
    idx = rng.integers(0, len(x), size=(reps, len(x)))
    stats = np.array([statistic(x[i]) for i in idx])
    alpha = (1.0 - level) / 2.0
    return float(np.quantile(stats, alpha)), float(np.quantile(stats, 1.0 - alpha))


def stratified_bootstrap_ci(
    scores: dict[str, np.ndarray], statistic: Callable[[np.ndarray], float], rng: np.random.Generator,
    reps: int = 2000, level: float = 0.95,
) -> dict[str, tuple[float, float]]:
    """CI per objective; `scores[obj]` is [runs] or [runs, tasks] (resampled within each task column)."""
    out = {}
    for name, values in scores.items():
        x = np.asarray(values, dtype=float)
        if x.ndim == 1:
            out[name] = bootstrap_ci(x, statistic, rng, reps, level)
            continue
        runs, tasks = x.shape
        idx = rng.integers(0, runs, size=(reps, runs, tasks))
        stats = np.array([statistic(np.take_along_axis(x, i, axis=0)) for i in idx])
        alpha = (1.0 - level) / 2.0
        out[name] = (float(np.quantile(stats, alpha)), float(np.quantile(stats, 1 - alpha)))
    return out


def ema(values: pd.Series | np.ndarray, alpha: float = 0.2) -> np.ndarray:
    """Exponential moving average (bias-corrected, so the first point is the first value)."""
    x = np.asarray(values, dtype=float)
    out = np.empty_like(x)
    acc, weight = 0.0, 0.0
    for i, v in enumerate(x):
        acc = (1 - alpha) * acc + alpha * v
        weight = (1 - alpha) * weight + alpha
        out[i] = acc / weight
    return out


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


def final_value(frame: pd.DataFrame, column: str, last_fraction: float = 0.1) -> float:
    """Mean of `column` over the last `last_fraction` of a run's steps (at least one step)."""
    n = max(1, int(np.ceil(len(frame) * last_fraction)))
    return float(frame[column].tail(n).mean())


def per_run(metrics: pd.DataFrame, fn: Callable[[pd.DataFrame], float]) -> dict[str, np.ndarray]:
    """`objective label -> array over seeds` of `fn(run's metrics)`."""
    out: dict[str, list[float]] = {}
    for (label, _seed), frame in metrics.groupby(["label", "seed"], sort=False):
        out.setdefault(label, []).append(fn(frame.sort_values("step")))
    return {k: np.array(v) for k, v in out.items()}
