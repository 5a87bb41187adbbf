"""Where each arm of a swept suite stands on the dose axis, in the order of the estimand declared before
stage 3 (results/stability_cpu/README.md): its **boundary** with an interval where the map's logistic fit
(analysis.evidence.stability) rises (failures grow with the dose) and crosses 0.5 inside the level doses
measured with a bounded Fieller interval; else the **bracket** of cells, the last level held (no run failed) below the first level where
most runs failed; else **up to which dose it held**, with the exact one-sided Clopper-Pearson bound that
puts on its failure rate at that level (analysis.evidence.dose.level_bounds: per level, never pooled
across levels). A crossing outside the doses measured is an extrapolation, never a boundary.

Each placement spans an interval of the dose per token where the arm's boundary may lie (the Fieller
interval; the bracket; from the last level held up): a description, never a test. Two arms are told apart
by a **paired test** (PairTest): the cells they share (the same level and seed: the same warm start,
prompts and engine noise), degenerate cells left out, compared on failure; the cells where exactly one of
the two failed (discordant) are pooled over the levels into McNemar's exact test stratified by level
(analysis.stats.library.stratified_mcnemar_p). The family is the suite's declared pairs (Holm over them;
every other pair exploratory, unadjusted), or without a declared family every pair of the map (Holm over
all of them, each exploratory): a pair separates at a Holm-adjusted p below 0.05.

An arm **faces no mismatch by construction** where its own measured mismatch (the run-median
`mismatch/k3_kl`) is float rounding (at most KL_FLOOR) in every run at a level whose dose is not: its
engine and trainer compute the same distribution (R3 replaying the engine's routing under router noise
only), so whatever it shows there is the noise-free control's, not robustness.

Every dose is given per token and per response: the per-response value of a dose between two levels is
interpolated between their doses (log-log), and a dose outside the levels measured has none (NaN)."""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass, replace
from itertools import combinations

import numpy as np
import pandas as pd

from analysis.evidence.construction import float_rounding
from analysis.evidence.dose import DOSE, DOSE_RESPONSE, level_bounds
from analysis.evidence.stability import RUN_MEDIAN, Boundary, StabilityMap, failed, on_kl_axis
from analysis.stats.library import ALPHA, holm, stratified_mcnemar_p

BOUNDARY, BRACKET, HELD, FAILED_ONLY, UNPLACED = "boundary", "bracket", "held", "failed only", "unplaced"
# why a fit gives no boundary: its crossing is outside the data, its slope not told from 0, its failures falling
BEYOND, UNBOUNDED, FALLING = "beyond", "unbounded", "falling"
LOG10_MAX = math.log10(sys.float_info.max)  # 308.25: 10 ** x is past a float's range above it


@dataclass(frozen=True)
class Level:
    """One level of one arm: its dose per token and per response, runs, failures, and the failure rate's
    exact intervals (`bound`: the one-sided 95% upper bound after no failure, NaN otherwise)."""

    dose: float
    dose_response: float
    runs: int
    failures: int
    low: float
    high: float
    bound: float


@dataclass(frozen=True)
class Placement:
    """One arm's place (see the module). `boundary`: (center, low, high) per token where kind is
    BOUNDARY, `boundary_response` the same per response (NaN outside the doses measured); `held`: the
    largest level with no failed run, `failed_at`: the smallest where most runs failed; `fit_note`: why
    the fit gives no boundary (BEYOND, UNBOUNDED, FALLING; "" where it does or there is no fit); `measured`: the
    smallest and largest level dose per token."""

    arm: str
    kind: str
    runs: int
    failures: int
    measured: tuple[float, float]
    boundary: tuple[float, float, float] | None = None
    boundary_response: tuple[float, float, float] | None = None
    held: Level | None = None
    failed_at: Level | None = None
    fit_note: str = ""
    by_construction: bool = False
    failed_levels: tuple[Level, ...] = ()  # every level with a failed run, by dose
    unmeasured: int = 0  # levels with no dose: no run there measured a finite first-step KL (not float rounding)

    def interval(self) -> tuple[float, float]:
        """Where the boundary may lie, per token: the Fieller interval; the bracket; from the lowest of the
        levels read up (held, or most failed below a level held); up to the level most failed; anywhere."""
        if self.boundary is not None:
            return self.boundary[1], self.boundary[2]
        if self.kind == BRACKET and self.held and self.failed_at:
            return self.held.dose, self.failed_at.dose
        if self.held is not None:
            return min(self.held.dose, self.failed_at.dose if self.failed_at else math.inf), math.inf
        return 0.0, self.failed_at.dose if self.failed_at else math.inf


