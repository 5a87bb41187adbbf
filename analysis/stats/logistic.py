"""A logistic fit of a failure's probability against one variable, by maximum likelihood, with its Wald
band and Fieller's interval for where it crosses 0.5; and the exact bound on a rate after no events.
The stability map (analysis.evidence.stability) fits P(failure) against log10 KL with it."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from scipy import special, stats

from analysis.stats.library import LEVEL

NEWTON_STEPS = 100  # the logistic fit's damped Newton steps (it needs under 20 on every pattern tried)
NEWTON_TOLERANCE = 1e-16  # the Newton decrement that ends the fit (the loss is then at its minimum to rounding)


def zero_event_bound(n: int, level: float = LEVEL) -> float:
    """The exact one-sided Clopper-Pearson upper bound on a rate after 0 events in n trials:
    1 - (1 - level)^(1/n) (0 of 60 at 95%: 4.87%)."""
    if n < 1:
        raise ValueError(f"zero_event_bound: n must be at least 1, got {n}")
    return 1.0 - (1.0 - level) ** (1.0 / n)


def no_fit_reason(x: np.ndarray, y: np.ndarray) -> str | None:
    """Why P(y) against x has no maximum-likelihood logistic fit, or None when it has one."""
    if len(x) == 0:
        return "no run measured a positive mismatch KL"
    if y.all() or not y.any():
        return f"every run {'failed' if y.all() else 'held'}: only one outcome"
    if len(np.unique(x)) < 2:
        return "every run measured the same KL"
    held, fell = x[~y], x[y]
    if held.max() <= fell.min() or fell.max() <= held.min():
        return "the outcomes are separated by KL (the maximum-likelihood slope is infinite)"
    return None


@dataclass(frozen=True)
class LogisticFit:
    """P(y) = expit(intercept + slope x), by maximum likelihood; `cov` the inverse observed information."""

    intercept: float
    slope: float
    cov: np.ndarray  # [2, 2]
    n: int
    events: int

    def logit_band(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(eta, its Wald standard error) at `x`: eta = b0 + b1 x, se^2 = [1 x] cov [1 x]^T."""
        x = np.asarray(x, dtype=float)
        eta = self.intercept + self.slope * x
        var = self.cov[0, 0] + 2 * self.cov[0, 1] * x + self.cov[1, 1] * x ** 2
        return eta, np.sqrt(var)

    def curve(self, x: np.ndarray, level: float = LEVEL) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(p, low, high) at `x`: the fitted probability and its pointwise Wald band, expit(eta -+ z se)."""
        z = stats.norm.ppf(0.5 + level / 2)
        eta, se = self.logit_band(x)
        return special.expit(eta), special.expit(eta - z * se), special.expit(eta + z * se)

    def crossing(self, level: float = LEVEL) -> tuple[float, float, float]:
        """(x where p = 0.5, low, high): -b0/b1 and Fieller's interval, the x whose band contains 0.5,
        i.e. (b0 + b1 x)^2 <= z^2 se(x)^2: between the two roots of that quadratic where b1^2 > z^2 var(b1),
        else unbounded, (-inf, +inf) (the slope is not different from 0 at 1 - level). A slope of exactly
        0 (the same failure rate at every KL) crosses nowhere: the center is NaN."""
        z2 = stats.norm.ppf(0.5 + level / 2) ** 2
        b0, b1, v = self.intercept, self.slope, self.cov
        a, b, c = b1 ** 2 - z2 * v[1, 1], 2 * (b0 * b1 - z2 * v[0, 1]), b0 ** 2 - z2 * v[0, 0]
        center = -b0 / b1 if b1 != 0 else math.nan
        if a <= 0:
            return center, -math.inf, math.inf
        root = math.sqrt(max(b * b - 4 * a * c, 0.0))  # >= 0 up to rounding: the center is in the set
        return center, (-b - root) / (2 * a), (-b + root) / (2 * a)


def fit_logistic(x: np.ndarray, y: np.ndarray) -> LogisticFit:
    """The maximum-likelihood logistic fit of y (booleans) on x (damped Newton with the exact gradient
    and Hessian, on x centred and scaled, so that the intercept and the slope are not nearly the same
    direction; the estimate and its covariance mapped back to x); ValueError where no_fit_reason gives one."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=bool)
    reason = no_fit_reason(x, y)
    if reason:
        raise ValueError(f"no logistic fit: {reason}")
    center, scale = float(x.mean()), float(x.std())
    design = np.column_stack([np.ones_like(x), (x - center) / scale])  # [n, 2]
    target = y.astype(float)

    def loss(b: np.ndarray) -> float:
        eta = design @ b
        return float(np.sum(np.logaddexp(0.0, eta) - target * eta))

    def grad(b: np.ndarray) -> np.ndarray:
        return design.T @ (special.expit(design @ b) - target)

    def hess(b: np.ndarray) -> np.ndarray:
        p = special.expit(design @ b)
        return (design * (p * (1 - p))[:, None]).T @ design

    found = newton(loss, grad, hess, np.array([special.logit(target.mean()), 0.0]))
    back = np.array([[1.0, -center / scale], [0.0, 1.0 / scale]])  # (b0, b1) in x from the scaled fit
    b0, b1 = back @ found
    return LogisticFit(float(b0), float(b1), back @ np.linalg.inv(hess(found)) @ back.T, len(x), int(y.sum()))


def newton(loss: Callable[[np.ndarray], float], grad: Callable[[np.ndarray], np.ndarray],
           hess: Callable[[np.ndarray], np.ndarray], start: np.ndarray, steps: int = NEWTON_STEPS) -> np.ndarray:
    """The minimum of a smooth, strictly convex `loss` by damped Newton steps (halved until the loss falls
    by a quarter of what the quadratic model predicts, up to the loss's rounding): it converges from any
    start wherever a minimum exists, which for the logistic likelihood is wherever no_fit_reason finds
    none (scipy's trust-exact stopped short of its tolerance on about 1 in 11 such outcome patterns).
    Stops once the Newton decrement g^T H^-1 g (twice the loss's predicted distance to its minimum) is
    below NEWTON_TOLERANCE, after that last step; ValueError after `steps` steps without that."""
    b = start
    for _ in range(steps):
        g = grad(b)
        step = np.linalg.solve(hess(b), g)
        decrement = float(g @ step)
        if decrement < NEWTON_TOLERANCE:
            return b - step
        size, now = 1.0, loss(b)
        rounding = 64 * np.finfo(float).eps * (1 + abs(now))  # below this a loss's fall is not measurable
        while loss(b - size * step) > now - 0.25 * size * decrement + rounding and size > 1e-12:
            size /= 2
        b = b - size * step
    raise ValueError(f"no logistic fit: Newton's method did not converge in {steps} steps")
