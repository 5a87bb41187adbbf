"""The statistics behind every interval and p-value of the report, on cases small enough to work out by
hand: scipy's exact sign-flip p against a plain enumeration (with ties), the paired t-interval, Holm's
adjustment, rliable's probability of improvement, why no bootstrap is shown below 10 seeds, and McNemar's
exact test stratified by level (a map's pairs of arms) by hand and against scipy's exact binomial test."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from analysis.stats.library import (
    MIN_BOOTSTRAP_SEEDS,
    bootstrap_ci,
    holm,
    paired,
    paired_t_interval,
    seeds_needed,
    sign_flip_p,
    smallest_p,
    stratified_bootstrap_ci,
    stratified_mcnemar_p,
    t_interval,
)
from analysis.stats.metrics import probability_of_improvement


def enumerated_p(differences: list[float]) -> float:
    """Two-sided sign-flip p by listing every sign pattern: 2 min(P(sum <= observed), P(sum >= observed))."""
    observed = sum(differences)
    sums = [sum(s * d for s, d in zip(signs, differences)) for signs in itertools.product((1, -1), repeat=len(differences))]
    low = sum(s <= observed + 1e-12 for s in sums) / len(sums)
    high = sum(s >= observed - 1e-12 for s in sums) / len(sums)
    return min(1.0, 2 * min(low, high))


def test_the_sign_flip_p_of_three_seeds_that_all_agree_is_a_quarter():
    """The stress suite's grpo_r3 - grpo: +0.0116, +0.0124, +0.0098: one pattern of 8 as extreme, each side."""
    a, b = np.array([0.2145, 0.2261, 0.2018]), np.array([0.2029, 0.2137, 0.1920])
    assert sign_flip_p(a, b) == pytest.approx(0.25)
    assert smallest_p(3) == 0.25 and smallest_p(6) == pytest.approx(0.03125)


@pytest.mark.parametrize("differences, by_hand", [
    ([3.0, 1.0, 1.0, -1.0], 0.5),  # sums 3 + (+-1 +-1 +-1): >= 4 in 4 of 16 patterns -> 2 x 4/16
    ([1.0, 1.0, 2.0], 0.25),  # ties: only +1 +1 +2 reaches 4
    ([1.0, 1.0, -2.0], 1.0),  # observed sum 0: 5 of 8 on each side -> 10/8, at most 1
    ([0.5, 0.5, 0.5, 0.5, 0.5, 0.5], 2 / 64),  # six seeds that agree: the first p below 0.05
    ([0.0, 2.0, 2.0, 1.0, -1.0], 0.375),  # a zero difference: its two signs tie (12 of 32 >= 4)
    ([0.7], 1.0),  # one pair: +0.7 and -0.7, one on each side
])
def test_scipys_exact_sign_flip_p_equals_the_enumeration(differences, by_hand):
    d = np.array(differences)
    assert enumerated_p(differences) == pytest.approx(by_hand)
    assert sign_flip_p(d + 10.0, np.full(len(d), 10.0)) == pytest.approx(by_hand)  # paired: only a - b counts


def test_the_paired_t_interval_by_hand():
    """Differences 1, 2, 3: mean 2, sd 1, t(0.975, 2 df) = 4.302653: 2 -+ 4.302653 / sqrt(3)."""
    low, high = paired_t_interval(np.array([11.0, 12.0, 13.0]), np.array([10.0, 10.0, 10.0]))
    half = 4.302653 / np.sqrt(3)
    assert (low, high) == pytest.approx((2 - half, 2 + half), abs=1e-5)
    assert t_interval(np.array([1.0, 2.0, 3.0])) == pytest.approx((2 - half, 2 + half), abs=1e-5)
    assert np.isnan(paired_t_interval(np.array([1.0]), np.array([0.0]))[0])  # one pair: no interval
    assert t_interval(np.array([0.3, 0.3])) == (0.3, 0.3)  # no spread