def per_response(classes: pd.DataFrame, doses: np.ndarray) -> np.ndarray:
    """`doses` per token as doses per response, interpolated (log-log) between the levels of `classes`;
    NaN outside the levels measured or where no level has a per-response dose."""
    levels = classes[[DOSE, DOSE_RESPONSE]].drop_duplicates().dropna()
    levels = levels[(levels[DOSE] > 0) & (levels[DOSE_RESPONSE] > 0)].sort_values(DOSE)
    doses = np.asarray(doses, dtype=float)
    if not len(levels):
        return np.full(doses.shape, np.nan)
    x, y = np.log10(levels[DOSE].to_numpy(dtype=float)), np.log10(levels[DOSE_RESPONSE].to_numpy(dtype=float))
    with np.errstate(divide="ignore", invalid="ignore"):
        at = np.log10(doses)
    inside = np.isfinite(at) & (at >= x[0]) & (at <= x[-1])
    return np.where(inside, 10 ** np.interp(np.where(inside, at, x[0]), x, y), np.nan)


def arm_levels(classes: pd.DataFrame) -> list[Level]:
    """One arm's levels on the dose axis, by dose (analysis.evidence.dose.level_bounds: one per cell)."""
    placed = classes[on_kl_axis(classes)]
    rows = level_bounds(placed, failed(placed)) if len(placed) else pd.DataFrame()
    return [Level(float(r[DOSE]), float(r[DOSE_RESPONSE]), int(r["runs"]), int(r["failures"]), float(r["low"]),
                  float(r["high"]), float(r["bound"]))
            for _, r in (rows.sort_values(DOSE, kind="stable").iterrows() if len(rows) else iter(()))]


def power_of_ten(log: float) -> float:
    """10 ** `log` as a float: inf above a float's range (a crossing extrapolated by a slope near 0, where
    `10 ** log` raises OverflowError), 0 below it."""
    return math.inf if log > LOG10_MAX else 10.0 ** log


def why_no_boundary(found: Boundary) -> str:
    """The one guard on reading a boundary off an arm's fit, for every place that reads one: UNBOUNDED
    where the fit's slope is not distinguishable from 0 at 5% (Fieller's interval unbounded; a slope of
    exactly 0, the same failure rate at every dose, among them); else FALLING where the slope is negative
    (failures fall as the dose grows: a boundary is where a rising failure rate crosses 0.5, and there is
    none); else BEYOND where it crosses 0.5 outside the doses measured (compared in log10: a crossing past
    a float's range is beyond the data, never an overflow); "" where the crossing places a boundary, or
    there is no fit."""
    if found.fit is None:
        return ""
    center, low, high = found.fit.crossing()
    if not (math.isfinite(low) and math.isfinite(high)):
        return UNBOUNDED
    if not found.fit.slope > 0:
        return FALLING
    if not (math.isfinite(center) and math.log10(found.kl_low) <= center <= math.log10(found.kl_high)):
        return BEYOND
    return ""


def fit_boundary(found: Boundary) -> tuple[tuple[float, float, float] | None, str]:
    """The fit's crossing and Fieller interval per token where they place a boundary (why_no_boundary), else
    (None, why: UNBOUNDED, FALLING, BEYOND, or "" without a fit)."""
    note = why_no_boundary(found)
    if found.fit is None or note:
        return None, note
    center, low, high = found.fit.crossing()
    return (power_of_ten(center), power_of_ten(low), power_of_ten(high)), ""


def fallback_kind(held: Level | None, failed_at: Level | None) -> str:
    """Without a boundary: a bracket where the last level held lies below the first level most failed."""
    if held is not None and failed_at is not None:
        return BRACKET if held.dose < failed_at.dose else HELD
    return HELD if held is not None else FAILED_ONLY if failed_at is not None else UNPLACED


def placement(found: Boundary, classes: pd.DataFrame) -> Placement:
    """One arm's placement from its boundary (analysis.evidence.stability.boundary) and its runs' rows."""
    levels = arm_levels(classes)
    held = next((level for level in reversed(levels) if level.failures == 0), None)
    failed_at = next((level for level in levels if level.failures > level.runs / 2), None)
    span = (found.kl_low, found.kl_high)
    construction, with_failures = faces_no_mismatch(classes), tuple(level for level in levels if level.failures)
    unmeasured = unmeasured_levels(classes)
    boundary, note = fit_boundary(found)
    if boundary is not None:
        response = per_response(classes, np.array(boundary))
        return Placement(found.arm, BOUNDARY, found.runs, found.failures, span, boundary,
                         (float(response[0]), float(response[1]), float(response[2])), held, failed_at,
                         by_construction=construction, failed_levels=with_failures, unmeasured=unmeasured)
    return Placement(found.arm, fallback_kind(held, failed_at), found.runs, found.failures, span, held=held,
                     failed_at=failed_at, fit_note=note, by_construction=construction, failed_levels=with_failures,
                     unmeasured=unmeasured)


def unmeasured_levels(classes: pd.DataFrame) -> int:
    """How many levels (cells) of `classes` have no dose: none of their runs measured a finite
    `mismatch/k3_kl` in the steps of the dose's window that exist (analysis.evidence.dose.level_doses)."""
    if DOSE not in classes:
        return 0
    return int(classes.loc[classes[DOSE].isna(), "cell"].nunique())


