"""Runs placed where an arm's boundary is least known (issue #60; experiments/adaptive/README.md): a sequential
rule over a grid's levels, one run at a time, and its replay on a grid already run.

A level's **state** from the runs made there so far: held (none failed), failed (more than half failed), open
(otherwise). The **bracket**: the lowest failed level f and the highest held level h below it. The rule, per
arm: the lowest and the highest level first (`first_seeds` runs each, as every level placed); it stops where the lowest level failed
(the boundary is below the grid) or the highest held (above it); else it gives one more run to the open level
with runs left between h and f (the one nearest the bracket's middle in log dose), else places the unplaced
level between h and f nearest that middle (bisection in log dose), else stops: the bracket is as narrow as the
grid allows.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

HELD, FAILED, OPEN = "held", "failed", "open"
FIRST_SEEDS = 2  # runs at a level when it is first placed


def level_state(outcomes: Sequence[bool]) -> str:
    """held (no run failed), failed (more than half failed) or open (else, and before any run)."""
    if not outcomes:
        return OPEN
    failures = sum(outcomes)
    return HELD if failures == 0 else FAILED if 2 * failures > len(outcomes) else OPEN


@dataclass(frozen=True)
class GridLevel:
    """One level of one arm on a grid already run: its dose and each seed's outcome (True: failed), in the
    order the rule draws the seeds."""

    dose: float
    outcomes: tuple[bool, ...]


@dataclass(frozen=True)
class Conclusion:
    """Where the arm stands on the runs made: `kind` (below: the lowest level failed; above: the highest held;
    bracket: held at `held`, failed at `failed`, level indices; open: no bracket yet) and the runs behind each
    end."""

    kind: str
    held: int | None = None
    failed: int | None = None
    held_runs: int = 0
    failed_runs: int = 0


def conclusion(taken: Sequence[Sequence[bool]]) -> Conclusion:
    """The arm's standing from the outcomes drawn so far at each level (`taken[i]`, level i by dose)."""
    states = [level_state(runs) if runs else None for runs in taken]
    if states[0] == FAILED:
        return Conclusion("below", failed=0, failed_runs=len(taken[0]))
    if states[-1] == HELD:
        return Conclusion("above", held=len(taken) - 1, held_runs=len(taken[-1]))
    failed = next((i for i, state in enumerate(states) if state == FAILED), None)
    top = failed if failed is not None else len(taken)
    held = max((i for i in range(top) if states[i] == HELD), default=None)
    if failed is None or held is None:
        return Conclusion("open", held=held, failed=failed, held_runs=len(taken[held]) if held is not None else 0,
                          failed_runs=len(taken[failed]) if failed is not None else 0)
    return Conclusion("bracket", held, failed, len(taken[held]), len(taken[failed]))


def nearest_middle(candidates: list[int], levels: Sequence[GridLevel], low: int, high: int) -> int:
    """The candidate level whose log dose is nearest the middle of levels `low` and `high`'s log doses (the lower
    of two equally near)."""
    middle = (math.log(levels[low].dose) + math.log(levels[high].dose)) / 2
    return min(candidates, key=lambda i: (abs(math.log(levels[i].dose) - middle), i))


def next_level(taken: Sequence[Sequence[bool]], levels: Sequence[GridLevel], first_seeds: int = FIRST_SEEDS) -> int | None:
    """The level the rule's next run goes to, or None where it stops (module docstring)."""
    left = [len(level.outcomes) - len(runs) for level, runs in zip(levels, taken, strict=True)]
    last = len(levels) - 1
    for end in (0, last):  # the first round
        if len(taken[end]) < first_seeds and left[end] > 0:
            return end
    for i, runs in enumerate(taken):  # a level placed gets its first_seeds runs before anything else
        if 0 < len(runs) < first_seeds and left[i] > 0:
            return i
    now = conclusion(taken)
    if now.kind in ("below", "above"):
        return None
    high = now.failed if now.failed is not None else last
    low = now.held if now.held is not None else 0
    lowest = now.held + 1 if now.held is not None else 0
    open_left = [i for i in range(lowest, high + 1)
                 if taken[i] and level_state(taken[i]) == OPEN and left[i] > 0]
    if open_left:
        return nearest_middle(open_left, levels, low, high)
    unplaced = [i for i in range(lowest, high) if not taken[i] and left[i] > 0]
    return nearest_middle(unplaced, levels, low, high) if unplaced else None


def replay(levels: Sequence[GridLevel], first_seeds: int = FIRST_SEEDS) -> list[tuple[int, int, bool]]:
    """The rule run on a grid already run: (level, the seed's position in its level's order, failed) per run,
    in the order the rule asked for them."""
    taken: list[list[bool]] = [[] for _ in levels]
    asked = []
    while (level := next_level(taken, levels, first_seeds)) is not None:
        position = len(taken[level])
        taken[level].append(levels[level].outcomes[position])
        asked.append((level, position, levels[level].outcomes[position]))
    return asked


def after(asked: Sequence[tuple[int, int, bool]], runs: int, n_levels: int) -> Conclusion:
    """The conclusion from the first `runs` runs of a replay."""
    taken: list[list[bool]] = [[] for _ in range(n_levels)]
    for level, _, failed in asked[:runs]:
        taken[level].append(failed)
    return conclusion(taken)


def grid_conclusion(levels: Sequence[GridLevel]) -> Conclusion:
    """The fixed grid's conclusion: every run at every level."""
    return conclusion([list(level.outcomes) for level in levels])
