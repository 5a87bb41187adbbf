"""Statistics across seeds that stay valid at the handful of seeds a CPU suite has.

Data are `objective -> array[runs]` (one value per seed) unless stated otherwise. What the report
uses, and why:

- always the per-seed values themselves;
- comparisons are paired by seed (the same seed of two objectives shares its warm start, prompts and
  sampling noise): a paired t-interval of the mean difference (`scipy.stats.ttest_rel`; it assumes
  the per-seed differences are roughly normal) and an exact two-sided sign-flip p-value
  (`scipy.stats.permutation_test`, every one of the 2^n sign patterns enumerated up to EXACT_PAIRS
  pairs; above that a Monte Carlo estimate from MONTE_CARLO_DRAWS random sign patterns of a fixed
  seed, (b + 1) / (m + 1) per tail; no normality assumed; `p_method` names which). With n paired
  seeds the smallest sign-flip p is 2 / 2^n: 0.25 at 3 seeds, 0.031 at 6;
- Holm's step-down correction over every comparison one report makes (`holm`);
- for a pass/fail outcome paired across arms and stratified (a swept suite's cells: the same level and
  seed), the exact conditional test on the discordant pairs pooled over the strata
  (`stratified_mcnemar_p`: McNemar's exact test, a two-sided sign test);
- the probability of improvement P(X > Y) of rliable (Agarwal et al. 2021): over all pairs of runs,
  ties counting one half (the Mann-Whitney U statistic over n m);
- IQM and (stratified) percentile-bootstrap CIs only from MIN_BOOTSTRAP_SEEDS seeds on: below that a
  percentile bootstrap is too narrow to be called a 95% interval (over 3 values it returns about the
  smallest and largest: 73% coverage).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy import stats

from analysis.stats.metrics import iqm, mean, probability_of_improvement

ALPHA = 0.05  # every test and interval of the report: two-sided 5%, 95% intervals
LEVEL = 1.0 - ALPHA
# The percentile bootstrap of a mean of n normal values covers the true mean in about 73% of cases
# at n = 3, 84% at 5, 88% at 8 and 90% at 10 (nominal 95%; tests/test_analysis_stats.py simulates
# it). From 10 seeds on it is close enough to be shown as a 95% interval; below, the report gives
# the per-seed values and t-intervals only, and no IQM (a 25% trimmed mean of 3 values is their median).
MIN_BOOTSTRAP_SEEDS = 10
# The sign-flip p is exact (2^n patterns) up to EXACT_PAIRS pairs (65,536 patterns, well under a
# second); above, 2^n grows past memory (24 pairs) and time, and a Monte Carlo estimate takes over:
# MONTE_CARLO_DRAWS random sign patterns (its standard error at p = 0.05 is about 0.001), drawn from
# a generator of a fixed seed, so one report gives the same p on every run and machine.
EXACT_PAIRS = 16
MONTE_CARLO_DRAWS = 100_000
MONTE_CARLO_SEED = 0


def bootstrap_ci(values: np.ndarray, rng: np.random.Generator, statistic: Callable = mean, reps: int = 2000,
                 level: float = LEVEL) -> tuple:
    """Percentile bootstrap CI of `statistic` over runs: `values` [runs, ...] are resampled along the
    first axis (seeds, with replacement); `statistic(x, axis=...)` must reduce an axis. Returns
    (low, high), floats for [runs] data, arrays of the trailing shape otherwise (e.g. a curve's points).
    Meaningful from MIN_BOOTSTRAP_SEEDS runs on: the report never calls it with fewer."""
    x = np.asarray(values, dtype=float)
    if len(x) == 0:
        return float("nan"), float("nan")
    if len(x) == 1:
        return (float(x[0]), float(x[0])) if x.ndim == 1 else (x[0], x[0])
    resampled = x[rng.integers(0, len(x), size=(reps, len(x)))]  # [reps, runs, ...]
    stats_ = statistic(resampled, axis=1)  # [reps, ...]
    alpha = (1.0 - level) / 2.0
    low, high = np.quantile(stats_, alpha, axis=0), np.quantile(stats_, 1.0 - alpha, axis=0)
    return (float(low), float(high)) if x.ndim == 1 else (low, high)


def stratified_bootstrap_ci(strata: list[np.ndarray], rng: np.random.Generator, statistic: Callable = iqm,
                            reps: int = 2000, level: float = LEVEL) -> tuple[float, float]:
    """rliable's stratified bootstrap: the runs of each stratum (a task, a sweep point) are resampled
    with replacement within that stratum, the resampled strata pooled, `statistic` taken; the
    percentile interval of those. NaN below MIN_BOOTSTRAP_SEEDS runs in the smallest stratum."""
    strata = [np.asarray(s, dtype=float) for s in strata]
    if not strata or min(len(s) for s in strata) < MIN_BOOTSTRAP_SEEDS:
        return float("nan"), float("nan")
    pooled = np.concatenate([s[rng.integers(0, len(s), size=(reps, len(s)))] for s in strata], axis=1)
    values = statistic(pooled, axis=1)  # [reps]
    alpha = (1.0 - level) / 2.0
    return float(np.quantile(values, alpha)), float(np.quantile(values, 1.0 - alpha))


def t_interval(values: np.ndarray, level: float = LEVEL) -> tuple[float, float]:
    """Student-t interval of the mean of `values` (assumes them roughly normal); NaN below 2 values."""
    x = np.asarray(values, dtype=float)
    x = x[np.isfinite(x)]
    if len(x) < 2:
        return float("nan"), float("nan")
    if np.ptp(x) == 0:  # no spread: the interval is the value (scipy would divide 0 by 0)
        return float(x[0]), float(x[0])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # scipy's precision note on nearly equal values
        ci = stats.ttest_1samp(x, 0.0).confidence_interval(level)
    return float(ci.low), float(ci.high)


def paired_t_interval(a: np.ndarray, b: np.ndarray, level: float = LEVEL) -> tuple[float, float]:
    """Paired t-interval of mean(a - b) over pairs (`scipy.stats.ttest_rel`); NaN below 2 pairs."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if len(a) < 2:
        return float("nan"), float("nan")
    if np.ptp(a - b) == 0:
        return float(a[0] - b[0]), float(a[0] - b[0])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        ci = stats.ttest_rel(a, b).confidence_interval(level)
    return float(ci.low), float(ci.high)


def _mean_difference(x: np.ndarray, y: np.ndarray, axis: int) -> np.ndarray:
    """The permutation test's statistic: mean(x - y) along `axis`."""
    return np.asarray(np.mean(x - y, axis=axis))


def p_method(pairs: int) -> str:
    """How `sign_flip_p` computes the p of `pairs` pairs: "exact", or "Monte Carlo, N draws"."""
    return "exact" if pairs <= EXACT_PAIRS else f"Monte Carlo, {MONTE_CARLO_DRAWS} draws"


def sign_flip_p(a: np.ndarray, b: np.ndarray) -> float:
    """Two-sided sign-flip p-value of mean(a - b) = 0 over pairs (`scipy.stats.permutation_test`,
    `permutation_type='samples'`: a pair's two values swapped), p = 2 min(P(<= observed), P(>=
    observed)), at most 1. Up to EXACT_PAIRS pairs exact, every one of the 2^n patterns enumerated;
    above, MONTE_CARLO_DRAWS random patterns of a generator seeded MONTE_CARLO_SEED, each tail
    estimated (b + 1) / (m + 1) (b of the m draws as extreme; never 0). NaN without pairs."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if len(a) == 0:
        return float("nan")
    if len(a) == 1:  # two patterns, one on each side: p = 2 x 1/2 (scipy wants two pairs)
        return 1.0
    if len(a) <= EXACT_PAIRS:
        result = stats.permutation_test(  # type: ignore[call-overload]  # scipy documents n_resamples=np.inf (every permutation); scipy-stubs take an int only
            (a, b), _mean_difference, vectorized=True, permutation_type="samples", n_resamples=np.inf,
            alternative="two-sided")
    else:  # batches of 10,000 draws: memory stays 10,000 x n whatever n
        result = stats.permutation_test(
            (a, b), _mean_difference, vectorized=True, permutation_type="samples", n_resamples=MONTE_CARLO_DRAWS,
            batch=10_000, alternative="two-sided", rng=np.random.default_rng(MONTE_CARLO_SEED))
    return float(result.pvalue)


def smallest_p(pairs: int) -> float:
    """The smallest two-sided sign-flip p that `pairs` paired seeds can give: 2 / 2^n."""
    return min(1.0, 2.0 / 2.0**pairs)


def seeds_needed(comparisons: int, alpha: float = ALPHA) -> int:
    """The fewest paired seeds whose smallest sign-flip p, times Holm's first factor (the number of
    comparisons), is below `alpha`: 6 for one comparison, 8 for 4, 9 for 10."""
    n = 1
    while comparisons * smallest_p(n) >= alpha:
        n += 1
    return n


def holm(pvalues: np.ndarray) -> np.ndarray:
    """Holm's step-down adjusted p-values, in the order given: sorted ascending, the i-th smallest
    (from 0) times (m - i), made non-decreasing, at most 1. NaN entries stay NaN and do not count."""
    p = np.asarray(pvalues, dtype=float)
    out = np.full(p.shape, np.nan)
    finite = np.flatnonzero(np.isfinite(p))
    order = finite[np.argsort(p[finite], kind="stable")]
    m = len(order)
    adjusted = np.maximum.accumulate(p[order] * (m - np.arange(m))) if m else np.array([])
    out[order] = np.minimum(adjusted, 1.0)
    return out


@dataclass(frozen=True)
class Paired:
    """`first` against `second` over the seeds both have (sorted): per-seed values and differences, the
    mean difference, its paired t-interval, the exact sign-flip p and rliable's P(first > second)."""

    seeds: tuple[int, ...]
    first: tuple[float, ...]
    second: tuple[float, ...]
    mean: float
    low: float
    high: float
    p: float
    poi: float

    @property
    def differences(self) -> np.ndarray:
        return np.array(self.first) - np.array(self.second)

    @property
    def n(self) -> int:
        return len(self.seeds)


