"""Choosing each arm's setting from its trials (`tuning:` in a suite): pure functions on a table.

The trials table has one row per evaluation of a trial run: `arm`, `trial` (its index among the
arm's trials), `seed`, `step`, `score` (the validation score of the selection metric). A run's score
is its last evaluation's (`final`) or the mean of its evaluations weighted by the steps between them
(`auc`: the area under its score-per-step curve over the steps it spans, divided by that span); a
trial's score is the mean of its runs' (one per trial seed). Each arm's chosen trial is the one of
the highest score; ties go to the trial drawn first (the lowest index), so the choice never depends
on the table's row order. A trial with no score (its runs failed) is never chosen.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
import pandas as pd

TRIAL_COLUMNS = ("arm", "trial", "seed", "step", "score")


def run_score(evaluations: pd.DataFrame, rule: Literal["final", "auc"]) -> float:
    """The score of one run by `rule` from its evaluations (`step`, `score`); NaN without any."""
    rows = evaluations.dropna(subset=["score"]).sort_values("step")
    if rows.empty:
        return float("nan")
    if rule == "final":
        return float(rows["score"].iloc[-1])
    steps, scores = rows["step"].to_numpy(dtype=float), rows["score"].to_numpy(dtype=float)
    span = steps[-1] - steps[0]
    return float(scores[0]) if span == 0 else float(np.trapezoid(scores, steps) / span)


def trial_scores(trials: pd.DataFrame, rule: Literal["final", "auc"]) -> pd.DataFrame:
    """One row per (arm, trial): `score` (the mean over its runs of `run_score`) and `runs` (how many
    runs scored); ValueError naming the columns a trials table lacks."""
    missing = [c for c in TRIAL_COLUMNS if c not in trials.columns]
    if missing:
        raise ValueError(f"trials table without columns {missing}")
    per_run = (trials.groupby(["arm", "trial", "seed"], sort=True)[["step", "score"]]
               .apply(lambda rows: run_score(rows, rule)).rename("score").reset_index())
    grouped = per_run.groupby(["arm", "trial"], sort=True)["score"]
    return pd.DataFrame({"score": grouped.mean(), "runs": grouped.count()}).reset_index()


def choose(scores: pd.DataFrame) -> pd.DataFrame:
    """Each arm's chosen trial from `trial_scores`: the highest score, ties to the lowest trial index;
    ValueError for an arm none of whose trials has a score."""
    scored = scores.dropna(subset=["score"])
    unscored = sorted(set(scores["arm"]) - set(scored["arm"]))
    if unscored:
        raise ValueError(f"arm(s) {unscored}: no trial has a validation score (their runs failed or never "
                         "evaluated): nothing to choose from")
    ranked = scored.sort_values(["arm", "score", "trial"], ascending=[True, False, True], kind="stable")
    return ranked.groupby("arm", sort=True).head(1).reset_index(drop=True)
