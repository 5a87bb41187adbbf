"""A tuned suite's tuning as its results folder holds it (`tuning:` in the suite file): chosen.json
(each arm's ruleset and chosen trial, every trial's settings and validation score) and the trial runs'
status.json (the FLOPs they spent), both under OUT/<suite>/tuning/ (`gspo_bench.suite.tuning_runs`
writes them). The trial runs are never among the compared runs (`analysis.data.load.find_run_dirs`
leaves them out); `analysis.report.tuning` and `analysis.figures.tuning` show what is read here."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd

from analysis.data.load import Results
from gspo_bench.config.tuning import TRIALS_FOLDER
from gspo_bench.rundir.names import run_folder_name

CHOSEN = "chosen.json"


def tuning_records(results: Results) -> dict[str, tuple[Path, dict[str, Any]]]:
    """suite name -> (its trials folder, chosen.json's record), for each suite among `results` that was tuned."""
    found: dict[str, tuple[Path, dict[str, Any]]] = {}
    for suite, path in zip(results.runs["suite"], results.runs["path"], strict=True):
        folder = Path(path).parent / TRIALS_FOLDER
        if suite not in found and (folder / CHOSEN).is_file():
            found[suite] = (folder, json.loads((folder / CHOSEN).read_text()))
    return found


def trial_flops(folder: Path, record: dict[str, Any]) -> dict[str, float]:
    """FLOPs each arm's trial runs spent, summed from their status.json (as they ran, not as planned)."""
    spent: dict[str, float] = {}
    for trial in record["trials"]:
        for seed in record["seeds"]:
            status = folder / run_folder_name(trial["label"], seed) / "status.json"  # the label made safe
            flops = json.loads(status.read_text()).get("cum_flops", 0.0) if status.is_file() else 0.0
            spent[trial["arm"]] = spent.get(trial["arm"], 0.0) + float(flops)
    return spent


def trial_points(results: Results) -> pd.DataFrame:
    """One row per (suite, arm, trial, setting): the setting's value, the trial's score, whether it was chosen."""
    rows = []
    for suite, (_, record) in tuning_records(results).items():
        for trial in record["trials"]:
            chosen = record["chosen"].get(trial["arm"], {}).get("trial") == trial["trial"]
            for setting, value in trial["settings"].items():
                if isinstance(value, int | float) and not isinstance(value, bool):
                    rows.append({"suite": suite, "arm": trial["arm"], "trial": trial["trial"], "setting": setting,
                                 "value": float(value), "score": trial["score"], "chosen": chosen})
    return pd.DataFrame(rows, columns=["suite", "arm", "trial", "setting", "value", "score", "chosen"])


def settings_text(settings: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v:.3g}" if isinstance(v, float) else f"{k}={v}" for k, v in settings.items())
