"""Interactive (plotly) versions of the report's figures, for report.html: hover values, a legend
that toggles each objective (its group title) and each seed (its own entry), and a linear / log
switch on the y axis. Each function returns a list of single-panel figures (one legend per panel);
nothing here writes files."""

from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from analysis.data.load import Results
from analysis.data.robust import robust_curves
from analysis.figures.curves import (
    COMPUTE,
    WEAK_GRADIENT,
    band,
    band_words,
    clip_by_length_table,
    curve_with_band,
    seed_means,
)
from analysis.figures.style import fill, hex_colors, labels_of, layout, log_switch
from analysis.stats.metrics import ema

X_TITLE = {COMPUTE: "training compute (FLOPs)", "step": "step"}


def _seed_traces(frame: pd.DataFrame, column: str, x: str, smooth: float | None, color: str, label: str,
                 dash: str) -> list[go.Scatter]:
    traces = []
    for seed, run in frame.groupby("seed"):
        run = run.sort_values("step")
        run = run[run[column].notna()]
        if run.empty:
            continue
        y = ema(run[column].to_numpy(), smooth) if smooth else run[column].to_numpy()
        traces.append(go.Scatter(
            x=run[x].to_numpy(), y=y, mode="lines", name=f"{label} s{seed}", legendgroup=label, visible="legendonly",
            line=dict(color=color, width=1, dash=dash), opacity=0.45, customdata=run["step"].to_numpy(),
            hovertemplate=f"{label} seed {seed}<br>step %{{customdata}}<br>x %{{x:.4g}}<br>y %{{y:.4g}}<extra></extra>"))
    return traces


def add_curves(fig: go.Figure, metrics: pd.DataFrame, column: str, x: str = COMPUTE, smooth: float | None = 0.2,
               suffix: str = "", dash: str = "solid", curves: pd.DataFrame | None = None,
               center: str = "mean") -> go.Figure:
    """Per objective label: the mean over seeds with its band (analysis.figures.curves.band), and every seed's
    curve (in the legend, hidden until clicked: the first view is the PNG's). `curves`: the central line
    and band to draw instead (columns label, x, mean, low, high), `center` what its line is over seeds."""
    colors = hex_colors(labels_of(metrics))
    lines = curve_with_band(metrics, column, x=x, smooth=smooth) if curves is None else curves
    for label, frame in metrics.groupby("label", sort=False):
        d = lines[lines["label"] == label] if len(lines) else lines
        if d.empty:
            continue
        group, color = f"{label}{suffix}", colors[str(label)]
        fig.add_trace(go.Scatter(x=d["x"], y=d["high"], mode="lines", line=dict(width=0), legendgroup=group,
                                 showlegend=False, hoverinfo="skip"))
        fig.add_trace(go.Scatter(x=d["x"], y=d["low"], mode="lines", line=dict(width=0), fill="tonexty",
                                 fillcolor=fill(color), legendgroup=group, showlegend=False, hoverinfo="skip"))
        fig.add_trace(go.Scatter(
            x=d["x"], y=d["mean"], mode="lines", name=f"{label}{suffix} {center}", legendgroup=group,
            legendgrouptitle_text=f"{label}{suffix}", line=dict(color=color, width=2.5, dash=dash),
            customdata=np.stack([d["low"], d["high"]], axis=-1),
            hovertemplate=f"{label}{suffix} {center} over seeds<br>x %{{x:.4g}}<br>y %{{y:.4g}} "
                          "[%{customdata[0]:.4g}, %{customdata[1]:.4g}]<extra></extra>"))
        for trace in _seed_traces(frame, column, x, smooth, color, f"{label}{suffix}", dash):
            fig.add_trace(trace)
    return fig


def curves(metrics: pd.DataFrame, column: str, title: str, y_title: str, x: str = COMPUTE,
           smooth: float | None = 0.2, log: bool = False) -> go.Figure:
    fig = add_curves(go.Figure(), metrics, column, x=x, smooth=smooth)
    return log_switch(layout(fig, title, X_TITLE[x], y_title), log)


def reward_vs_compute(results: Results) -> list[go.Figure]:
    """Figure 1: training reward vs compute; with held-out evaluations, one figure per eval task."""
    figures = [curves(results.metrics, "reward/mean",
                      f"Training reward vs compute (EMA, mean over seeds; {band_words(results.metrics)})",
                      "training reward")]
    colors = hex_colors(labels_of(results.metrics))
    for task, frame in results.evals.groupby("task", sort=False) if len(results.evals) else []:
        fig = go.Figure()
        for label, runs in frame.groupby("label", sort=False):
            agg = runs.groupby("step").agg(x=(COMPUTE, "mean"), score=("score", "mean")).reset_index()
            fig.add_trace(go.Scatter(x=agg["x"], y=agg["score"], mode="lines+markers", name=label,
                                     line=dict(color=colors.get(str(label))), customdata=agg["step"],
                                     hovertemplate=f"{label}<br>step %{{customdata}}<br>score %{{y:.4g}}<extra></extra>"))
        figures.append(log_switch(layout(fig, f"Eval: {task} (mean over seeds)", X_TITLE[COMPUTE],
                                          "held-out score (avg Pass@1)"), False))
    return figures


