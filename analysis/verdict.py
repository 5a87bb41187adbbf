"""The answer a reader wants first, as sentences generated from the numbers, per group (suite and
sweep point): what the objectives are compared on and against which chance level, whether RL learned
at all, which objective leads at equal compute, and which of the paper's phenomena these runs show.
Every sentence links to the table or figure it reads.

A leader is named only when it is ahead of every other objective of its group with a Holm-adjusted
exact sign-flip p below 5% (analysis.family): never with fewer than 6 paired seeds, and more when the
report makes more comparisons; otherwise the sentence says how many paired seeds the claim needs.
Nothing is named where no objective learned, and unfinished runs are never set against finished ones.

Sentence text is markdown: user text (labels, messages) goes in through `analysis.escape.escape`."""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from analysis import anchors
from analysis.escape import escape
from analysis.evidence import Evidence
from analysis.family import FEW, NO, REWARD, TIE, YES
from analysis.groups import Group
from analysis.matching import MATCH_TOLERANCE
from analysis.outcome import HELD_OUT, Learning
from analysis.paper import WITHHELD, Check, paper_checks
from analysis.stats import ALPHA, Paired, smallest_p
from analysis.texts import count, difference_text, p_text

# A difference of outcomes below RESOLUTION is no difference: float rounding (1e-12 and below), far
# under the resolution of any reward a suite averages (a final training reward is a mean of at most
# ~10^5 responses: steps of its last 25% x responses a step; a held-out score, limit x samples).
RESOLUTION = 1e-6
LEARNABILITY = "learnability"
COMPARISONS = "comparisons"
UNFINISHED = "unfinished-runs"


@dataclass(frozen=True)
class Sentence:
    """Markdown text (bold allowed) and the (link text, anchor) pairs it points to."""

    text: str
    links: tuple[tuple[str, str], ...]


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


def lead(found: Learning, evidence: Evidence) -> Lead | None:
    """The comparison behind the leader sentence of one group (None with fewer than two objectives). Only
    an objective that learned on every seed may lead: one that did not leads by where it started."""
    arms = found.arms.sort_values("final", ascending=False, kind="stable")
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


def _compute_words(spread: float, allow_unmatched: bool) -> str:
    if allow_unmatched and spread > MATCH_TOLERANCE:
        return f"at unmatched compute (spread {spread:.1%}, allowed by flag)"
    return "at equal compute"


def leader_sentence(found: Lead | None, evidence: Evidence, compute: str, where: str, links: tuple) -> Sentence:
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
                        f"P({a} > {b}) = {found.result.poi:.2g}.", links)
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
        state = (f"**too few seeds** ({check.seeds} paired; with the report's {count(evidence.family.size, 'comparison')} "
                 f"{evidence.family.needed} are needed): {check.evidence or check.this_run}")
    else:
        state = (f"{_SHOWN[check.outcome]} ({check.evidence or check.this_run} over {count(check.seeds, 'seed')}; "
                 f"p = {p_text(check.p, check.seeds)}, Holm-adjusted {p_text(check.holm)})")
    return Sentence(f"{where}{check.claim}: {state}.", links)


def unfinished_sentence(unfinished: pd.DataFrame) -> list[Sentence]:
    """The runs left out of every comparison, by name ([] when every run finished)."""
    if unfinished.empty:
        return []
    named = "; ".join(f"{escape(r.label)} s{r.seed} ({escape(str(r.status))} at step {r.steps}"
                      + (f": {escape(str(r.message))}" if r.message else "") + ")" for r in unfinished.itertuples())
    return [Sentence(f"**{len(unfinished)} run(s) did not finish** and are left out of every comparison (a collapse "
                     f"is a result in itself: read them apart): {named}.", (("table", UNFINISHED),))]


def group_sentences(group: Group, evidence: Evidence, compute: str, figures: set[str]) -> list[Sentence]:
    title = evidence.title(group)
    where = f"At {escape(title)}: " if title else ""
    found = evidence.learnings[group]
    sentences = [basis_sentence(found, where), learning_sentence(found, where)]
    figure = "reward_by_sweep_point" if group[1] else "fig1_reward_vs_compute"
    links = (("comparisons", COMPARISONS), *([("figure", anchors.figure(figure))] if figure in figures else []))
    if found.learned:
        sentences.append(leader_sentence(lead(found, evidence), evidence, compute, where, links))
    checks = paper_checks(evidence.subset(group), found, evidence.family)
    if checks is None:
        return sentences + [Sentence(f"{where}The paper's phenomena are not checked: that needs GRPO and GSPO runs.", ())]
    table = ("table", anchors.paper(group, len(evidence.groups) == 1))
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
    for group in evidence.groups:
        sentences += group_sentences(group, evidence, compute, figures)
    return sentences