def test_paired_differs_from_unpaired_when_seeds_share_an_offset():
    """Seed effects 0, 0.2, 0.4 shared by both objectives; differences 0.10, 0.12, 0.08: the paired
    interval is that of the differences, far narrower than the two objectives' own spread."""
    seeds = [0, 1, 2]
    a = pd.Series([0.50, 0.72, 0.88], index=seeds)
    b = pd.Series([0.40, 0.60, 0.80], index=seeds)
    found = paired(a, b)
    half = 4.302653 * 0.02 / np.sqrt(3)
    assert found.mean == pytest.approx(0.10) and (found.low, found.high) == pytest.approx((0.1 - half, 0.1 + half), abs=1e-6)
    assert found.p == pytest.approx(0.25) and found.seeds == (0, 1, 2)
    assert found.poi == pytest.approx(6 / 9)  # 0.50 beats 0.40 only; 0.72 beats 0.40, 0.60; 0.88 all three
    shuffled = paired(a, pd.Series([0.80, 0.40, 0.60], index=seeds))  # the same values on other seeds
    assert shuffled.mean == pytest.approx(0.10) and shuffled.high - shuffled.low > 0.5


def test_paired_uses_the_seeds_both_have_and_a_constant_as_a_one_sample_test():
    a = pd.Series([0.1, 0.2, 0.3, 0.4], index=[0, 1, 2, 5])
    b = pd.Series([0.0, 0.0, np.nan], index=[2, 5, 7])
    found = paired(a, b)
    assert found.seeds == (2, 5) and found.first == (0.3, 0.4) and found.mean == pytest.approx(0.35)
    one = paired(a, 0.05)
    assert one.n == 4 and one.mean == pytest.approx(0.2) and one.p == pytest.approx(2 / 16)


def test_a_seed_whose_second_value_is_not_finite_is_left_out():
    """Seed 5's second value is NaN (seed 7's too, where the first has none): seeds 0 and 2 remain."""
    a = pd.Series([0.1, 0.2, 0.3], index=[0, 2, 5])
    found = paired(a, pd.Series([0.0, 0.1, np.nan, np.inf], index=[0, 2, 5, 7]))
    assert found.seeds == (0, 2) and found.mean == pytest.approx(0.1) and np.isfinite(found.low)


def test_holm_by_hand():
    """p 0.01, 0.04, 0.03, 0.005: sorted x 4, 3, 2, 1 = 0.02, 0.03, 0.06, 0.04 -> non-decreasing 0.06."""
    assert holm(np.array([0.01, 0.04, 0.03, 0.005])) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert holm(np.array([0.5, np.nan, 0.4])) == pytest.approx([0.8, np.nan, 0.8], nan_ok=True)
    assert holm(np.array([0.9, 0.6])) == pytest.approx([1.0, 1.0])  # at most 1
    assert holm(np.array([0.03125])) == pytest.approx([0.03125])  # one comparison: unchanged


def test_how_many_paired_seeds_a_claim_needs():
    assert seeds_needed(1) == 6  # 2/64 < 0.05 <= 2/32
    assert seeds_needed(3) == 7  # 3 x 2/128 = 0.047
    assert seeds_needed(4) == 8 and seeds_needed(10) == 9


def test_too_few_seeds_only_below_the_seeds_the_family_needs():
    """One test: 6 paired seeds are needed. 6 seeds with differences +-0.01 in turn (p = 1) are enough to
    tell: not distinguishable; 5 of them are too few; 6 in one direction: p = 2/64, shown."""
    from analysis.evidence.family import FEW, TIE, YES, Test, make_family

    def outcome(differences: list[float]) -> str:
        seeds = range(len(differences))
        family = make_family([Test(("s", ""), "q", "a", "b", paired(pd.Series(differences, index=seeds),
                                                                     pd.Series(0.0, index=seeds)))])
        return family.outcome(family.tests[0].result, family.adjusted[0])

    assert outcome([0.01, -0.01] * 3) == TIE and outcome([0.01, -0.01, 0.01, -0.01, 0.01]) == FEW
    assert outcome([0.01] * 6) == YES


