"""The suite's answer in at most five plain sentences, the first thing `gspo-bench run` prints at its end
and the first thing report.md and report.html show: what ran; whether RL learned, and where; what
differs and how sure the test is at this n (a swept suite with a stability map: each arm's stability);
what the paper says and whether this run agrees; what to run for a decision.

The sentences read judgements made elsewhere and make none of their own: the learnability gate
(analysis.evidence.learning), the leader rules (analysis.report.verdict.lead), the declared family and
Holm's adjustment (analysis.evidence.family), the paper checks (analysis.evidence.paper,
analysis.report.paper_checks) and the stability map's boundaries (analysis.evidence.stability). They
hold words and counts only: every mean, interval, p-value and per-seed value they rest on is a row of
`numbers`, shown below them. A count sits beside the word it counts with the gate's meaning ("passed
the learnability test on 0 of 2 seeds"), never beside a word that could read otherwise (a mean that
went up is not "rose" when the test did not pass).

Sentence text is markdown: user text (labels, sweep points) goes in through
`analysis.report.escape.escape`."""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
import pandas as pd

from analysis.data.groups import Group
from analysis.data.load import Results, finished, unfinished, why_unfinished
from analysis.data.matching import check_matched, is_unmatched
from analysis.evidence.declared import (
    DECIDED,
    NOT_NAMED,
    UNTESTED,
    WITHHELD,
    Judged,
    judged,
    standing,
    undecided,
)
from analysis.evidence.family import FEW, NO, REWARD, TIE, YES
from analysis.evidence.gather import Evidence, gather
from analysis.evidence.leader import FEW_SEEDS, ITS_START, LEADS, ROUNDING, lead, leads
from analysis.evidence.learning import HELD_OUT, Learning
from analysis.evidence.paper import CLIP, DEPTH, DRIFT_ONE, arms, paper_tests
from analysis.evidence.placement import BEYOND, BOUNDARY, FALLING, UNBOUNDED, placements, why_no_boundary
from analysis.evidence.primary import declarations
from analysis.evidence.stability import (
    AXIS,
    AXIS_NAMES,
    COLLAPSED,
    KL_FLOOR,
    PER_RESPONSE,
    Boundary,
    StabilityMap,
    stability_map,
)
from analysis.report import anchors
from analysis.report.anchors import COMPARISONS, FOREST, LEARNABILITY, NUMBERS, PRIMARY, SUITE_SUMMARY
from analysis.report.construction_text import (
    HOLDS,
    decided_item,
    row_note,
    same_item,
    settings_text,
    standing_words,
)
from analysis.report.escape import SPECIAL, escape
from analysis.report.map_answer import dose_rows, map_items, map_lead, placement_rows
from analysis.report.page import Sentence
from analysis.report.paper_checks import paper_checks
from analysis.report.stability_text import kl_text, span_text
from analysis.report.texts import count, difference_text, p_text
from analysis.stats.library import ALPHA, smallest_p

MAX_SENTENCES, MAX_WORDS = 5, 40
_ESCAPED = re.compile(r"\\([" + re.escape(SPECIAL) + "])")  # analysis.report.escape's backslash escapes
SIGN_FLIP = "exact sign-flip test"


@dataclass(frozen=True)
class PlainAnswer:
    """`sentences` (at most five) and `numbers`: one row per figure they rest on (`sentence`: which one, 1-5)."""

    sentences: list[Sentence]
    numbers: pd.DataFrame


def plain_text(markdown: str) -> str:
    """A sentence as the console shows it: no bold or code marks, user text unescaped."""
    return _ESCAPED.sub(r"\1", re.sub(r"\*\*|(?<!\\)`", "", markdown))


def words(text: str) -> int:
    return len(re.findall(r"\S+", plain_text(text)))


