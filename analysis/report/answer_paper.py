"""The answer's fourth sentence: what the paper says and whether this run agrees. Over the groups, the
paper's findings the family tested (analysis.report.paper_checks) by outcome: confirmed, the opposite, no
difference, too few seeds; beside them the findings every seed points the paper's way on (a count of signs,
never instead of the test). Where the paper checks are exploratory or cannot be made, why."""

from __future__ import annotations

import numpy as np

from analysis.data.groups import Group
from analysis.evidence.family import FEW, NO, REWARD, TIE, YES
from analysis.evidence.gather import Evidence
from analysis.evidence.paper import CLIP, DEPTH, DRIFT_ONE, arms, paper_tests
from analysis.report import anchors
from analysis.report.anchors import NUMBERS
from analysis.report.answer_words import figure_links, holm_words, names, number_row
from analysis.report.page import Sentence
from analysis.report.paper_checks import paper_checks
from analysis.report.texts import count, p_text

# the paper's findings in a few words, by the check's figure (analysis.report.paper_checks.paper_checks)
FINDINGS = {"fig2_clip_fraction": "GSPO clips more tokens than GRPO", "drift": "5% or more of GRPO's experts change "
            "per update", "depth": "deeper layers drift more", "fig3_routing_replay": "Routing Replay raises GRPO's "
            "reward", "fig1_reward_vs_compute": "GSPO ends above GRPO"}



NEEDS_BOTH = "that needs GRPO and GSPO runs"

EXPLORATORY_PAPER = ("The paper's findings are exploratory here: the suite file's declared family leaves them out, so "
                     "no claim is made from them.")



def finding(figure: str | None) -> str:
    return FINDINGS["depth" if (figure or "").startswith("drift_layers_") else figure or ""]



def every_seed_agrees(evidence: Evidence, group: Group) -> set[str]:
    """The findings every seed of the group points the paper's way on (each paired difference above 0): a
    count of signs, shown beside a test that cannot decide at this n, never instead of it."""
    subset = evidence.subset(group)
    a, found = arms(subset.runs), evidence.learnings[group]
    tests = {t.quantity: t.result for t in paper_tests(subset, group)}
    by_figure = {"fig2_clip_fraction": tests.get(CLIP), "drift": tests.get(DRIFT_ONE), "depth": tests.get(DEPTH)}
    if found.learned:
        for figure, first in (("fig3_routing_replay", a.grpo_rr), ("fig1_reward_vs_compute", a.gspo)):
            read = evidence.family.read(group, REWARD, first, a.grpo) if first and a.grpo else None
            by_figure[figure] = read[0] if read else None
    return {FINDINGS[f] for f, r in by_figure.items() if r is not None and r.n and bool(np.all(r.differences > 0))}



def paper_counts(evidence: Evidence) -> tuple[dict[str, list[str]], set[str], list[dict], list[str]]:
    """Over the groups: the findings per outcome, those every seed agrees with (in every group that tests
    them), the table's rows, and why groups were not checked."""
    by_outcome: dict[str, list[str]] = {YES: [], NO: [], TIE: [], FEW: []}
    agreeing: set[str] | None = None
    rows, unchecked = [], []
    for group, found in evidence.learnings.items():
        checks = paper_checks(evidence.subset(group), found, evidence.family)
        if checks is None:
            unchecked.append(NEEDS_BOTH)
            continue
        if not evidence.paper_in_family(group):
            unchecked.append(EXPLORATORY_PAPER)
            continue
        where = f"{evidence.title(group)}: " if len(evidence.groups) > 1 else ""
        tested_ = [c for c in checks if c.claim and c.outcome in by_outcome]
        for c in tested_:
            by_outcome[str(c.outcome)].append(finding(c.figure))
            rows.append(number_row(4, f"{where}{c.claim}", c.evidence or c.this_run, holm_words(evidence).removeprefix("the "),
                             f"{c.agrees}; p = {p_text(c.p, c.seeds)}, Holm-adjusted {p_text(c.holm)}"))
        seen = every_seed_agrees(evidence, group) & {finding(c.figure) for c in tested_}
        agreeing = seen if agreeing is None else agreeing & seen
    return by_outcome, agreeing or set(), rows, unchecked



def paper_sentence(evidence: Evidence, figures: set[str]) -> tuple[Sentence, list[dict]]:
    by_outcome, agreeing, rows, unchecked = paper_counts(evidence)
    tested = sum(map(len, by_outcome.values()))
    links = (("table", anchors.paper(evidence.groups[0], len(evidence.groups) == 1)),
             *figure_links(figures, "fig2_clip_fraction"), ("numbers", NUMBERS))
    if not tested:
        if unchecked and unchecked[0] == EXPLORATORY_PAPER:
            return Sentence(EXPLORATORY_PAPER, links), rows
        why = unchecked[0] if unchecked else "no objective learned and nothing else was measured"
        return Sentence(f"The paper's findings are not checked here: {why}.", () if why == NEEDS_BOTH else links), rows
    said = [f"confirms {names(sorted(set(by_outcome[YES])))}"] if by_outcome[YES] else []
    said += [f"shows the opposite of {names(sorted(set(by_outcome[NO])))}"] if by_outcome[NO] else []
    said += [f"finds no difference for {count(len(by_outcome[TIE]), 'finding')}"] if by_outcome[TIE] else []
    few = len(by_outcome[FEW])
    said += [("has too few seeds to decide any" if few == tested else f"has too few seeds to decide {few} more")] \
        if few else []
    undecided = sorted(agreeing - set(by_outcome[YES]))
    also = ""
    if undecided:  # two named fit in the sentence; more are counted (the table names them)
        also = (f"; on every seed, {names(undecided)}, as the paper reports" if len(undecided) <= 2
                else f"; every seed points the paper's way on {len(undecided)} of them")
    text = f"Of the paper's {count(tested, 'finding')} tested here, this run {', '.join(said)}{also}."
    return Sentence(text, links), rows
