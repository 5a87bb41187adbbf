"""The report's early-warnings section (issue #61; analysis.evidence.early_warnings): the package's alarm rules,
fixed on this benchmark's runs and scored on others, applied to a suite's runs. For a suite with failed runs:
which rule fired first on each failed run and how many steps ahead, and the rules ranked by their held-out AUC
beside how they did on these runs (in-sample where these runs took part in choosing them). For imported runs
(`gspo-bench import`, which have no outcome class): the rules their logs carry and where each fired."""

from __future__ import annotations

import numpy as np
import pandas as pd

from analysis.data.load import Results
from analysis.evidence.early_warnings import ShippedRule, rules_on
from analysis.evidence.stability import FAILED, StabilityMap
from analysis.report.escape import escape
from analysis.report.texts import count

IMPORTED = "imported from "  # the prefix of an imported run's `device` (gspo_bench.imports.write)
NOT_JUDGED = "not judged"


def warning_runs(results: Results, stability: StabilityMap | None) -> pd.DataFrame:
    """The runs the section reads, as (suite, label, seed, outcome, step) rows: the map's judged runs, and every
    imported run the map did not judge (outcome NOT_JUDGED, no onset)."""
    columns = ["suite", "label", "seed", "outcome", "step"]
    frames = [stability.every_run[columns]] if stability is not None else []
    runs = results.runs
    imported = runs[runs["device"].astype(str).str.startswith(IMPORTED)][["suite", "label", "seed"]]
    known = {key for frame in frames for key in zip(frame["suite"], frame["label"], frame["seed"])}
    imported = imported[[key not in known for key in zip(imported["suite"], imported["label"], imported["seed"])]]
    frames.append(imported.assign(outcome=NOT_JUDGED, step=np.nan))
    frames = [frame for frame in frames if len(frame)]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=columns)


def applies(runs: pd.DataFrame) -> bool:
    """A section where a judged run failed or a run was imported."""
    return bool(len(runs)) and bool((runs["outcome"].isin(FAILED) | (runs["outcome"] == NOT_JUDGED)).any())


def provenance_text(rules: list[ShippedRule], suites: set[str]) -> str:
    """Where the rules come from, and whether these runs took part in choosing them."""
    if not rules:
        return "No shipped rule applies to these runs."
    chosen = sorted({suite for r in rules for suite in r.chosen_on})
    scored = sorted({suite for r in rules for suite in r.scored_on})
    inside = escape(", ".join(sorted(suites & set(chosen))))
    held_out = escape(", ".join(sorted(suites & set(scored))))
    where = (f"**In-sample here**: the runs of {inside} chose the thresholds, so their scores below flatter the "
             "rules. " if inside else
             f"These runs ({held_out}) are the rules' held-out runs: the scores below repeat theirs. " if held_out
             else "These runs took no part in choosing the rules: the scores below are held out too. ")
    return ("Exploratory. Each rule is an alarm on one logged signal, its value at or beyond a threshold on "
            "consecutive steps; its threshold was chosen on the suite(s) " + escape(", ".join(chosen)) +
            " (the most failed runs warned ahead of their onset with at most 10% false alarms) and scored on " +
            escape(", ".join(scored)) + ", which took no part in the choice (experiments/warnings/README.md, reading "
            f"'{escape(rules[0].reading)}'). A failed run's onset is the step of its outcome class (degraded or "
            "collapsed); an alarm at or after it is no warning, an alarm on a run that held is a false alarm. "
            + where + "Rules whose threshold kept no false-alarm rate within 10% on the choice runs are "
            "not shipped (the README lists them).")


def left_out_text(left_out: list[ShippedRule], tasks: list[str]) -> str:
    """Which rules these runs' tasks leave out (a threshold in another task's units), or nothing."""
    if not left_out:
        return ""
    names = ", ".join(f"{r.rule.signal} (chosen on {' '.join(r.tasks)})" for r in left_out)
    return (f"Left out here: {escape(names)}. Each is measured in its task's own units (tokens of a response), so "
            f"its threshold does not carry to these runs' task ({escape(', '.join(tasks))}).")


def rules_table(rules: list[ShippedRule], metrics: pd.DataFrame, runs: pd.DataFrame) -> pd.DataFrame:
    """One row per rule, ranked by its held-out AUC: the rule, its held-out scores, and its scores on these runs'
    judged ones."""
    judged = runs[runs["outcome"] != NOT_JUDGED]
    here = rules_on(metrics, judged, rules) if len(judged) else [None] * len(rules)
    rows = []
    for shipped, on in sorted(zip(rules, here, strict=True), key=lambda pair: -pair[0].held_out.auc):
        out = shipped.held_out
        row = {"rule": shipped.text, "held out: warned ahead": f"{out.warned}/{out.failed}",
               "held out: median lead (steps)": out.median_lead,
               "held out: false alarms": f"{out.false_alarms}/{out.held}",
               "held out: AUC [95%]": f"{out.auc:.2f} [{out.auc_low:.2f}, {out.auc_high:.2f}]"}
        if on is not None:
            row |= {"here: warned ahead": f"{on.warned}/{on.failed}", "here: median lead (steps)": on.median_lead,
                    "here: false alarms": f"{on.false_alarms}/{on.held}",
                    "here: AUC": f"{on.auc:.2f}" if np.isfinite(on.auc) else "-"}
        rows.append(row)
    return pd.DataFrame(rows)


def first_alarms_text(alarms: pd.DataFrame) -> str:
    """How many failed runs each rule warned first, with the median lead; and how many no rule warned."""
    failed = alarms[alarms["outcome"].isin(FAILED)]
    if not len(failed):
        return "No judged run failed here: there is nothing to warn of (imported runs are listed below)."
    warned = failed[failed["first"] != ""]
    lines = [f"Of the {count(len(failed), 'failed run')}, {len(warned)} had an alarm before their onset; the rule "
             "that fired first:", ""]
    for signal, rows in warned.groupby("first", sort=False):
        lines.append(f"- **{escape(str(signal))}**: first on {count(len(rows), 'run')}, a median "
                     f"{rows['lead'].median():.3g} steps ahead")
    lines.append(f"- no rule before the onset: {count(len(failed) - len(warned), 'run')}")
    return "\n".join(lines)


def run_table(alarms: pd.DataFrame) -> pd.DataFrame:
    """Per failed or imported run: its outcome and onset, the first alarm ahead and its lead, every alarm."""
    shown = alarms[alarms["outcome"].isin(FAILED) | (alarms["outcome"] == NOT_JUDGED)]
    return shown.rename(columns={"first": "first alarm", "alarm": "at step", "lead": "steps ahead",
                                 "carried": "rule signals logged", "alarms": "every alarm (signal @ step)"})
