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

from collections import deque
from dataclasses import dataclass, replace
from pathlib import Path
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


# ---------------------------------------------------------------------------------- derived signals
BURST = "clip/frac_burst"  # the clip fraction against its own recent past (derived, not logged)
BURST_WINDOW = 10  # earlier finite steps whose median is the baseline (analysis.evidence.divergence's WINDOW)
BURST_FLOOR = 0.05 / 3  # the least baseline: a burst needs the clip fraction above 0.05 (divergence's floor) at 3x


def clip_burstiness(clip: np.ndarray, window: int = BURST_WINDOW, floor: float = BURST_FLOOR) -> np.ndarray:
    """Per step of one run's clip fraction (in step order): its value over the median of the `window` finite
    values before it, that median raised to `floor` (a step at 3 is analysis.evidence.divergence's clip-fraction
    burst where the clip fraction is also above 0.05); NaN at a NaN step and before `window` earlier values."""
    clip = np.asarray(clip, dtype=float)
    out = np.full(len(clip), np.nan)
    earlier: list[float] = []
    for i, value in enumerate(clip):
        if len(earlier) >= window and np.isfinite(value):
            out[i] = value / max(float(np.median(earlier[-window:])), floor)
        if np.isfinite(value):
            earlier.append(float(value))
    return out


def with_derived(metrics: pd.DataFrame) -> pd.DataFrame:
    """`metrics` with the derived signals added per run (suite, label, seed; in step order): BURST from
    `clip/frac`, where that column exists."""
    if "clip/frac" not in metrics or metrics.empty:
        return metrics
    ordered = metrics.sort_values(["suite", "label", "seed", "step"], kind="stable")
    burst = ordered.groupby(["suite", "label", "seed"], sort=False)["clip/frac"].transform(
        lambda clip: pd.Series(clip_burstiness(clip.to_numpy(dtype=float)), index=clip.index))
    return metrics.assign(**{BURST: burst.reindex(metrics.index)})


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


# ---------------------------------------------------------------------------------------------- shipped rules
SHIPPED_RULES = Path(__file__).with_name("warning_rules.csv")  # written by experiments/warnings/score.py
# signals measured in a task's own units (tokens of a response): a threshold on one fires only on runs of the
# tasks it was chosen on (a sort response is at most 12 tokens, a countdown one 24)
TASK_SCALED = frozenset({"response/len_mean"})
HELD_OUT_COLUMNS = ("failed", "warned", "median_lead", "held", "false_alarms", "auc", "auc_low", "auc_high")


@dataclass(frozen=True)
class ShippedRule:
    """An alarm rule whose threshold was chosen on the runs of `chosen_on` (suite names) and scored on those of
    `scored_on`, which took no part in the choice: `held_out` holds those scores (HELD_OUT_COLUMNS)."""

    rule: AlarmRule
    reading: str
    chosen_on: tuple[str, ...]
    scored_on: tuple[str, ...]
    held_out: Scored
    tasks: tuple[str, ...] = ()  # the tasks of the runs it was chosen on

    def applies_to(self, task: str | None) -> bool:
        """Whether the rule may fire on a run of `task`: every rule, but one on a TASK_SCALED signal only on the
        tasks it was chosen on (a run of unknown task, or a rule of unknown tasks: yes)."""
        return self.rule.signal not in TASK_SCALED or task is None or not self.tasks or task in self.tasks

    @property
    def text(self) -> str:
        """The rule in words: 'lag/ess at or below 0.115 on 2 consecutive steps'."""
        side = "at or above" if self.rule.direction == "above" else "at or below"
        return f"{self.rule.signal} {side} {self.rule.threshold:.3g} on {self.rule.persist} consecutive steps"


def rules_table(rules: list[ShippedRule]) -> pd.DataFrame:
    """The rules as the CSV holds them, one row per rule (a threshold of NaN: no candidate kept the false alarms
    within the bound; such a rule never fires)."""
    return pd.DataFrame([{"reading": r.reading, "signal": r.rule.signal, "direction": r.rule.direction,
                          "threshold": r.rule.threshold, "persist": r.rule.persist,
                          "chosen_on": " ".join(r.chosen_on), "scored_on": " ".join(r.scored_on),
                          "tasks": " ".join(r.tasks),
                          **{column: getattr(r.held_out, column) for column in HELD_OUT_COLUMNS}} for r in rules])


def load_rules(path: Path | None = None) -> list[ShippedRule]:
    """The rules of `path` (the package's, SHIPPED_RULES, by default) that can fire (a finite threshold), in its
    order."""
    path = SHIPPED_RULES if path is None else path
    table = pd.read_csv(path)
    missing = [c for c in ("reading", "signal", "direction", "threshold", "persist", "chosen_on", "scored_on",
                           *HELD_OUT_COLUMNS) if c not in table]
    if missing:
        raise ValueError(f"{path}: not a rules file (experiments/warnings/score.py --rules-out): no column "
                         f"{', '.join(missing)}")
    found = []
    for row in table.to_dict("records"):
        if not np.isfinite(row["threshold"]):
            continue
        rule = AlarmRule(str(row["signal"]), float(row["threshold"]), row["direction"], int(row["persist"]))
        scored = Scored(rule, int(row["failed"]), int(row["warned"]), float(row["median_lead"]), int(row["held"]),
                        int(row["false_alarms"]), float(row["auc"]), float(row["auc_low"]), float(row["auc_high"]))
        tasks = tuple(str(row["tasks"]).split()) if "tasks" in row and isinstance(row["tasks"], str) else ()
        found.append(ShippedRule(rule, str(row["reading"]), tuple(str(row["chosen_on"]).split()),
                                 tuple(str(row["scored_on"]).split()), scored, tasks))
    return found


