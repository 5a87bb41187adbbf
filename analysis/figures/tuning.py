"""The tuning sensitivity figure: per arm, each trial's validation score against each tuned setting,
trials as points and the chosen one a star, so a reader sees whether an arm's result hinges on its
setting (static matplotlib and interactive plotly, like the report's other figures)."""

from __future__ import annotations

import matplotlib.pyplot as plt
import pandas as pd
import plotly.graph_objects as go
from matplotlib.ticker import NullFormatter
from plotly.subplots import make_subplots

from analysis.data.load import Results
from analysis.data.tuning import trial_points

TUNING_FIGURE = "tuning_sensitivity"


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