def reward_by_point(results: Results) -> list[go.Figure]:
    """Training reward vs compute at each sweep point, one line per arm."""
    m = results.metrics
    return [curves(m[m["facet"] == facet].assign(label=lambda f: f["arm"]), "reward/mean",
                   f"Training reward vs compute: {facet or '(no sweep)'}", "training reward")
            for facet in dict.fromkeys(m["facet"])]


def clip_fraction(results: Results) -> list[go.Figure]:
    """Figure 2: clipped-token fraction per objective (mean over steps, then seeds, with the band of
    analysis.figures.curves.band) and each seed."""
    m, fig, rng = results.metrics, go.Figure(), np.random.default_rng(0)
    colors = hex_colors(labels_of(m))
    missing = [label for label in labels_of(m) if label not in seed_means(m, "clip/frac")]
    for label, frame in m.groupby("label", sort=False):
        per_seed = frame.groupby("seed")["clip/frac"].mean().dropna()
        if per_seed.empty:  # named in the title
            continue
        (low,), (high,) = band(per_seed.to_numpy()[:, None], rng)
        value = per_seed.mean()
        fig.add_trace(go.Bar(x=[label], y=[value], name=f"{label} mean", legendgroup=label, legendgrouptitle_text=label,
                             marker_color=colors[str(label)], error_y=dict(type="data", symmetric=False,
                                                                      array=[high - value], arrayminus=[value - low]),
                             hovertemplate=f"{label}: %{{y:.4g}} [{low:.4g}, {high:.4g}]<extra></extra>"))
        for seed, v in per_seed.items():
            fig.add_trace(go.Scatter(x=[label], y=[v], mode="markers", name=f"{label} s{seed}", legendgroup=label,
                                     marker=dict(color="#222", size=6, symbol="circle-open"),
                                     hovertemplate=f"{label} seed {seed}: %{{y:.4g}}<extra></extra>"))
        if WEAK_GRADIENT in frame.columns:
            weak = frame.groupby("seed")[WEAK_GRADIENT].mean().dropna()
            if not weak.empty:
                fig.add_trace(go.Bar(x=[label], y=[weak.mean()], name=f"{label} gradient < 1/2", legendgroup=label,
                                     marker=dict(color=colors[str(label)], opacity=0.5, pattern_shape="/"),
                                     hovertemplate=(f"{label}: share of tokens with an advantage whose gradient is "
                                                    f"under half the plain one %{{y:.4g}} ({len(weak)} seeds)"
                                                    "<extra></extra>")))
    if WEAK_GRADIENT in m.columns:
        fig.update_layout(barmode="group")
    title = f"Clipped token fraction (Figure 2; {band_words(m)})" + (
        ": no run logged clip/frac" if len(missing) == len(labels_of(m)) else
        f"; not logged by {', '.join(missing)}" if missing else "")
    return [log_switch(layout(fig, title, "objective", "clipped token fraction"), True)]


def replay(results: Results) -> list[go.Figure]:
    """Figure 3: GRPO with and without Routing Replay."""
    grpo = results.metrics[results.metrics["objective"] == "grpo"]
    title = "GRPO with / without Routing Replay (Figure 3)"
    if grpo.empty:
        return [layout(go.Figure(), title + ": no GRPO runs in these results", X_TITLE[COMPUTE], "training reward")]
    return [curves(grpo, "reward/mean", title, "training reward")]


def ratio_variance(results: Results, window: int = 5) -> list[go.Figure]:
    """Token (solid) and sequence (dashed) importance-ratio variance per step: the median over seeds of
    a rolling median, the band the range over seeds (as the PNG); each seed's raw values in the legend."""
    m = results.metrics
    fig = add_curves(go.Figure(), m, "ratio/token_var", x="step", smooth=None, suffix=" token",
                     curves=robust_curves(m, "ratio/token_var", window), center="median")
    add_curves(fig, m, "ratio/seq_var", x="step", smooth=None, suffix=" seq", dash="dash",
               curves=robust_curves(m, "ratio/seq_var", window), center="median")
    return [log_switch(layout(fig, f"Importance-ratio variance, token (solid) vs sequence (dashed): median over seeds "
                                    f"of a {window}-step rolling median; band: range over seeds", "step",
                               "importance-ratio variance"), True)]


