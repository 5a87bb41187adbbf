"""The sampler against the learner under rollout lag, static (matplotlib) and interactive (plotly): per arm,
the share of activated experts whose choice differs between sampler and learner, and the k3 of KL(mu || pi_old)
per response, against the lag, each run a point and the median over seeds a line; the GSPO paper's ~10% per
update drawn beside. Drawn from `analysis.evidence.lag.lag_runs`' rows."""

from __future__ import annotations

import textwrap

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import plotly.graph_objects as go

from analysis.evidence.lag import PAPER_ROUTE_SHARE
from analysis.evidence.lag_law import LawFit
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


def lag_lr_law(table: pd.DataFrame, fits: list[LawFit]) -> plt.Figure:
    """The lag x lr law, a panel per treatment: each cell of the grid (`analysis.evidence.lag_law.cells`) a
    square shaded by its failed share and labelled failed/runs (crossed where off the law), over lag (symlog:
    lag 0 is the off-law check) and lr (log); the fitted boundary (P = 0.5) over the fitted lags, and the
    constant-product line lag x lr = const through the boundary at the fit's geometric-mean lag."""
    figure, panels = plt.subplots(1, len(fits), figsize=(4.4 * len(fits), 4.6), layout="constrained",
                                  sharey=True, squeeze=False)
    for ax, fit in zip(panels[0], fits, strict=True):
        own = table[table["arm"] == fit.arm]
        shade = ax.scatter(own["lag"], own["lr"], c=own["failed"] / own["runs"], cmap="Reds", vmin=0, vmax=1,
                           marker="s", s=420, edgecolors="grey")
        for row in own.itertuples():
            ax.annotate(f"{row.failed}/{row.runs}" + (" x" if row.off_law else ""), (row.lag, row.lr),
                        ha="center", va="center", fontsize=7)
        if not fit.why:
            lags = np.geomspace(max(own.loc[own["lag"] > 0, "lag"].min(), 1), own["lag"].max(), 50)
            ax.plot(lags, fit.boundary_lr(lags), color="black",
                    label=f"fitted boundary, slope {fit.slope:.2g} [{fit.low:.2g}, {fit.high:.2g}]")
            middle = float(np.exp(np.mean(np.log(lags))))
            ax.plot(lags, fit.boundary_lr(np.array([middle]))[0] * middle / lags, color="grey", linestyle="--",
                    label="lag x lr = const (slope -1)")
            ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.16))
        else:
            ax.text(0.5, -0.2, "\n".join(textwrap.wrap(f"no fit: {fit.why}", 48)), transform=ax.transAxes,
                    fontsize=7, ha="center", va="top")
        ax.set_xscale("symlog", linthresh=1.0)
        ax.set_yscale("log")
        lags_run = sorted(own["lag"].unique())
        ax.set_xticks(lags_run, [f"{lag:g}" for lag in lags_run])
        rates = sorted(own["lr"].unique())
        ax.set_yticks(rates, [f"{lr:.2g}" for lr in rates])
        ax.set_ylim(rates[0] / 1.6, rates[-1] * 1.6)
        ax.minorticks_off()
        ax.set_xlabel("lag (updates)")
        ax.set_title(f"{fit.arm} ({fit.failed} of {fit.runs} fitted runs failed)", fontsize=9)
    panels[0][0].set_ylabel("learning rate")
    figure.colorbar(shade, ax=panels[0][-1], label="failed share of the cell's seeds")
    return figure
