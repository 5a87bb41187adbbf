"""A swept suite's stability answer, per arm, first and plain: one short sentence, and under it one item
per arm saying where it fails (its boundary on the level dose with its 95% interval, per token and per
response) or, where no boundary is placed, the bracket of cells or up to which dose it held and the
Clopper-Pearson bound that puts on its failure rate at that level (analysis.evidence.placement); a
crossing outside the doses measured is said to lie beyond the data, never given as the boundary. An arm
that faces no mismatch by construction is said to, first. Then the degenerate cells left out, and a last
item says which pairs of arms the paired test (McNemar's exact, stratified by level) tells apart and
which it does not. Every number of an item is a row of the answer's numbers table, which each item
links to.

Text is markdown: user text (arm labels) goes in through `analysis.report.escape.escape`."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from analysis.evidence.dose import DOSE, DOSE_RESPONSE, DOSE_STEPS
from analysis.evidence.placement import (
    BEYOND,
    BOUNDARY,
    BRACKET,
    FALLING,
    UNBOUNDED,
    UNPLACED,
    Level,
    PairTest,
    Placement,
    pairs_told_apart,
)
from analysis.evidence.stability import KL_FLOOR, StabilityMap
from analysis.report.escape import escape
from analysis.report.page import Sentence
from analysis.report.texts import count, p_text

CLOPPER_PEARSON = "Clopper-Pearson 95%"
LEAD = (f"Stability per arm on the level dose (a level's mismatch over the first {DOSE_STEPS} steps of its runs, "
        f"per token and per response); failure is degraded or collapsed; rate bounds are {CLOPPER_PEARSON}:")
MAX_ITEM_WORDS = 40  # an arm's item, at most: the sentences' limit (analysis.report.answer_words.MAX_WORDS)
CONSTRUCTION = "faces no mismatch by construction"  # said instead of why no boundary; why: a row of the numbers


def dose_text(value: float, measured: tuple[float, float]) -> str:
    """A dose per token: "0.814", or where it lies outside the doses measured, "below the data" /
    "beyond the data" (an extrapolation, whose value the numbers table keeps)."""
    if value < measured[0] * (1 - 1e-9):
        return "below the data"
    if value > measured[1] * (1 + 1e-9):
        return "beyond the data"
    return f"{value:.3g}"


def response_text(value: float, token: float, measured: tuple[float, float]) -> str:
    """A dose per response: "4.67", the words of dose_text outside the data, "-" where not measured."""
    inside = dose_text(token, measured)
    return inside if not inside[0].isdigit() else f"{value:.3g}" if math.isfinite(value) else "-"


def level_text(level: Level, said: str = "") -> str:
    """"dose 0.814 per token (4.67 per response)", with `said` in the brackets after it ("(4.67 per
    response; 0 of 6 failed)")."""
    inside = [f"{level.dose_response:.3g} per response"] if math.isfinite(level.dose_response) else []
    inside += [said] if said else []
    return f"dose {level.dose:.3g} per token" + (f" ({'; '.join(inside)})" if inside else "")


def held_text(level: Level, below: tuple[Level, ...] = ()) -> str:
    """"held up to dose 5.13 per token (46.5 per response; 0 of 6 failed, ≤ 39.3%)": the bound of that
    level's runs only; "held at" where a level of `below` (those with a failed run) lies under it."""
    upto = "at" if any(failed.dose < level.dose for failed in below) else "up to"
    return f"held {upto} {level_text(level, f'0 of {level.runs} failed, ≤ {100 * level.bound:.3g}%')}"


def failed_text(level: Level) -> str:
    """"most failed at dose 3.86 per token (4 of 6)": the first level where most runs failed."""
    return f"most failed at dose {level.dose:.3g} per token ({level.failures} of {level.runs})"


def boundary_text(found: Placement) -> str:
    """"fails at dose 4.18 per token (95% interval 2.23 to beyond the data), 32.9 per response (17.1 to
    beyond the data)"."""
    assert found.boundary is not None and found.boundary_response is not None
    (center, low, high), (r_center, r_low, r_high) = found.boundary, found.boundary_response
    token = f"{center:.3g} per token (95% interval {dose_text(low, found.measured)} to {dose_text(high, found.measured)})"
    response = (f"{response_text(r_center, center, found.measured)} per response "
                f"({response_text(r_low, low, found.measured)} to {response_text(r_high, high, found.measured)})")
    return f"fails at dose {token}, {response}"