def drift(results: Results) -> list[go.Figure]:
    """Drift over a step's minibatch forwards, and after exactly one update (dashed) where measured."""
    m = results.metrics
    fig = add_curves(go.Figure(), m, "moe/drift", x="step", smooth=0.3)
    if "moe/drift_1" in m and m["moe/drift_1"].notna().any():
        add_curves(fig, m, "moe/drift_1", x="step", smooth=0.3, suffix=", after one update", dash="dash")
    return [log_switch(layout(fig, f"Expert-activation drift per step ({band_words(m)})", "step",
                               "token-layer drift (moe/drift; dashed: moe/drift_1)"), False)]


def clip_by_length(results: Results) -> list[go.Figure]:
    table, fig = clip_by_length_table(results.metrics), go.Figure()
    colors = hex_colors(labels_of(results.metrics))
    for label, rows in table.groupby("label", sort=False):
        fig.add_trace(go.Bar(x=rows["bucket"], y=rows["clip_frac"], name=label, marker_color=colors[str(label)],
                             customdata=rows["tokens"],
                             hovertemplate=f"{label}<br>length %{{x}}<br>clipped %{{y:.4g}} of %{{customdata:.0f}} "
                                           "tokens<extra></extra>"))
    fig.update_layout(barmode="group")
    return [log_switch(layout(fig, "Clipping by response length", "response length (tokens)",
                               "clipped token fraction"), bool((table["clip_frac"] > 0).any()))]


def kl_entropy(results: Results) -> list[go.Figure]:
    m = results.metrics
    return [curves(m, "kl/old_new", "KL between old and new policy", "KL(old || new), k3", x="step", smooth=0.3,
                   log=True),
            curves(m, "entropy/mean", "Policy entropy", "entropy (nats / token)", x="step", smooth=0.3)]


def drift_heatmap(results: Results, label: str) -> list[go.Figure]:
    """Layer x step drift of one objective (mean over seeds)."""
    data = results.layers[results.layers["label"] == label]
    grid = data.pivot_table(index="layer", columns="step", values="moe/drift", aggfunc="mean")
    fig = go.Figure(go.Heatmap(z=grid.to_numpy(), x=grid.columns, y=grid.index, colorscale="Viridis",
                               colorbar=dict(title="drift"),
                               hovertemplate="step %{x}<br>layer %{y}<br>drift %{z:.4g}<extra></extra>"))
    return [layout(fig, f"Drift by layer and step: {label}", "step", "layer")]


def forest(rows: pd.DataFrame) -> list[go.Figure]:
    """The forest plot (analysis.figures.curves.forest): per comparison the mean difference with its 95%
    t-interval, every seed's difference with its seed on hover, and the Holm-adjusted p at the right."""
    fig = go.Figure()
    names = list(rows["comparison"])
    for i, row in enumerate(rows.to_dict("records")):
        name, holm_p = str(row["comparison"]), str(row["holm"])
        mean, low, high = float(row["mean"]), float(row["low"]), float(row["high"])
        seeds, differences = list(row["seeds"]), np.asarray(row["differences"], dtype=float)
        fig.add_trace(go.Scatter(
            x=differences, y=[name] * len(differences), mode="markers", name="per-seed difference",
            legendgroup="seeds", showlegend=i == 0, marker=dict(color="#888", size=7), customdata=seeds,
            hovertemplate=f"{name}<br>seed %{{customdata}}: %{{x:+.4g}}<extra></extra>"))
        if np.isfinite(mean):
            below, above = (mean - low, high - mean) if np.isfinite(low) else (0.0, 0.0)
            fig.add_trace(go.Scatter(
                x=[mean], y=[name], mode="markers", name="mean, 95% t-interval", legendgroup="mean",
                showlegend=i == 0, marker=dict(color="#1f77b4", size=11),
                error_x=dict(type="data", symmetric=False, array=[above], arrayminus=[below], thickness=3),
                hovertemplate=(f"{name}<br>mean %{{x:+.4g}} [{low:+.4g}, {high:+.4g}]<br>"
                               f"Holm p = {holm_p}<extra></extra>")))
        fig.add_annotation(x=1.0, xref="paper", xanchor="left", y=name, text=f"Holm p = {holm_p}",
                           showarrow=False, font=dict(size=11))
    fig.add_vline(x=0.0, line=dict(color="#555", dash="dash", width=1))
    fig.update_yaxes(categoryorder="array", categoryarray=names[::-1], type="category")
    layout(fig, "Primary comparisons: mean difference, 95% t-interval, per-seed differences",
            "final reward, first minus second (paired by seed)", "")
    fig.update_layout(height=200 + 45 * max(len(names), 1), margin=dict(t=70, r=120, b=50, l=160))
    return [fig]
