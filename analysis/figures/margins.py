"""Router margins against drift, the figures (the tables and what they show: analysis.evidence.margins):
measured drift beside the independence flip rate, per MoE layer or per updates since the old policy
(the interactive twin: analysis.figures.margins_interactive); nothing here saves files."""

from __future__ import annotations

import matplotlib.pyplot as plt
import pandas as pd
from matplotlib.ticker import MaxNLocator

from analysis.evidence.margins import drift_by
from analysis.figures.style import axes, labels_of, palette

PANELS = {"layer": "MoE layer", "updates": "updates since the old policy (minibatch forward after j updates)"}


TITLES = {"layer": "per layer", "updates": "by updates since the old policy"}


# the two curves of every panel: column, name in the legend, matplotlib style, plotly dash
CURVES = (("moe/drift", "measured drift", "-o", "solid"), ("moe/flip_pred", "independence rate", "--x", "dash"))


Y_TITLE = "share of tokens rerouted"


def title_of(across: str) -> str:
    return f"Drift {TITLES[across]}: measured vs the independence flip rate (same updates)"


def predicted_vs_measured_panel(layers: pd.DataFrame, across: str = "layer", ax: plt.Axes | None = None) -> plt.Axes:
    """Measured drift (solid) and the independence flip rate (dashed), one colour per objective, per MoE
    layer or per number of updates (`across`)."""
    ax = axes(ax)
    table = drift_by(layers, across)
    colors = palette(labels_of(table))
    for label, rows in table.groupby("label", sort=False):
        for column, name, style, _ in CURVES:
            ax.plot(rows[across], rows[column], style, color=colors[str(label)], label=f"{label}: {name}")
    ax.set_xlabel(PANELS[across])
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_ylabel(Y_TITLE)
    ax.set_title(title_of(across), fontsize=9)
    ax.legend(fontsize=7)
    return ax


def predicted_vs_measured(layers: pd.DataFrame) -> plt.Figure:
    """One panel per MoE layer axis and per updates axis (where the runs record updates)."""
    across = [a for a in PANELS if a in layers.columns]
    figure, panels = plt.subplots(1, len(across), figsize=(6.0 * len(across), 4.0), layout="constrained", squeeze=False)
    for ax, name in zip(panels[0], across):
        predicted_vs_measured_panel(layers, name, ax=ax)
    return figure


