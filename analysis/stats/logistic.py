"""A logistic fit of a failure's probability against one variable, by maximum likelihood, with its Wald
band and Fieller's interval for where it crosses 0.5; and the exact bound on a rate after no events.
The stability map (analysis.evidence.stability) fits P(failure) against log10 KL with it."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from scipy import optimize, special, stats

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
        v = self.cov
        return fieller_ratio(-self.intercept, self.slope, v[0, 0], -v[0, 1], v[1, 1], level)


def fieller_ratio(num: float, den: float, v_num: float, cov: float, v_den: float,
                  level: float = LEVEL) -> tuple[float, float, float]:
    """(num/den, low, high): the ratio of two jointly normal estimates (variances v_num, v_den, covariance
    `cov`) and Fieller's interval, the theta with (num - theta den)^2 <= z^2 var(num - theta den): between
    the two roots of that quadratic in theta where den^2 > z^2 v_den, else unbounded, (-inf, +inf) (den is not
    different from 0 at 1 - level). A den of exactly 0 gives a NaN center."""
    z2 = stats.norm.ppf(0.5 + level / 2) ** 2
    a, b, c = den ** 2 - z2 * v_den, -2 * (num * den - z2 * cov), num ** 2 - z2 * v_num
    center = num / den if den != 0 else math.nan
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
    found, information = maximum_likelihood(design, target, np.array([special.logit(target.mean()), 0.0]))
    back = np.array([[1.0, -center / scale], [0.0, 1.0 / scale]])  # (b0, b1) in x from the scaled fit
    b0, b1 = back @ found
    return LogisticFit(float(b0), float(b1), back @ np.linalg.inv(information) @ back.T, len(x), int(y.sum()))


def maximum_likelihood(design: np.ndarray, target: np.ndarray, start: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The logistic likelihood's maximum on `design`'s columns [n, k] for the 0/1 `target` (`newton` from
    `start`, exact gradient and Hessian) and the observed information there [k, k]."""

    def loss(b: np.ndarray) -> float:
        eta = design @ b
        return float(np.sum(np.logaddexp(0.0, eta) - target * eta))

    def grad(b: np.ndarray) -> np.ndarray:
        return design.T @ (special.expit(design @ b) - target)

    def hess(b: np.ndarray) -> np.ndarray:
        p = special.expit(design @ b)
        return (design * (p * (1 - p))[:, None]).T @ design

    found = newton(loss, grad, hess, start)
    return found, hess(found)


def separated(design: np.ndarray, y: np.ndarray) -> bool:
    """Whether the outcomes y are separated by the design's columns [n, k]: a direction w != 0 with
    (2y - 1)_i x_i.w >= 0 on every row and > 0 on one, where the logistic likelihood has no maximum (complete
    or quasi-complete separation, Albert and Anderson 1984; one outcome alone is such a case, along the
    intercept). Found as Konis (2007) does, by the linear program max sum_i s_i subject to s_i = (2y - 1)_i
    x_i.w >= 0 and -1 <= w <= 1: separation is an optimum above 0 (up to rounding)."""
    signed = np.asarray(design, dtype=float) * (2.0 * np.asarray(y, dtype=bool) - 1.0)[:, None]
    found = optimize.linprog(-signed.sum(0), A_ub=-signed, b_ub=np.zeros(len(signed)),
                             bounds=[(-1.0, 1.0)] * signed.shape[1], method="highs")
    if found.status != 0 or found.fun is None:
        raise ValueError(f"separated: the linear program ended with {found.message!r}")
    return -float(found.fun) > 1e-9 * max(1.0, float(np.abs(signed).sum()))


@dataclass(frozen=True)
class DesignFit:
    """P(y) = expit(design @ coef), by maximum likelihood; `cov` the inverse observed information."""

    coef: np.ndarray  # [k]
    cov: np.ndarray  # [k, k]
    n: int
    events: int


def fit_logistic_design(design: np.ndarray, y: np.ndarray) -> DesignFit:
    """The maximum-likelihood logistic fit of y (booleans) on the columns of `design` [n, k] (the caller's
    intercept column among them), as fit_logistic does on one variable: damped Newton on the columns centred
    and scaled (a constant column kept as it is), mapped back. ValueError where the outcomes are `separated`
    (no maximum exists) or the design's columns are not independent."""
    design, y = np.asarray(design, dtype=float), np.asarray(y, dtype=bool)
    if np.linalg.matrix_rank(design) < design.shape[1]:
        raise ValueError("no logistic fit: the design's columns are not linearly independent")
    if separated(design, y):
        raise ValueError("no logistic fit: the outcomes are separated (the maximum-likelihood estimate is infinite)")
    spread = design.std(0)
    constant = spread == 0
    # centred only where a constant column (the intercept) can absorb the offset
    center = np.where(constant | ~constant.any(), 0.0, design.mean(0))
    scale = np.where(constant, 1.0, spread)
    scaled = (design - center) / scale
    found, information = maximum_likelihood(scaled, y.astype(float), np.zeros(design.shape[1]))
    # scaled = (design - center) / scale, so scaled @ b = design @ (b / scale) - center . (b / scale): the
    # offset falls on the constant column (the intercept), whose value is its own (the mean of the column)
    back = np.diag(1.0 / scale)
    if constant.any():
        where = int(np.flatnonzero(constant)[0])
        back[where, :] -= (center / scale) / design[0, where]
    return DesignFit(back @ found, back @ np.linalg.inv(information) @ back.T, len(y), int(y.sum()))


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
