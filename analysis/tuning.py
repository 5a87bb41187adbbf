"""What a tuned suite's report says about its tuning (`tuning:` in the suite file): under which ruleset
each arm ran (`tuned`: its settings chosen from its trials on the validation split; `defaults`: as
declared), the FLOPs its trials spent beside the FLOPs of its compared runs, and a sensitivity figure
per arm: each trial's validation score against each tuned setting, the chosen trial marked, so a
reader sees whether an arm's result hinges on its setting. Read from OUT/<suite>/tuning/chosen.json
and the trial runs' status.json (`gspo_bench.suite.tuning_runs` writes them); the trial runs are never
among the compared runs (`analysis.load.find_run_dirs` leaves them out)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt
import pandas as pd
import plotly.graph_objects as go
from matplotlib.ticker import NullFormatter
from plotly.subplots import make_subplots

from analysis.load import Results
from gspo_bench.config.tuning import TRIALS_FOLDER

CHOSEN = "chosen.json"
TUNING_FIGURE = "tuning_sensitivity"


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
            status = folder / f"{trial['label']}-s{seed}" / "status.json"
            flops = json.loads(status.read_text()).get("cum_flops", 0.0) if status.is_file() else 0.0
            spent[trial["arm"]] = spent.get(trial["arm"], 0.0) + float(flops)
    return spent


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


def settings_text(settings: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v:.3g}" if isinstance(v, float) else f"{k}={v}" for k, v in settings.items())


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


def panels(points: pd.DataFrame) -> list[tuple[str, str]]:
    """(arm, setting) of each panel: one row of panels per arm, one panel per tuned setting."""
    return list(dict.fromkeys(zip(points["arm"], points["setting"], strict=True)))


def log_axis(values: pd.Series) -> bool:
    """Log scale for a positive setting spanning more than a factor 10 (clip ranges, learning rates)."""
    return bool((values > 0).all() and values.max() / values.min() > 10)


def sensitivity_figure(results: Results) -> plt.Figure:
    """Validation score against each tuned setting, one panel per (arm, setting); the chosen trial a star."""
    points = trial_points(results)
    arms = list(dict.fromkeys(points["arm"]))
    width = max(int(points.groupby("arm")["setting"].nunique().max()), 1)
    fig, axes = plt.subplots(len(arms), width, figsize=(3.2 * width, 2.6 * len(arms)), squeeze=False)
    for row, arm in enumerate(arms):
        settings = list(dict.fromkeys(points.loc[points["arm"] == arm, "setting"]))
        for col in range(width):
            ax = axes[row][col]
            if col >= len(settings):
                ax.set_axis_off()
                continue
            here = points[(points["arm"] == arm) & (points["setting"] == settings[col])]
            ax.scatter(here["value"], here["score"], s=18, color="tab:blue", alpha=0.7, label="trials")
            best = here[here["chosen"]]
            ax.scatter(best["value"], best["score"], s=140, marker="*", color="tab:red", label="chosen")
            if log_axis(here["value"]):
                ax.set_xscale("log")
                ax.xaxis.set_minor_formatter(NullFormatter())  # decades only: minor labels overlap
            ax.set_xlabel(settings[col])
            ax.set_ylabel(f"{arm}: validation score" if col == 0 else "")
    axes[0][0].legend(fontsize=7)
    fig.tight_layout()
    return fig


def sensitivity_interactive(results: Results) -> list[go.Figure]:
    """The sensitivity figure in plotly: one figure per arm, a panel per tuned setting, hover shows the trial."""
    points = trial_points(results)
    figures = []
    for arm in dict.fromkeys(points["arm"]):
        mine = points[points["arm"] == arm]
        settings = list(dict.fromkeys(mine["setting"]))
        fig = make_subplots(rows=1, cols=len(settings), shared_yaxes=True, subplot_titles=settings)
        for col, setting in enumerate(settings, start=1):
            here = mine[mine["setting"] == setting]
            for chosen, style in ((False, {"size": 8, "color": "#1f77b4"}), (True, {"size": 16, "color": "#d62728",
                                                                                    "symbol": "star"})):
                part = here[here["chosen"] == chosen]
                fig.add_trace(go.Scatter(x=part["value"], y=part["score"], mode="markers", marker=style,
                                         name="chosen" if chosen else "trials", showlegend=col == 1,
                                         text=[f"{arm}.t{t:02d}" for t in part["trial"]]), row=1, col=col)
            fig.update_xaxes(type="log" if log_axis(here["value"]) else "linear", row=1, col=col)
        fig.update_layout(title=f"{arm}: validation score against each tuned setting", height=320,
                          yaxis_title="validation score")
        figures.append(fig)
    return figures