def names(items: list[str]) -> str:
    """"a", "a and b", "a, b and c" (escaped)."""
    shown = [escape(i) for i in items]
    return shown[0] if len(shown) == 1 else ", ".join(shown[:-1]) + " and " + shown[-1]


def _row(sentence: int, what: str, value: str, test: str = "", result: str = "") -> dict:
    return {"sentence": sentence, "what": what, "value": value, "test": test, "result": result}


def map_link(name: str, figures: set[str]) -> tuple:
    """A link to the stability map's figure `name` where the report has it: "figure (c)"."""
    return ((f"figure ({anchors.FIGURE_LETTERS[name]})", anchors.figure(name)),) if name in figures else ()


def _figure_links(figures: set[str], *names_: str) -> tuple:
    return tuple(("figure", anchors.figure(n)) for n in names_ if n in figures)


# ------------------------------------------------------------------------------ 1: what ran


def seeds_per_arm(runs: pd.DataFrame) -> tuple[str, list[dict]]:
    """"2 seeds" where every arm finished on as many seeds at every sweep point (and suite), else "1 to 2
    seeds", the arms short of the most named in the table row."""
    per_arm = runs.groupby(["suite", "label"], sort=False)["seed"].nunique()
    fewest, most = int(per_arm.min()), int(per_arm.max())
    if fewest == most:
        return count(most, "seed"), []
    short = ", ".join(f"{key[1]}: {n}" for key, n in zip(per_arm.index, per_arm, strict=True) if n < most)
    return f"{fewest} to {most} seeds", [_row(1, f"arms finished on fewer than {count(most, 'seed')}", short)]


def left_words(unfinished: pd.DataFrame, mapped: bool) -> tuple[str, int]:
    """The runs that did not finish, in words: those the harness stopped as collapsed (with a step) are
    judged by the stability map where there is one (analysis.evidence.stability.judged), the others are
    left out; and how many the map judges."""
    stopped = int(((unfinished["status"] == COLLAPSED) & (unfinished["steps"] > 0)).sum()) if mapped and len(unfinished) else 0
    rest = len(unfinished) - stopped
    parts = [f"the map also judges {count(stopped, 'run')} stopped as collapsed"] if stopped else []
    be = "is" if rest == 1 else "are"
    parts += ([f"{count(rest, 'unfinished run')} {be} left out"] if stopped else
              [f"{count(rest, 'more run')} did not finish and {be} left out"]) if rest else []
    return "".join(f"; {part}" for part in parts), stopped


def unfinished_arms(finished_arms: pd.Series, unfinished: pd.DataFrame) -> tuple[str, list[dict]]:
    """The arms with no finished run, each with how its runs ended ("; grpo_rr has no finished run (3
    failed)"), and a row each naming its runs, status and message ("s0 failed: RuntimeError: ...")."""
    runs = unfinished[~unfinished["arm"].isin(set(finished_arms))] if len(unfinished) else unfinished
    parts, rows = [], []
    for arm, own in runs.groupby("arm", sort=False):
        ended = ", ".join(f"{n} {escape(str(status))}" for status, n in own["status"].value_counts(sort=False).items())
        parts.append(f"{escape(str(arm))} ({ended})")
        rows.append(_row(1, f"{arm}: no finished run", "; ".join(
            f"s{r.seed} {r.status}" + (f": {why}" if (why := why_unfinished(r.message, r.steps)) else "")
            for r in own.itertuples())))
    if not parts:
        return "", []
    have = "has" if len(parts) == 1 else "have"
    listed = parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " and " + parts[-1]
    return f"; {listed} {have} no finished run", rows


def group_count(every: list[Group], n: int | None = None) -> str:
    """`n` (default: all) of the groups `every` in words, by what tells them apart: "3 sweep points" of one
    suite, "2 suites" none of which is swept, "4 pairs of suite and sweep point" otherwise."""
    n = len(every) if n is None else n
    if len({suite for suite, _ in every}) == 1:
        return count(n, "sweep point")
    if not any(facet for _, facet in every):
        return count(n, "suite")
    return f"{count(n, 'pair')} of suite and sweep point"


