"""Everything the report tests, computed once from the finished runs: each group's outcomes and
learnability gate (analysis.evidence.learning), and the family of every comparison with its Holm-adjusted
p-values (analysis.evidence.family: the reward pairs and the paper checks). The answer, the tables and the
paper checks all read this one object, so a comparison is counted once and shown alike everywhere.
Each group's runs' median engine/trainer mismatch per arm and each arm's recorded settings
(analysis.evidence.construction) are kept with it, so the answer and the verdict say alike which
comparison holds by construction and which two arms train one gradient.

Where the suite file declares a primary family (analysis.primary), the family is the declared
comparisons (plus the paper checks where declared) and every other test is exploratory."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from analysis.data.groups import Group, group_subset, group_title, groups
from analysis.data.load import Results
from analysis.evidence.construction import (
    ByConstruction,
    SameGradient,
    arm_run_kls,
    arm_settings,
    by_construction,
    same_gradient,
)
from analysis.evidence.family import Family, Test, declared_family, make_family, reward_tests
from analysis.evidence.learning import Learning, learning
from analysis.evidence.paper import arms, paper_tests
from analysis.evidence.primary import Declaration, primary_tests


@dataclass(frozen=True)
class Evidence:
    results: Results  # the finished runs
    learnings: dict[Group, Learning]
    family: Family
    declared: dict[str, Declaration] = field(default_factory=dict)  # by suite; {} without a declared family
    primary: tuple[Test, ...] = ()  # the declared comparisons, in order (each in `family`)
    run_kls: dict[Group, dict[str, np.ndarray]] = field(default_factory=dict)  # per group and arm ({}: none measured)
    settings: dict[Group, dict[str, dict | None]] = field(default_factory=dict)  # per group and arm (construction.arm_settings)

    @property
    def groups(self) -> list[Group]:
        return list(self.learnings)

    def title(self, group: Group) -> str:
        return group_title(group, self.groups)

    def subset(self, group: Group) -> Results:
        return group_subset(self.results, group)

    def paper_in_family(self, group: Group) -> bool:
        return paper_in_family(self.declared, group)

    def by_construction(self, group: Group, first: str, second: str) -> ByConstruction | None:
        """Whether the comparison of two arms of `group` holds by construction (analysis.evidence.construction)."""
        return by_construction(self.run_kls.get(group, {}), first, second)

    def same_gradient(self, group: Group, first: str, second: str) -> SameGradient | None:
        """Whether two arms of `group` train one gradient by construction (analysis.evidence.construction)."""
        return same_gradient(self.settings.get(group, {}), first, second)

    def same_gradients(self, group: Group) -> list[SameGradient]:
        """Every pair of the group's arms that trains one gradient by construction, in suite order."""
        arms = list(self.settings.get(group, {}))
        return [found for i, a in enumerate(arms) for b in arms[i + 1:] if (found := self.same_gradient(group, a, b))]


def paper_in_family(declared: dict[str, Declaration], group: Group) -> bool:
    """Whether the group's paper checks are in the Holm family: always without a declared family, with
    one only where its suite declares `paper_checks: true`."""
    if not declared:
        return True
    declaration = declared.get(group[0])
    return declaration is not None and declaration.primary.paper_checks


def paper_reward_tests(results: Results, group: Group, rewards: list[Test]) -> list[Test]:
    """The reward tests the paper checks read (GSPO and GRPO + RR against GRPO) among `rewards`."""
    a = arms(group_subset(results, group).runs)
    pairs = {frozenset(p) for p in ((a.gspo, a.grpo), (a.grpo_rr, a.grpo)) if None not in p}
    return [t for t in rewards if t.group == group and frozenset((t.first, t.second)) in pairs]


def gather(results: Results, declared: dict[str, Declaration] | None = None) -> Evidence:
    """The evidence of `results`, which should hold finished runs only (analysis.data.load.finished);
    `declared`: the suites' declared families (analysis.evidence.primary.declarations), if any."""
    learnings = learning(results)
    run_kls = {group: arm_run_kls(group_subset(results, group)) for group in learnings}
    settings = {group: arm_settings(group_subset(results, group).runs) for group in learnings}
    rewards = reward_tests(learnings)
    paper = {group: paper_tests(group_subset(results, group), group) for group in groups(results)}
    if not declared:
        return Evidence(results, learnings, make_family(rewards + [t for tests in paper.values() for t in tests]),
                        run_kls=run_kls, settings=settings)
    primary = primary_tests(learnings, declared)
    chosen = list(primary)
    for group in paper:
        if paper_in_family(declared, group):
            chosen += paper[group] + paper_reward_tests(results, group, rewards)
    others = rewards + [t for tests in paper.values() for t in tests]
    return Evidence(results, learnings, declared_family(chosen, others), declared, tuple(primary), run_kls,
                    settings)
