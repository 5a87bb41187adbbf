"""Early-warning scoring (analysis.evidence.early_warnings) on hand-made series: an alarm before the onset is a
warning with its lead, one at or after it is none, an alarm on a run that held is a false alarm; the AUC
equals scikit-learn's on a hand table with ties."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.metrics import roc_auc_score

from analysis.evidence.early_warnings import (
    AlarmRule,
    alarm_step,
    auc,
    choose_threshold,
    lead_time,
    run_score,
    score_rule,
    signal_runs,
)

STEPS = np.arange(1, 11, dtype=float)
RULE = AlarmRule("grad/norm", threshold=4.0, direction="above", persist=2)


def test_an_alarm_needs_its_persistence_and_comes_at_its_last_step():
    values = np.array([0, 5, 0, 5, 5, 9, 0, 0, 0, 0], dtype=float)  # one step at 5 (step 2) is not enough
    assert alarm_step(RULE, STEPS, values) == 5.0
    assert np.isnan(alarm_step(RULE, STEPS, values, before=5.0))  # the onset's own step is never read
    below = AlarmRule("lag/ess", threshold=0.5, direction="below")
    assert alarm_step(below, STEPS, np.array([1, 1, np.nan, 0.4, 1, 1, 1, 1, 1, 1])) == 4.0


def test_lead_time_and_false_alarms_by_hand():
    """Failed at 8 with an alarm at 5: lead 3. Failed at 8 with the signal crossing only from 9: missed (an alarm
    after the onset is no warning). A held run that crossed: a false alarm; one that did not: none."""
    warned = (STEPS, np.array([0, 0, 0, 5, 5, 5, 5, 0, 0, 0], dtype=float), 8.0)
    late = (STEPS, np.array([0, 0, 0, 0, 0, 0, 0, 0, 9, 9], dtype=float), 8.0)
    noisy = (STEPS, np.array([0, 6, 6, 0, 0, 0, 0, 0, 0, 0], dtype=float), np.nan)
    calm = (STEPS, np.zeros(10), np.nan)
    assert lead_time(8.0, 5.0) == 3.0 and np.isnan(lead_time(8.0, 8.0)) and np.isnan(lead_time(8.0, np.nan))
    scored = score_rule(RULE, [warned, late, noisy, calm], np.random.default_rng(0))
    assert (scored.failed, scored.warned, scored.median_lead) == (2, 1, 3.0)
    assert (scored.held, scored.false_alarms, scored.false_alarm_rate) == (2, 1, 0.5)


def test_a_failed_runs_score_reads_only_the_steps_before_its_onset():
    values = np.array([1, 2, 3, 4, 5, 6, 7, 100, 100, 100], dtype=float)
    assert run_score(RULE, STEPS, values, before=8.0) == 7.0 and run_score(RULE, STEPS, values) == 100.0
    below = AlarmRule("lag/ess", threshold=0.5, direction="below")
    assert run_score(below, STEPS, values, before=3.0) == -1.0  # lower is more extreme: scores negated


def test_the_auc_equals_scikit_learns_with_ties():
    failed = np.array([0.9, 0.7, 0.7, 0.4])
    held = np.array([0.7, 0.3, 0.2, 0.7, 0.1])
    ours = auc(failed, held)
    theirs = roc_auc_score(np.r_[np.ones(4), np.zeros(5)], np.r_[failed, held])
    # 0.9 beats all 5; each 0.7 beats 3 and ties 2 (half each): 4; 0.4 beats 3: (5 + 4 + 4 + 3) / 20
    assert ours == pytest.approx(theirs) and ours == pytest.approx(16 / 20)
    assert np.isnan(auc(failed, np.array([np.nan])))


def test_a_threshold_is_chosen_on_some_runs_within_its_false_alarm_rate():
    """Held runs peak at 2 and 6; failed runs peak at 5 and 8 before their onsets. Allowing no false alarm, the
    threshold must exceed 6: 8 warns one failed run (at step 3), and nothing larger warns more. Allowing one
    false alarm in two, 5 warns both."""
    steps = np.arange(1, 6, dtype=float)
    runs = [(steps, np.array([0, 2, 0, 0, 0.0]), np.nan), (steps, np.array([0, 6, 0, 0, 0.0]), np.nan),
            (steps, np.array([0, 0, 5, 0, 9.0]), 5.0), (steps, np.array([0, 0, 8, 0, 0.0]), 4.0)]
    rule = AlarmRule("grad/norm", threshold=0.0)
    strict = choose_threshold(rule, runs, max_false_alarm=0.0)
    assert strict.threshold == 8.0 and score_rule(strict, runs, np.random.default_rng(0)).warned == 1
    loose = choose_threshold(rule, runs, max_false_alarm=0.5)
    assert loose.threshold == 5.0 and score_rule(loose, runs, np.random.default_rng(0)).warned == 2


def test_signal_runs_take_the_onset_from_the_outcome_class():
    import pandas as pd

    metrics = pd.DataFrame({"suite": "s", "label": ["a"] * 3 + ["b"] * 3, "seed": 0, "step": [1, 2, 3] * 2,
                            "grad/norm": [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]})
    classes = pd.DataFrame({"suite": "s", "label": ["a", "b"], "seed": 0, "outcome": ["collapsed", "learned"],
                            "step": [2.0, float("nan")]})
    (a_steps, a_values, a_onset), (_, b_values, b_onset) = signal_runs(metrics, classes, "grad/norm")
    assert a_onset == 2.0 and a_values.tolist() == [1.0, 2.0, 3.0] and np.isnan(b_onset) and b_values[0] == 4.0
    assert signal_runs(metrics, classes, "lag/ess") == []


def test_no_threshold_within_the_false_alarm_rate_gives_a_rule_that_never_fires():
    steps = np.arange(1, 4, dtype=float)
    runs = [(steps, np.array([9.0, 9.0, 9.0]), np.nan), (steps, np.array([1.0, 1.0, 1.0]), 3.0)]
    rule = choose_threshold(AlarmRule("grad/norm", threshold=0.0), runs, max_false_alarm=0.0)
    assert np.isnan(rule.threshold) and np.isnan(alarm_step(rule, steps, np.array([9.0, 9.0, 9.0])))
