"""The answer's second sentence: whether RL learned, and where. Every arm by the learnability gate
(analysis.evidence.learning): on every seed, on some seeds only, on none, or not testable; over several
groups (sweep points, suites), at how many of them each arm learned on every seed. Each arm's start and
end per seed is a row of the numbers table."""

from __future__ import annotations

from analysis.data.groups import Group
from analysis.evidence.gather import Evidence
from analysis.evidence.learning import Learning
from analysis.report.anchors import LEARNABILITY, NUMBERS
from analysis.report.answer_words import figure_links, group_count, group_in, names, number_row
from analysis.report.page import Sentence
from analysis.report.texts import count
from analysis.stats.library import ALPHA


def _gate_words(kind: str) -> str:
    return f"the learnability test (each seed's {kind} must rise, one-sided at {ALPHA:.0%})"



def learned_one_group(found: Learning) -> str:
    """Every arm by the gate: learned on every seed, on some seeds only, or on none."""
    arms_, judged = found.arms, found.per_run.groupby("arm", sort=False)["learned"].count()
    every = [str(a) for a, r in arms_.iterrows() if r["learned"]]
    some = [str(a) for a, r in arms_.iterrows() if 0 < r["learned_seeds"] < r["seeds"]]
    none = [str(a) for a, r in arms_.iterrows() if r["learned_seeds"] == 0 and judged.get(a, 0)]
    unjudged = [str(a) for a in arms_.index if not judged.get(a, 0)]
    finite = found.per_run.groupby("arm", sort=False)["finite_rewards"].sum()
    never = [a for a in unjudged if not finite.get(a, 0)]  # no finite reward on any seed: nothing to test
    short = [a for a in unjudged if a not in never]  # too few steps for the test's two windows
    parts = [f"RL learned on every seed for {names(every)}" if every else "no objective learned on every seed"]
    if some:
        parts.append(f"{names(some)} passed it on some seeds only")
    if none:
        parts.append(f"{names(none)} did not pass it on any seed")
    if short:
        parts.append(f"{names(short)} ran too few steps to be tested")
    if never:
        parts.append(f"{names(never)} never logged a finite {found.source.kind} (NaN or infinite throughout) and "
                     "cannot be tested")
    return "; ".join(parts) + ("" if every else ", so rewards are not compared")



def learned_by_point(evidence: Evidence) -> str:
    """Per arm, at how many of its groups (sweep points, suites) it learned on every seed (naming the others
    where one or two); an arm of one group (a suite's, among unswept suites) learned on every seed or not."""
    arms_ = list(dict.fromkeys(a for found in evidence.learnings.values() for a in found.arms.index))
    alike: dict[tuple[int, int], list[str]] = {}  # (points learned at, points present) -> its arms: one clause each
    missed: list[Group] = []
    for arm in arms_:
        present = [g for g, found in evidence.learnings.items() if arm in found.arms.index]
        missed = [g for g in present if arm not in evidence.learnings[g].learned]
        alike.setdefault((len(present) - len(missed), len(present)), []).append(arm)
    at = group_in(evidence.groups)
    parts = [f"{names(group)} " + (("learned on every seed" if hit else "did not learn on every seed") if total == 1 else
                                   f"learned on every seed {at} {hit} of {group_count(evidence.groups, total)}")
             for (hit, total), group in alike.items()]
    if missed and len(missed) <= 2 and len(arms_) == 1:
        parts[0] += f", not at {names([evidence.title(g) for g in missed])}"
    return "; ".join(parts)



def learned_sentence(evidence: Evidence, figures: set[str]) -> tuple[Sentence, list[dict]]:
    kind = next(iter(evidence.learnings.values())).source.kind
    body = (learned_one_group(next(iter(evidence.learnings.values()))) if len(evidence.groups) == 1
            else learned_by_point(evidence))
    rows = []
    for group, found in evidence.learnings.items():
        where = f"{evidence.title(group)}: " if len(evidence.groups) > 1 else ""
        for arm, r in found.arms.iterrows():
            seeds = found.per_run[found.per_run["arm"] == arm]
            per_seed = ", ".join(f"s{s.seed} {s.start:.3g} -> {s.final:.3g}" for s in seeds.itertuples())
            rows.append(number_row(2, f"{where}{arm}: {found.source.kind}, start -> end (mean over seeds)",
                             f"{r['start']:.3g} -> {r['final']:.3g} ({per_seed})",
                             f"learnability: one-sided {ALPHA:.0%} test of each seed's rise",
                             f"passed on {r['learned_seeds']} of {count(int(r['seeds']), 'seed')}"))
    text = f"By {_gate_words(kind)}, {body}."
    return Sentence(text, (("table", LEARNABILITY), *figure_links(figures, "fig1_reward_vs_compute"),
                           ("numbers", NUMBERS))), rows
