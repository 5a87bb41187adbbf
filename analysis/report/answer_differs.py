"""The answer's third sentence: what differs, and how sure the test is at this n. Without a declared
family, the leader rule's outcome (analysis.evidence.leader) in words; with one, how many declared
comparisons are decided and what holds the others back (analysis.evidence.declared); with a stability map,
each arm's place on the dose axis (analysis.report.map_answer). A lead or decided comparison that holds by
construction says so, with why in an item under the sentence; two arms that are one objective by
construction are said to be, once each."""

from __future__ import annotations

import numpy as np

from analysis.data.groups import Group
from analysis.evidence.declared import DECIDED, NOT_NAMED, UNTESTED, WITHHELD, Judged, judged, standing
from analysis.evidence.family import FEW, REWARD, TIE
from analysis.evidence.gather import Evidence
from analysis.evidence.leader import FEW_SEEDS, ITS_START, LEADS, ROUNDING, lead, leads
from analysis.evidence.learning import Learning
from analysis.evidence.placement import BEYOND, FALLING, UNBOUNDED, pair_tests, placements, why_no_boundary
from analysis.evidence.stability import AXIS_NAMES, KL_FLOOR, PER_RESPONSE, Boundary, StabilityMap
from analysis.report import anchors
from analysis.report.anchors import COMPARISONS, FOREST, NUMBERS, PRIMARY
from analysis.report.answer_words import (
    figure_links,
    group_count,
    group_in,
    holm_words,
    map_link,
    names,
    number_row,
)
from analysis.report.construction_text import (
    HOLDS,
    decided_item,
    row_note,
    same_item,
    settings_text,
    standing_words,
)
from analysis.report.escape import escape
from analysis.report.map_answer import (
    degenerate_rows,
    dose_rows,
    map_items,
    map_lead,
    pair_rows,
    placement_rows,
)
from analysis.report.page import Sentence
from analysis.report.stability_text import kl_text, span_text
from analysis.report.texts import count, difference_text, p_text


def leader_clause(found: Learning, evidence: Evidence) -> tuple[str, list[dict]]:
    """The leader rule (analysis.evidence.leader) in words, as analysis.report.verdict.leader_sentence says it,
    and the comparison it rests on."""
    if not found.learned:
        return "nothing is compared", []
    best = lead(found, evidence)
    if best is None:
        return "one objective only: nothing to compare", []
    a, b, n = escape(best.best), escape(best.second), best.result.n
    row = number_row(3, f"{best.best} minus {best.second}, final {found.source.kind}, paired by seed",
               difference_text(best.result), holm_words(evidence).removeprefix("the "),
               f"p = {p_text(best.result.p, n)}, Holm-adjusted {p_text(best.adjusted)}")
    if best.why == LEADS:
        held = best.held
        row = {**row, "result": row["result"] + (f"; {row_note(held)}" if held else "")}
        return (f"**{escape(best.best)} ends above every other objective**{f', {HOLDS}' if held else ''}, decided by "
                f"{holm_words(evidence)}"), [row]
    if best.why == FEW_SEEDS:
        return (f"no objective is ahead of every other yet: {a} and {b} end highest, and {count(n, 'paired seed')} "
                "cannot separate them whatever the data"), [row]
    if best.why == ITS_START:
        return f"no leader: {a} ends highest but did not learn on every seed, so its lead is where it started", [row]
    if best.why == ROUNDING:
        return f"no leader: {a} and {b} end equal, below the reward's resolution", [row]
    return (f"no objective is ahead of every other: {a} and {b}, the best two, are not distinguishable at "
            f"{count(n, 'paired seed')} by {holm_words(evidence)}"), [row]



def leader_items(evidence: Evidence) -> tuple[Sentence, ...]:
    """Under the leader sentence: for each named leader whose lead holds by construction, why (in plain words)."""
    items = []
    for group, best in leads(evidence).items():
        where = f"At {escape(evidence.title(group))}: " if len(evidence.groups) > 1 else ""
        if best is not None and best.held is not None:
            items.append(Sentence(where + decided_item(best.held), (("numbers", NUMBERS),)))
    return tuple(items)



