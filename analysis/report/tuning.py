"""The report's words and table on a tuned suite: under which ruleset each arm ran (`tuned`: its
settings chosen from its trials on the validation split; `defaults`: as declared), its chosen settings
and validation score, and the FLOPs its trials spent beside the FLOPs of its compared runs."""

from __future__ import annotations

import math

import pandas as pd

from analysis.data.load import Results
from analysis.data.tuning import settings_text, trial_flops, tuning_records
from analysis.report.escape import escape


def tuning_table(results: Results) -> pd.DataFrame:
    """One row per arm of each tuned suite: ruleset, trials, the chosen trial and settings, its validation
    score, and the FLOPs of its tuning beside those of its compared runs."""
    rows = []
    for suite, (folder, record) in tuning_records(results).items():
        spent = trial_flops(folder, record)
        runs = results.runs[results.runs["suite"] == suite]
        for arm, rule in record["ruleset"].items():
            chosen = record["chosen"].get(arm)
            rows.append({"suite": suite, "arm": arm, "ruleset": rule,
                         "trials": sum(t["arm"] == arm for t in record["trials"]),
                         "chosen": chosen["label"] if chosen else "-",
                         "settings": settings_text(chosen["settings"]) if chosen else "as declared",
                         f"validation {record['metric']} ({record['rule']})": chosen["score"] if chosen else math.nan,
                         "tuning FLOPs": spent.get(arm, 0.0),
                         "comparison FLOPs": float(runs.loc[runs["label"] == arm, "cum_flops"].sum())})
    return pd.DataFrame(rows)


def tuning_text(results: Results) -> str:
    """The sentence before the table: how trials were drawn, scored and chosen, per tuned suite."""
    lines = []
    for suite, (_, record) in tuning_records(results).items():
        budget = record["trial_budget"]
        lines.append(f"Suite {suite}: each tuned arm's settings were chosen from its trials ({budget['kind']} = "
                     f"{budget['value']:g} each, trial seeds {record['seeds']}, disjoint from the compared seeds) by "
                     f"the {record['rule']} {record['metric']} score on the task's validation split, never its test "
                     "split; ties go to the trial drawn first. Arms under `defaults` ran as declared, untuned.")
    return "\n".join(lines)


def untuned_text(results: Results) -> str:
    """The sentence for suites with no tuning: their arms ran as declared, so a gap between two arms may
    be one of step size (each objective's own clip range at the suite's lr) rather than of objective."""
    tuned = tuning_records(results)
    untuned = [escape(s) for s in pd.unique(results.runs["suite"]) if s not in tuned]
    if not untuned:
        return ""
    return (f"Untuned: every arm of {', '.join(untuned)} ran at its declared settings (the suite's lr, each "
            "objective's own clip range unless the suite sets one), with no trials. A difference between arms can "
            "then be one of step size rather than of objective; a `tuning:` section in the suite file tunes every "
            "arm on the same budget, on a validation split, before the comparison (docs/suites.md#tuning-every-"
            "arm-tuned-on-the-same-budget-before-it-is-compared).")