NO_BOUNDARY = {BEYOND: "no boundary (crosses 0.5 beyond the data)",
               UNBOUNDED: "no boundary (slope not distinguishable from 0)",
               FALLING: "no boundary (failures do not rise with the dose)", "": "no boundary fitted"}


def unplaced_text(found: Placement) -> str:
    """Without a boundary: the bracket, or up to which dose it held (and the first level most failed,
    where there is one), or that every level had a failure; the levels with a failed run are counted, each
    given in the numbers table (placement_rows)."""
    parts = [CONSTRUCTION if found.by_construction else NO_BOUNDARY[found.fit_note] if found.failures else "never failed"]
    if found.kind == BRACKET and found.held and found.failed_at:
        held, most = found.held, found.failed_at
        response = f" ({most.dose_response:.3g} per response; " if math.isfinite(most.dose_response) else " ("
        parts.append(f"between {level_text(held, f'0 of {held.runs} failed, ≤ {100 * held.bound:.3g}%')} and "
                     f"{most.dose:.3g}{response}{most.failures} of {most.runs} failed)")
        return "; ".join(parts)
    if found.held is not None:
        parts.append(held_text(found.held, found.failed_levels))
    elif not (found.failed_levels or found.failed_at):  # no level on the axis: nothing to read a place off
        parts.append(f"no level has a dose above {KL_FLOOR:g}" + (
            f" ({count(found.unmeasured, 'level')} never measured a finite mismatch)" if found.unmeasured else ""))
    else:
        parts.append("no level held")
    if found.failed_at is not None:
        parts.append(failed_text(found.failed_at))
    elif found.failed_levels:  # failed runs on the axis (those at no dose above the floor are on none)
        parts.append("no level mostly failed")
    return "; ".join(parts)


def failures_text(levels: tuple[Level, ...]) -> str:
    """"1 of 3 at dose 0.528; 1 of 3 at 0.552": every level with a failed run, for the numbers table."""
    return "; ".join(f"{level.failures} of {level.runs} at " + ("dose " if i == 0 else "") + f"{level.dose:.4g}"
                     for i, level in enumerate(levels))


def arm_item(found: Placement, links: tuple) -> Sentence:
    """One arm's place in one sentence of at most MAX_ITEM_WORDS words (an arm named in one word): where
    it faces no mismatch by construction, that first (for a boundary) or instead of why it has none; then
    its boundary, bracket or the dose it held up to. Each level's numbers are rows of the answer's table."""
    if found.kind == BOUNDARY:
        place = (f"{CONSTRUCTION}; " if found.by_construction else "") + boundary_text(found)
    else:
        place = unplaced_text(found)
    return Sentence(f"**{escape(found.arm)}** ({found.failures} of {count(found.runs, 'run')} failed): {place}.", links)


def pair_names(pairs: list[tuple[str, str]], joiner: str) -> str:
    """"a from b and c; d from e": each first arm once, with every arm it is paired with."""
    by_first: dict[str, list[str]] = {}
    for first, second in pairs:
        by_first.setdefault(first, []).append(second)
    return "; ".join(f"{escape(first)} {joiner} {listed(seconds)}" for first, seconds in by_first.items())


def listed(items: list[str]) -> str:
    """"a", "a and b", "a, b and c" (escaped)."""
    shown = [escape(i) for i in items]
    return shown[0] if len(shown) == 1 else ", ".join(shown[:-1]) + " and " + shown[-1]


PAIRED_TEST = "Paired by cell (the same level and seed), McNemar's exact test of failure stratified by level"


def pair_phrase(test: PairTest) -> str:
    """"only grpo_icepop failed in 10 of its 26 cells shared with grpo_rr, only grpo_rr in 0 (p = 0.002,
    Holm 0.07)": the arm alone failed in more cells named first; Holm where the pair is in the family; in
    words where no shared cell has only one failed, or the two share none."""
    held = f", Holm {p_text(test.adjusted)}" if math.isfinite(test.adjusted) else ""
    if not test.cells:
        return f"{escape(test.first)} and {escape(test.second)} share no cell (nothing tested)"
    if not test.first_only + test.second_only:
        return (f"in none of the {count(test.cells, 'cell')} {escape(test.first)} and {escape(test.second)} share did "
                f"only one fail (p = {p_text(test.p)}{held})")
    (more, many), (less, few) = sorted(((test.first, test.first_only), (test.second, test.second_only)),
                                       key=lambda side: -side[1])
    return (f"only {escape(more)} failed in {many} of its {count(test.cells, 'cell')} shared with {escape(less)}, only "
            f"{escape(less)} in {few} (p = {p_text(test.p)}{held})")