def test_probability_of_improvement_counts_ties_as_half():
    """x = 1, 2, 3 against y = 2, 2, 0: wins 1 + (0.5 + 0.5 + 1) + 3 = 6 of 9."""
    assert probability_of_improvement(np.array([1.0, 2.0, 3.0]), np.array([2.0, 2.0, 0.0])) == pytest.approx(6 / 9)
    assert probability_of_improvement(np.array([1.0]), np.array([1.0])) == 0.5


def coverage(n: int, trials: int, rng: np.random.Generator) -> float:
    hits = 0
    for _ in range(trials):
        sample = rng.normal(0.0, 1.0, size=n)
        low, high = bootstrap_ci(sample, rng, reps=500)
        hits += low <= 0.0 <= high
    return hits / trials


def test_a_percentile_bootstrap_is_no_95_percent_interval_below_ten_seeds():
    """Why MIN_BOOTSTRAP_SEEDS is 10: at 3 seeds the nominal 95% interval covers about 3 times in 4."""
    rng = np.random.default_rng(2024)
    assert 0.66 <= coverage(3, 600, rng) <= 0.80
    assert coverage(MIN_BOOTSTRAP_SEEDS, 600, rng) >= 0.87


def test_the_stratified_bootstrap_resamples_within_each_stratum_and_refuses_few_runs():
    rng = np.random.default_rng(0)
    low, high = stratified_bootstrap_ci([np.zeros(10), np.ones(10)], rng, statistic=lambda x, axis: x.mean(axis=axis))
    assert (low, high) == (0.5, 0.5)  # every resample keeps ten zeros and ten ones: the strata never mix
    assert np.isnan(stratified_bootstrap_ci([np.arange(9.0)], rng)[0])  # 9 runs: no interval


# ------------------------------------------------------------------ many paired seeds (issue #40 item 5, cause 1)

def enumerated_p_fast(differences: np.ndarray) -> float:
    """`enumerated_p` with numpy, for up to ~20 pairs: every sign pattern's sum, in chunks."""
    n, observed = len(differences), float(differences.sum())
    low = high = 0
    for start in range(0, 2**n, 2**16):
        codes = np.arange(start, min(start + 2**16, 2**n))[:, None]  # [patterns, 1]
        signs = 1 - 2 * ((codes >> np.arange(n)) & 1)  # [patterns, n]
        sums = signs @ differences  # [patterns]
        low += int((sums <= observed + 1e-12).sum())
        high += int((sums >= observed - 1e-12).sum())
    return min(1.0, 2 * min(low, high) / 2**n)


def test_above_exact_pairs_the_sign_flip_p_is_a_seeded_monte_carlo_estimate_of_the_exact_one():
    """18 pairs (2^18 patterns, enumerated here): the estimate from MONTE_CARLO_DRAWS random sign
    patterns lies within 5 binomial standard errors (each tail's count is binomial; two tails double
    it) plus the estimator's 2 / (m + 1) of the exact p, and the same on every call (a fixed seed)."""
    from analysis.stats.library import EXACT_PAIRS, MONTE_CARLO_DRAWS, p_method

    d = np.random.default_rng(7).normal(0.1, 0.3, size=18)
    exact, estimate = enumerated_p_fast(d), sign_flip_p(d, np.zeros(18))
    half = exact / 2
    bound = 2 * 5 * np.sqrt(half * (1 - half) / MONTE_CARLO_DRAWS) + 2 / (MONTE_CARLO_DRAWS + 1)
    assert 0.01 < exact < 0.5 and abs(estimate - exact) <= bound, (estimate, exact, bound)
    assert sign_flip_p(d, np.zeros(18)) == estimate
    assert EXACT_PAIRS == 16 and p_method(16) == "exact" and p_method(17) == f"Monte Carlo, {MONTE_CARLO_DRAWS} draws"


def test_forty_paired_seeds_get_a_p_without_enumerating_two_to_the_forty_patterns():
    """Every one of 40 differences positive: no random pattern reaches the observed sum but the all-plus
    one (probability 2^-40), so p = 2 (0 + 1) / (m + 1), the estimator's smallest."""
    from analysis.stats.library import MONTE_CARLO_DRAWS

    a = np.linspace(1.0, 2.0, 40)
    assert sign_flip_p(a, np.zeros(40)) == pytest.approx(2 / (MONTE_CARLO_DRAWS + 1))


