"""The adaptive rule (`analysis.evidence.adaptive`) placing a suite's runs (`adaptive:` in a suite; issue #60).

A suite with `adaptive:` sweeps one setting; its values, in the order given, are the levels. Each arm (an
objective entry) is placed on its own. A round is the runs every arm's rule asks for before it needs another
outcome (`next_round`). The runs of a level take the suite's seeds in their declared order.

The outcomes a round is decided on are those of the runs of the earlier rounds only (`counted`), judged by
the map's rules (`analysis.evidence.stability.class_rows`: failed is degraded or collapsed). A run says
nothing, and its seed is spent, where it is too short to judge, never ended, or lies in a degenerate cell
(`degenerate_cells`: every run there inert, or two or more arms bit for bit alike). So a round's choice
depends on nothing a later run wrote, and a resumed suite, which recomputes each round from the runs of the
rounds before it, makes the same choices.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from analysis.data.load import Results, load_results
from analysis.evidence.adaptive import Conclusion, Rule, conclusion, next_round
from analysis.evidence.stability import (
    TOO_SHORT,
    class_rows,
    degenerate_cells,
    failed,
    in_cells,
    judged,
)
from analysis.stats.logistic import zero_event_bound


@dataclass(frozen=True)
class GridRun:
    """One run the suite could make: its folder `name`, run `label`, `arm` (the entry's label), `level` (the
    index of its value among the adaptive setting's) and `seed`."""

    name: str
    label: str
    arm: str
    level: int
    seed: int


@dataclass(frozen=True)
class Placement:
    """A round: the run folders asked for, in order (empty: every arm's rule has stopped, or the budget is
    spent), and where each arm stands on the counted runs (`standing`: one row per arm)."""

    names: list[str]
    standing: pd.DataFrame
    cut: int = 0  # runs the rules asked for that the budget left out


def outcomes(suite_dir: Path, grid: Sequence[GridRun], counted: set[str]) -> dict[str, bool | None]:
    """{run folder: failed} for the `counted` runs of `grid` found under `suite_dir`; None for a run that says
    nothing (too short to judge, not ended, or in a degenerate cell; module docstring)."""
    found: dict[str, bool | None] = {run.name: None for run in grid if run.name in counted}
    if not found:
        return found
    results = load_results(suite_dir)
    by_key = {(run.label, run.seed): run.name for run in grid if run.name in counted}
    keep = pd.Series([(label, seed) in by_key for label, seed in zip(results.runs["label"], results.runs["seed"])],
                     index=results.runs.index)
    mine: Results = results.select(keep)
    rows = class_rows(mine) if len(judged(mine).runs) else pd.DataFrame()
    if not len(rows):
        return found
    rows = rows[rows["outcome"] != TOO_SHORT].reset_index(drop=True)
    cells = degenerate_cells(rows, judged(mine).metrics)
    informative = rows[~in_cells(rows, cells)]
    for (label, seed), bad in zip(zip(informative["label"], informative["seed"]), failed(informative)):
        found[by_key[(label, int(seed))]] = bool(bad)
    return found


def arm_levels(runs: Sequence[GridRun], n_levels: int, seen: dict[str, bool | None]
               ) -> tuple[list[list[bool]], list[list[GridRun]]]:
    """One arm's outcomes per level (its counted runs that say something, in seed order) and the runs each
    level has not made yet (in seed order)."""
    taken: list[list[bool]] = [[] for _ in range(n_levels)]
    unmade: list[list[GridRun]] = [[] for _ in range(n_levels)]
    for run in runs:
        if run.name not in seen:
            unmade[run.level].append(run)
        elif seen[run.name] is not None:
            taken[run.level].append(bool(seen[run.name]))
    return taken, unmade


def standing_row(arm: str, now: Conclusion, values: Sequence[float], taken: list[list[bool]], stopped: bool) -> dict:
    """Where one arm stands: its conclusion in the setting's values, the runs behind each end (a held end's
    exact one-sided 95% bound on its failure rate) and whether its rule has stopped."""
    def value(i: int | None) -> float:
        return float(values[i]) if i is not None else math.nan
    return {"arm": arm, "kind": now.kind, "held": value(now.held), "failed": value(now.failed),
            "held_runs": now.held_runs, "failed_runs": now.failed_runs,
            "held_bound": zero_event_bound(now.held_runs) if now.held is not None else math.nan,
            "runs": sum(len(t) for t in taken), "stopped": stopped}


def place(suite_dir: Path, grid: Sequence[GridRun], counted: set[str], doses: Sequence[float], rule: Rule,
          budget: int | None = None, values: Sequence[float] | None = None) -> Placement:
    """The next round of a suite whose `counted` runs (the earlier rounds') are under `suite_dir`: per arm (in
    `grid` order), `next_round` on its levels (`doses`, increasing: the setting's values, or their index where
    spaced by index), the seeds of each level taken in `grid` order; cut to what `budget` (runs in all) leaves.
    `values`: the levels' setting values the standing is written in (default: `doses`)."""
    seen = outcomes(suite_dir, grid, counted)
    asked: list[str] = []
    rows = []
    for arm in dict.fromkeys(run.arm for run in grid):
        mine = [run for run in grid if run.arm == arm]
        taken, unmade = arm_levels(mine, len(doses), seen)
        levels = next_round(taken, [len(u) for u in unmade], doses, rule)
        for level in levels:
            asked.append(unmade[level].pop(0).name)
        rows.append(standing_row(arm, conclusion(taken), values if values is not None else doses, taken,
                                 stopped=not levels))
    kept = asked if budget is None else asked[:max(0, budget - len(counted))]
    return Placement(kept, pd.DataFrame(rows), len(asked) - len(kept))


def standing_line(row: dict) -> str:
    """One arm's standing in words (`standing_row`)."""
    state = "stopped" if row["stopped"] else "placing"
    if row["kind"] == "below":
        where = f"fails at the lowest level ({row['failed']:g}, {row['failed_runs']} runs)"
    elif row["kind"] == "above":
        where = f"held at the highest level ({row['held']:g}, {row['held_runs']} runs, failure rate <= {row['held_bound']:.0%})"
    elif row["kind"] == "bracket":
        where = (f"held at {row['held']:g} ({row['held_runs']} runs, failure rate <= {row['held_bound']:.0%}), "
                 f"most failed at {row['failed']:g} ({row['failed_runs']} runs)")
    else:
        where = "no bracket yet"
    return f"{row['arm']}: {where}; {row['runs']} runs judged; {state}"


class AdaptivePlacer:
    """`gspo-bench run`'s placer for an adaptive suite (gspo_bench.suite.adaptive.Placer): built from the
    suite's `adaptive:` settings and its swept values (the levels, in order); called with the suite folder, the
    grid's rows (run folder, label, arm, level, seed) and the run folders it may judge. Standings name the levels
    by their values where all are numbers, else by their index."""

    def __init__(self, settings: Any, values: Sequence[Any]) -> None:
        self.rule = Rule(settings.first_seeds, settings.confirm_seeds, settings.factor)
        self.budget = settings.budget
        numeric = all(isinstance(v, int | float) and not isinstance(v, bool) for v in values)
        self.values = [float(v) for v in values] if numeric else [float(i) for i in range(len(values))]  # as shown
        self.doses = self.values if settings.spacing == "log" else [math.exp(i) for i in range(len(values))]

    def __call__(self, suite_dir: Path, grid: Sequence[tuple[str, str, str, int, int]], counted: set[str]
                 ) -> tuple[list[str], list[str]]:
        found = place(suite_dir, [GridRun(*row) for row in grid], counted, self.doses, self.rule, self.budget,
                      self.values)
        lines = [standing_line(row) for row in found.standing.to_dict("records")]
        if found.cut:
            lines.append(f"the budget ({self.budget} runs) is spent: it leaves out {found.cut} more runs the rule "
                         "asked for")
        return found.names, lines