def told_text(test: PairTest) -> str:
    """"grpo_rr and grpo (only grpo failed in 8 of its 16 cells shared with grpo_rr, ...)": a pair told apart."""
    return f"{escape(test.first)} and {escape(test.second)} ({pair_phrase(test)})"


def pair_names_of(tests: list[PairTest]) -> str:
    """"a and b, c and d": the pairs named."""
    return ", ".join(f"{escape(t.first)} and {escape(t.second)}" for t in tests)


def pairs_sentence(tests: list[PairTest], links: tuple) -> Sentence | None:
    """Which pairs of arms the paired test tells apart and which it does not (analysis.evidence.placement
    .pair_tests): the declared family's pairs, Holm over them, the rest exploratory; or, with no declared
    family, every pair, Holm over all of them, each exploratory. None for one arm."""
    if not tests:
        return None
    told, not_told = pairs_told_apart(tests)
    declared = [t for t in tests if t.declared]
    if declared:
        rest = len(tests) - len(declared)
        others = f"; the other {count(rest, 'pair')} {'is' if rest == 1 else 'are'} exploratory (no claim)" if rest else ""
        said = ([f"tells apart {'; '.join(told_text(t) for t in told)}"] if told else []) + (
            [f"does not tell apart {pair_names_of(not_told)}"] if not_told else [])
        return Sentence(f"{PAIRED_TEST}, over the {count(len(declared), 'declared pair')} (Holm over "
                        f"{'it' if len(declared) == 1 else 'them'}): {'; '.join(said)}{others}.", links)
    family = f"exploratory: no declared family; Holm over the {count(len(tests), 'pair')}"
    closest = min(tests, key=lambda t: t.p)
    if len(tests) == 1:
        verb = "tells" if told else "does not tell"
        return Sentence(f"{PAIRED_TEST} {verb} these 2 arms apart ({family}): {pair_phrase(closest)}.", links)
    if told:
        tail = "; no other pair" if not_told else ""
        return Sentence(f"{PAIRED_TEST} tells apart {len(told)} of the {count(len(tests), 'pair')} ({family}): "
                        f"{'; '.join(told_text(t) for t in told)}{tail}.", links)
    arms = len({arm for t in tests for arm in (t.first, t.second)})
    return Sentence(f"{PAIRED_TEST} tells no two of these {arms} arms apart ({family}); the closest: "
                    f"{pair_phrase(closest)}.", links)


def seeds_words(seeds: list[int]) -> str:
    """"seed 0", "seeds 0, 3, 4 and 5"."""
    shown = [str(s) for s in seeds]
    return f"seed {shown[0]}" if len(shown) == 1 else "seeds " + ", ".join(shown[:-1]) + " and " + shown[-1]


def degenerate_places(stability: StabilityMap) -> list[tuple[str, str, int]]:
    """Per level with a degenerate cell and each reason: (where, why, runs left out): "logit_noise=6.8, seeds
    0, 3, 4 and 5" or "logit_noise=6.8, every seed" where every cell of the level is."""
    cells = stability.degenerate
    if not len(cells):
        return []
    every = stability.every_run
    places = []
    for (suite, cell, why), frame in cells.groupby(["suite", "cell", "why"], sort=False):
        at_level = every.loc[(every["suite"] == suite) & (every["cell"] == cell), "seed"].nunique()
        seeds = sorted(int(s) for s in frame["seed"])
        where = f"{cell}, every seed" if len(seeds) == at_level else f"{cell}, {seeds_words(seeds)}"
        places.append((str(where), str(why), int(frame["runs"].sum())))
    return places


def degenerate_sentence(stability: StabilityMap | None, links: tuple) -> Sentence | None:
    """The degenerate cells, named, left out of the fits and the paired tests (analysis.evidence.stability
    .degenerate_cells); None where there is none."""
    places = degenerate_places(stability) if stability is not None else []
    if not places:
        return None
    said = "; ".join(f"{escape(where)} ({why}, {count(runs, 'run')})" for where, why, runs in places)
    return Sentence(f"Degenerate cells, left out of the fits and the paired tests (they carry no information about "
                    f"any arm): {said}.", links)


