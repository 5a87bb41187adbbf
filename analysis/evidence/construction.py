"""Whether an arm faces no engine/trainer mismatch by construction, and a comparison holds by it.

An arm's engine and trainer may compute the same distribution by construction: R3 replays the engine's
routing, so under router noise alone it meets none of the noise; a noise-free engine meets none at all.
Its measured mismatch, the median over each run's steps of `mismatch/k3_kl` (the run-median KL), is then
float rounding, at most KL_FLOOR (analysis.evidence.stability). Where the other arm of a comparison meets
a real one (its run-median KL above KL_FLOOR on each of its runs), whatever the first arm wins there it
wins as the noise-free control, not by a robust objective: the comparison holds by construction. Where
both arms meet the mismatch, or neither does (a suite without one), nothing is said. The stability map's
placements (analysis.evidence.placement) read the same test at each level of a sweep."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike

from analysis.data.load import Results
from analysis.evidence.stability import KL, KL_FLOOR, run_median


def float_rounding(run_kls: ArrayLike) -> bool:
    """Whether there is a run and every run's median KL is float rounding (at most KL_FLOOR): no mismatch
    reached the arm, by construction. A run without a KL (NaN) is not float rounding."""
    kls = np.asarray(run_kls, dtype=float)
    return bool(len(kls)) and bool(np.all(kls <= KL_FLOOR))


def mismatched(run_kls: ArrayLike) -> bool:
    """Whether there is a run and every run's median KL is above KL_FLOOR: a measured mismatch."""
    kls = np.asarray(run_kls, dtype=float)
    return bool(len(kls)) and bool(np.all(kls > KL_FLOOR))


@dataclass(frozen=True)
class ByConstruction:
    """One comparison that holds by construction: `free` faces no mismatch (the largest of its runs'
    median KLs, `free_kl`, is at most KL_FLOOR) where `other` meets one (`other_kl`: the median over its
    runs of their median KL, per token); `runs`: each arm's runs."""

    free: str
    other: str
    free_kl: float
    other_kl: float
    runs: tuple[int, int]


def arm_run_kls(results: Results) -> dict[str, np.ndarray]:
    """Per arm of one group (suite and sweep point), its runs' median `mismatch/k3_kl` in seed order;
    {} where the runs measured no engine/trainer mismatch (no such column)."""
    metrics = results.metrics
    if KL not in metrics.columns:
        return {}
    return {str(arm): np.array([run_median(steps, KL) for _, steps in runs.groupby("seed", sort=True)])
            for arm, runs in metrics.groupby("arm", sort=False)}


def by_construction(run_kls: dict[str, np.ndarray], first: str, second: str) -> ByConstruction | None:
    """The comparison of `first` and `second` where one faces no mismatch (float_rounding) while the
    other meets one (mismatched), from each arm's run-median KLs (arm_run_kls); else None."""
    for free, other in ((first, second), (second, first)):
        free_kls, other_kls = run_kls.get(free, np.array([])), run_kls.get(other, np.array([]))
        if float_rounding(free_kls) and mismatched(other_kls):
            return ByConstruction(free, other, float(np.max(free_kls)), float(np.median(other_kls)),
                                  (len(free_kls), len(other_kls)))
    return None
