"""The answer's fifth sentence: what to run for a decision. How many paired seeds the exact sign-flip
test needs under Holm at this family's size (analysis.evidence.family), whether the comparisons the answer
rests on are decided (analysis.evidence.declared.undecided), or for a stability map, where more runs would
place each unplaced boundary."""

from __future__ import annotations

from analysis.evidence.declared import undecided
from analysis.evidence.gather import Evidence
from analysis.evidence.placement import BOUNDARY, placements
from analysis.evidence.stability import AXIS, AXIS_NAMES, StabilityMap
from analysis.report import anchors
from analysis.report.anchors import COMPARISONS, NUMBERS
from analysis.report.answer_words import SIGN_FLIP, group_count, group_in, names, number_row
from analysis.report.page import Sentence
from analysis.report.texts import count
from analysis.stats.library import ALPHA, smallest_p


def seeds_flag(n: int) -> str:
    return "`--seeds " + ",".join(map(str, range(n))) + "`"



def stability_decision(stability: StabilityMap) -> Sentence:
    """Where more runs would place each arm's boundary: past the KL measured where none failed, more seeds
    where some did but too few to place it (no fit, an unbounded interval, a crossing beyond the data)."""
    links = (("table", anchors.STABILITY), ("numbers", NUMBERS))
    placed = {p.arm for p in placements(stability) if p.kind == BOUNDARY}
    open_ = [b for b in stability.bounds if b.arm not in placed]
    if not open_:
        return Sentence("Each arm's boundary is placed: more seeds in the cells near it narrow its interval.", links)
    never = [b.arm for b in open_ if b.failures == 0]
    few = [b.arm for b in open_ if b.failures > 0]
    parts = ([f"sweep {names(never)} past the largest {AXIS_NAMES[AXIS]} measured"] if never else []) + (
        [f"run more seeds of {names(few)} in and beyond the cells where its runs failed"] if few else [])
    return Sentence(f"For a decision on where a boundary lies, {' and '.join(parts)}.", links)



def decision_sentence(evidence: Evidence, stability: StabilityMap | None) -> tuple[Sentence, list[dict]]:
    """How many paired seeds the exact sign-flip test needs under Holm at this family's size, or for a
    stability map, where more runs would place each unplaced boundary."""
    if stability is not None:
        return stability_decision(stability), []
    m, needed = evidence.family.size, evidence.family.needed
    learned = any(found.learned for found in evidence.learnings.values())
    if m == 0:  # one objective (in each group): no comparison, so no number of seeds decides one
        alone = "one objective" + (f" {group_in(evidence.groups)} each of the {group_count(evidence.groups)}"
                                   if len(evidence.groups) > 1 else "")
        start = ("Nothing is compared" if learned else "For a decision, first get RL to pass the learnability test "
                 "on every seed (a larger budget); nothing is compared")
        return Sentence(f"{start} here ({alone}), so no number of paired seeds is advised: add an objective to "
                        "compare it with.", (("numbers", NUMBERS),)), []
    n = int(min(found.arms["seeds"].min() for found in evidence.learnings.values()))
    rows = [number_row(5, "paired seeds: these runs / a decision needs", f"{n} / {needed}",
                 f"{SIGN_FLIP}, Holm over {count(m, 'comparison')}",
                 f"smallest p {n} paired seeds can give: {smallest_p(n):.2g}")]
    links = (("comparisons", COMPARISONS), ("numbers", NUMBERS))
    if not learned:
        return Sentence(f"For a decision, first get RL to pass the learnability test on every seed (a larger budget), "
                        f"then run {needed} paired seeds, as many as the {SIGN_FLIP}, Holm-adjusted over "
                        f"{count(m, 'comparison')}, needs.", links), rows
    if n < needed:
        return Sentence(f"For a decision, run {needed} paired seeds ({seeds_flag(needed)}): with {n}, the {SIGN_FLIP}, "
                        f"Holm-adjusted over {count(m, 'comparison')}, cannot reach p below {ALPHA:g}.", links), rows
    if undecided(evidence):
        return Sentence(f"At {count(n, 'paired seed')} the {SIGN_FLIP}, Holm-adjusted over {count(m, 'comparison')}, "
                        "can decide; the comparisons it left open need more seeds, as their intervals show.", links), rows
    return Sentence(f"Decided at {count(n, 'paired seed')} by the {SIGN_FLIP}, Holm-adjusted over "
                    f"{count(m, 'comparison')}; the table gives every interval.", links), rows
