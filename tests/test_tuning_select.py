"""Choosing each arm's setting from its trials: the declared rule on a hand-made table."""

from __future__ import annotations

import pandas as pd
import pytest

from gspo_bench.suite.selection import choose, run_score, trial_scores


def table(rows: list[tuple[str, int, int, int, float]]) -> pd.DataFrame:
    return pd.DataFrame(rows, columns=["arm", "trial", "seed", "step", "score"])


# gspo trial 0 ends high after a slow start; trial 1 is high throughout and ends lower.
# Per seed (steps 0, 2, 4): t0 = [0.0, 0.2, 0.8] and [0.0, 0.2, 0.6]; t1 = [0.4, 0.6, 0.5] twice.
TRIALS = table([
    ("gspo", 0, 10, 0, 0.0), ("gspo", 0, 10, 2, 0.2), ("gspo", 0, 10, 4, 0.8),
    ("gspo", 0, 11, 0, 0.0), ("gspo", 0, 11, 2, 0.2), ("gspo", 0, 11, 4, 0.6),
    ("gspo", 1, 10, 0, 0.4), ("gspo", 1, 10, 2, 0.6), ("gspo", 1, 10, 4, 0.5),
    ("gspo", 1, 11, 4, 0.5), ("gspo", 1, 11, 0, 0.4), ("gspo", 1, 11, 2, 0.6),  # rows out of step order
    ("grpo", 0, 10, 4, 0.3), ("grpo", 1, 10, 4, 0.3), ("grpo", 2, 10, 4, float("nan")),
])


def test_final_takes_each_runs_last_evaluation_averaged_over_trial_seeds():
    scores = trial_scores(TRIALS, "final").set_index(["arm", "trial"])
    assert scores.loc[("gspo", 0), "score"] == pytest.approx(0.7)  # (0.8 + 0.6) / 2
    assert scores.loc[("gspo", 1), "score"] == pytest.approx(0.5)
    assert scores.loc[("gspo", 1), "runs"] == 2
    chosen = choose(trial_scores(TRIALS, "final")).set_index("arm")
    assert chosen.loc["gspo", "trial"] == 0


def test_auc_takes_the_area_under_each_runs_curve_per_step():
    # t0 seed 10: trapezoid (0 + 0.2) / 2 * 2 + (0.2 + 0.8) / 2 * 2 = 1.2 over 4 steps = 0.3; seed 11: 1.0 / 4
    assert run_score(TRIALS[(TRIALS.trial == 0) & (TRIALS.seed == 10) & (TRIALS.arm == "gspo")], "auc") == pytest.approx(0.3)
    scores = trial_scores(TRIALS, "auc").set_index(["arm", "trial"])
    assert scores.loc[("gspo", 0), "score"] == pytest.approx((0.3 + 0.25) / 2)
    assert scores.loc[("gspo", 1), "score"] == pytest.approx(0.525)  # (1.0 + 1.1) / 4
    assert choose(trial_scores(TRIALS, "auc")).set_index("arm").loc["gspo", "trial"] == 1


def test_a_tie_goes_to_the_trial_drawn_first_and_an_unscored_trial_is_never_chosen():
    for order in (TRIALS, TRIALS.iloc[::-1]):
        chosen = choose(trial_scores(order, "final")).set_index("arm")
        assert chosen.loc["grpo", "trial"] == 0 and chosen.loc["grpo", "score"] == pytest.approx(0.3)
    failed = table([("grpo", 0, 10, 4, float("nan"))])
    with pytest.raises(ValueError, match=r"arm\(s\) \['grpo'\]: no trial has a validation score"):
        choose(trial_scores(failed, "final"))


def test_a_single_evaluation_is_its_own_area():
    assert run_score(table([("a", 0, 0, 3, 0.4)]), "auc") == pytest.approx(0.4)
