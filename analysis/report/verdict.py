"""The answer a reader wants first, as sentences generated from the numbers, per group (suite and
sweep point): what the objectives are compared on and against which chance level, whether RL learned
at all, which objective leads at equal compute, and which of the paper's phenomena these runs show.
Every sentence links to the table or figure it reads.

The judgements are made in analysis.evidence and only worded here. A leader is named by the leader
rule (analysis.evidence.leader: ahead of every other objective of its group with a Holm-adjusted exact
sign-flip p below 5%, analysis.evidence.family): never with fewer than 6 paired seeds, and more when the
report makes more comparisons; otherwise the sentence says how many paired seeds the claim needs.
Nothing is named where no objective learned, and unfinished runs are never set against finished ones.

Where the suite file declares a primary family (analysis.primary), no leader sentence is written: the
answer states the family and where it was declared, then says of each declared comparison what its
verdict is (analysis.evidence.declared: decided, naming the arm that ends above, or how many paired seeds
it would need); the other comparisons are exploratory and no sentence claims anything from them.

Sentence text is markdown: user text (labels, messages) goes in through `analysis.report.escape.escape`."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pandas as pd

from analysis.data.groups import Group
from analysis.data.load import why_unfinished
from analysis.data.matching import MATCH_TOLERANCE
from analysis.evidence import declared as J
from analysis.evidence.declared import Judged, judge, standing
from analysis.evidence.family import FEW, NO, TIE, YES, Test
from analysis.evidence.gather import Evidence
from analysis.evidence.leader import FEW_SEEDS, ITS_START, LEADS, RESOLUTION, ROUNDING, Lead, lead
from analysis.evidence.learning import HELD_OUT, Learning
from analysis.evidence.primary import Declaration
from analysis.report import anchors
from analysis.report.anchors import COMPARISONS, EXPLORATORY_TABLE, FOREST, LEARNABILITY, PRIMARY, UNFINISHED
from analysis.report.construction_text import (
    construction_clause,
    control_words,
    same_clause,
    same_item,
    standing_words,
)
from analysis.report.escape import escape
from analysis.report.page import Sentence
from analysis.report.paper_checks import WITHHELD, Check, paper_checks
from analysis.report.texts import count, difference_text, p_text
from analysis.stats.library import ALPHA, smallest_p


def _compute_words(spread: float, allow_unmatched: bool) -> str:
    if allow_unmatched and spread > MATCH_TOLERANCE:
        return f"at unmatched compute (spread {spread:.1%}, allowed by flag)"
    return "at equal compute"


def leader_sentence(found: Lead | None, evidence: Evidence, compute: str, where: str, links: tuple) -> Sentence:
    """The leader, or why none is named (analysis.evidence.leader); where the lead holds by construction
    (`found.held`), that, after it."""
    if found is None:
        return Sentence(f"{where}One objective only: nothing to compare.", links)
    a, b = escape(found.best), escape(found.second)
    m, n = evidence.family.size, found.result.n
    tested = (f"{difference_text(found.result)} over {count(n, 'paired seed')}, p = {p_text(found.result.p, n)} "
              f"(Holm-adjusted over the report's {count(m, 'comparison')}: {p_text(found.adjusted)})")
    pair = f"{a} minus {b} (the best two), paired by seed: {tested}"
    if found.why == LEADS:
        leader, construction = escape(found.best), found.held
        return Sentence(f"{where}**{leader} leads {compute}** (Holm-adjusted p = {p_text(found.leader_p)}, the largest "
                        f"over its comparisons with every other objective; {count(m, 'comparison')} in the report): "
                        f"it rests on {a} minus {b}, paired by seed: {tested}; "
                        f"P({a} > {b}) = {found.result.poi:.2g}." + (
                            f" The lead holds by construction: {control_words(construction)}." if construction else ""),
                        links)
    if found.why == FEW_SEEDS:
        return Sentence(f"{where}**No leader named {compute}**: {pair}. {count(n, 'paired seed')} cannot give a p "
                        f"below {smallest_p(n):.2g}; with {count(m, 'comparison')} a leader needs at least "
                        f"{evidence.family.needed} paired seeds.", links)
    if found.why == ITS_START:
        return Sentence(f"{where}**No leader named {compute}**: {a}, the best by its outcome, did not learn "
                        f"on every seed (its lead is where it started): {pair}.", links)
    if found.why == ROUNDING:
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
    found = judge(test, evidence)
    judged = judged_sentence(found, evidence, where, links)
    same = evidence.same_gradient(test.group, test.first, test.second)
    if same is not None:  # declared, and kept: said to test nothing
        judged = replace(judged, text=f"{judged.text} {same_clause(same)}")
    if found.construction is None or found.held:
        return judged
    return replace(judged, text=f"{judged.text} {construction_clause(found.construction, False)}.")


def judged_sentence(found: Judged, evidence: Evidence, where: str, links: tuple) -> Sentence:
    """One declared comparison's verdict (analysis.evidence.declared) in words: decided (the arm that ends
    above named; HOLDS by construction right after it where `found.held`), not distinguishable with enough
    seeds, too few seeds (and how many it needs), withheld, or not tested."""
    test, result, adjusted = found.test, found.result, found.adjusted
    a, b, family = escape(test.first), escape(test.second), family_words(evidence)
    pair = f"{where}{a} against {b} (primary)"
    if found.state == J.WITHHELD:
        return Sentence(f"{pair}: **withheld**: no objective learned (counted in Holm's family at p = 1).", links)
    if found.state == J.UNTESTED:
        ran = set(evidence.learnings[test.group].per_run["arm"])
        absent = [escape(x) for x in (test.first, test.second) if x not in ran]
        return Sentence(f"{pair}: **not tested**: no finished runs of {' and '.join(absent)} (counted in Holm's family "
                        "at p = 1).", links)
    numbers = (f"{a} minus {b} {difference_text(result)} over {count(result.n, 'paired seed')}, "
               f"p = {p_text(result.p, result.n)}, Holm-adjusted {p_text(adjusted)} over {family}")
    above, below = escape(found.above), escape(found.below)
    if found.state == ROUNDING:  # the leader sentence's rules: a rounding difference is none
        return Sentence(f"{pair}: **no difference**: the two differ by less than {RESOLUTION:g}, float rounding "
                        f"below any reward's resolution: {numbers}.", links)
    if found.state == J.NOT_NAMED:  # what an arm that did not learn ends above by is where it started
        return Sentence(f"{pair}: **not named**: {above} did not learn on every seed, so where it ends is where it "
                        f"started: {numbers}.", links)
    if found.state == J.DECIDED:
        held = f", {construction_clause(found.construction, True)};" if found.held and found.construction else ":"
        return Sentence(f"{where}**{above} ends above {below}** (primary){held} {numbers}.", links)
    if found.state == FEW:
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
        sentences.append(leader_sentence(lead(found, evidence), evidence, compute, where, links))
    declared = {frozenset((t.first, t.second)) for t in evidence.primary if t.group == group}
    sentences += [Sentence(f"{where}{same_item(same, standing_words(standing(evidence, group, same.gspo, same.token)))}", (("comparisons", COMPARISONS),))
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


