"""What the report compares within: one suite at one sweep point, a group. Objectives are paired by
seed within a group only (two suites, or two sweep points, differ in more than the objective), and
every group gets its own answer, learnability gate and paper checks."""

from __future__ import annotations

from analysis.data.load import Results

Group = tuple[str, str]  # (suite, sweep point); the sweep point is "" without a sweep


def groups(results: Results) -> list[Group]:
    """The groups of `results`, in suite order."""
    return list(dict.fromkeys(zip(results.runs["suite"], results.runs["facet"])))


def group_subset(results: Results, group: Group) -> Results:
    """The runs of one group, with their rows of every table."""
    suite, facet = group
    return results.select((results.runs["suite"] == suite) & (results.runs["facet"] == facet))


def group_title(group: Group, every: list[Group]) -> str:
    """How the report names a group among `every` group it shows: "" for the only one, the sweep point
    for one suite, the suite for one sweep point, else both."""
    suite, facet = group
    if len(every) <= 1:
        return ""
    if len({g[0] for g in every}) == 1:
        return facet
    return f"suite {suite}" + (f", {facet}" if facet else "")


def group_key(group: Group) -> str:
    """One text per group, never the same for two: a suite name holds no "|" (it is a folder name)."""
    return f"{group[0]}|{group[1]}"
