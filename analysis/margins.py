"""Drift explained by router margins: per objective and per MoE layer, the measured drift beside the
flip rate predicted from the margin and margin-change distributions (`gspo_bench.moe.margins`), the
share of tokens near a tie, how far updates move the router, and the run's nondeterminism floor."""

from __future__ import annotations

import matplotlib.pyplot as plt
import pandas as pd
import plotly.graph_objects as go
from matplotlib.ticker import MaxNLocator

from analysis.figures import _ax, palette

# column -> its name in the report's table, in order
SUMMARY = {
    "moe/drift": "drift (measured)",
    "moe/flip_pred": "flip rate (predicted)",
    "moe/margin_crossed": "margins crossed",
    "moe/margin_lt_0.01": "margin < 0.01",
    "moe/margin_lt_0.1": "margin < 0.1",
    "moe/margin_lt_1": "margin < 1",
    "moe/margin_median": "median margin",
    "moe/dmargin_abs": "mean |d margin|",
    "moe/dscore": "mean |d s|",
    "moe/rollout_gap": "engine routing gap",
    "floor/drift_repeat": "floor: repeat",
    "floor/drift_precision": "floor: rollout precision",
}

EXPLAINED = ("Margins are router-logit gaps between each token's k-th chosen and best unchosen expert under "
             "the old policy; d margin is how far the updates before a minibatch moved that gap, |d s| how far "
             "they moved the two scores. The predicted flip rate is P(margin + d margin < 0) with the two "
             "drawn independently; 'margins crossed' counts tokens whose own gap closed (a k-th / (k+1)-th "
             "swap, part of the measured drift). Means over steps, minibatches, layers and seeds; the floors "
             "are the drift of two identical forwards and of a forward in the rollout precision (step 1).")


def margin_table(metrics: pd.DataFrame) -> pd.DataFrame | str:
    """Per objective: the mean over steps and seeds of each margin figure present (floors: step 1)."""
    present = [c for c in SUMMARY if c in metrics.columns]
    if "moe/flip_pred" not in present:
        return "These results carry no router-margin columns (runs older than the margin measurement, or measure: false)."
    table = metrics.groupby("label", sort=False)[present].mean()
    return table.rename(columns=SUMMARY).reset_index().rename(columns={"label": "objective"})


def drift_by(layers: pd.DataFrame, across: str = "layer") -> pd.DataFrame:
    """Per objective and MoE layer (or `across="updates"`: per number of updates the measured forward
    ran after): mean measured drift, predicted flip rate and crossed margins."""
    columns = [c for c in ("moe/drift", "moe/flip_pred", "moe/margin_crossed") if c in layers.columns]
    return layers.groupby(["label", across], sort=False)[columns].mean().reset_index().sort_values(["label", across],
                                                                                                     kind="stable")


def has_margins(layers: pd.DataFrame) -> bool:
    return "moe/flip_pred" in layers.columns and bool(layers["moe/flip_pred"].notna().any())


PANELS = {"layer": "MoE layer", "updates": "updates since the old policy (minibatch forward after j updates)"}
TITLES = {"layer": "per layer", "updates": "by updates since the old policy"}


def predicted_vs_measured(layers: pd.DataFrame, across: str = "layer", ax=None):
    """Measured drift (solid) and the predicted flip rate (dashed), one colour per objective, per MoE
    layer or per number of updates (`across`)."""
    ax = _ax(ax)
    table = drift_by(layers, across)
    colors = palette(list(dict.fromkeys(table["label"])))
    for label, rows in table.groupby("label", sort=False):
        ax.plot(rows[across], rows["moe/drift"], "-o", color=colors[label], label=f"{label}: measured")
        ax.plot(rows[across], rows["moe/flip_pred"], "--x", color=colors[label], label=f"{label}: predicted")
    ax.set_xlabel(PANELS[across])
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_ylabel("share of tokens rerouted")
    ax.set_title(f"Drift {TITLES[across]}: measured vs predicted from router margins")
    ax.legend(fontsize=7)
    return ax


def predicted_vs_measured_figure(layers: pd.DataFrame) -> plt.Figure:
    across = [a for a in PANELS if a in layers.columns]
    figure, axes = plt.subplots(1, len(across), figsize=(6.0 * len(across), 4.0), layout="constrained", squeeze=False)
    for ax, name in zip(axes[0], across):
        predicted_vs_measured(layers, name, ax=ax)
    return figure


def predicted_vs_measured_interactive(layers: pd.DataFrame) -> list[go.Figure]:
    from analysis.interactive import _colors, _layout

    figures = []
    for across in (a for a in PANELS if a in layers.columns):
        table = drift_by(layers, across)
        colors = _colors(table)
        fig = go.Figure()
        for label, rows in table.groupby("label", sort=False):
            for column, dash, kind in (("moe/drift", "solid", "measured"), ("moe/flip_pred", "dash", "predicted")):
                fig.add_trace(go.Scatter(
                    x=rows[across], y=rows[column], mode="lines+markers", name=f"{label}: {kind}", legendgroup=label,
                    line=dict(color=colors[label], dash=dash),
                    hovertemplate=f"{label} {kind}<br>{across} %{{x}}<br>%{{y:.4g}}<extra></extra>"))
        figures.append(_layout(fig, f"Drift {TITLES[across]}: measured vs predicted from router margins",
                               PANELS[across], "share of tokens rerouted"))
    return figures
