"""What warns before a failure: a per-step signal, an alarm rule on it, and how it scores on runs whose outcome
is known (issue #61's scoring, from the run folders alone).

- **Onset**: a failed run's first step of failure, the step its outcome class gives (analysis.evidence.stability:
  degraded or collapsed); a run that held has none.
- **Alarm**: the first step at which a declared rule fires on the signal: the value at or beyond `threshold` in
  `direction` ("above" or "below") on `persist` consecutive steps (the alarm is the last of them: when a
  watcher would know). A run's steps at or after its onset are never read for its alarm.
- **Lead time**: onset minus alarm, for a failed run whose alarm came before its onset; an alarm at or after
  the onset is no warning (the run counts as missed).
- **False alarm**: a run that held and raised an alarm; the false-alarm rate is their share of the held runs.
- **ROC**: each run's score is the signal's most extreme value (in the rule's direction) over the steps before
  its onset, or over every step of a run that held; the AUC is the probability that a failed run outscores a
  held one (ties half): the Mann-Whitney statistic over n_failed x n_held, scikit-learn's `roc_auc_score`.
  Its interval: the percentile bootstrap over runs, resampled within failed and within held runs.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal

import numpy as np
import pandas as pd

from analysis.evidence.stability import FAILED

Direction = Literal["above", "below"]


@dataclass(frozen=True)
class AlarmRule:
    """A threshold rule on one signal (a metrics column): it fires where the value is at or beyond `threshold` in
    `direction` on `persist` consecutive steps."""

    signal: str
    threshold: float
    direction: Direction = "above"
    persist: int = 1

    def beyond(self, values: np.ndarray) -> np.ndarray:
        """Per step: the value is at or beyond the threshold (NaN never is)."""
        values = np.asarray(values, dtype=float)
        with np.errstate(invalid="ignore"):
            hit = values >= self.threshold if self.direction == "above" else values <= self.threshold
        return hit & np.isfinite(values)


def alarm_step(rule: AlarmRule, steps: np.ndarray, values: np.ndarray, before: float = np.inf) -> float:
    """The step at which `rule` first fires on a run's `values` (by `steps`, ascending), reading only the steps
    before `before` (a failed run's onset); NaN where it never fires."""
    steps, hit = np.asarray(steps, dtype=float), rule.beyond(values)
    run = 0
    for step, beyond in zip(steps, hit, strict=True):
        if step >= before:
            break
        run = run + 1 if beyond else 0
        if run >= rule.persist:
            return float(step)
    return float("nan")


def lead_time(onset: float, alarm: float) -> float:
    """Steps from the alarm to the onset of a failed run; NaN where the alarm did not come before it."""
    return float(onset - alarm) if np.isfinite(alarm) and np.isfinite(onset) and alarm < onset else float("nan")


def run_score(rule: AlarmRule, steps: np.ndarray, values: np.ndarray, before: float = np.inf) -> float:
    """The signal's most extreme value in the rule's direction over the steps before `before` (the ROC's score of
    a run); NaN where none is finite."""
    steps, values = np.asarray(steps, dtype=float), np.asarray(values, dtype=float)
    kept = values[(steps < before) & np.isfinite(values)]
    if not len(kept):
        return float("nan")
    return float(kept.max() if rule.direction == "above" else -kept.min())


def auc(failed_scores: np.ndarray, held_scores: np.ndarray) -> float:
    """P(a failed run's score > a held run's), ties counted half: the area under the ROC over every threshold.
    NaN without a finite score on both sides."""
    failed = np.asarray(failed_scores, dtype=float)
    held = np.asarray(held_scores, dtype=float)
    failed, held = failed[np.isfinite(failed)], held[np.isfinite(held)]
    if not len(failed) or not len(held):
        return float("nan")
    greater = (failed[:, None] > held[None, :]).sum()
    ties = (failed[:, None] == held[None, :]).sum()
    return float((greater + 0.5 * ties) / (len(failed) * len(held)))


def auc_interval(failed_scores: np.ndarray, held_scores: np.ndarray, rng: np.random.Generator, reps: int = 2000,
                 level: float = 0.95) -> tuple[float, float]:
    """The percentile bootstrap interval of `auc`, failed and held runs each resampled with replacement."""
    failed = np.asarray(failed_scores, dtype=float)
    held = np.asarray(held_scores, dtype=float)
    failed, held = failed[np.isfinite(failed)], held[np.isfinite(held)]
    if len(failed) < 2 or len(held) < 2:
        return float("nan"), float("nan")
    draws = [auc(rng.choice(failed, len(failed)), rng.choice(held, len(held))) for _ in range(reps)]
    tail = (1 - level) / 2
    return float(np.quantile(draws, tail)), float(np.quantile(draws, 1 - tail))


@dataclass(frozen=True)
class Scored:
    """A rule scored on runs: failed runs warned ahead and their median lead, held runs alarmed, the AUC."""

    rule: AlarmRule
    failed: int
    warned: int  # failed runs whose alarm came before their onset
    median_lead: float  # over the warned runs (NaN with none)
    held: int
    false_alarms: int  # held runs that raised an alarm
    auc: float
    auc_low: float
    auc_high: float

    @property
    def false_alarm_rate(self) -> float:
        return self.false_alarms / self.held if self.held else float("nan")


def score_rule(rule: AlarmRule, runs: list[tuple[np.ndarray, np.ndarray, float]], rng: np.random.Generator) -> Scored:
    """`rule` on `runs`, each (steps, the signal's values, onset: NaN for a run that held)."""
    leads, scores_failed, scores_held, false_alarms = [], [], [], 0
    for steps, values, onset in runs:
        if np.isfinite(onset):
            leads.append(lead_time(onset, alarm_step(rule, steps, values, before=onset)))
            scores_failed.append(run_score(rule, steps, values, before=onset))
        else:
            false_alarms += int(np.isfinite(alarm_step(rule, steps, values)))
            scores_held.append(run_score(rule, steps, values))
    warned = [lead for lead in leads if np.isfinite(lead)]
    low, high = auc_interval(np.array(scores_failed), np.array(scores_held), rng)
    return Scored(rule, len(leads), len(warned), float(np.median(warned)) if warned else float("nan"),
                  len(scores_held), false_alarms, auc(np.array(scores_failed), np.array(scores_held)), low, high)


Run = tuple[np.ndarray, np.ndarray, float]  # (steps, the signal's values, onset: NaN for a run that held)


def signal_runs(metrics: pd.DataFrame, classes: pd.DataFrame, signal: str) -> list[Run]:
    """Per judged run of `classes` (the map's rows: suite, label, seed, outcome, step) its `signal` by step from
    `metrics` and its onset: the class's step for a failed run (degraded or collapsed), NaN for one that held. A
    failed run without an onset step, or without the signal, is left out."""
    if signal not in metrics:
        return []
    found = []
    for row in classes[["suite", "label", "seed", "outcome", "step"]].to_dict("records"):
        onset = float(row["step"]) if row["outcome"] in FAILED else float("nan")
        if row["outcome"] in FAILED and not np.isfinite(onset):
            continue
        own = metrics[(metrics["suite"] == row["suite"]) & (metrics["label"] == row["label"])
                      & (metrics["seed"] == row["seed"])]
        own = own.sort_values("step")
        if len(own):
            found.append((own["step"].to_numpy(dtype=float), own[signal].to_numpy(dtype=float), onset))
    return found


def choose_threshold(rule: AlarmRule, runs: list[Run], max_false_alarm: float = 0.1) -> AlarmRule:
    """`rule` with the threshold, among the held and failed runs' scores, that warns the most failed runs ahead
    of their onset while its false-alarm rate on the held runs stays at most `max_false_alarm` (the most
    conservative of equals: the largest threshold "above", the smallest "below"): chosen on `runs` alone, to be
    scored on others. Where no candidate keeps the rate, the threshold is NaN: a rule that never fires."""
    scores = np.array([run_score(rule, steps, values, before=onset) for steps, values, onset in runs])
    sign = 1.0 if rule.direction == "above" else -1.0  # run_score negates a "below" signal's minimum
    candidates = sorted({sign * v for v in scores[np.isfinite(scores)]}, reverse=rule.direction == "above")
    best, best_warned = replace(rule, threshold=float("nan")), -1
    for value in candidates:
        trial = replace(rule, threshold=float(value))
        held = [r for r in runs if not np.isfinite(r[2])]
        alarms = sum(np.isfinite(alarm_step(trial, steps, values)) for steps, values, _ in held)
        if held and alarms / len(held) > max_false_alarm:
            continue
        warned = sum(np.isfinite(lead_time(onset, alarm_step(trial, steps, values, before=onset)))
                     for steps, values, onset in runs if np.isfinite(onset))
        if warned > best_warned:
            best, best_warned = trial, warned
    return best
