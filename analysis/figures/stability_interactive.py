"""Interactive (plotly) versions of the stability map's figures (analysis.figures.stability), for
report.html: the same data, hover values per run (arm, seed, cell, class, step), a legend that toggles
each arm. Each function takes the rows of `analysis.evidence.stability.run_classes` and returns a list of
figures; nothing here writes files."""

from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from analysis.evidence.stability import AXIS, COLLAPSED, FAILED, arm_fit, kl_axis, survival
from analysis.figures.stability import (
    AXIS_TITLE,
    MARKERS,
    arms,
    cell_grid,
    cell_lines,
    change_words,
    drift_column,
    fit_label,
    off_axis_words,
)
from analysis.figures.style import fill, hex_colors, layout, log_switch
from analysis.stats.logistic import LogisticFit

SYMBOLS = {"X": "x", "v": "triangle-down", "^": "triangle-up", "o": "circle"}


def _runs(frame: pd.DataFrame, y: pd.Series, color: str, name: str, group: str) -> go.Scatter:
    """One marker per run at its level's dose, its class as the symbol, and what it is on hover (with the
    run's own median KL, the secondary view)."""
    text = [f"{r.arm} s{r.seed} at {r.cell}: {r.outcome}" + (f" at step {r.step:g}" if r.outcome in FAILED else "")
            + f"<br>run-median KL {r.kl:.3g} (not fitted)" for r in frame.itertuples()]
    return go.Scatter(x=frame[AXIS], y=y, mode="markers", name=name, legendgroup=group, text=text,
                      marker=dict(color=color, size=9, line=dict(color="#222", width=0.5),
                                  symbol=[SYMBOLS[MARKERS[o]] for o in frame["outcome"]]),
                      hovertemplate="%{text}<br>level dose %{x:.3g}<br>y %{y:.3g}<extra></extra>")


def change_vs_kl(classes: pd.DataFrame) -> list[go.Figure]:
    """(a) Reward change against the level dose, a line per arm through its cells, every seed a point."""
    fig, colors = go.Figure(), hex_colors(arms(classes))
    placed = kl_axis(classes)
    placed = placed[np.isfinite(placed["change"].to_numpy(dtype=float))]
    for arm, frame in placed.groupby("arm", sort=False):
        line = cell_lines(frame)
        fig.add_trace(go.Scatter(x=line["at"], y=line["change"], mode="lines", name=f"{arm} cell means",
                                 legendgroup=str(arm), legendgrouptitle_text=str(arm),
                                 line=dict(color=colors[str(arm)], width=2.5), text=list(line.index),
                                 hovertemplate=f"{arm} at %{{text}}<br>level dose %{{x:.3g}}<br>change %{{y:.3g}}<extra></extra>"))
        fig.add_trace(_runs(frame, frame["change"], colors[str(arm)], f"{arm} seeds", str(arm)))
    fig.update_xaxes(type="log")
    return [layout(fig, f"Reward change against the level dose{off_axis_words(classes)}", AXIS_TITLE,
                    change_words(classes))]


def cells(classes: pd.DataFrame) -> list[go.Figure]:
    """(b) Per arm, a heatmap of its sweep cells: the share of seeds degraded or collapsed (k/n on hover)."""
    figures = []
    for arm in arms(classes):
        share, text = cell_grid(classes[classes["arm"] == arm])
        fig = go.Figure(go.Heatmap(z=share.to_numpy(), x=list(share.columns), y=[str(i) for i in share.index],
                                   zmin=0.0, zmax=1.0, colorscale="Reds", text=text.fillna("").to_numpy(),
                                   texttemplate="%{text}", colorbar=dict(title="share failed"),
                                   hovertemplate="%{y} %{x}<br>%{text} degraded or collapsed<extra></extra>"))
        figures.append(layout(fig, f"{arm}: share of seeds degraded or collapsed per sweep cell", "", ""))
    return figures