def leader_text(evidence: Evidence) -> tuple[str, list[dict]]:
    """One group: its leader clause. Several: in how many groups (sweep points, suites) a leader is named, and which."""
    if len(evidence.groups) == 1:
        return leader_clause(next(iter(evidence.learnings.values())), evidence)
    named, rows = [], []
    found_leads = leads(evidence)
    for group, found in evidence.learnings.items():
        _, found_rows = leader_clause(found, evidence)
        best = found_leads.get(group)
        rows += [{**r, "what": f"{evidence.title(group)}: {r['what']}"} for r in found_rows]
        if best is not None and best.why == LEADS:
            named.append(f"{escape(best.best)} at {escape(evidence.title(group))}" + (f", {HOLDS}" if best.held else ""))
    at = group_in(evidence.groups)
    if not named:
        return (f"no objective is ahead of every other {at} any of the {group_count(evidence.groups)} by "
                f"{holm_words(evidence)}"), rows
    return (f"a leader is named {at} {len(named)} of {group_count(evidence.groups)} "
            f"({'; '.join(named)}) by {holm_words(evidence)}"), rows



STATUS = {WITHHELD: "not tested", UNTESTED: "not tested", ROUNDING: "not named", NOT_NAMED: "not named", FEW: FEW,
          TIE: TIE}



def primary_status(found: Judged) -> str:
    """A declared comparison's verdict (analysis.evidence.declared) in a few words: "X ends above Y", or why not."""
    if found.state == DECIDED:
        return f"{escape(found.above)} ends above {escape(found.below)}"
    return STATUS[found.state]



def primary_rows(evidence: Evidence, verdicts: list[Judged]) -> list[dict]:
    """The numbers of the declared comparisons, one row each; where one arm faces no mismatch by
    construction, the run-median KLs that say so beside its result."""
    rows = []
    for found in verdicts:
        t, held = found.test, found.construction
        rows.append(number_row(3, f"{t.first} minus {t.second} (declared), final {evidence.learnings[t.group].source.kind}",
                         difference_text(found.result), holm_words(evidence).removeprefix("the "),
                         f"{primary_status(found)}; Holm-adjusted p = {p_text(found.adjusted)}"
                         + (f"; {row_note(held)}" if held else "")))
    return rows



def primary_text(evidence: Evidence) -> tuple[str, list[dict], tuple[Sentence, ...]]:
    """The declared family: which comparisons are decided (those that hold by construction said so, with
    an item under the sentence giving why), and what holds the others back."""
    verdicts = judged(evidence)
    statuses = [primary_status(found) for found in verdicts]
    decided = [primary_status(j) + (f", {HOLDS}" if j.held else "") for j in verdicts if j.state == DECIDED]
    items = tuple(Sentence(decided_item(j.construction), (("numbers", NUMBERS),)) for j in verdicts
                  if j.held and j.construction)
    rest = {label: statuses.count(label) for label in (TIE, FEW, "not named", "not tested") if label in statuses}
    n = max((t.result.n for t in evidence.primary), default=0)
    held_back = {TIE: f"not distinguishable at {count(n, 'paired seed')}", FEW: "short of the seeds a decision needs",
                 "not named": "not named (the arm above did not learn on every seed)",
                 "not tested": "not tested (nothing learned, or no finished runs)"}

    def be(k: int) -> str:
        return "is" if k == 1 else "are"

    parts = [f"{len(decided)} {be(len(decided))} decided" + (f" ({'; '.join(decided)})" if decided else "")]
    parts += [f"{k} {be(k)} {held_back[label]}" for label, k in rest.items()]
    return (f"of the {count(len(statuses), 'comparison')} declared in the suite file, " + ", ".join(parts),
            primary_rows(evidence, verdicts), items)



def fit_result(found: Boundary) -> str:
    """An arm's fit in the numbers table, by the guard every reading of a fit goes through
    (analysis.evidence.placement.why_no_boundary): a slope not distinguishable from 0, a falling one or a
    crossing outside the doses measured is no boundary, said so; values past a float's range in words (kl_text)."""
    assert found.fit is not None
    name, unit = AXIS_NAMES[found.axis], " per token" if found.axis in PER_RESPONSE else ""
    center, low, high = found.fit.crossing()
    note = why_no_boundary(found)
    if note == UNBOUNDED:
        return (f"no boundary: the fit's slope, {found.fit.slope:.3g} per log10 {name}, is not distinguishable from 0 "
                "at 5% (95% Fieller interval unbounded)")
    if note == FALLING:
        return (f"no boundary: failures do not rise with the dose (the fit's slope, {found.fit.slope:.3g} per log10 "
                f"{name}, is negative; it crosses P(failure) = 0.5 at {kl_text(center)}{unit}, falling)")
    beyond = " (outside the doses measured: not a boundary)" if note == BEYOND else ""
    return f"P(failure) = 0.5 at {name} {kl_text(center)}{unit}{beyond}, 95% Fieller interval [{kl_text(low)}, {kl_text(high)}]"



