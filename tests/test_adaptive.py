"""The adaptive placement rule (analysis.evidence.adaptive) on hand grids: a level's state, the runs it asks for
in order (first round, a placed level's first seeds, more seeds at an open level, bisection in log dose), where
it stops, and its conclusions part way and against the full grid."""

from __future__ import annotations

import pytest

from analysis.evidence.adaptive import (
    FAILED,
    HELD,
    OPEN,
    GridLevel,
    after,
    conclusion,
    grid_conclusion,
    level_state,
    next_level,
    replay,
)

T, F = True, False


@pytest.mark.parametrize(("outcomes", "state"), [([], OPEN), ([F, F], HELD), ([T, F], OPEN), ([T], FAILED),
                                                 ([T, F, T], FAILED), ([T, T, F, F], OPEN)])
def test_a_levels_state(outcomes, state):
    assert level_state(outcomes) == state


def grid(*outcomes: tuple[bool, ...], doses: tuple[float, ...] = (1, 2, 4, 8, 16)) -> list[GridLevel]:
    return [GridLevel(float(d), tuple(o)) for d, o in zip(doses, outcomes, strict=True)]


def test_the_rule_bisects_in_log_dose_and_stops_at_adjacent_levels():
    """Levels 1, 2, 4, 8, 16: the first round runs level 0 (held) and 4 (failed) twice each; bisection places
    level 2 (log 4 is the middle of log 1 and log 16), open after 2 runs (T, F), so it gets a third (T: failed);
    then level 1, the only level between held 0 and failed 2, held on 2 runs: bracket (1, 2), 9 runs of 30."""
    levels = grid((F,) * 6, (F, F, T, F, F, F), (T, F, T, F, F, F), (T,) * 6, (T,) * 6)
    asked = replay(levels)
    assert [(level, position) for level, position, _ in asked] == [(0, 0), (0, 1), (4, 0), (4, 1), (2, 0), (2, 1),
                                                                    (2, 2), (1, 0), (1, 1)]
    final = after(asked, len(asked), 5)
    assert (final.kind, final.held, final.failed, final.held_runs, final.failed_runs) == ("bracket", 1, 2, 2, 3)
    assert after(asked, 4, 5) == conclusion([[F, F], [], [], [], [T, T]])  # after the first round: (0, 4)
    assert after(asked, 4, 5).kind == "bracket" and (after(asked, 4, 5).held, after(asked, 4, 5).failed) == (0, 4)
    # the full grid disagrees: level 1 failed on one of 6 seeds (not held) and level 2 on 2 of 6 (open, not
    # failed), so its bracket is (0, 3); the rule's 9 runs saw neither
    whole = grid_conclusion(levels)
    assert (whole.kind, whole.held, whole.failed, whole.held_runs) == ("bracket", 0, 3, 6)


def test_the_rule_stops_below_or_above_the_grid_after_its_first_round():
    below = replay(grid((T, T, T), (F,) * 3, (F,) * 3, (F,) * 3, (T,) * 3))
    assert [level for level, _, _ in below] == [0, 0, 4, 4] and after(below, 4, 5).kind == "below"
    above = replay(grid((F,) * 3, (F,) * 3, (T,) * 3, (T,) * 3, (F, F, F)))
    assert [level for level, _, _ in above] == [0, 0, 4, 4] and after(above, 4, 5).kind == "above"


def test_an_open_level_takes_every_seed_it_has_then_the_bracket_spans_it():
    """Level 2 stays open on all 4 seeds (T, F, F, T): the rule gives it every seed, then bisects below it
    (level 1 held) and above it (level 3 failed), and stops with the bracket (1, 3) around the open level."""
    levels = grid((F,) * 4, (F,) * 4, (T, F, F, T), (T,) * 4, (T,) * 4)
    asked = replay(levels)
    assert sum(level == 2 for level, _, _ in asked) == 4
    final = after(asked, len(asked), 5)
    assert (final.kind, final.held, final.failed) == ("bracket", 1, 3)
    assert next_level([[F, F], [F, F], [T, F, F, T], [T, T], [T, T]], levels) is None


def test_the_middle_is_in_log_dose_not_in_level_index():
    """Doses 1, 1.1, 1.2, 100, 10000 between held level 0 and failed level 4: the log-dose middle is 100
    (level 3), where the index middle would be level 2."""
    levels = grid((F, F), (F, F), (F, F), (T, T), (T, T), doses=(1, 1.1, 1.2, 100, 10000))
    assert next_level([[F, F], [], [], [], [T, T]], levels) == 3
