"""Everything the report tests, computed once from the finished runs: each group's outcomes and
learnability gate (analysis.outcome), and the family of every comparison with its Holm-adjusted
p-values (analysis.family: the reward pairs and the paper checks). The answer, the tables and the
paper checks all read this one object, so a comparison is counted once and shown alike everywhere."""

from __future__ import annotations

from dataclasses import dataclass

from analysis.family import Family, make_family, reward_tests
from analysis.groups import Group, group_subset, group_title, groups
from analysis.load import Results
from analysis.outcome import Learning, learning
from analysis.paper import paper_tests


@dataclass(frozen=True)
class Evidence:
    results: Results  # the finished runs
    learnings: dict[Group, Learning]
    family: Family

    @property
    def groups(self) -> list[Group]:
        return list(self.learnings)

    def title(self, group: Group) -> str:
        return group_title(group, self.groups)

    def subset(self, group: Group) -> Results:
        return group_subset(self.results, group)


def gather(results: Results) -> Evidence:
    """The evidence of `results`, which should hold finished runs only (analysis.load.finished)."""
    learnings = learning(results)
    tests = reward_tests(learnings)
    for group in groups(results):
        tests += paper_tests(group_subset(results, group), group)
    return Evidence(results, learnings, make_family(tests))
