"""Router margins against drift, the interactive (plotly) twin of analysis.figures.margins, for
report.html; nothing here writes files."""

from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go

from analysis.evidence.margins import drift_by
from analysis.figures.margins import CURVES, PANELS, Y_TITLE, title_of
from analysis.figures.style import hex_colors, labels_of, layout


def predicted_vs_measured(layers: pd.DataFrame) -> list[go.Figure]:
    """Measured drift and the independence flip rate per objective: one figure per MoE layer axis
    and per updates axis (where the runs record updates), hover values, a legend entry per curve."""
    figures = []
    for across in (a for a in PANELS if a in layers.columns):
        table = drift_by(layers, across)
        colors = hex_colors(labels_of(table))
        fig = go.Figure()
        for label, rows in table.groupby("label", sort=False):
            for column, name, _, dash in CURVES:
                fig.add_trace(go.Scatter(
                    x=rows[across], y=rows[column], mode="lines+markers", name=f"{label}: {name}", legendgroup=label,
                    line=dict(color=colors[str(label)], dash=dash),
                    hovertemplate=f"{label} {name}<br>{across} %{{x}}<br>%{{y:.4g}}<extra></extra>"))
        figures.append(layout(fig, title_of(across), PANELS[across], Y_TITLE))
    return figures