NO_AXIS_LEAD = (f"No level of this sweep meets a mismatch (every level dose is float rounding, at most {KL_FLOOR:g}), "
                "so the map places no arm on a dose axis; runs degraded or collapsed per arm:")


def on_no_axis(found: list[Placement]) -> bool:
    """Whether no arm has a level on the dose axis (a sweep of settings that meet no mismatch, or whose
    runs never measured a finite one)."""
    return all(p.kind == UNPLACED and p.held is None and p.failed_at is None and not p.failed_levels for p in found)


def unmeasured_lead(found: list[Placement]) -> str:
    """The lead where no level is on the dose axis and some level has no dose at all: its runs measured no
    finite mismatch in the first steps that exist (collapsed to non-finite values): not float rounding."""
    levels = max(p.unmeasured for p in found)
    return (f"No level of this sweep has a dose on the axis: at {count(levels, 'level')} no run measured a finite "
            f"mismatch in the first {DOSE_STEPS} steps it ran (the reward and mismatch of a collapsed policy are "
            f"not finite), at any other the dose is float rounding (at most {KL_FLOOR:g}); runs degraded or "
            "collapsed per arm:")


def every_level_failed(found: list[Placement]) -> bool:
    """Whether every run of every arm failed (degraded or collapsed), at whatever levels it ran."""
    return bool(found) and all(p.runs and p.failures == p.runs for p in found)


def dose_range(classes: pd.DataFrame) -> str:
    """"at level doses 0.1 to 0.3 per token (0.5 to 1.5 per response)": the level doses on the axis, or
    that no level has one (no dose ever finite, or none above KL_FLOOR)."""
    doses = classes[[DOSE, DOSE_RESPONSE]].drop_duplicates() if DOSE in classes else pd.DataFrame(columns=[DOSE])
    token = doses[DOSE].to_numpy(dtype=float)
    if not np.isfinite(token).any():
        return f"where no run measured a finite mismatch in the first {DOSE_STEPS} steps it ran (no level has a dose)"
    token = token[token > KL_FLOOR]
    if not len(token):
        return f"where no level has a dose above {KL_FLOOR:g}"
    response = doses.loc[doses[DOSE] > KL_FLOOR, DOSE_RESPONSE].to_numpy(dtype=float)
    response = response[response > 0]
    per = f" ({response.min():.3g} to {response.max():.3g} per response)" if len(response) else ""
    return f"at level doses {token.min():.3g} to {token.max():.3g} per token{per}"


def short_levels(classes: pd.DataFrame) -> pd.DataFrame:
    """The levels whose dose pooled fewer values than the first DOSE_STEPS steps of each of their runs (a
    run stopped within them, or a step measured no finite mismatch): one row each, suite, cell, dose,
    dose_steps, dose_runs and level_runs."""
    needed = ["suite", "cell", DOSE, "dose_steps", "dose_runs", "level_runs"]
    if any(c not in classes for c in needed):
        return pd.DataFrame(columns=needed)
    levels = classes[needed].drop_duplicates(["suite", "cell"])
    return levels[levels["dose_steps"] < DOSE_STEPS * levels["level_runs"]]


def map_lead(found: list[Placement], classes: pd.DataFrame | None = None) -> str:
    """The lead sentence: the dose axis and what failure is; where no arm is on it, why (float rounding,
    or a dose never measured finite); where every run failed, that, with the doses measured. `classes`:
    the map's runs (analysis.evidence.stability.StabilityMap.classes)."""
    classes = pd.DataFrame() if classes is None else classes
    if every_level_failed(found):
        return (f"Every run of every arm failed (degraded or collapsed) at every level, {dose_range(classes)}: no arm "
                f"held at any dose measured; rate bounds are {CLOPPER_PEARSON}:")
    if on_no_axis(found):
        return unmeasured_lead(found) if any(p.unmeasured for p in found) else NO_AXIS_LEAD
    short, lead, window = short_levels(classes), LEAD, f"over the first {DOSE_STEPS} steps of its runs"
    if is_lag_sweep(classes):  # analysis.evidence.dose
        lead, window = lead.replace(window, f"{window} at the level's lag"), f"{window} at the level's lag"
    if not len(short):
        return lead
    return lead.replace(window, f"{window}, or at {count(len(short), 'level')} the finite steps they ran, as runs "
                                "stopped within them")