def stability_rows(found: StabilityMap) -> list[dict]:
    rows = []
    for b in found.bounds:
        name, unit = AXIS_NAMES[b.axis], " per token" if b.axis in PER_RESPONSE else ""
        if b.failures == 0:
            where = f" in each of its {b.cells} cells" if b.cells > 1 else ""
            result = f"failure rate at most {100 * b.bound:.3g}%{where} at 95% (exact one-sided Clopper-Pearson)"
        elif b.fit is not None:
            result = fit_result(b)
        else:
            result = f"no fit: {b.why_no_fit}"
        kls = span_text(b) if np.isfinite(b.kl_high) else f"no {name} above {KL_FLOOR:g}"  # none on the axis: no range
        rows.append(number_row(3, f"{b.arm}: runs degraded or collapsed; {name} measured", f"{b.failures} of {b.runs}; {kls}",
                         f"stability map: logistic fit of failure in log10 {name}{unit}", result))
    return rows



def same_gradient_items(evidence: Evidence) -> tuple[tuple[Sentence, ...], list[dict]]:
    """Under the third sentence, each pair of arms that is one objective by construction
    (analysis.evidence.construction.same_gradient), once, with the groups where it is where not every group;
    and a numbers row per group with the recorded settings it rests on and the comparison that tests nothing."""
    groups: dict[tuple[str, str], list[Group]] = {}
    items, rows = [], []
    for group in evidence.groups:
        where = f"{evidence.title(group)}: " if len(evidence.groups) > 1 else ""
        for same in evidence.same_gradients(group):
            if (same.gspo, same.token) not in groups:
                items.append(same)
            groups.setdefault((same.gspo, same.token), []).append(group)
            read = evidence.family.read(group, REWARD, same.gspo, same.token)
            result = ("not compared: no objective learned" if read is None else
                      f"final difference {difference_text(read[0])}, p = {p_text(read[0].p, read[0].n)}"
                      + (" (exploratory)" if np.isnan(read[1]) else f", Holm-adjusted {p_text(read[1])}"))
            rows.append(number_row(3, f"{where}{same.gspo} and {same.token}: one objective by construction",
                             settings_text(same), "the run records: GSPO-token with A_i,t = A_i is GSPO (eq. 13-15); a "
                             "difference between the runs is float rounding carried through training",
                             result))
    sentences = []
    for same in items:
        at = groups[(same.gspo, same.token)]
        where = "" if len(at) == len(evidence.groups) else f"At {names([evidence.title(g) for g in at])}: "
        stands = {standing_words(standing(evidence, g, same.gspo, same.token)) for g in at}  # said only where it is alike at every group
        sentences.append(Sentence(where + same_item(same, stands.pop() if len(stands) == 1 else ""), (("numbers", NUMBERS),)))
    return tuple(sentences), rows



def declared_pairs(evidence: Evidence) -> list[tuple[str, str]]:
    """The declared family's pairs of arms (analysis.evidence.primary), as the report names the arms; [] without one."""
    return [pair for declaration in evidence.declared.values() for pair in declaration.comparisons()]


def differs_sentence(evidence: Evidence, stability: StabilityMap | None, figures: set[str]) -> tuple[Sentence, list[dict]]:
    """A swept suite with a stability map answers per arm; a declared family by its comparisons; else the leader."""
    if stability is not None:
        links = (("table", anchors.STABILITY), *(link for name in (anchors.CHANGE_VS_KL, anchors.COLLAPSE_PROBABILITY)
                                                 for link in map_link(name, figures)))
        placed = placements(stability)
        tests = pair_tests(stability.classes, declared_pairs(evidence))
        rows = [row for first, p in zip(stability_rows(stability), placed, strict=True)
                for row in (first, *placement_rows(p))] + dose_rows(stability.classes)
        rows += degenerate_rows(stability) + pair_rows(tests)
        same, same_rows = same_gradient_items(evidence)
        return Sentence(map_lead(placed, stability.classes), (*links, ("numbers", NUMBERS)),
                        map_items(placed, (("numbers", NUMBERS),), tests, stability) + same), rows + same_rows
    items: tuple[Sentence, ...] = ()
    if evidence.declared:
        clause, rows, items = primary_text(evidence)
        links = (("table", PRIMARY), *figure_links(figures, FOREST))
    else:
        (clause, rows), items = leader_text(evidence), leader_items(evidence)
        links = (("comparisons", COMPARISONS), *figure_links(figures, "fig1_reward_vs_compute"))
    same, same_rows = same_gradient_items(evidence)
    return Sentence(clause[0].upper() + clause[1:] + ".", (*links, ("numbers", NUMBERS)), items + same), rows + same_rows
