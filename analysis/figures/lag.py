"""The sampler against the learner under rollout lag, static (matplotlib) and interactive (plotly): per arm,
the share of activated experts whose choice differs between sampler and learner, and the k3 of KL(mu || pi_old)
per response, against the lag, each run a point and the median over seeds a line; the GSPO paper's ~10% per
update drawn beside. Drawn from `analysis.evidence.lag.lag_runs`' rows."""

from __future__ import annotations

import matplotlib.pyplot as plt
import pandas as pd
import plotly.graph_objects as go

from analysis.evidence.lag import PAPER_ROUTE_SHARE
from analysis.figures.style import hex_colors, layout, palette

PANELS = (("route_diff", "experts apart, sampler vs learner (lag/route_diff)"),
          ("k3_response", "k3 of KL(mu || pi_old) per response (lag/k3_response)"))
PAPER_LABEL = f"GSPO paper: ~{PAPER_ROUTE_SHARE:.0%} of experts change per update"


def arms_of(runs: pd.DataFrame) -> list[str]:
    return list(dict.fromkeys(runs["arm"]))


def lag_routes(runs: pd.DataFrame) -> plt.Figure:
    """Two panels side by side: experts apart (linear, the paper's share dashed) and k3 per response (log),
    against the lag (symmetric log: lag 0 is the synchronous control)."""
    figure, panels = plt.subplots(1, 2, figsize=(10.0, 4.0), layout="constrained")
    colors = palette(arms_of(runs))
    for ax, (column, title) in zip(panels, PANELS, strict=True):
        for arm, rows in runs.groupby("arm", sort=False):
            ax.scatter(rows["lag"], rows[column], s=12, alpha=0.5, color=colors[str(arm)])
            median = rows.groupby("lag")[column].median()
            ax.plot(median.index, median.to_numpy(), marker="o", color=colors[str(arm)], label=str(arm))
        ax.set_xscale("symlog", linthresh=1.0)
        lags = sorted(runs["lag"].unique())
        ax.set_xticks(lags, [f"{lag:g}" for lag in lags])
        ax.minorticks_off()
        ax.set_xlabel("lag (updates between sampler and learner)")
        ax.set_title(title, fontsize=9)
    panels[0].axhline(PAPER_ROUTE_SHARE, color="grey", linestyle="--", label=PAPER_LABEL)
    panels[0].set_ylabel("share of activated experts")
    panels[1].set_yscale("log")
    panels[1].set_ylabel("k3 summed over a response")
    panels[0].legend(fontsize=7)
    return figure


def lag_routes_interactive(runs: pd.DataFrame) -> list[go.Figure]:
    """The two panels as plotly figures, each run's point hovering its seed."""
    colors, figures = hex_colors(arms_of(runs)), []
    for column, title in PANELS:
        fig = go.Figure()
        for arm, rows in runs.groupby("arm", sort=False):
            median = rows.groupby("lag")[column].median()
            fig.add_trace(go.Scatter(x=median.index, y=median.to_numpy(), mode="lines+markers", name=str(arm),
                                     legendgroup=str(arm), line=dict(color=colors[str(arm)])))
            fig.add_trace(go.Scatter(x=rows["lag"], y=rows[column], mode="markers", name=f"{arm}, runs",
                                     legendgroup=str(arm), showlegend=False, opacity=0.5,
                                     marker=dict(color=colors[str(arm)], size=6), customdata=rows["seed"],
                                     hovertemplate=f"{arm}<br>lag %{{x}}, seed %{{customdata}}<br>%{{y:.4g}}"
                                                   "<extra></extra>"))
        if column == "route_diff":
            fig.add_hline(y=PAPER_ROUTE_SHARE, line_dash="dash", line_color="grey", annotation_text=PAPER_LABEL)
        layout(fig, title, "lag (updates between sampler and learner)", column.replace("_", " "))
        fig.update_xaxes(type="log" if (runs["lag"] > 0).all() else "linear")
        if column == "k3_response":
            fig.update_yaxes(type="log")
        figures.append(fig)
    return figures