def is_lag_sweep(classes: pd.DataFrame) -> bool:
    """Whether the map sweeps rollout lag (its level dose is read at each level's lag: analysis.evidence.dose)."""
    return any(name.startswith("sweep/") and name.endswith("lag") for name in classes.columns)


def lag_levels_sentence(classes: pd.DataFrame | None, links: tuple) -> Sentence | None:
    """Where the map sweeps rollout lag, which lag each level dose is, so that every arm's dose reads on the lag
    axis: "The levels by lag: lag=2 at dose 0.0811 per token, lag=4 at 0.123, ...; lag=0 meets no mismatch."
    (each level's cell name and dose, by dose); None for other maps."""
    if classes is None or not is_lag_sweep(classes) or DOSE not in classes or "cell" not in classes:
        return None
    levels = classes[["cell", DOSE]].drop_duplicates("cell")
    on_axis = levels[levels[DOSE].astype(float) > KL_FLOOR].sort_values(DOSE)
    if not len(on_axis):
        return None
    said = ", ".join(f"{escape(str(cell))} at {'dose ' if i == 0 else ''}{dose:.3g}"
                     for i, (cell, dose) in enumerate(zip(on_axis["cell"], on_axis[DOSE].astype(float))))
    off = [escape(str(c)) for c in levels.loc[~levels["cell"].isin(on_axis["cell"]), "cell"]]
    tail = f"; {listed(off)} {'meets' if len(off) == 1 else 'meet'} no mismatch" if off else ""
    return Sentence(f"The levels by lag: {said} per token{tail}.", links)


def map_items(found: list[Placement], links: tuple, tests: list[PairTest] | None = None,
              stability: StabilityMap | None = None) -> tuple[Sentence, ...]:
    """The items under the lead sentence: one per arm (where no arm is on the dose axis, its failed runs
    alone: no place to give), then, for a lag sweep, which lag each level dose is, then the degenerate cells
    left out, then which pairs of arms the paired test tells apart (`tests`:
    analysis.evidence.placement.pair_tests)."""
    if on_no_axis(found):
        arms = tuple(Sentence(f"**{escape(p.arm)}**: {p.failures} of {count(p.runs, 'run')} failed.", links) for p in found)
    else:
        arms = tuple(arm_item(p, links) for p in found)
    extra = (lag_levels_sentence(stability.classes if stability is not None else None, links),
             degenerate_sentence(stability, links), pairs_sentence(tests or [], links))
    return arms + tuple(sentence for sentence in extra if sentence is not None)


# ------------------------------------------------------------------------------ the numbers behind the items


def _row(what: str, value: str, test: str, result: str) -> dict:
    return {"sentence": 3, "what": what, "value": value, "test": test, "result": result}


def dose_rows(classes: pd.DataFrame) -> list[dict]:
    """A row per level whose dose pooled fewer values than the first DOSE_STEPS steps of each of its runs
    (short_levels): the values it pooled, and the dose they gave, or that none was finite."""
    rows = []
    for r in short_levels(classes).to_dict("records"):
        dose = float(r[DOSE])
        rows.append(_row(f"level dose at {r['cell']}: the first-step values pooled",
                         f"{r['dose_steps']} finite of the first {DOSE_STEPS} steps of {count(int(r['level_runs']), 'run')} "
                         f"({r['dose_runs']} with one or more)",
                         "median of the finite per-step mismatch/k3_kl over the steps that exist (analysis.evidence.dose)",
                         f"{dose:.4g} per token" if math.isfinite(dose) else
                         "no dose: never finite (off the axis, not float rounding)"))
    return rows


def _g(value: float) -> str:
    """A value in 4 significant digits, "-" where there is none (a dose per response outside the data)."""
    return f"{value:.4g}" if math.isfinite(value) else "-"


def level_value(level: Level) -> str:
    response = f"{level.dose_response:.4g}" if math.isfinite(level.dose_response) else "-"
    return f"{level.dose:.4g} per token, {response} per response: {level.failures} of {level.runs} failed"