def faces_no_mismatch(classes: pd.DataFrame) -> bool:
    """Whether every run of `classes` at a level with a dose above KL_FLOOR measured its own mismatch at
    KL_FLOOR or below (float rounding), and there is such a run: no mismatch reached it, by construction
    (analysis.evidence.construction.float_rounding)."""
    return float_rounding(classes.loc[on_kl_axis(classes), RUN_MEDIAN])


def placements(found: StabilityMap) -> list[Placement]:
    """Every arm's placement, in the map's order of arms."""
    return [placement(b, found.classes[found.classes["arm"] == b.arm]) for b in found.bounds]


# ------------------------------------------------------------------------------ pairs of arms, cell by cell


@dataclass(frozen=True)
class PairTest:
    """Two arms compared on failure over the cells they share (the same level and seed, degenerate cells
    left out: the map's classes): per level (`levels`: its cell name, the cells where only `first` failed,
    where only `second` did), the exact McNemar test stratified by level (`p`:
    analysis.stats.library.stratified_mcnemar_p) and its Holm adjustment over the family (`adjusted`: over the
    declared pairs where the suite declares a family, NaN for a pair outside it; over every pair of the
    map where none is declared). `declared`: the pair is in the suite's declared family."""

    first: str
    second: str
    cells: int
    levels: tuple[tuple[str, int, int], ...]
    p: float
    declared: bool
    adjusted: float = float("nan")

    @property
    def first_only(self) -> int:
        return sum(level[1] for level in self.levels)

    @property
    def second_only(self) -> int:
        return sum(level[2] for level in self.levels)

    @property
    def separates(self) -> bool:
        """Whether the pair is told apart: its Holm-adjusted p below ALPHA (never for a pair outside a
        declared family, which is exploratory and adjusted by none)."""
        return bool(self.adjusted < ALPHA)


def shared_cells(classes: pd.DataFrame, first: str, second: str) -> pd.DataFrame:
    """The cells (suite, cell, seed) where both arms have a run of `classes`, with `first_failed` and
    `second_failed`, in the order of `classes`."""
    marked = classes.assign(failed=failed(classes).to_numpy(dtype=bool))
    key = ["suite", "cell", "seed"]
    a = marked.loc[marked["arm"] == first, [*key, "failed"]].drop_duplicates(key)
    b = marked.loc[marked["arm"] == second, [*key, "failed"]].drop_duplicates(key)
    return a.merge(b, on=key, suffixes=("_a", "_b")).rename(columns={"failed_a": "first_failed", "failed_b": "second_failed"})


def discordant_by_level(cells: pd.DataFrame) -> tuple[tuple[str, int, int], ...]:
    """Per level (suite and cell) of shared_cells' rows: (its cell name, cells where only the first arm
    failed, cells where only the second did), in the order the levels come."""
    levels = []
    for (_, cell), frame in cells.groupby(["suite", "cell"], sort=False):
        one, two = frame["first_failed"].to_numpy(dtype=bool), frame["second_failed"].to_numpy(dtype=bool)
        levels.append((str(cell), int((one & ~two).sum()), int((two & ~one).sum())))
    return tuple(levels)


def pair_test(classes: pd.DataFrame, first: str, second: str, declared: bool) -> PairTest:
    """One pair's test over the cells they share (see PairTest); no shared cell: p = 1 (nothing tested)."""
    cells = shared_cells(classes, first, second)
    levels = discordant_by_level(cells)
    return PairTest(first, second, len(cells), levels, stratified_mcnemar_p([lvl[1:] for lvl in levels]), declared)


def pair_tests(classes: pd.DataFrame, declared: list[tuple[str, str]] | None = None) -> list[PairTest]:
    """Every pair of the map's arms compared cell by cell (PairTest). With `declared` pairs (the suite's
    primary family, as the report names its arms), those first, in declared order and orientation, Holm
    over them alone (a declared arm without a run on the map counts at p = 1, so the family is the size
    declared), then the other pairs, exploratory (no adjustment); without, every pair in the arms' order,
    Holm over all of them, every one exploratory (no declared family)."""
    arms = [str(a) for a in dict.fromkeys(classes["arm"])]
    chosen = list(dict.fromkeys(declared or []))
    tests = [pair_test(classes, a, b, True) for a, b in chosen]
    taken = {frozenset(pair) for pair in chosen}
    tests += [pair_test(classes, a, b, False) for a, b in combinations(arms, 2) if frozenset((a, b)) not in taken]
    adjusted = holm(np.array([t.p if t.declared or not chosen else np.nan for t in tests], dtype=float))
    return [replace(t, adjusted=float(p)) for t, p in zip(tests, adjusted, strict=True)]


def pairs_told_apart(tests: list[PairTest]) -> tuple[list[PairTest], list[PairTest]]:
    """(the pairs that separate, those that do not) among the family's pairs (declared where there is a
    declared family, else every pair)."""
    family = [t for t in tests if t.declared] or tests
    return [t for t in family if t.separates], [t for t in family if not t.separates]