def group_in(every: list[Group]) -> str:
    """The preposition before `group_count`: "in" 2 suites, "at" 3 sweep points."""
    return "in" if len({suite for suite, _ in every}) > 1 and not any(facet for _, facet in every) else "at"


def ran_sentence(evidence: Evidence, unfinished: pd.DataFrame, compute: str,
                 mapped: bool = False) -> tuple[Sentence, list[dict]]:
    """What ran; `mapped`: whether a stability map judges the runs the harness stopped as collapsed."""
    runs = evidence.results.runs
    objectives, seeds = list(dict.fromkeys(runs["arm"])), sorted(set(runs["seed"]))
    listed = names(objectives) if len(objectives) <= 8 else f"{len(objectives)} objectives"
    points = (f" {group_in(evidence.groups)} each of {group_count(evidence.groups)}" if len(evidence.groups) > 1 else "")
    kinds = {found.source.kind for found in evidence.learnings.values()}
    basis = ("the **held-out reward**" if kinds == {HELD_OUT} else "the **training reward**" if len(kinds) == 1
             else "the held-out reward where evaluated, else the training reward")
    left, stopped = left_words(unfinished, mapped)
    missing, missing_rows = unfinished_arms(runs["arm"], unfinished)
    on_seeds, short = seeds_per_arm(runs)
    finite = pd.concat([found.per_run for found in evidence.learnings.values()]).groupby("arm", sort=False)[
        "finite_rewards"].sum() if evidence.learnings else pd.Series(dtype=int)
    never = [str(a) for a, n in finite.items() if not n]
    unmeasured = f" (never finite for {names(never)})" if never else ""
    text = (f"{count(len(runs), 'run')} finished: {listed} on {on_seeds}{points}, {compute}, compared on {basis}"
            f"{unmeasured}{left}{missing}.")
    rows = [_row(1, "runs finished / not finished", f"{len(runs)} / {len(unfinished)}"),
            *([_row(1, "runs stopped as collapsed, judged by the stability map only", str(stopped))] if stopped else []),
            _row(1, "seeds", ", ".join(map(str, seeds))), *short, *missing_rows]
    return Sentence(text, (("summary", SUITE_SUMMARY), ("numbers", NUMBERS))), rows


# ------------------------------------------------------------------------------ 2: whether RL learned, and where


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
            rows.append(_row(2, f"{where}{arm}: {found.source.kind}, start -> end (mean over seeds)",
                             f"{r['start']:.3g} -> {r['final']:.3g} ({per_seed})",
                             f"learnability: one-sided {ALPHA:.0%} test of each seed's rise",
                             f"passed on {r['learned_seeds']} of {count(int(r['seeds']), 'seed')}"))
    text = f"By {_gate_words(kind)}, {body}."
    return Sentence(text, (("table", LEARNABILITY), *_figure_links(figures, "fig1_reward_vs_compute"),
                           ("numbers", NUMBERS))), rows


# ------------------------------------------------------------------------------ 3: what differs, and how sure


def _holm_words(evidence: Evidence) -> str:
    return f"the {SIGN_FLIP}, Holm-adjusted over {count(evidence.family.size, 'comparison')}"