def placement_rows(found: Placement) -> list[dict]:
    """The numbers of one arm's item: its boundary (the fitted values, extrapolated ends included, marked),
    its last level held with that level's one-sided bound, its first level most failed with that level's
    exact interval."""
    rows = []
    arm = found.arm
    if found.boundary is not None and found.boundary_response is not None:
        (center, low, high), (r_center, r_low, r_high) = found.boundary, found.boundary_response
        outside = [name for name, v in (("low", low), ("high", high)) if not dose_text(v, found.measured)[0].isdigit()]
        rows.append(_row(f"{arm}: boundary, the level dose where P(failure) = 0.5 [95% interval], per token; per "
                         "response", f"{center:.4g} [{low:.4g}, {high:.4g}]; {_g(r_center)} [{_g(r_low)}, {_g(r_high)}]",
                         "logistic fit, Fieller's interval; per response interpolated between the levels' doses "
                         "(log-log)", f"{' and '.join(outside)} end outside the doses measured "
                         f"({found.measured[0]:.4g} to {found.measured[1]:.4g} per token)" if outside else "inside the "
                         "doses measured"))
    if found.by_construction:
        rows.append(_row(f"{arm}: faces no mismatch by construction", "its own run-median mismatch/k3_kl is float "
                         f"rounding (at most {KL_FLOOR:g}) in every run at a level with a dose above it",
                         "analysis.evidence.placement.faces_no_mismatch", "not robustness: no dose reached it"))
    if found.held is not None:
        rows.append(_row(f"{arm}: the last level held (no run failed)", level_value(found.held),
                         "exact one-sided Clopper-Pearson at 95%, this level's runs only",
                         f"failure rate ≤ {100 * found.held.bound:.3g}% (1 - 0.05^(1/{found.held.runs}))"))
    if found.failed_at is None and found.failed_levels:
        rows.append(_row(f"{arm}: the levels with a failed run (none where most failed)",
                         failures_text(found.failed_levels), "", ""))
    if found.failed_at is not None:
        level = found.failed_at
        rows.append(_row(f"{arm}: the first level where most runs failed", level_value(level),
                         "exact two-sided Clopper-Pearson at 95%, this level's runs only",
                         f"failure rate {level.failures / level.runs:.3g} [{level.low:.3g}, {level.high:.3g}]"))
    return rows


def pair_family(test: PairTest, tests: list[PairTest]) -> str:
    """The family a pair's p is adjusted in, in words."""
    declared = sum(t.declared for t in tests)
    if test.declared:
        return f"declared, Holm over the {count(declared, 'declared pair')}"
    return "exploratory, unadjusted" if declared else f"exploratory (no declared family), Holm over the {count(len(tests), 'pair')}"


def pair_rows(tests: list[PairTest]) -> list[dict]:
    """One row per pair of arms: the cells where only one of the two failed, per level, the test and its p."""
    rows = []
    for t in tests:
        levels = ", ".join(f"{cell} {a}/{b}" for cell, a, b in t.levels)
        adjusted = math.isfinite(t.adjusted)
        verdict = ("tells apart" if t.separates else "does not tell apart") if adjusted else "exploratory: no claim"
        rows.append(_row(f"{t.first} against {t.second}: cells where only {t.first} / only {t.second} failed, per level",
                         f"{t.first_only} / {t.second_only} of {count(t.cells, 'shared cell')}" + (f" ({levels})" if levels else ""),
                         f"McNemar's exact test stratified by level: two-sided, Binomial(n, 1/2) on the "
                         f"{count(t.first_only + t.second_only, 'cell')} where exactly one failed, pooled over "
                         f"{count(len(t.levels), 'level')}; {pair_family(t, tests)}",
                         f"p = {p_text(t.p)}" + (f", Holm-adjusted {p_text(t.adjusted)}" if adjusted else "") + f": {verdict}"))
    return rows


def degenerate_rows(stability: StabilityMap) -> list[dict]:
    """One row per level with degenerate cells and reason: where, the runs left out, the rule."""
    return [_row(f"degenerate cells at {where}", f"{count(runs, 'run')} left out of the fits and the paired tests",
                 "analysis.evidence.stability.degenerate_cells: every run's reward and gradient zero at every step, or "
                 "every arm's run the same metrics bit for bit", why)
            for where, why, runs in degenerate_places(stability)]
