"""The figures' one look: axes, colours, bands and layout shared by the static (matplotlib) and the
interactive (plotly) figures, so that an objective has the same colour in both and every panel the
same frame. Nothing here draws data or saves files."""

from __future__ import annotations

import matplotlib.pyplot as plt
import pandas as pd
import plotly.graph_objects as go
import seaborn as sns
from matplotlib.colors import to_hex, to_rgba

SIZE = (6.0, 4.0)  # a static panel's size, inches


def axes(ax: plt.Axes | None, size: tuple[float, float] = SIZE) -> plt.Axes:
    """`ax`, or the axes of a new figure of `size` where it is None."""
    if ax is None:
        _, ax = plt.subplots(figsize=size, layout="constrained")
    return ax


def labels_of(frame: pd.DataFrame) -> list[str]:
    """The `label` values of `frame` in order of first appearance: the order of legends and colours."""
    return list(dict.fromkeys(frame["label"]))


def palette(labels: list[str]) -> dict[str, tuple]:
    """label -> its colour (seaborn's colorblind palette, in the order given)."""
    return dict(zip(labels, sns.color_palette("colorblind", n_colors=max(len(labels), 1))))


def hex_colors(labels: list[str]) -> dict[str, str]:
    """`palette` as hex strings, for plotly."""
    return {label: to_hex(rgb) for label, rgb in palette(labels).items()}


def fill(color: str) -> str:
    """`color` at 20% opacity: an interactive band's fill."""
    r, g, b, _ = to_rgba(color)
    return f"rgba({int(r * 255)},{int(g * 255)},{int(b * 255)},0.2)"


def log_switch(fig: go.Figure, log: bool) -> go.Figure:
    """Buttons that set the y axis linear or log; `log` chooses the one shown first."""
    fig.update_yaxes(type="log" if log else "linear")
    buttons = [dict(label=kind, method="relayout", args=[{"yaxis.type": kind}]) for kind in ("linear", "log")]
    fig.update_layout(updatemenus=[dict(type="buttons", direction="right", buttons=buttons, active=int(log),
                                        x=1.0, xanchor="right", y=1.12, yanchor="bottom", showactive=True)])
    return fig


def layout(fig: go.Figure, title: str, x_title: str, y_title: str) -> go.Figure:
    """An interactive panel's frame: title, axis titles, legend toggling each item, white template."""
    fig.update_layout(title=dict(text=title, x=0.01), xaxis_title=x_title, yaxis_title=y_title, height=420,
                      template="plotly_white", legend=dict(groupclick="toggleitem", traceorder="grouped"),
                      hovermode="closest",
                      margin=dict(t=70, r=20, b=50, l=60))
    return fig
