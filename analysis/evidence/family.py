"""Every comparison one report makes, each tested once and all corrected together.

A test is paired by seed within one group (suite and sweep point): two objectives' per-seed values,
or one objective's against a constant. Its p is the exact sign-flip p (analysis.stats); the family
is every test the report shows (the final reward of every pair of objectives in each group where RL
learned, and the paper checks), and Holm's step-down adjustment runs over all of them. A test asked
twice (the paper's "Routing Replay raises GRPO's reward" is also the pair GRPO + RR / GRPO) is one
test. A claim needs its Holm-adjusted p below 5%: with m tests that takes at least
`seeds_needed(m)` paired seeds (6 for one test), whatever the data.

A suite may declare its family before it runs (analysis.primary): then the family is the declared
comparisons (and the paper checks where declared) and nothing else. A declared test that cannot be
made (no objective learned in its group, an arm without finished runs) still counts, at p = 1, so the
family's size is what was declared; every other test is `exploratory`: shown with its unadjusted p,
never adjusted, never the ground of a claim.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, replace

import numpy as np

from analysis.data.groups import Group
from analysis.evidence.learning import Learning
from analysis.stats.library import ALPHA, Paired, holm, paired, seeds_needed

REWARD = "final reward"

# outcomes of a test read on the side a claim expects (the paper's side, or "first is higher")
YES, NO, TIE, FEW = "yes", "no", "not distinguishable", "too few seeds"
EXPLORATORY = "exploratory"  # a test outside a declared family: its unadjusted p, no claim


@dataclass(frozen=True)
class Test:
    """`first` against `second` on `quantity` in `group` (`second` may name a constant, e.g. "5%")."""

    group: Group
    quantity: str
    first: str
    second: str
    result: Paired

    @property
    def key(self) -> tuple:
        return self.group, self.quantity, frozenset((self.first, self.second))


def flipped(result: Paired) -> Paired:
    """The same comparison read the other way round (second minus first)."""
    return replace(result, first=result.second, second=result.first, mean=-result.mean, low=-result.high,
                   high=-result.low, poi=1.0 - result.poi)


@dataclass(frozen=True)
class Family:
    tests: tuple[Test, ...]
    adjusted: tuple[float, ...]  # Holm-adjusted p of each test, in order
    exploratory: tuple[Test, ...] = ()  # tests outside a declared family (none without one)

    @property
    def size(self) -> int:
        return len(self.tests)

    @property
    def needed(self) -> int:
        """The fewest paired seeds any claim of this report needs."""
        return seeds_needed(max(self.size, 1))

    def find(self, group: Group, quantity: str, first: str, second: str) -> tuple[Paired, float] | None:
        """The test of `first` against `second` read as first - second, and its Holm-adjusted p."""
        for test, adjusted in zip(self.tests, self.adjusted):
            if test.key == (group, quantity, frozenset((first, second))):
                return (test.result if test.first == first else flipped(test.result)), adjusted
        return None

    def read(self, group: Group, quantity: str, first: str, second: str) -> tuple[Paired, float] | None:
        """`find`'s test, or else the exploratory test of `first` against `second` (first - second) with a
        NaN adjusted p: it is not in the family."""
        found = self.find(group, quantity, first, second)
        if found is not None:
            return found
        for test in self.exploratory:
            if test.key == (group, quantity, frozenset((first, second))):
                return (test.result if test.first == first else flipped(test.result)), float("nan")
        return None

    def tested(self, group: Group, quantity: str, first: str, second: str) -> tuple[Paired, float]:
        """`find`'s test, which the caller knows the family holds; KeyError naming the pair where it does not."""
        found = self.find(group, quantity, first, second)
        if found is None:
            raise KeyError(f"no test of {first} against {second} on {quantity} in group {group}")
        return found

    def outcome(self, result: Paired, adjusted: float, sign: int = 1) -> str:
        """YES / NO when the Holm-adjusted p is below 5% (on the `sign` side of 0, or the other); FEW
        when the seeds cannot get there with this family; else TIE."""
        if adjusted < ALPHA:
            return YES if result.mean * sign > 0 else NO
        return FEW if result.n < self.needed else TIE


def unique(tests: list[Test]) -> list[Test]:
    """One test per key, the first given kept, in order."""
    first: dict[tuple, Test] = {}
    for test in tests:
        first.setdefault(test.key, test)
    return list(first.values())


def make_family(tests: list[Test]) -> Family:
    """The tests (one per key, the first given kept) with their Holm-adjusted p-values; a test without
    a p (no paired seeds) is left out of the count."""
    kept = unique(tests)
    adjusted = holm(np.array([t.result.p for t in kept], dtype=float)) if kept else np.array([])
    return Family(tuple(kept), tuple(float(p) for p in adjusted))


def declared_family(tests: list[Test], others: list[Test]) -> Family:
    """A declared family: `tests` (one per key) Holm-adjusted among themselves, a test without a p
    counted at p = 1 (it was declared: leaving it out would make the others easier to pass); `others`
    not in it are exploratory (one per key)."""
    kept = unique(tests)
    p = np.array([t.result.p for t in kept], dtype=float)
    adjusted = holm(np.where(np.isfinite(p), p, 1.0)) if kept else np.array([])
    inside = {t.key for t in kept}
    return Family(tuple(kept), tuple(float(x) for x in adjusted),
                  tuple(t for t in unique(others) if t.key not in inside))


def reward_tests(learnings: dict[Group, Learning]) -> list[Test]:
    """Final reward, every pair of objectives (suite order) in each group where some objective learned."""
    tests = []
    for group, found in learnings.items():
        if not found.learned:
            continue
        arms = list(dict.fromkeys(found.per_run["arm"]))
        for a, b in itertools.combinations(arms, 2):
            tests.append(Test(group, REWARD, a, b, paired(found.values(a), found.values(b))))
    return tests
