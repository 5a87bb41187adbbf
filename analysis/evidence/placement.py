"""Where each arm of a swept suite stands on the dose axis, in the order of the estimand declared before
stage 3 (results/stability_cpu/README.md): its **boundary** with an interval where the map's logistic fit
(analysis.evidence.stability) rises (failures grow with the dose) and crosses 0.5 inside the level doses
measured with a bounded Fieller interval; else the **bracket** of cells, the last level held (no run failed) below the first level where
most runs failed; else **up to which dose it held**, with the exact one-sided Clopper-Pearson bound that
puts on its failure rate at that level (analysis.evidence.dose.level_bounds: per level, never pooled
across levels). A crossing outside the doses measured is an extrapolation, never a boundary.

Each placement spans an interval of the dose per token where the arm's boundary may lie (the Fieller
interval; the bracket; from the last level held up); two arms whose intervals overlap are **not told
apart** by the suite (a reading across levels: exploratory, never a declared comparison).

An arm **faces no mismatch by construction** where its own measured mismatch (the run-median
`mismatch/k3_kl`) is float rounding (at most KL_FLOOR) in every run at a level whose dose is not: its
engine and trainer compute the same distribution (R3 replaying the engine's routing under router noise
only), so whatever it shows there is the noise-free control's, not robustness.

Every dose is given per token and per response: the per-response value of a dose between two levels is
interpolated between their doses (log-log), and a dose outside the levels measured has none (NaN)."""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass
from itertools import combinations

import numpy as np
import pandas as pd

from analysis.evidence.construction import float_rounding
from analysis.evidence.dose import DOSE, DOSE_RESPONSE, level_bounds
from analysis.evidence.stability import RUN_MEDIAN, Boundary, StabilityMap, failed, on_kl_axis

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


def overlapping(first: Placement, second: Placement) -> bool:
    """Whether two arms' intervals (Placement.interval) share a dose: the suite does not tell them apart."""
    (a_low, a_high), (b_low, b_high) = first.interval(), second.interval()
    return a_low <= b_high and b_low <= a_high


def pairs_apart(found: list[Placement]) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """(the pairs of arms not told apart, the pairs told apart), each pair in the arms' order."""
    together: list[tuple[str, str]] = []
    apart: list[tuple[str, str]] = []
    for first, second in combinations(found, 2):
        (together if overlapping(first, second) else apart).append((first.arm, second.arm))
    return together, apart
