"""The stability map in the report's words: the rules (declared before any run; docs/report.md holds the
same text), the sentences of the answer (generated from the numbers, each linked to its figure or table)
and the per-run table. Sentence text is markdown: user text goes in through `analysis.report.escape.escape`."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from analysis.evidence.dose import DOSE_STEPS
from analysis.evidence.outcome_rules import COLLAPSE_SHARE, V2, rules_sentence
from analysis.evidence.placement import BEYOND, FALLING, UNBOUNDED, why_no_boundary
from analysis.evidence.resolution import suite_resolutions
from analysis.evidence.stability import (
    AXIS_NAMES,
    CLASSES,
    COLLAPSED,
    DRIFT_EXPERT,
    DRIFT_TOKEN,
    KL_FLOOR,
    PER_RESPONSE,
    Boundary,
    StabilityMap,
    failed,
    survival,
)
from analysis.report import anchors
from analysis.report.escape import escape
from analysis.report.page import Sentence
from analysis.report.texts import count
from analysis.stats.logistic import zero_event_bound

RULES = f"""\
Every run that finished, or that the harness stopped as collapsed, is judged on the reward its group is compared on (held-out evaluations where the group has them, else the training reward's windows: the gate's start window, then blocks as long as its end window counted back from the last step). A point is **below** when its score is under start - max(0.05, 3 SE), SE = hypot(the start's standard error, the point's).
Classes, the first that holds:
1. **collapsed**: the harness stopped the run (status `collapsed`: non-finite loss, gradients, parameters or logits, or the reward floor), at its last step; or `grad/norm` above 100x the run's median (over steps with a finite, non-zero grad norm) for 3 steps in a row, at the first; or the points below from one point to the end, at least 2 of them (degraded without recovery), at the first of those.
2. **degraded**: the last point below, at the first point of the final run of points below.
3. **learned**: the learnability gate (held-out rise z-test, else the training reward's Welch test; one-sided p < 0.05).
4. **flat**: none of these.
These are outcome rules v1, those of every suite that declares none; the report says which rules each suite used, and what v2 changes where a suite used it.
The map's x axis is measured: each level's **dose**, the median `mismatch/k3_kl` over the first {DOSE_STEPS} steps of every judged run at the level (a sweep cell), pooled across its arms and seeds, which no run's later outcome moves. A run stopped within those steps gives the steps it ran, and a step whose policy had collapsed to non-finite values gives none: the dose is the median of the finite values that exist. A level with none has no dose (off the axis, said to be never finite, not float rounding). The fit reads it per token; the text gives it per response beside (x `response/len_mean`: the k3 summed over a response; published mismatch figures compare per response only). A run's own median `mismatch/k3_kl` over its steps grows as the run fails (partly an outcome): the table shows it beside the dose, never fitted. **Failure** = degraded or collapsed. Per arm, P(failure) against log10 dose is fitted by maximum likelihood (logistic) with a 95% Wald band (inverse observed information), where the arm has both outcomes at two or more doses and they are not separated by dose; the boundary is the dose where the fit crosses 0.5, with Fieller's interval (the doses whose band contains 0.5). Without a fit: the largest level dose with no failed seed and the smallest where most seeds failed. With no failure: in each cell the rate is at most 1 - 0.05^(1/n) at 95% for its n runs (exact one-sided Clopper-Pearson per cell; runs of different cells are never pooled)."""

V2_RULES = f"""\
Outcome rules v2 (a suite's `analysis: {{rules: v2}}`) change one rule: the points below from one point to the end make a **collapse** only where they span at least {COLLAPSE_SHARE:.0%} of the run's evaluated steps (from the first of them to the last point, against the first point to the last); a shorter sustained drop leaves the run **degraded** (two evaluations one step apart at the end of a long run are not a collapse). Every other rule is as above."""


COMPARISON_RULES = """\
Added after the stability stages ran, for every map alike: a **degenerate cell** (a level and a seed) carries no information about any arm and is left out of the fits, the bounds and the paired tests (named in the answer, marked in the per-run table): every run there has training reward and gradient norm 0 at every step, or runs of two or more arms there have the same metrics bit for bit (every column all of them logged, less time, throughput and GPU memory). A level's dose is measured over all its runs as before. Two arms are compared **cell by cell**: on the cells they share (the same level and seed), by McNemar's exact test of failure stratified by level (the cells where exactly one of the two failed, pooled over the levels; two-sided, Binomial(n, 1/2); null: within every cell the two arms' outcomes are exchangeable). The family is the suite's declared pairs, Holm over them, every other pair exploratory; without a declared family every pair is exploratory, Holm over all of them. A pair is told apart at a Holm-adjusted p below 0.05; the arms' intervals on the dose axis describe where each fails and test no pair."""


def rules_text(classes: pd.DataFrame) -> str:
    """The rules section: RULES (v1), COMPARISON_RULES (degenerate cells, pairs of arms), which rules each
    suite used, and V2_RULES where a suite used v2."""
    used = dict(zip(classes["suite"], classes["rules"]))
    return "\n\n".join([RULES, COMPARISON_RULES, rules_sentence(used), *([V2_RULES] if V2 in used.values() else [])])


def bound_text(n: int, cells: int = 1, fewest: int | None = None) -> str:
    """"0 of 60 runs degraded or collapsed: the rate is at most 4.87% at 95% (...)"; over several cells the
    bound of each cell (the loosest: the `fewest` runs of a cell), never one over the runs pooled."""
    if cells <= 1:
        return (f"0 of {count(n, 'run')} degraded or collapsed: the rate is at most {100 * zero_event_bound(n):.3g}% "
                f"at 95% (exact one-sided Clopper-Pearson, 1 - 0.05^(1/{n}))")
    fewest = n if fewest is None else fewest
    return (f"0 of {count(n, 'run')} degraded or collapsed: in each of its {cells} cells the rate is at most "
            f"{100 * zero_event_bound(fewest):.3g}% at 95% (exact one-sided Clopper-Pearson per cell, 1 - 0.05^(1/"
            f"{fewest}) at its fewest runs in a cell; cells are not pooled)")


def kl_text(log_kl: float) -> str:
    """A KL given by its log10 in words: "0", "unbounded", "0.0123", or "10^412" past a float's range (a
    crossing extrapolated by a slope near 0)."""
    if log_kl == -math.inf:
        return "0"
    if log_kl == math.inf:
        return "unbounded"
    return f"{10 ** log_kl:.3g}" if abs(log_kl) < 300 else f"10^{log_kl:.4g}"


def place_text(found: Boundary, value: float, per_response: float) -> str:
    """A place on the boundary's axis: "0.552 per token (2.62 per response)" on the dose axis, the value
    alone on the secondary view (no per-response value)."""
    if found.axis not in PER_RESPONSE:
        return f"{value:.3g}"
    return f"{value:.3g} per token" + (f" ({per_response:.3g} per response)" if np.isfinite(per_response) else "")


def span_text(found: Boundary) -> str:
    """The range of the axis measured: "3e-05 to 0.55 per token (0.00016 to 2.6 per response)" on the
    dose axis, "0.001 to 0.9" on the secondary view."""
    low, high = found.kl_low, found.kl_high
    if found.axis not in PER_RESPONSE:
        return f"{low:.3g} to {high:.3g}"
    responses = (f" ({found.response_low:.3g} to {found.response_high:.3g} per response)"
                 if np.isfinite(found.response_low) and np.isfinite(found.response_high) else "")
    return f"{low:.3g} to {high:.3g} per token{responses}"


def fit_sentence(arm: str, found: Boundary, measured: str, off: str, links: tuple) -> Sentence:
    """Where one arm's logistic fit crosses 0.5, with Fieller's interval, or, by the guard every reading
    of a fit goes through (analysis.evidence.placement.why_no_boundary), that it places no boundary: a
    slope of 0 (the same failure rate at every dose) crosses nowhere; one not distinguishable from 0, a
    falling one (failures do not rise with the dose), or a crossing outside the doses measured (an
    extrapolation), is said as such."""
    fit, name = found.fit, AXIS_NAMES[found.axis]
    assert fit is not None
    unit = " per token" if found.axis in PER_RESPONSE else ""
    over = f"logistic fit in log10 {name}{unit} over {count(fit.n, 'run')}, {fit.events} degraded or collapsed; {measured}"
    center, low, high = fit.crossing()
    if math.isnan(center):
        return Sentence(f"**{arm}: P(degraded or collapsed) does not change with the {name}**: the fit is flat "
                        f"at {fit.curve(np.array([0.0]))[0][0]:.2g} and crosses 0.5 nowhere ({over}){off}.", links)
    note = why_no_boundary(found)
    outside = (f", outside the {name}s measured (an extrapolation)"
               if not math.log10(found.kl_low) <= center <= math.log10(found.kl_high) else "")
    crossing = f"crosses 0.5 at {name} {kl_text(center)}{unit}"
    if note == UNBOUNDED:
        return Sentence(f"**{arm}: no stability boundary placed**: the fit's slope is not distinguishable from 0 at 5% "
                        f"(its 95% interval is unbounded; the fitted curve {crossing}{outside}; {over}){off}.", links)
    interval = f"95% Fieller interval [{kl_text(low)}, {kl_text(high)}]"
    if note == FALLING:
        return Sentence(f"**{arm}: no stability boundary placed**: failures do not rise with the {name} (the fit's "
                        f"slope, {fit.slope:.3g} per log10 {name}, is negative; the falling curve {crossing}{outside}, "
                        f"{interval}; {over}){off}.", links)
    if note == BEYOND:
        return Sentence(f"**{arm}: no stability boundary placed**: the fit {crossing}{outside} ({interval}; {over}){off}.",
                        links)
    return Sentence(f"**{arm}: P(degraded or collapsed) {crossing}** ({interval}; {over}){off}.", links)


def cells_text(found: Boundary) -> str:
    """Without a fit, the cells the boundary lies between: the largest place with no failed seed and the
    smallest where most seeds failed."""
    name = AXIS_NAMES[found.axis]
    held = (f"the largest {name} with no degraded or collapsed seed is "
            f"{place_text(found, found.largest_held, found.response_held)}"
            if np.isfinite(found.largest_held) else "every cell had a degraded or collapsed seed")
    most = (f"the smallest {name} where most seeds degraded or collapsed is "
            f"{place_text(found, found.smallest_majority, found.response_majority)}"
            if np.isfinite(found.smallest_majority) else "no cell had a majority of degraded or collapsed seeds")
    return f"{held}; {most}"


def boundary_sentence(found: Boundary, links: tuple) -> Sentence:
    """Where one arm's boundary lies, or that none was reached, with the bound its runs give."""
    arm, name = escape(found.arm), AXIS_NAMES[found.axis]
    placed = np.isfinite(found.kl_high)
    none_placed = f"no run has a {name} above {KL_FLOOR:g}"
    measured = f"{name} measured {span_text(found)}" if placed else none_placed
    off = (f"; {count(found.off_axis, 'run')} without a {name} above {KL_FLOOR:g} left off the axis"
           if found.off_axis else "")
    if found.failures == 0:
        upto = (f"up to the largest {name} measured, {place_text(found, found.kl_high, found.response_high)}"
                if placed else f"({none_placed})")
        return Sentence(f"**{arm}: no stability boundary reached** {upto}: {bound_text(found.runs, found.cells, found.fewest_in_cell)}{off}.", links)
    if found.fit is not None:
        return fit_sentence(arm, found, measured, off, links)
    cells = cells_text(found) if placed else f"no cell has a {name} to read a boundary off"
    return Sentence(f"**{arm}: {found.failures} of {count(found.runs, 'run')} degraded or collapsed**, no logistic fit "
                    f"({escape(found.why_no_fit)}): {cells} ({measured}){off}.", links)


def classes_sentence(classes: pd.DataFrame, links: tuple, too_short: int = 0, left_out: int = 0) -> Sentence:
    """How many runs of each arm fell in each class, how many finished runs were too short to judge, and
    how many runs of degenerate cells were left out."""
    per_arm = []
    for arm, frame in classes.groupby("arm", sort=False):
        counts = frame["outcome"].value_counts()
        per_arm.append(f"{escape(arm)} " + ", ".join(f"{int(counts.get(c, 0))} {c}" for c in CLASSES))
    return Sentence(f"**Stability map** over {count(len(classes), 'run')} (finished or collapsed) in "
                    f"{count(classes['cell'].nunique(), 'cell')}, each run classed by rules fixed before any run: "
                    f"{'; '.join(per_arm)}{short_words(too_short)}{degenerate_words(left_out)}.", links)


def short_words(too_short: int) -> str:
    return (f"; {count(too_short, 'finished run')} too short for the learnability gate (fewer than two training "
            "steps in either window) not judged" if too_short else "")


def degenerate_words(left_out: int) -> str:
    return (f"; {count(left_out, 'run')} of degenerate cells (no information about any arm) left out of the fits and "
            "the paired tests" if left_out else "")


def collapse_sentence(classes: pd.DataFrame, links: tuple) -> Sentence:
    """Where runs collapsed: the steps per arm and the Kaplan-Meier share left at the last step."""
    collapsed = classes[classes["outcome"] == COLLAPSED]
    if collapsed.empty:
        return Sentence("No run collapsed: there is no step of collapse to show.", ())
    parts = []
    for arm, frame in classes.groupby("arm", sort=False):
        hit = frame[frame["outcome"] == COLLAPSED].sort_values("step")
        if hit.empty:
            parts.append(f"{escape(arm)} none of {len(frame)}")
            continue
        curve = survival(frame)
        steps = ", ".join(f"s{r.seed} at {escape(r.cell)} at step {r.step:g}" for r in hit.itertuples())
        parts.append(f"{escape(arm)} {len(hit)} of {len(frame)} ({steps}; share not collapsed by step "
                     f"{curve['step'].iloc[-1]:g}: {curve['surviving'].iloc[-1]:.2g})")
    return Sentence(f"Runs collapsed: {'; '.join(parts)}.", links)


def drift_sentence(classes: pd.DataFrame, links: tuple) -> Sentence:
    """Drift after one update at each router learning-rate scale, per arm (mean over runs)."""
    scales = sorted(classes["router_lr_scale"].unique())
    if len(scales) < 2:
        return Sentence(f"train.router_lr_scale is {scales[0]:g} in every run: drift is not compared across router "
                        "learning rates.", ())
    column = "drift_expert_1" if classes["drift_expert_1"].notna().any() else "drift_1"
    if classes[column].isna().all():
        return Sentence("Drift after one update was not measured: it is not compared across router learning rates.", ())
    name = DRIFT_EXPERT if column == "drift_expert_1" else DRIFT_TOKEN
    parts = []
    for arm, frame in classes.groupby("arm", sort=False):
        means = frame.groupby("router_lr_scale")[column].mean().dropna()
        parts.append(f"{escape(arm)} " + ", ".join(f"{v:.3g} at {s:g}" for s, v in means.items()))
    return Sentence(f"Drift after one update ({name}, median over steps, mean over runs) by train.router_lr_scale: "
                    f"{'; '.join(parts)}.", links)




def _links(name: str, figures: set[str]) -> tuple:
    """A link to the map's figure `name` where the report has it: "figure (c)"."""
    return ((f"figure ({anchors.FIGURE_LETTERS[name]})", anchors.figure(name)),) if name in figures else ()


def stability_sentences(found: StabilityMap, figures: set[str]) -> list[Sentence]:
    """The map's part of the answer: the classes, each arm's boundary, the collapses, drift by router lr."""
    classes = found.classes
    table = ("table", anchors.STABILITY)
    sentences = [classes_sentence(classes, (table, ("rules", anchors.STABILITY_RULES),
                                             *_links(anchors.CELLS, figures)), found.too_short, len(found.left_out))]
    links = (*_links(anchors.COLLAPSE_PROBABILITY, figures), *_links(anchors.CHANGE_VS_KL, figures))
    sentences += [boundary_sentence(b, links) for b in found.bounds]
    sentences.append(collapse_sentence(classes, _links(anchors.SURVIVAL, figures)))
    sentences.append(drift_sentence(classes, _links(anchors.DRIFT_VS_ROUTER_LR, figures)))
    used = dict(zip(classes["suite"], classes["rules"]))  # analysis.evidence.outcome_rules
    sentences.append(Sentence(rules_sentence(used), (("rules", anchors.STABILITY_RULES),)))
    return sentences + resolution_sentences(classes)


def resolution_sentences(classes: pd.DataFrame) -> list[Sentence]:
    """Per suite judged on held-out evaluations, the smallest drop its classes can see at its evaluation
    draws from its runs' median start (analysis.evidence.resolution)."""
    found = suite_resolutions(classes)
    return [Sentence(f"Resolution of {escape(str(suite))} (its runs' median first held-out score, {start:.2f}): "
                     f"{str(said)[:1].lower()}{str(said)[1:]}", (("rules", anchors.STABILITY_RULES),))
            for suite, start, said in zip(found["suite"], found["start"], found["sentence"])]


def class_table(classes: pd.DataFrame) -> pd.DataFrame:
    """One row per judged run: its cell, arm, seed, class, the step it happened and why, the reward it was
    judged on and what the map plots it against (its level's dose), with the run's own median KL beside
    as the secondary view (partly an outcome: never fitted); where a run lies in a degenerate cell
    (`classes`: StabilityMap.every_run), why, in a last column."""
    o = classes
    return pd.DataFrame({
        "cell": o["cell"], "arm": o["arm"], "seed": o["seed"], "status": o["status"], "class": o["outcome"],
        "step": o["step"], "why": o["why"], "judged on": o["source"], "start": o["start"], "end": o["final"],
        "change": o["change"], "level dose per token": o["dose"], "level dose per response": o["dose_response"],
        "run-median mismatch KL (not fitted)": o["kl"], "tokens outside [1/2, 2] (median)": o["frac_gt_ln2"],
        "experts changed after 1 update": o["drift_expert_1"], "router lr scale": o["router_lr_scale"],
        "failed": failed(o).map({True: "yes", False: "no"}),
        **({"left out: degenerate cell": o["degenerate"]} if "degenerate" in o and o["degenerate"].astype(bool).any() else {})})
