"""Whether an arm faces no engine/trainer mismatch by construction, and a comparison holds by it.

An arm's engine and trainer may compute the same distribution by construction: R3 replays the engine's
routing, so under router noise alone it meets none of the noise; a noise-free engine meets none at all.
Its measured mismatch, the median over each run's steps of `mismatch/k3_kl` (the run-median KL), is then
float rounding, at most KL_FLOOR (analysis.evidence.stability). Where the other arm of a comparison meets
a real one (its run-median KL above KL_FLOOR on each of its runs), whatever the first arm wins there it
wins as the noise-free control, not by a robust objective: the comparison holds by construction. Where
both arms meet the mismatch, or neither does (a suite without one), nothing is said. The stability map's
placements (analysis.evidence.placement) read the same test at each level of a sweep.

Two arms may also train one gradient by construction: GSPO-token's token ratio s_i,t = sg[s_i] pi/sg[pi]
has s_i's value, so with per-response advantages (A_i,t = A_i: `credit: response`) its value, the
responses it clips and its gradient are GSPO's (GSPO eq. 13-15; tests/test_objectives.py holds the
identity). Where the run records show the built-in gspo and gspo_token at the same clip range, lr, routing
replay, parameters and `set:`, both with per-response credit and no correction, the two arms are one
objective (`same_gradient`): their comparison tests nothing, and any difference between their runs is
float rounding carried through training. This is read from the records, never from the numbers."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
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


GSPO_PAIR = frozenset({"gspo", "gspo_token"})  # GSPO and GSPO-token: one gradient with per-response advantages


@dataclass(frozen=True)
class SameGradient:
    """Two arms that train one gradient by construction: `gspo` (the arm of the built-in gspo) and
    `token` (the built-in gspo_token's), at `settings` (what both arms' runs recorded: lr, clip range, ...)."""

    gspo: str
    token: str
    settings: dict[str, Any]


def arm_settings(runs: pd.DataFrame) -> dict[str, dict[str, Any] | None]:
    """Per arm of one group, the settings every one of its runs recorded (analysis.data.load: `arm_settings`)
    with the plugin that registered its objective ("" built in); None where its runs recorded different ones."""
    out: dict[str, dict[str, Any] | None] = {}
    if "arm_settings" not in runs.columns:  # runs not read from run folders record no settings: nothing is said
        return out
    for arm, own in runs.groupby("arm", sort=False):
        recorded = [{**settings, "plugin": plugin} for settings, plugin in zip(own["arm_settings"], own["plugin"], strict=True)]
        out[str(arm)] = recorded[0] if all(r == recorded[0] for r in recorded) else None
    return out


def same_gradient(settings: dict[str, dict[str, Any] | None], first: str, second: str) -> SameGradient | None:
    """`first` and `second` where they train one gradient by construction (see the module): the built-in
    gspo and gspo_token, each arm's runs alike, with per-response credit, no correction and every other
    setting equal; else None."""
    a, b = settings.get(first), settings.get(second)
    if a is None or b is None or {a["objective"], b["objective"]} != GSPO_PAIR:
        return None
    if a["plugin"] or b["plugin"] or a["credit"] != "response" or b["credit"] != "response" or a["correction"] or b["correction"]:
        return None
    if {k: v for k, v in a.items() if k != "objective"} != {k: v for k, v in b.items() if k != "objective"}:
        return None
    gspo, token = (first, second) if a["objective"] == "gspo" else (second, first)
    return SameGradient(gspo, token, {k: v for k, v in a.items() if k not in ("objective", "plugin")})