def leader_clause(found: Learning, evidence: Evidence) -> tuple[str, list[dict]]:
    """The leader rules of analysis.report.verdict.leader_sentence, in words, and the comparison they rest on."""
    if not found.learned:
        return "nothing is compared", []
    best = lead(found, evidence)
    if best is None:
        return "one objective only: nothing to compare", []
    a, b, n = escape(best.best), escape(best.second), best.result.n
    row = _row(3, f"{best.best} minus {best.second}, final {found.source.kind}, paired by seed",
               difference_text(best.result), _holm_words(evidence).removeprefix("the "),
               f"p = {p_text(best.result.p, n)}, Holm-adjusted {p_text(best.adjusted)}")
    if best.why == LEADS:
        held = best.held
        row = {**row, "result": row["result"] + (f"; {row_note(held)}" if held else "")}
        return (f"**{escape(best.best)} ends above every other objective**{f', {HOLDS}' if held else ''}, decided by "
                f"{_holm_words(evidence)}"), [row]
    if best.why == FEW_SEEDS:
        return (f"no objective is ahead of every other yet: {a} and {b} end highest, and {count(n, 'paired seed')} "
                "cannot separate them whatever the data"), [row]
    if best.why == ITS_START:
        return f"no leader: {a} ends highest but did not learn on every seed, so its lead is where it started", [row]
    if best.why == ROUNDING:
        return f"no leader: {a} and {b} end equal, below the reward's resolution", [row]
    return (f"no objective is ahead of every other: {a} and {b}, the best two, are not distinguishable at "
            f"{count(n, 'paired seed')} by {_holm_words(evidence)}"), [row]


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
                f"{_holm_words(evidence)}"), rows
    return (f"a leader is named {at} {len(named)} of {group_count(evidence.groups)} "
            f"({'; '.join(named)}) by {_holm_words(evidence)}"), rows


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
        rows.append(_row(3, f"{t.first} minus {t.second} (declared), final {evidence.learnings[t.group].source.kind}",
                         difference_text(found.result), _holm_words(evidence).removeprefix("the "),
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
        rows.append(_row(3, f"{b.arm}: runs degraded or collapsed; {name} measured", f"{b.failures} of {b.runs}; {kls}",
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
            rows.append(_row(3, f"{where}{same.gspo} and {same.token}: one objective by construction",
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


def differs_sentence(evidence: Evidence, stability: StabilityMap | None, figures: set[str]) -> tuple[Sentence, list[dict]]:
    """A swept suite with a stability map answers per arm; a declared family by its comparisons; else the leader."""
    if stability is not None:
        links = (("table", anchors.STABILITY), *(link for name in (anchors.CHANGE_VS_KL, anchors.COLLAPSE_PROBABILITY)
                                                 for link in map_link(name, figures)))
        placed = placements(stability)
        rows = [row for first, p in zip(stability_rows(stability), placed, strict=True)
                for row in (first, *placement_rows(p))] + dose_rows(stability.classes)
        same, same_rows = same_gradient_items(evidence)
        return Sentence(map_lead(placed, stability.classes), (*links, ("numbers", NUMBERS)),
                        map_items(placed, (("numbers", NUMBERS),)) + same), rows + same_rows
    items: tuple[Sentence, ...] = ()
    if evidence.declared:
        clause, rows, items = primary_text(evidence)
        links = (("table", PRIMARY), *_figure_links(figures, FOREST))
    else:
        (clause, rows), items = leader_text(evidence), leader_items(evidence)
        links = (("comparisons", COMPARISONS), *_figure_links(figures, "fig1_reward_vs_compute"))
    same, same_rows = same_gradient_items(evidence)
    return Sentence(clause[0].upper() + clause[1:] + ".", (*links, ("numbers", NUMBERS)), items + same), rows + same_rows


# ------------------------------------------------------------------------------ 4: the paper, and whether this run agrees

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
            rows.append(_row(4, f"{where}{c.claim}", c.evidence or c.this_run, _holm_words(evidence).removeprefix("the "),
                             f"{c.agrees}; p = {p_text(c.p, c.seeds)}, Holm-adjusted {p_text(c.holm)}"))
        seen = every_seed_agrees(evidence, group) & {finding(c.figure) for c in tested_}
        agreeing = seen if agreeing is None else agreeing & seen
    return by_outcome, agreeing or set(), rows, unchecked


def paper_sentence(evidence: Evidence, figures: set[str]) -> tuple[Sentence, list[dict]]:
    by_outcome, agreeing, rows, unchecked = paper_counts(evidence)
    tested = sum(map(len, by_outcome.values()))
    links = (("table", anchors.paper(evidence.groups[0], len(evidence.groups) == 1)),
             *_figure_links(figures, "fig2_clip_fraction"), ("numbers", NUMBERS))
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


# ------------------------------------------------------------------------------ 5: what to run for a decision


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
    rows = [_row(5, "paired seeds: these runs / a decision needs", f"{n} / {needed}",
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


# ------------------------------------------------------------------------------ the answer


def compute_words(spread: float, allow_unmatched: bool) -> str:
    return "at unmatched compute (allowed by flag)" if allow_unmatched and is_unmatched(spread) else "at equal compute"


def mapped_only_answer(evidence: Evidence, unfinished: pd.DataFrame, stability: StabilityMap,
                       figures: set[str]) -> PlainAnswer:
    """Where no run finished but the harness stopped runs as collapsed that the stability map judges: what
    ran, the map's answer per arm and where more runs would place a boundary (nothing else is compared)."""
    _, stopped = left_words(unfinished, True)
    rest = len(unfinished) - stopped
    left = f"; {count(rest, 'other unfinished run')} {'is' if rest == 1 else 'are'} left out" if rest else ""
    ran = Sentence(f"No run finished: the stability map judges the {count(stopped, 'run')} the harness stopped as "
                   f"collapsed, and nothing is compared on a reward{left}.", (("summary", SUITE_SUMMARY), ("numbers", NUMBERS)))
    rows = [_row(1, "runs finished / not finished", f"0 / {len(unfinished)}"),
            _row(1, "runs stopped as collapsed, judged by the stability map only", str(stopped))]
    (differs, map_rows), (decision, _) = differs_sentence(evidence, stability, figures), decision_sentence(evidence, stability)
    return PlainAnswer([ran, differs, decision], pd.DataFrame(rows + map_rows))


def plain_answer(evidence: Evidence, unfinished: pd.DataFrame, stability: StabilityMap | None, spread: float = 0.0,
                 allow_unmatched: bool = False, figures: frozenset[str] | set[str] = frozenset()) -> PlainAnswer:
    """At most five sentences (see the module) and the table of their numbers; `figures`: the names of the
    report's figures the sentences may link to."""
    if not evidence.groups and stability is not None:  # every judged run stopped as collapsed: the map answers
        return mapped_only_answer(evidence, unfinished, stability, set(figures))
    if not evidence.groups:
        why = f"{count(len(unfinished), 'run')} did not finish" if len(unfinished) else "no run was found"
        _, missing_rows = unfinished_arms(pd.Series([], dtype=object), unfinished)
        return PlainAnswer([Sentence(f"No run finished ({why}): nothing is compared.", ())],
                           pd.DataFrame([_row(1, "runs finished / not finished", f"0 / {len(unfinished)}"), *missing_rows]))
    shown = set(figures)
    built = [ran_sentence(evidence, unfinished, compute_words(spread, allow_unmatched), stability is not None),
             learned_sentence(evidence, shown), differs_sentence(evidence, stability, shown),
             paper_sentence(evidence, shown), decision_sentence(evidence, stability)]
    return PlainAnswer([sentence for sentence, _ in built], pd.DataFrame([r for _, rows in built for r in rows]))


def console_answer(results: Results) -> list[str]:
    """The sentences as `gspo-bench run` prints them at its end, from every run of a suite (the report's
    rules: compute must match, UnmatchedComputeError otherwise; a declared family must read,
    DeclarationError otherwise)."""
    spread = check_matched(results)
    found = plain_answer(gather(finished(results), declarations(results)), unfinished(results),
                         stability_map(results), spread)
    return [plain_text(sentence.text) + "".join(f"\n    - {plain_text(item.text)}" for item in sentence.items)
            for sentence in found.sentences]