def test_a_p_of_sixteen_pairs_or_fewer_is_the_exact_one():
    d = np.random.default_rng(3).normal(0.05, 0.3, size=12)
    assert sign_flip_p(d, np.zeros(12)) == pytest.approx(enumerated_p_fast(d), abs=1e-12)


def test_the_stratified_exact_mcnemar_p_by_hand():
    """Three levels: 3 cells where only the first arm failed and none the other way; 2 and 1; none
    discordant. b = 5, c = 1, n = 6: P(B <= 1) = (1 + 6) / 64, two-sided 14/64 = 0.21875. Ten cells all one
    way: 2/2^10. As many each way: 1. No discordant cell: nothing tested, 1."""
    assert stratified_mcnemar_p([(3, 0), (2, 1), (0, 0)]) == pytest.approx(14 / 64, abs=0)
    assert stratified_mcnemar_p([(0, 3), (1, 2), (0, 0)]) == pytest.approx(14 / 64, abs=0)  # two-sided: symmetric
    assert stratified_mcnemar_p([(4, 0), (6, 0)]) == 2 / 1024
    assert stratified_mcnemar_p([(2, 1), (1, 2)]) == 1.0
    assert stratified_mcnemar_p([(0, 0), (0, 0)]) == 1.0 and stratified_mcnemar_p([]) == 1.0
    with pytest.raises(ValueError, match="negative"):
        stratified_mcnemar_p([(1, -1)])


def test_the_stratified_exact_mcnemar_p_is_scipys_exact_binomial_test_on_the_pooled_discordant_cells():
    """Given each level's discordant cells, the null makes the first arm's count Binomial(n, 1/2) pooled over
    the levels: scipy.stats.binomtest(b, n, 0.5) two-sided is the reference (statsmodels' exact mcnemar is
    the same formula), on 300 random tables of 1 to 6 levels, up to 40 discordant cells each."""
    rng = np.random.default_rng(60)
    for _ in range(300):
        table = [tuple(int(x) for x in rng.integers(0, 8, size=2)) for _ in range(int(rng.integers(1, 7)))]
        b, c = sum(t[0] for t in table), sum(t[1] for t in table)
        expected = stats.binomtest(b, b + c, 0.5).pvalue if b + c else 1.0
        assert stratified_mcnemar_p(table) == pytest.approx(expected, rel=1e-12), table


def test_mcnemar_power_by_enumeration_and_its_exact_edges():
    """Every cell discordant one way: the exact test rejects at 5% from 6 discordant cells (2 / 2^6 =
    0.031), not at 5 (2 / 2^5 = 0.0625). On 3 cells with rates 0.3 / 0.1, the power equals the enumeration
    of all 3^3 outcomes (only-first, only-second, concordant) with their p by stratified_mcnemar_p."""
    import itertools

    from analysis.stats.library import mcnemar_power, mcnemar_seeds_needed, stratified_mcnemar_p

    assert mcnemar_power(1.0, 0.0, 6) == pytest.approx(1.0) and mcnemar_power(1.0, 0.0, 5) == 0.0
    assert mcnemar_seeds_needed(1.0, 0.0, levels=1) == 6 and mcnemar_seeds_needed(0.2, 0.2, levels=6) is None
    rates = {"first": 0.3, "second": 0.1, "same": 0.6}
    by_hand = 0.0
    for outcome in itertools.product(rates, repeat=7):
        prob = math.prod(rates[o] for o in outcome)
        b, c = outcome.count("first"), outcome.count("second")
        by_hand += prob * (stratified_mcnemar_p([(b, c)]) <= 0.05)
    assert mcnemar_power(0.3, 0.1, 7) == pytest.approx(by_hand, rel=1e-9)
    assert mcnemar_seeds_needed(0.3, 0.1, levels=6) == min(
        s for s in range(1, 50) if mcnemar_power(0.3, 0.1, 6 * s) >= 0.8)