def paired(first: pd.Series, second: pd.Series | float) -> Paired:
    """`first` (index: seed) against `second` on the same seeds, or against a constant (a one-sample test
    of first - constant)."""
    first = first[np.isfinite(first.astype(float))]
    if not isinstance(second, pd.Series):
        second = pd.Series(float(second), index=first.index)
    second = second[np.isfinite(second.astype(float))]
    seeds = sorted(first.index.intersection(second.index))
    a, b = first[seeds].to_numpy(dtype=float), second[seeds].to_numpy(dtype=float)
    low, high = paired_t_interval(a, b)
    return Paired(tuple(int(s) for s in seeds), tuple(a), tuple(b), mean(a - b), low, high, sign_flip_p(a, b),
                  probability_of_improvement(a, b))




def stratified_mcnemar_p(discordant: Sequence[tuple[int, int]]) -> float:
    """Exact two-sided p of McNemar's test stratified by level, from each stratum's discordant pairs
    (b_k: pairs where only the first failed, c_k: where only the second did). Null: in every pair the two
    outcomes are exchangeable, so given a stratum's n_k = b_k + c_k discordant pairs each falls either way
    with probability 1/2, independently of the other pairs; concordant pairs carry no information. Given
    the n_k, B = sum b_k is then Binomial(n = sum n_k, 1/2) whatever the strata's own failure rates, and
    p = min(1, 2 P(B <= min(b, c))) with b = sum b_k, c = sum c_k (exact, in integers: the sum of
    C(n, i) for i <= min(b, c), over 2^n). 1 without a discordant pair (nothing to test)."""
    b = sum(int(first) for first, _ in discordant)
    c = sum(int(second) for _, second in discordant)
    if any(int(x) < 0 for pair in discordant for x in pair):
        raise ValueError(f"a count of discordant pairs is negative: {list(discordant)}")
    n = b + c
    if n == 0:
        return 1.0
    tail = sum(math.comb(n, i) for i in range(min(b, c) + 1))
    return min(1.0, 2 * tail / 2**n)


