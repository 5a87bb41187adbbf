"""Early warnings scored on the stability map's runs (experiments/warnings/README.md): each signal's threshold
chosen on stages 1-3, then scored on stage 4 and the length points.

    python experiments/warnings/score.py --csv results/warnings/scores.csv
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import typer

from analysis.data.load import load_results
from analysis.evidence.early_warnings import AlarmRule, choose_threshold, score_rule, signal_runs
from analysis.evidence.stability import TOO_SHORT, class_rows

ROOT = Path(__file__).resolve().parent.parent.parent / "results" / "stability_cpu"
CHOOSE = ["stage1", "stage2", "stage3"]
SCORE = ["stage4", "length", "length_short"]
RULES = [AlarmRule(signal, 0.0, "above", persist=2) for signal in
         ("grad/norm", "response/len_mean", "clip/frac", "kl/old_new", "mismatch/k3_kl", "moe/drift")]
RULES.append(AlarmRule("entropy/mean", 0.0, "below", persist=2))


def judged(folders: list[str]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The metrics and the judged runs' classes of the stages `folders`, pooled."""
    metrics, classes = [], []
    for folder in folders:
        loaded = load_results(ROOT / folder)
        rows = class_rows(loaded)
        classes.append(rows[rows["outcome"] != TOO_SHORT])
        metrics.append(loaded.metrics)
    return pd.concat(metrics, ignore_index=True), pd.concat(classes, ignore_index=True)


def main(csv: Path | None = None) -> None:
    chosen_on, scored_on = judged(CHOOSE), judged(SCORE)
    rows = []
    for template in RULES:
        rule = choose_threshold(template, signal_runs(*chosen_on, template.signal), max_false_alarm=0.1)
        found = score_rule(rule, signal_runs(*scored_on, rule.signal), np.random.default_rng(0))
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


if __name__ == "__main__":
    typer.run(main)