class AlarmWatch:
    """The rules watched live on one run's rows as they come (`gspo-bench run`): `update(row)` returns the rules
    that fire at that row, each once per run, by the same rule as `alarm_step` (the value at or beyond the
    threshold on `persist` consecutive rows; a missing or NaN value breaks the run of rows)."""

    def __init__(self, rules: list[ShippedRule]):
        self.rules = rules
        self.streak = [0] * len(rules)
        self.fired: set[int] = set()

    def update(self, row: dict) -> list[ShippedRule]:
        now = []
        for i, shipped in enumerate(self.rules):
            value = row.get(shipped.rule.signal)
            beyond = value is not None and bool(shipped.rule.beyond(np.array([value], dtype=float))[0])
            self.streak[i] = self.streak[i] + 1 if beyond else 0
            if self.streak[i] >= shipped.rule.persist and i not in self.fired:
                self.fired.add(i)
                now.append(shipped)
        return now


class LiveWarnings:
    """`gspo-bench run`'s live early warnings: called with a run's name and each row as it comes, it returns the
    lines (`alarm_line`) of the shipped rules that fire there, each once per run (an `AlarmWatch` per run)."""

    def __init__(self, rules: list[ShippedRule] | None = None):
        self.rules = load_rules() if rules is None else rules
        self.watches: dict[str, AlarmWatch] = {}
        self.clips: dict[str, deque[float]] = {}  # each run's last BURST_WINDOW finite clip fractions

    def __call__(self, name: str, row: dict, task: str | None = None) -> list[str]:
        """The alarm lines of run `name` at `row`; `task`, the run's task, leaves out the rules that do not apply
        to it (`ShippedRule.applies_to`)."""
        earlier = self.clips.setdefault(name, deque(maxlen=BURST_WINDOW))  # the last finite clip fractions
        clip = float("nan") if row.get("clip/frac") is None else float(row["clip/frac"])
        burst = clip / max(float(np.median(earlier)), BURST_FLOOR) \
            if len(earlier) == BURST_WINDOW and np.isfinite(clip) else float("nan")
        if np.isfinite(clip):
            earlier.append(clip)
        row = {**row, BURST: burst}  # the derived signal, as clip_burstiness computes it offline
        watch = self.watches.setdefault(name, AlarmWatch([r for r in self.rules if r.applies_to(task)]))
        fired = watch.update(row)
        return [alarm_line(r, int(row["step"]), float(row[r.rule.signal])) for r in fired]


def alarm_line(shipped: ShippedRule, step: int, value: float) -> str:
    """The line `gspo-bench run` prints when a rule fires: the signal, its value, the rule, and its held-out
    scores (warned failures, median lead, false-alarm rate)."""
    out = shipped.held_out
    lead = f", a median {out.median_lead:.3g} steps ahead" if np.isfinite(out.median_lead) else ""
    return (f"early warning at step {step}: {shipped.rule.signal} = {value:.4g} ({shipped.text}). Held out on "
            f"{' '.join(shipped.scored_on)}: it warned {out.warned} of {out.failed} failed runs{lead}, and fired on "
            f"{out.false_alarm_rate:.0%} of the {out.held} runs that held")


def runs_alarms(metrics: pd.DataFrame, classes: pd.DataFrame, rules: list[ShippedRule]) -> pd.DataFrame:
    """Per run of `classes` (suite, label, seed, outcome, step: the onset of a failed one) the rules' alarms on
    its steps before the onset (every step of a run that held or was not judged): `alarms` ('signal @ step',
    in step order), and for a failed run the first of them with its lead (`first`, `alarm`, `lead`; empty and
    NaN where none fired before the onset). `carried`: how many of the rules' signals the run logged (a finite value at some step)."""
    rows = []
    for run in classes[["suite", "label", "seed", "outcome", "step"]].to_dict("records"):
        own = metrics[(metrics["suite"] == run["suite"]) & (metrics["label"] == run["label"])
                      & (metrics["seed"] == run["seed"])].sort_values("step")
        failed = run["outcome"] in FAILED and np.isfinite(run["step"])
        onset = float(run["step"]) if failed else np.inf
        fired = sorted((alarm_step(r.rule, own["step"].to_numpy(float), own[r.rule.signal].to_numpy(float),
                                   before=onset), r.rule.signal) for r in rules if r.rule.signal in own)
        fired = [(step, signal) for step, signal in fired if np.isfinite(step)]
        first = fired[0] if fired and failed else (np.nan, "")
        rows.append({**{k: run[k] for k in ("suite", "label", "seed", "outcome")},
                     "onset": onset if failed else np.nan, "carried": sum(bool(own[r.rule.signal].notna().any()) for r in rules if r.rule.signal in own),
                     "alarms": ", ".join(f"{signal} @ {step:g}" for step, signal in fired), "first": first[1],
                     "alarm": first[0], "lead": lead_time(onset, first[0]) if failed else np.nan})
    return pd.DataFrame(rows)


def rules_on(metrics: pd.DataFrame, classes: pd.DataFrame, rules: list[ShippedRule]) -> list[Scored]:
    """Each rule scored on the judged runs of `classes` (as on its held-out runs; seed 0 for the AUC's
    bootstrap)."""
    return [score_rule(r.rule, signal_runs(metrics, classes, r.rule.signal), np.random.default_rng(0)) for r in rules]