def mcnemar_power(first_only: float, second_only: float, cells: int, alpha: float = ALPHA) -> float:
    """Power of `stratified_mcnemar_p` at level `alpha` over `cells` shared cells, each independently
    discordant with only the first arm failing at rate `first_only` and only the second at `second_only`
    (the rest concordant): P(p <= alpha), summed exactly over the number of discordant cells D ~
    Binomial(cells, first_only + second_only) and, given D, the first arm's share B ~ Binomial(D, first_only /
    (first_only + second_only)). The test pools the strata, so the rates are the pooled ones."""
    if not (0 <= first_only and 0 <= second_only and first_only + second_only <= 1) or cells < 0:
        raise ValueError(f"rates must be >= 0 with a sum <= 1 and cells >= 0, got {first_only}, {second_only}, {cells}")
    rate = first_only + second_only
    if rate == 0 or cells == 0:
        return 0.0
    d = np.arange(1, cells + 1)
    # the largest count k of the rarer side at which the two-sided exact p 2 P(Binomial(d, 1/2) <= k) <= alpha
    k = stats.binom.ppf(alpha / 2, d, 0.5)
    k = np.where(stats.binom.cdf(k, d, 0.5) <= alpha / 2, k, k - 1)
    share = first_only / rate
    rejected = np.where(k >= 0, stats.binom.cdf(k, d, share) + stats.binom.sf(d - k - 1, d, share), 0.0)
    return float((stats.binom.pmf(d, cells, rate) * rejected).sum())


def mcnemar_seeds_needed(first_only: float, second_only: float, levels: int, alpha: float = ALPHA,
                         power: float = 0.8, most: int = 400) -> int | None:
    """The fewest seeds per level (cells = levels x seeds) at which `mcnemar_power` reaches `power`; None
    where even `most` seeds do not (or the rates are equal: no difference to find)."""
    if first_only == second_only:
        return None
    for seeds in range(1, most + 1):
        if mcnemar_power(first_only, second_only, levels * seeds, alpha) >= power:
            return seeds
    return None
