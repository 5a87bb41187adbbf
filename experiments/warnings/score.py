"""Early warnings scored on the map's runs (experiments/warnings/README.md): each signal's threshold chosen on
one part of the runs, then scored on another. The first reading chose on the stability stages 1-3 and scored
stage 4 and the length points; the second (`--reading lag`) chooses on the lag pilot and scores stage 5.

    python experiments/warnings/score.py --csv results/warnings/scores.csv
    python experiments/warnings/score.py --reading lag --csv results/warnings/lag_scores.csv \
        --rules-out analysis/evidence/warning_rules.csv

`--rules-out` writes the rules with their held-out scores as the package ships them (the report's early-warnings
section and `gspo-bench run`'s live alarms read analysis/evidence/warning_rules.csv: the lag reading's).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import typer

from analysis.data.load import load_results
from analysis.evidence.early_warnings import (
    BURST,
    AlarmRule,
    ShippedRule,
    choose_threshold,
    rules_table,
    score_rule,
    signal_runs,
    with_derived,
)
from analysis.evidence.stability import TOO_SHORT, class_rows

RESULTS = Path(__file__).resolve().parent.parent.parent / "results"
READINGS = {  # (the folders rules are chosen on, the folders they are scored on), under results/
    "stability": (["stability_cpu/stage1", "stability_cpu/stage2", "stability_cpu/stage3"],
                  ["stability_cpu/stage4", "stability_cpu/length", "stability_cpu/length_short"]),
    "lag": (["lag_cpu/pilot"], ["lag_cpu/stage5"]),
}
RULES = [AlarmRule(signal, 0.0, "above", persist=2) for signal in
         ("grad/norm", "response/len_mean", "clip/frac", "kl/old_new", "mismatch/k3_kl", "moe/drift", BURST)]
RULES.append(AlarmRule("entropy/mean", 0.0, "below", persist=2))
LAG_RULES = [AlarmRule("lag/ess", 0.0, "below", persist=2), AlarmRule("lag/k3_response", 0.0, "above", persist=2)]


def judged(folders: list[str]) -> tuple[pd.DataFrame, pd.DataFrame, tuple[str, ...]]:
    """The metrics and the judged runs' classes of the stages `folders`, pooled, and their tasks."""
    metrics, classes, tasks = [], [], []
    for folder in folders:
        loaded = load_results(RESULTS / folder)
        rows = class_rows(loaded)
        classes.append(rows[rows["outcome"] != TOO_SHORT])
        metrics.append(with_derived(loaded.metrics))  # clip/frac_burst
        tasks += [str(task) for task in loaded.runs["task"]]
    return pd.concat(metrics, ignore_index=True), pd.concat(classes, ignore_index=True), tuple(dict.fromkeys(tasks))


def suites_of(classes: pd.DataFrame) -> tuple[str, ...]:
    return tuple(dict.fromkeys(str(suite) for suite in classes["suite"]))


def main(csv: Path | None = None, reading: str = typer.Option("stability", help="stability or lag"),
         rules_out: Path | None = None) -> None:
    if reading not in READINGS:
        raise typer.BadParameter(f"--reading must be one of {', '.join(READINGS)}, got {reading!r}")
    choose, score = READINGS[reading]
    (*chosen_on, tasks), (*scored_on, _) = judged(choose), judged(score)
    rows, shipped = [], []
    for template in RULES + (LAG_RULES if reading == "lag" else []):
        rule = choose_threshold(template, signal_runs(*chosen_on, template.signal), max_false_alarm=0.1)
        found = score_rule(rule, signal_runs(*scored_on, rule.signal), np.random.default_rng(0))
        shipped.append(ShippedRule(rule, reading, suites_of(chosen_on[1]), suites_of(scored_on[1]), found, tasks))
        rows.append({"signal": rule.signal, "direction": rule.direction, "threshold": rule.threshold,
                     "failed": found.failed, "warned": found.warned, "median_lead": found.median_lead,
                     "held": found.held, "false_alarms": found.false_alarms, "auc": found.auc,
                     "auc_low": found.auc_low, "auc_high": found.auc_high})
    table = pd.DataFrame(rows).sort_values("auc", ascending=False)
    pd.set_option("display.width", 160)
    print(table.to_string(index=False, float_format=lambda v: f"{v:.4g}"))
    if csv is not None:
        csv.parent.mkdir(parents=True, exist_ok=True)
        table.to_csv(csv, index=False, float_format="%.6g")
    if rules_out is not None:
        ranked = [shipped[i] for i in table.index]  # the table's order: held-out AUC, highest first
        rules_table(ranked).to_csv(rules_out, index=False)  # full precision: the thresholds are fired on
        print(f"wrote {rules_out}")


if __name__ == "__main__":
    typer.run(main)
