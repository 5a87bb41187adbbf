"""Runs placed where an arm's boundary is least known (issue #60; experiments/adaptive/README.md): a sequential
rule over a grid's levels, one run at a time, and its replay on a grid already run.

A level's **state** from the runs made there so far: held (none failed), failed (more than half failed), open
(otherwise). The **bracket**: the lowest failed level f and the highest held level h below it. The rule, per
arm: the lowest and the highest level first (`first_seeds` runs each, as every level placed); it stops where the lowest level failed
(the boundary is below the grid) or the highest held (above it); else it gives one more run to the open level
with runs left between h and f (the one nearest the bracket's middle in log dose), else places the unplaced
level between h and f nearest that middle (bisection in log dose), else stops: the bracket is as narrow as the
grid allows. Two declared options (`Rule`): a stated factor (stop once dose(f) / dose(h) is within it) and
`confirm_seeds` (before any stop, the held end gets runs one at a time up to that many, so a held end rests
on more than its first seeds). `next_round` gives the runs asked for before the next outcome is needed, the
unit a suite runs at once (`analysis.evidence.adaptive_suite`).
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


def nearest_middle(candidates: list[int], doses: Sequence[float], low: int, high: int) -> int:
    """The candidate level whose log dose is nearest the middle of levels `low` and `high`'s log doses (the lower
    of two equally near)."""
    middle = (math.log(doses[low]) + math.log(doses[high])) / 2
    return min(candidates, key=lambda i: (abs(math.log(doses[i]) - middle), i))


@dataclass(frozen=True)
class Rule:
    """The rule's declared settings: `first_seeds` runs at a level when it is first placed; `confirm_seeds`
    (None: `first_seeds`): the runs the held end must have before the rule stops (one more at a time, while
    its seeds last); `factor` (None: the grid's resolution): stop once dose(failed) / dose(held) is at most
    this."""

    first_seeds: int = FIRST_SEEDS
    confirm_seeds: int | None = None
    factor: float | None = None


def unconfirmed(held: int | None, taken: Sequence[Sequence[bool]], left: Sequence[int], rule: Rule) -> int | None:
    """The held end where it has fewer than `confirm_seeds` runs and seeds left (the rule's next run), else None."""
    if held is None or rule.confirm_seeds is None:
        return None
    return held if len(taken[held]) < rule.confirm_seeds and left[held] > 0 else None


def next_level(taken: Sequence[Sequence[bool]], levels: Sequence[GridLevel], first_seeds: int = FIRST_SEEDS) -> int | None:
    """The level the rule's next run goes to on a grid already run, or None where it stops (module docstring)."""
    left = [len(level.outcomes) - len(runs) for level, runs in zip(levels, taken, strict=True)]
    return next_level_for(taken, left, [level.dose for level in levels], Rule(first_seeds))


def next_level_for(taken: Sequence[Sequence[bool]], left: Sequence[int], doses: Sequence[float], rule: Rule
                   ) -> int | None:
    """The level the next run goes to (`taken[i]`: the outcomes at level i so far, `left[i]`: its seeds not yet
    run, `doses[i]`: its dose, increasing), or None where the rule stops (module docstring)."""
    last = len(doses) - 1
    forced = forced_runs(taken, left, rule.first_seeds)
    if forced:
        return forced[0]
    now = conclusion(taken)
    if now.kind == "below":
        return None
    if now.kind == "above":
        return unconfirmed(now.held, taken, left, rule)
    high = now.failed if now.failed is not None else last
    low = now.held if now.held is not None else 0
    if rule.factor is not None and now.kind == "bracket" and doses[high] / doses[low] <= rule.factor:
        return unconfirmed(now.held, taken, left, rule)
    lowest = now.held + 1 if now.held is not None else 0
    open_left = [i for i in range(lowest, high + 1)
                 if taken[i] and level_state(taken[i]) == OPEN and left[i] > 0]
    if open_left:
        return nearest_middle(open_left, doses, low, high)
    unplaced = [i for i in range(lowest, high) if not taken[i] and left[i] > 0]
    if unplaced:
        return nearest_middle(unplaced, doses, low, high)
    return unconfirmed(now.held, taken, left, rule)


def forced_runs(taken: Sequence[Sequence[bool]], left: Sequence[int], first_seeds: int) -> list[int]:
    """The runs asked for whatever the outcomes (their levels, in order): the first round's (the lowest and the
    highest level to `first_seeds` runs), then each placed level's to `first_seeds`."""
    last = len(taken) - 1
    ends = list(dict.fromkeys((0, last)))  # one level: it is both ends
    runs = [end for end in ends for _ in range(max(0, min(first_seeds - len(taken[end]), left[end])))]
    if runs:
        return runs
    return [i for i, done in enumerate(taken) if 0 < len(done) < first_seeds
            for _ in range(min(first_seeds - len(done), left[i]))]


def next_round(taken: Sequence[Sequence[bool]], left: Sequence[int], doses: Sequence[float], rule: Rule) -> list[int]:
    """The levels of the runs the rule asks for before it needs another outcome, in the order the one-at-a-time
    rule (`next_level_for`) asks for them: a newly placed level's `first_seeds` together; [] where it stops."""
    forced = forced_runs(taken, left, rule.first_seeds)
    if forced:
        return forced
    level = next_level_for(taken, left, doses, rule)
    if level is None:
        return []
    return [level] * (min(rule.first_seeds, left[level]) if not taken[level] else 1)


def replay(levels: Sequence[GridLevel], rule: Rule | None = None) -> list[tuple[int, int, bool]]:
    """The rule (default: `Rule()`) run on a grid already run: (level, the seed's position in its level's
    order, failed) per run, in the order the rule asked for them."""
    rule = rule or Rule()
    taken: list[list[bool]] = [[] for _ in levels]
    doses = [level.dose for level in levels]
    asked: list[tuple[int, int, bool]] = []
    while True:
        left = [len(level.outcomes) - len(runs) for level, runs in zip(levels, taken, strict=True)]
        level = next_level_for(taken, left, doses, rule)
        if level is None:
            return asked
        position = len(taken[level])
        taken[level].append(levels[level].outcomes[position])
        asked.append((level, position, levels[level].outcomes[position]))


def after(asked: Sequence[tuple[int, int, bool]], runs: int, n_levels: int) -> Conclusion:
    """The conclusion from the first `runs` runs of a replay."""
    taken: list[list[bool]] = [[] for _ in range(n_levels)]
    for level, _, failed in asked[:runs]:
        taken[level].append(failed)
    return conclusion(taken)


def grid_conclusion(levels: Sequence[GridLevel]) -> Conclusion:
    """The fixed grid's conclusion: every run at every level."""
    return conclusion([list(level.outcomes) for level in levels])
