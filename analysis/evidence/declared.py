"""The verdict on each comparison a suite file declares (analysis.evidence.primary), decided here and
worded in the report (analysis.report.verdict, the answer's third sentence, the primary table).

A declared comparison's state, read in this order: WITHHELD where no objective of its group learned,
UNTESTED where an arm has no finished run (both counted in Holm's family at p = 1); then by the family's
outcome (analysis.evidence.family): a Holm-adjusted p below 5% is ROUNDING where the two differ by no more
than RESOLUTION (float rounding), NOT_NAMED where the arm that ends above did not learn on every seed (where
it ends is where it started), else DECIDED (`held` where that arm faces no mismatch by construction while the
other meets one: analysis.evidence.construction); otherwise FEW (too few paired seeds for this family) or
TIE (not distinguishable).

Where a comparison stands in the family (`standing`): IN_FAMILY (Holm-adjusted), EXPLORATORY (outside a
declared family: unadjusted p, no claim), or None where it is not made (no objective learned)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from analysis.data.groups import Group
from analysis.evidence.construction import ByConstruction
from analysis.evidence.family import NO, REWARD, YES, Test
from analysis.evidence.gather import Evidence
from analysis.evidence.leader import RESOLUTION, ROUNDING, leads
from analysis.stats.library import Paired

WITHHELD, UNTESTED, NOT_NAMED, DECIDED = "withheld", "not tested", "not named", "decided"  # and ROUNDING (leader)
IN_FAMILY, EXPLORATORY = "in the family", "exploratory"


@dataclass(frozen=True)
class Judged:
    """One declared comparison judged: its test (`result`: first - second, `adjusted`: its Holm p over the
    declared family), its `state` (see the module), the family's `outcome` (YES / NO / FEW / TIE) where it
    was tested, the arm that ends `above` (and `below`) where the outcome is YES or NO, the comparison's
    `construction` where one arm faces no mismatch by it, and `held`: DECIDED with the arm above that arm."""

    test: Test
    result: Paired
    adjusted: float
    state: str
    outcome: str | None = None
    above: str = ""
    below: str = ""
    construction: ByConstruction | None = None
    held: bool = False


def decided_state(result: Paired, above: str, learned: list[str]) -> str:
    """A comparison whose Holm p is below 5%: ROUNDING, NOT_NAMED or DECIDED (see the module)."""
    if abs(result.mean) <= RESOLUTION:
        return ROUNDING
    return DECIDED if above in learned else NOT_NAMED


def judge(test: Test, evidence: Evidence) -> Judged:
    """One declared comparison's verdict (see the module)."""
    found = evidence.learnings[test.group]
    result, adjusted = evidence.family.tested(test.group, test.quantity, test.first, test.second)
    construction = evidence.by_construction(test.group, test.first, test.second)
    if not found.learned:
        return Judged(test, result, adjusted, WITHHELD, construction=construction)
    if not result.n:
        return Judged(test, result, adjusted, UNTESTED, construction=construction)
    outcome = evidence.family.outcome(result, adjusted)
    if outcome not in (YES, NO):
        return Judged(test, result, adjusted, outcome, outcome, construction=construction)
    above, below = (test.first, test.second) if outcome == YES else (test.second, test.first)
    state = decided_state(result, above, found.learned)
    held = state == DECIDED and construction is not None and construction.free == above
    return Judged(test, result, adjusted, state, outcome, above, below, construction, held)


def judged(evidence: Evidence) -> list[Judged]:
    """Every declared comparison's verdict, in the order declared ([] without a declared family)."""
    return [judge(test, evidence) for test in evidence.primary]


def undecided(evidence: Evidence) -> bool:
    """Whether a comparison the answer rests on is left open: a declared one not DECIDED, or, without a
    declared family, a group where RL learned and no leader is named."""
    if evidence.declared:
        return any(j.state != DECIDED for j in judged(evidence))
    return any(found is not None and found.leader is None for found in leads(evidence).values())


def standing(evidence: Evidence, group: Group, first: str, second: str) -> str | None:
    """Where the final-reward comparison of two arms stands: IN_FAMILY, EXPLORATORY, or None where it is not
    made (no objective of the group learned)."""
    read = evidence.family.read(group, REWARD, first, second)
    if read is None:
        return None
    return EXPLORATORY if math.isnan(read[1]) else IN_FAMILY