def collapse_probability(classes: pd.DataFrame) -> list[go.Figure]:
    """(c) Runs as 0/1 against the level dose and the logistic fit with its 95% Wald band, per arm with a fit."""
    fig, colors = go.Figure(), hex_colors(arms(classes))
    for arm in arms(classes):
        frame = classes[classes["arm"] == arm]
        placed, fit = kl_axis(frame), arm_fit(frame)
        color = colors[arm]
        if isinstance(fit, LogisticFit):
            x = np.linspace(placed["log_kl"].min(), placed["log_kl"].max(), 200)
            p, low, high = fit.curve(x)
            fig.add_trace(go.Scatter(x=10 ** x, y=high, mode="lines", line=dict(width=0), legendgroup=arm,
                                     showlegend=False, hoverinfo="skip"))
            fig.add_trace(go.Scatter(x=10 ** x, y=low, mode="lines", line=dict(width=0), fill="tonexty",
                                     fillcolor=fill(color), legendgroup=arm, showlegend=False, hoverinfo="skip"))
            fig.add_trace(go.Scatter(x=10 ** x, y=p, mode="lines", line=dict(color=color, width=2.5),
                                     name=fit_label(arm, fit), legendgroup=arm, legendgrouptitle_text=arm,
                                     hovertemplate=f"{arm}<br>level dose %{{x:.3g}}<br>P %{{y:.3g}}<extra></extra>"))
        else:
            fig.add_trace(go.Scatter(x=[None], y=[None], mode="lines", line=dict(color=color),
                                     name=fit_label(arm, fit), legendgroup=arm, legendgrouptitle_text=arm))
        fig.add_trace(_runs(placed, placed["failed"].astype(float), color, f"{arm} runs", arm))
    fig.update_xaxes(type="log")
    return [layout(fig, f"P(degraded or collapsed) against the level dose, logistic fit in log10 dose, 95% Wald band"
                         f"{off_axis_words(classes)}", AXIS_TITLE, "P(degraded or collapsed)")]


def drift_vs_router_lr(classes: pd.DataFrame) -> list[go.Figure]:
    """(d) Drift after one update against train.router_lr_scale, per run and per arm's mean."""
    fig, colors = go.Figure(), hex_colors(arms(classes))
    column, words = drift_column(classes)
    for arm, frame in classes[classes[column].notna()].groupby("arm", sort=False):
        means = frame.groupby("router_lr_scale")[column].mean()
        fig.add_trace(go.Scatter(x=means.index, y=means.to_numpy(), mode="lines+markers", name=f"{arm} mean",
                                 legendgroup=str(arm), legendgrouptitle_text=str(arm),
                                 line=dict(color=colors[str(arm)], width=2.5)))
        fig.add_trace(go.Scatter(x=frame["router_lr_scale"], y=frame[column], mode="markers", name=f"{arm} runs",
                                 legendgroup=str(arm), marker=dict(color=colors[str(arm)], size=7, opacity=0.6),
                                 text=[f"{arm} s{s} at {c}" for s, c in zip(frame["seed"], frame["cell"])],
                                 hovertemplate="%{text}<br>scale %{x:.3g}<br>drift %{y:.3g}<extra></extra>"))
    return [log_switch(layout(fig, "Drift after one update against train.router_lr_scale",
                               "train.router_lr_scale (router lr / lr)", words), False)]


def survival_curves(classes: pd.DataFrame) -> list[go.Figure]:
    """(e) Kaplan-Meier share of runs not yet collapsed against step, per arm."""
    fig, colors = go.Figure(), hex_colors(arms(classes))
    for arm, frame in classes.groupby("arm", sort=False):
        curve = survival(frame)
        last = max(float(curve["step"].max()), float(frame["last_step"].max()))
        collapsed = int((frame["outcome"] == COLLAPSED).sum())
        fig.add_trace(go.Scatter(x=[*curve["step"], last], y=[*curve["surviving"], curve["surviving"].iloc[-1]],
                                 mode="lines", line=dict(color=colors[str(arm)], width=2.5, shape="hv"),
                                 name=f"{arm} ({collapsed} of {len(frame)} collapsed)",
                                 hovertemplate=f"{arm}<br>step %{{x}}<br>not collapsed %{{y:.3g}}<extra></extra>"))
    fig.update_yaxes(range=[-0.02, 1.05])
    return [layout(fig, "Collapse over steps (Kaplan-Meier; runs that did not collapse censored at their last step)",
                    "step", "share of runs not yet collapsed")]
