"""The leader rule, decided here and worded in the report (analysis.report.verdict's leader sentence, the
answer's third sentence): which objective of a group leads at equal compute, or which rule names none.

A leader is named only when it learned on every seed and is ahead of every other objective of its group
by more than RESOLUTION with a Holm-adjusted exact sign-flip p below 5% (analysis.evidence.family): never
with fewer paired seeds than the family needs. Arms that are one objective by construction
(analysis.evidence.construction.same_gradient) count once: a comparison of the two tests nothing. Where no
leader is named, `Lead.why` says which rule held one back, read in this order: too few paired seeds for any
claim (FEW_SEEDS), the best by its outcome did not learn on every seed (ITS_START: its lead is where it
started), the best two differ by float rounding (ROUNDING), or no objective is ahead of every other
(NOT_AHEAD). Where a named lead holds by construction (the arm it rests on faces no mismatch where the
other meets one), `Lead.held` says so."""

from __future__ import annotations

from dataclasses import dataclass

from analysis.data.groups import Group
from analysis.evidence.construction import ByConstruction
from analysis.evidence.family import REWARD
from analysis.evidence.gather import Evidence
from analysis.evidence.learning import Learning
from analysis.stats.library import ALPHA, Paired

# A difference of outcomes below RESOLUTION is no difference: float rounding (1e-12 and below), far
# under the resolution of any reward a suite averages (a final training reward is a mean of at most
# ~10^5 responses: steps of its last 25% x responses a step; a held-out score, limit x samples).
RESOLUTION = 1e-6

# why a lead is named or not (Lead.why), in the order the rules are read
LEADS, FEW_SEEDS, ITS_START, ROUNDING, NOT_AHEAD = "leads", "few seeds", "its start", "rounding", "not ahead"


@dataclass(frozen=True)
class Lead:
    """The two objectives with the highest mean outcome, their paired comparison (`best - second`) and
    its Holm-adjusted p; `leader`: the objective that learned and is ahead of every other by more than
    RESOLUTION at Holm p < 5%, if one is, with the largest of its adjusted p-values (then `best` is the
    leader and `second` the objective of that comparison: the one the claim rests on). `learned`: the
    objectives that learned on every seed; `why`: LEADS, or the rule that names no leader; `held`: where
    the named lead holds by construction."""

    best: str
    second: str
    means: tuple[float, float]
    result: Paired
    adjusted: float
    leader: str | None = None
    leader_p: float = float("nan")
    learned: tuple[str, ...] = ()
    why: str = NOT_AHEAD
    held: ByConstruction | None = None


def ahead(test: tuple[Paired, float] | None) -> bool:
    """Whether a comparison (first - second, Holm p) puts its first arm ahead: above RESOLUTION at p < 5%."""
    return test is not None and test[0].mean > RESOLUTION and test[1] < ALPHA


def distinct_arms(found: Learning, evidence: Evidence) -> list[str]:
    """The group's arms by outcome, highest first, less any arm that is one objective by construction with an
    arm before it (analysis.evidence.construction.same_gradient): a comparison of the two tests nothing."""
    ordered = [str(a) for a in found.arms.sort_values("final", ascending=False, kind="stable").index]
    return [a for i, a in enumerate(ordered)
            if not any(evidence.same_gradient(found.group, b, a) for b in ordered[:i])]


def why_none(result: Paired, adjusted: float, best: str, learned: tuple[str, ...], needed: int) -> str:
    """The rule that names no leader where none leads (see the module), in its order."""
    if result.n < needed:
        return FEW_SEEDS
    if adjusted < ALPHA and best not in learned and result.mean > RESOLUTION:
        return ITS_START
    if adjusted < ALPHA and abs(result.mean) <= RESOLUTION:
        return ROUNDING
    return NOT_AHEAD


def lead(found: Learning, evidence: Evidence) -> Lead | None:
    """The comparison behind the leader sentence of one group (None with fewer than two objectives, arms that
    are one objective by construction counted once: distinct_arms). Only an objective that learned on every
    seed may lead: one that did not leads by where it started."""
    arms = found.arms.loc[distinct_arms(found, evidence)]
    if len(arms) < 2:
        return None
    family, group, learned = evidence.family, found.group, tuple(found.learned)
    for first in (a for a in arms.index if a in found.learned):
        tests = {other: family.find(group, REWARD, first, other) for other in arms.index if other != first}
        if all(ahead(t) for t in tests.values()):
            closest = max(tests, key=lambda other: tests[other][1])  # type: ignore[index]  # every test is found (ahead)
            result, leader_p = family.tested(group, REWARD, first, closest)
            construction = evidence.by_construction(group, first, closest)
            held = construction if construction is not None and construction.free == first else None
            return Lead(first, closest, (arms.loc[first, "final"], arms.loc[closest, "final"]), result, leader_p, first,
                        leader_p, learned, LEADS, held)
    best, second = arms.index[:2]
    result, adjusted = family.tested(group, REWARD, best, second)
    return Lead(best, second, (arms.loc[best, "final"], arms.loc[second, "final"]), result, adjusted,
                learned=learned, why=why_none(result, adjusted, best, learned, family.needed))


def leads(evidence: Evidence) -> dict[Group, Lead | None]:
    """Each group's lead where RL learned there (lead: None with one objective); groups where nothing
    learned are left out: nothing is compared there."""
    return {group: lead(found, evidence) for group, found in evidence.learnings.items() if found.learned}
