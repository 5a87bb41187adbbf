"""The answer a reader wants first, as sentences generated from the numbers, per group (suite and
sweep point): what the objectives are compared on and against which chance level, whether RL learned
at all, which objective leads at equal compute, and which of the paper's phenomena these runs show.
Every sentence links to the table or figure it reads.

A leader is named only when it is ahead of every other objective of its group with a Holm-adjusted
exact sign-flip p below 5% (analysis.evidence.family): never with fewer than 6 paired seeds, and more when the
report makes more comparisons; otherwise the sentence says how many paired seeds the claim needs.
Nothing is named where no objective learned, and unfinished runs are never set against finished ones.

Where the suite file declares a primary family (analysis.primary), no leader sentence is written: the
answer states the family and where it was declared, then says of each declared comparison whether it
is decided (Holm-adjusted p below 5%, naming the arm that ends above) or how many paired seeds it would
need; the other comparisons are exploratory and no sentence claims anything from them.

Sentence text is markdown: user text (labels, messages) goes in through `analysis.report.escape.escape`."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from pathlib import Path

import pandas as pd

from analysis.data.groups import Group
from analysis.data.load import why_unfinished
from analysis.data.matching import MATCH_TOLERANCE
from analysis.evidence.construction import ByConstruction, SameGradient
from analysis.evidence.family import FEW, NO, REWARD, TIE, YES, Test
from analysis.evidence.gather import Evidence
from analysis.evidence.learning import HELD_OUT, Learning
from analysis.evidence.primary import Declaration
from analysis.report import anchors
from analysis.report.construction_text import (
    HOLDS,
    construction_clause,
    control_words,
    same_clause,
    same_item,
)
from analysis.report.escape import escape
from analysis.report.paper_checks import WITHHELD, Check, paper_checks
from analysis.report.texts import count, difference_text, p_text
from analysis.stats.library import ALPHA, Paired, smallest_p

# A difference of outcomes below RESOLUTION is no difference: float rounding (1e-12 and below), far
# under the resolution of any reward a suite averages (a final training reward is a mean of at most
# ~10^5 responses: steps of its last 25% x responses a step; a held-out score, limit x samples).
RESOLUTION = 1e-6
LEARNABILITY = "learnability"
COMPARISONS = "comparisons"
UNFINISHED = "unfinished-runs"
PRIMARY = "primary-comparisons"
EXPLORATORY_TABLE = "exploratory-comparisons"
FOREST = "forest_primary"  # the figure of the declared comparisons


@dataclass(frozen=True)
class Sentence:
    """Markdown text (bold allowed) and the (link text, anchor) pairs it points to; `items`: sentences
    listed under it (a swept suite's answer per arm), each with its own links."""

    text: str
    links: tuple[tuple[str, str], ...]
    items: tuple[Sentence, ...] = ()


@dataclass(frozen=True)
class Lead:
    """The two objectives with the highest mean outcome, their paired comparison (`best - second`) and
    its Holm-adjusted p; `leader`: the objective that learned and is ahead of every other by more than
    RESOLUTION at Holm p < 5%, if one is, with the largest of its adjusted p-values (then `best` is the
    leader and `second` the objective of that comparison: the one the claim rests on). `learned`: the
    objectives that learned on every seed."""

    best: str
    second: str
    means: tuple[float, float]
    result: Paired
    adjusted: float
    leader: str | None = None
    leader_p: float = float("nan")
    learned: tuple[str, ...] = ()


def _ahead(test: tuple[Paired, float] | None) -> bool:
    return test is not None and test[0].mean > RESOLUTION and test[1] < ALPHA


def distinct_arms(found: Learning, evidence: Evidence) -> list[str]:
    """The group's arms by outcome, highest first, less any arm that is one objective by construction with an
    arm before it (analysis.evidence.construction.same_gradient): a comparison of the two tests nothing."""
    ordered = [str(a) for a in found.arms.sort_values("final", ascending=False, kind="stable").index]
    return [a for i, a in enumerate(ordered)
            if not any(evidence.same_gradient(found.group, b, a) for b in ordered[:i])]


def lead(found: Learning, evidence: Evidence) -> Lead | None:
    """The comparison behind the leader sentence of one group (None with fewer than two objectives, arms that
    are one objective by construction counted once: distinct_arms). Only an objective that learned on every
    seed may lead: one that did not leads by where it started."""
    arms = found.arms.loc[distinct_arms(found, evidence)]
    if len(arms) < 2:
        return None
    family, group = evidence.family, found.group
    best, second = arms.index[:2]
    for first in (a for a in arms.index if a in found.learned):
        tests = {other: family.find(group, REWARD, first, other) for other in arms.index if other != first}
        if all(_ahead(t) for t in tests.values()):
            closest = max(tests, key=lambda other: tests[other][1])  # type: ignore[index]  # every test is found (_ahead)
            result, leader_p = family.tested(group, REWARD, first, closest)
            return Lead(first, closest, (arms.loc[first, "final"], arms.loc[closest, "final"]), result, leader_p, first,
                        leader_p, tuple(found.learned))
    result, adjusted = family.tested(group, REWARD, best, second)
    return Lead(best, second, (arms.loc[best, "final"], arms.loc[second, "final"]), result, adjusted,
                learned=tuple(found.learned))


def lead_by_construction(found: Lead | None, evidence: Evidence, group: Group) -> ByConstruction | None:
    """Where a named leader's claim holds by construction (analysis.evidence.construction): the comparison it
    rests on (with `second`, its largest Holm p) sets the leader, facing no mismatch, against an arm that
    meets one. The claim is as strong as that comparison, so where it holds by construction, so does the lead."""
    if found is None or found.leader is None:
        return None
    construction = evidence.by_construction(group, found.best, found.second)
    return construction if construction is not None and construction.free == found.leader else None


def standing(evidence: Evidence, group: Group, same: SameGradient) -> str:
    """Where the comparison of two arms that are one objective by construction stands, for same_item: kept in
    Holm's family (every pair is, or the declared family holds it), exploratory, or not made (no objective learned)."""
    read = evidence.family.read(group, REWARD, same.gspo, same.token)
    if read is None:
        return ""
    return " (it stays among the exploratory comparisons)" if math.isnan(read[1]) else " (it stays counted in Holm's family)"


def _compute_words(spread: float, allow_unmatched: bool) -> str:
    if allow_unmatched and spread > MATCH_TOLERANCE:
        return f"at unmatched compute (spread {spread:.1%}, allowed by flag)"
    return "at equal compute"


def leader_sentence(found: Lead | None, evidence: Evidence, compute: str, where: str, links: tuple,
                    construction: ByConstruction | None = None) -> Sentence:
    """The leader, or why none is named; `construction`: where the lead holds by construction
    (lead_by_construction), said after it."""
    if found is None:
        return Sentence(f"{where}One objective only: nothing to compare.", links)
    a, b = escape(found.best), escape(found.second)
    m, n = evidence.family.size, found.result.n
    tested = (f"{difference_text(found.result)} over {count(n, 'paired seed')}, p = {p_text(found.result.p, n)} "
              f"(Holm-adjusted over the report's {count(m, 'comparison')}: {p_text(found.adjusted)})")
    pair = f"{a} minus {b} (the best two), paired by seed: {tested}"
    if found.leader is not None:
        leader = escape(found.leader)
        return Sentence(f"{where}**{leader} leads {compute}** (Holm-adjusted p = {p_text(found.leader_p)}, the largest "
                        f"over its comparisons with every other objective; {count(m, 'comparison')} in the report): "
                        f"it rests on {a} minus {b}, paired by seed: {tested}; "
                        f"P({a} > {b}) = {found.result.poi:.2g}." + (
                            f" The lead holds by construction: {control_words(construction)}." if construction else ""),
                        links)
    if n < evidence.family.needed:
        return Sentence(f"{where}**No leader named {compute}**: {pair}. {count(n, 'paired seed')} cannot give a p "
                        f"below {smallest_p(n):.2g}; with {count(m, 'comparison')} a leader needs at least "
                        f"{evidence.family.needed} paired seeds.", links)
    if found.adjusted < ALPHA and found.best not in found.learned and found.result.mean > RESOLUTION:
        return Sentence(f"{where}**No leader named {compute}**: {a}, the best by its outcome, did not learn "
                        f"on every seed (its lead is where it started): {pair}.", links)
    if found.adjusted < ALPHA and abs(found.result.mean) <= RESOLUTION:
        return Sentence(f"{where}**No leader named {compute}**: the best two differ by less than {RESOLUTION:g}, "
                        f"below the reward's resolution: {pair}.", links)
    return Sentence(f"{where}**No objective is ahead of every other {compute}** at a Holm-adjusted p below "
                    f"{ALPHA:g}: {pair}.", links)


def basis_sentence(found: Learning, where: str) -> Sentence:
    """What the group's objectives are compared on, and the task's chance level."""
    source = found.source
    why = f" (not the held-out reward: {source.why})" if source.why else ""
    chance = (f"; chance baseline of the task: {found.baseline.mean:.3g} ({escape(found.baseline.text)})"
              if found.baseline else "; the task declares no chance baseline")
    kind = "**held-out reward**" if source.kind == HELD_OUT else "**training reward**"
    return Sentence(f"{where}Objectives are compared on the {kind}: {escape(source.text)}{why}{chance}.",
                    (("learnability", LEARNABILITY),))


def learning_sentence(found: Learning, where: str) -> Sentence:
    arms = found.arms
    moves = "; ".join(f"{escape(a)} {r.start:.3g} -> {r.final:.3g} ({r.learned_seeds} of {count(r.seeds, 'seed')} rose)"
                      for a, r in arms.iterrows())
    if not found.learned:
        return Sentence(f"{where}**No objective learned** (start -> final, one-sided 5% test per seed: {moves}): "
                        "which objective leads is not asked, and rewards are not compared.", (("table", LEARNABILITY),))
    not_all = [a for a in arms.index if a not in found.learned]
    rest = f"; not on every seed: {', '.join(map(escape, not_all))}" if not_all else ""
    return Sentence(f"{where}RL learned ({moves}): on every seed for {', '.join(map(escape, found.learned))}{rest}.",
                    (("table", LEARNABILITY),))


_SHOWN = {YES: "**shown**", NO: "**not shown**: these runs show the opposite",
          TIE: "**not shown**: no difference at a Holm-adjusted p below 0.05"}


def phenomenon_sentence(check: Check, evidence: Evidence, where: str, links: tuple) -> Sentence:
    if check.this_run == WITHHELD:
        state = "**withheld**: no objective learned"
    elif check.outcome is None:
        state = f"**not measured** ({check.this_run})"
    elif check.outcome == FEW:
        state = (f"**too few seeds** ({check.seeds} paired; with {family_words(evidence)} "
                 f"{evidence.family.needed} are needed): {check.evidence or check.this_run}")
    else:
        state = (f"{_SHOWN[check.outcome]} ({check.evidence or check.this_run} over {count(check.seeds, 'seed')}; "
                 f"p = {p_text(check.p, check.seeds)}, Holm-adjusted {p_text(check.holm)})")
    return Sentence(f"{where}{check.claim}: {state}.", links)


def family_words(evidence: Evidence) -> str:
    """"the report's 3 comparisons", or with a declared family "the primary family's 5 tests"."""
    if evidence.declared:
        return f"the primary family's {count(evidence.family.size, 'test')}"
    return f"the report's {count(evidence.family.size, 'comparison')}"


def primary_sentence(test: Test, evidence: Evidence, where: str, links: tuple) -> Sentence:
    """One declared comparison (judged_sentence), and where one arm faces no mismatch by construction
    (analysis.evidence.construction): a decided one that the noise-free arm ends above holds by
    construction, said right after it; any other says which arm is the noise-free control."""
    found = evidence.by_construction(test.group, test.first, test.second)
    judged = judged_sentence(test, evidence, where, links, found)
    same = evidence.same_gradient(test.group, test.first, test.second)
    if same is not None:  # declared, and kept: said to test nothing
        judged = replace(judged, text=f"{judged.text} {same_clause(same)}")
    if found is None or HOLDS in judged.text:
        return judged
    return replace(judged, text=f"{judged.text} {construction_clause(found, False)}.")


def judged_sentence(test: Test, evidence: Evidence, where: str, links: tuple,
                    construction: ByConstruction | None = None) -> Sentence:
    """One declared comparison: decided (the arm that ends above named; HOLDS by construction right after
    it where that arm is `construction.free`), not distinguishable with enough seeds, too few seeds (and how many
    it needs), withheld, or not tested."""
    found, (result, adjusted) = evidence.learnings[test.group], evidence.family.tested(
        test.group, test.quantity, test.first, test.second)
    a, b, family = escape(test.first), escape(test.second), family_words(evidence)
    pair = f"{where}{a} against {b} (primary)"
    if not found.learned:
        return Sentence(f"{pair}: **withheld**: no objective learned (counted in Holm's family at p = 1).", links)
    if not result.n:
        absent = [escape(x) for x in (test.first, test.second) if x not in set(found.per_run["arm"])]
        return Sentence(f"{pair}: **not tested**: no finished runs of {' and '.join(absent)} (counted in Holm's family "
                        "at p = 1).", links)
    numbers = (f"{a} minus {b} {difference_text(result)} over {count(result.n, 'paired seed')}, "
               f"p = {p_text(result.p, result.n)}, Holm-adjusted {p_text(adjusted)} over {family}")
    outcome = evidence.family.outcome(result, adjusted)
    if outcome in (YES, NO):
        above, below = (a, b) if outcome == YES else (b, a)
        upper = test.first if outcome == YES else test.second
        if abs(result.mean) <= RESOLUTION:  # the leader sentence's rules: a rounding difference is none
            return Sentence(f"{pair}: **no difference**: the two differ by less than {RESOLUTION:g}, float rounding "
                            f"below any reward's resolution: {numbers}.", links)
        if upper not in found.learned:  # what an arm that did not learn ends above by is where it started
            return Sentence(f"{pair}: **not named**: {above} did not learn on every seed, so where it ends is where it "
                            f"started: {numbers}.", links)
        held = (f", {construction_clause(construction, True)};" if construction is not None and construction.free == upper
                else ":")
        return Sentence(f"{where}**{above} ends above {below}** (primary){held} {numbers}.", links)
    if outcome == FEW:
        return Sentence(f"{pair}: **too few seeds**: {numbers}. {count(result.n, 'paired seed')} cannot give a p below "
                        f"{smallest_p(result.n):.2g}; with {family} a claim needs at least {evidence.family.needed} "
                        "paired seeds.", links)
    return Sentence(f"{pair}: **not distinguishable** at a Holm-adjusted p below {ALPHA:g} ({count(result.n, 'paired seed')}"
                    f" are enough for a claim in this family): {numbers}.", links)


def _declared_what(declaration: Declaration) -> str:
    primary = declaration.primary
    tests = (f"every other arm against {escape(declaration.names[primary.each_vs])}" if primary.each_vs is not None else
             "; ".join(f"{escape(a)} against {escape(b)}" for a, b in declaration.comparisons()))
    return tests + (", and the paper checks" if primary.paper_checks else "")


def _hash_words(declaration: Declaration) -> str:
    """The suite file's sha256 and what the runs' provenance recorded of it (analysis.data.load: `suite_sha256`)."""
    shas, recorded = [sha for _, sha in declaration.files], declaration.recorded
    same = sum(r in shas for r in recorded)
    missing = sum(r is None for r in recorded)
    other = sorted({r for r in recorded if r is not None and r not in shas})
    if same == len(recorded):
        return f"sha256 {', '.join(shas)}, as every run recorded it in its provenance at its start"
    if missing == len(recorded):
        return f"sha256 {', '.join(shas)}; no run recorded a suite hash in its provenance (written before runs kept one)"
    words = [f"{same} of {count(len(recorded), 'run')} recorded it in their provenance at their start"]
    if missing:
        words.append(f"{missing} recorded no suite hash (written before runs kept one)")
    if other:
        words.append(f"**{len(recorded) - same - missing} started with another suite file** (sha256 {', '.join(other)}): "
                     "it was rewritten since, with the same `analysis:`")
    return f"sha256 {', '.join(shas)}; " + ", ".join(words)


def family_sentence(evidence: Evidence, figures: set[str]) -> Sentence:
    """The declared family: its size, what it holds, the suite file it came from and its hash."""
    m, others = evidence.family.size, len(evidence.family.exploratory)
    files = "; ".join(f"{' and '.join(escape(Path(path).parent.name + '/' + Path(path).name) for path, _ in d.files)} "
                      f"({_hash_words(d)}): {_declared_what(d)}, in each group" for d in evidence.declared.values())
    links = (("primary comparisons", PRIMARY), ("Holm's family", COMPARISONS), ("exploratory", EXPLORATORY_TABLE),
             *([("figure", anchors.figure(FOREST))] if FOREST in figures else []))
    return Sentence(f"**Primary family of {count(m, 'test')}, declared in the suite file** {files}. Holm's adjustment "
                    f"runs over these tests only; the report's {count(others, 'other comparison')} are exploratory: "
                    "unadjusted p, no claim and no leader named from them.", links)


def unfinished_sentence(unfinished: pd.DataFrame) -> list[Sentence]:
    """The runs left out of every comparison, by name ([] when every run finished)."""
    if unfinished.empty:
        return []
    named = "; ".join(f"{escape(r.label)} s{r.seed} ({escape(str(r.status))} at step {r.steps}"
                      + (f": {escape(why)}" if (why := why_unfinished(r.message, r.steps)) else "")
                      + ")" for r in unfinished.itertuples())
    return [Sentence(f"**{len(unfinished)} run(s) did not finish** and are left out of every comparison (a collapse "
                     f"is a result in itself: read them apart): {named}.", (("table", UNFINISHED),))]


def primary_sentences(group: Group, evidence: Evidence, figures: set[str], where: str) -> list[Sentence]:
    """The group's declared comparisons, one sentence each (one saying so where its suite declares none)."""
    tests = [t for t in evidence.primary if t.group == group]
    if not tests:
        return [Sentence(f"{where}The suite file declares no primary comparison here: this group's comparisons are "
                         "exploratory (unadjusted p, no claim).", (("exploratory", EXPLORATORY_TABLE),))]
    links = (("table", PRIMARY), *([("figure", anchors.figure(FOREST))] if FOREST in figures else []))
    return [primary_sentence(t, evidence, where, links) for t in tests]


def group_sentences(group: Group, evidence: Evidence, compute: str, figures: set[str]) -> list[Sentence]:
    title = evidence.title(group)
    where = f"At {escape(title)}: " if title else ""
    found = evidence.learnings[group]
    sentences = [basis_sentence(found, where), learning_sentence(found, where)]
    figure = "reward_by_sweep_point" if group[1] else "fig1_reward_vs_compute"
    links = (("comparisons", COMPARISONS), *([("figure", anchors.figure(figure))] if figure in figures else []))
    if evidence.declared:
        sentences += primary_sentences(group, evidence, figures, where)
    elif found.learned:
        best = lead(found, evidence)
        sentences.append(leader_sentence(best, evidence, compute, where, links, lead_by_construction(best, evidence, group)))
    declared = {frozenset((t.first, t.second)) for t in evidence.primary if t.group == group}
    sentences += [Sentence(f"{where}{same_item(same, standing(evidence, group, same))}", (("comparisons", COMPARISONS),))
                  for same in evidence.same_gradients(group) if frozenset((same.gspo, same.token)) not in declared]
    checks = paper_checks(evidence.subset(group), found, evidence.family)
    if checks is None:
        return sentences + [Sentence(f"{where}The paper's phenomena are not checked: that needs GRPO and GSPO runs.", ())]
    table = ("table", anchors.paper(group, len(evidence.groups) == 1))
    if not evidence.paper_in_family(group):
        return sentences + [Sentence(f"{where}The paper's checks are exploratory here (the suite file's primary family "
                                     "leaves them out): their table gives unadjusted p-values, and no claim is made "
                                     "from them.", (table,))]
    for check in (c for c in checks if c.claim):
        shown = [("figure", anchors.figure(check.figure))] if check.figure in figures else []
        sentences.append(phenomenon_sentence(check, evidence, where, (table, *shown)))
    return sentences


def answer(evidence: Evidence, unfinished: pd.DataFrame, spread: float, allow_unmatched: bool,
           figures: set[str]) -> list[Sentence]:
    """The unfinished runs, then for every group: the basis, the gate, the leader, the phenomena."""
    sentences = unfinished_sentence(unfinished)
    if not evidence.groups:
        return sentences + [Sentence("No run finished: nothing is compared.", ())]
    compute = _compute_words(spread, allow_unmatched)
    if evidence.declared:
        sentences.append(family_sentence(evidence, figures))
    for group in evidence.groups:
        sentences += group_sentences(group, evidence, compute, figures)
    return sentences


