"""The stability map's static figures (analysis.evidence.stability): (a) reward change against the level dose
(the map's axis: each level's `mismatch/k3_kl` over its runs' first steps, analysis.evidence.dose), (b) the
share of failed seeds per sweep cell, (c) P(degraded or collapsed) against log dose with its logistic fit, (d) drift after one update against `train.router_lr_scale`, (e) the share of runs not yet
collapsed against step. Every function takes the rows of `analysis.evidence.stability.run_classes` and `ax=None`
(a new figure when None) and returns the axes; nothing here saves files."""

from __future__ import annotations

from collections.abc import Sequence

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns

from analysis.evidence.dose import DOSE_STEPS
from analysis.evidence.learning import HELD_OUT, TRAINING
from analysis.evidence.stability import (
    AXIS,
    COLLAPSED,
    DEGRADED,
    DRIFT_EXPERT,
    DRIFT_TOKEN,
    FLAT,
    KL_FLOOR,
    LEARNED,
    arm_fit,
    failed,
    kl_axis,
    on_kl_axis,
    survival,
    sweep_names,
)
from analysis.figures.style import axes, palette
from analysis.stats.logistic import LogisticFit

MAP_SIZE = (8.5, 4.4)  # a stability map panel's size, inches
MARKERS = {COLLAPSED: "X", DEGRADED: "v", LEARNED: "^", FLAT: "o"}
AXIS_TITLE = (f"level dose per token (median mismatch/k3_kl over the first {DOSE_STEPS} steps of every run at "
              "the level)")


def arms(classes: pd.DataFrame) -> list[str]:
    return [str(a) for a in dict.fromkeys(classes["arm"])]


def change_words(classes: pd.DataFrame) -> str:
    """What the y axis of (a) holds: the held-out or the training reward's change, or both."""
    kinds = set(classes["source"])
    if kinds == {HELD_OUT}:
        return "held-out reward change (last - first evaluation)"
    if kinds == {TRAINING}:
        return "training reward change (end window - start window)"
    return "reward change (held-out where the group was evaluated, else training)"


def off_axis_words(classes: pd.DataFrame) -> str:
    """How many runs the axis leaves out (no level dose above KL_FLOOR), or ""."""
    off = int((~on_kl_axis(classes)).sum())
    return f"; {off} run(s) without a level dose above {KL_FLOOR:g} left out" if off else ""


def cell_lines(placed: pd.DataFrame) -> pd.DataFrame:
    """Per sweep cell of one arm: its place on the axis (`at`, the level dose) and its runs' mean change,
    in dose order."""
    return placed.groupby("cell", sort=False).agg(at=(AXIS, "median"), change=("change", "mean")).sort_values("at")


def change_vs_kl(classes: pd.DataFrame, ax: plt.Axes | None = None) -> plt.Axes:
    """(a) Each run's reward change against its level's dose (log axis; the run's own median KL is the
    table's secondary view): a point per seed (marker: its class), a line per arm through its cells."""
    ax = axes(ax, MAP_SIZE)
    colors = palette(arms(classes))
    placed = kl_axis(classes)
    placed = placed[np.isfinite(placed["change"].to_numpy(dtype=float))]
    for arm, frame in placed.groupby("arm", sort=False):
        line = cell_lines(frame)
        ax.plot(line["at"], line["change"], color=colors[str(arm)], label=str(arm), linewidth=1.8)
        for outcome, runs in frame.groupby("outcome"):
            ax.scatter(runs[AXIS], runs["change"], color=colors[str(arm)], marker=MARKERS[str(outcome)], s=28,
                       alpha=0.8, edgecolor="#222", linewidth=0.4)
    for outcome, marker in MARKERS.items():
        ax.scatter([], [], marker=marker, color="#888", label=outcome)
    ax.axhline(0.0, color="#444", linewidth=0.8, linestyle=":")
    if len(placed):
        ax.set_xscale("log")
    ax.set_xlabel(AXIS_TITLE)
    ax.set_ylabel(change_words(classes))
    ax.set_title(f"Reward change against the level dose\n(points: seeds; lines: cell means){off_axis_words(classes)}",
                 fontsize=8)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    return ax


def _value(value: object) -> str:
    return format(value, "g") if isinstance(value, float | np.floating) else str(value)


def cell_grid(frame: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """One arm's sweep cells as a grid: (share of seeds degraded or collapsed, "k/n" text). Rows: the
    first swept field's values, columns: the others'; one row of cells with one swept field; one row of
    groups (suites) without a sweep."""
    frame = frame.assign(failed=failed(frame).to_numpy())
    names = sweep_names(frame)
    if len(names) >= 2:
        rows, cols = f"sweep/{names[0]}", [f"sweep/{n}" for n in names[1:]]
    elif names:
        frame = frame.assign(row=names[0])
        rows, cols = "row", [f"sweep/{names[0]}"]
    else:
        frame = frame.assign(row="")
        rows, cols = "row", ["cell"]
    share = frame.pivot_table(index=rows, columns=cols, values="failed", aggfunc="mean")
    fell = frame.pivot_table(index=rows, columns=cols, values="failed", aggfunc="sum")
    runs = frame.pivot_table(index=rows, columns=cols, values="failed", aggfunc="size")
    # a sweep whose grid is not full (a combination never run) leaves that cell empty, not "0/0"
    counts = fell.astype("Int64").astype(str) + "/" + runs.astype("Int64").astype(str)
    text = counts.where(runs.notna(), "").reindex_like(share)
    labels = [", ".join(f"{n}={_value(v)}" for n, v in zip(names[1:] if len(names) >= 2 else names,
                                                             c if isinstance(c, tuple) else (c,)))
              if names else str(c) for c in share.columns]
    share.columns = text.columns = labels
    if len(names) >= 2:
        share.index = text.index = [f"{names[0]}={_value(v)}" for v in share.index]
    return share, text


def cells(classes: pd.DataFrame, axes: Sequence[plt.Axes] | None = None) -> Sequence[plt.Axes]:
    """(b) Per arm, its sweep cells coloured by the share of seeds degraded or collapsed (text: k/n)."""
    names = arms(classes)
    if axes is None:
        _, grid = plt.subplots(len(names), 1, figsize=(7.0, 1.2 + 1.6 * len(names)), layout="constrained",
                               squeeze=False)
        axes = list(grid[:, 0])
    for arm, ax in zip(names, axes):
        share, text = cell_grid(classes[classes["arm"] == arm])
        sns.heatmap(share, ax=ax, vmin=0.0, vmax=1.0, cmap="Reds", annot=text.fillna("").to_numpy(), fmt="",
                    cbar_kws={"label": "share failed"}, linewidths=0.5, linecolor="#ddd")
        ax.set_title(f"{arm}: share of seeds degraded or collapsed", fontsize=9)
        ax.set_xlabel("")
        ax.set_ylabel("")
        ax.tick_params(axis="x", rotation=20, labelsize=7)
        ax.tick_params(axis="y", rotation=0, labelsize=7)
    return axes


def fit_label(arm: str, fit: LogisticFit | str) -> str:
    return f"{arm}: logistic fit" if isinstance(fit, LogisticFit) else f"{arm}: no fit ({fit})"


def collapse_probability(classes: pd.DataFrame, ax: plt.Axes | None = None) -> plt.Axes:
    """(c) Per arm: each run as 0 (held) or 1 (degraded or collapsed) against log10 of its level's dose (arms
    offset a little apart), the maximum-likelihood logistic curve with its 95% Wald band where the arm has a fit;
    the legend says why an arm has none."""
    ax = axes(ax, MAP_SIZE)
    names = arms(classes)
    colors = palette(names)
    for i, arm in enumerate(names):
        frame = classes[classes["arm"] == arm]
        placed, fit = kl_axis(frame), arm_fit(frame)
        offset = 0.03 * (i - (len(names) - 1) / 2)
        ax.scatter(placed[AXIS], placed["failed"].astype(float) + offset, color=colors[arm], s=22, alpha=0.8,
                   edgecolor="#222", linewidth=0.4)
        if isinstance(fit, LogisticFit):
            x = np.linspace(placed["log_kl"].min(), placed["log_kl"].max(), 200)
            p, low, high = fit.curve(x)
            ax.plot(10 ** x, p, color=colors[arm], label=fit_label(arm, fit))
            ax.fill_between(10 ** x, low, high, color=colors[arm], alpha=0.15, linewidth=0)
        else:
            ax.plot([], [], color=colors[arm], label=fit_label(arm, fit))
    if on_kl_axis(classes).any():
        ax.set_xscale("log")
    ax.set_ylim(-0.1, 1.1)
    ax.axhline(0.5, color="#444", linewidth=0.8, linestyle=":")
    ax.set_xlabel(AXIS_TITLE)
    ax.set_ylabel("P(degraded or collapsed)")
    ax.set_title("Degraded or collapsed against the level dose: runs (0/1),\na logistic fit in log10 dose with its "
                 "95% Wald band"
                 f"{off_axis_words(classes)}", fontsize=8)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    return ax


def drift_column(classes: pd.DataFrame) -> tuple[str, str]:
    """(column, words): drift after one update in activated-expert units where measured, else per
    token-layer routing."""
    if classes["drift_expert_1"].notna().any():
        return "drift_expert_1", f"experts changed after one update ({DRIFT_EXPERT}, median over steps)"
    return "drift_1", f"token-layer routings changed after one update ({DRIFT_TOKEN}, median over steps)"


def drift_vs_router_lr(classes: pd.DataFrame, ax: plt.Axes | None = None) -> plt.Axes:
    """(d) Drift after one update against `train.router_lr_scale`: a point per run, a line per arm through
    the mean at each scale."""
    ax = axes(ax, MAP_SIZE)
    column, words = drift_column(classes)
    colors = palette(arms(classes))
    measured = classes[classes[column].notna()]
    if measured.empty:
        ax.text(0.5, 0.5, "drift after one update not measured", ha="center", va="center", transform=ax.transAxes)
        return ax
    for arm, frame in measured.groupby("arm", sort=False):
        means = frame.groupby("router_lr_scale")[column].mean()
        ax.plot(means.index, means.to_numpy(), color=colors[str(arm)], label=str(arm), marker="o")
        ax.scatter(frame["router_lr_scale"], frame[column], color=colors[str(arm)], s=14, alpha=0.6)
    ax.set_xlabel("train.router_lr_scale (router lr / lr)")
    ax.set_ylabel(words)
    ax.set_title("Drift after one update against the router's learning-rate scale (points: runs)", fontsize=8)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    return ax


def survival_curves(classes: pd.DataFrame, ax: plt.Axes | None = None) -> plt.Axes:
    """(e) Per arm, the Kaplan-Meier share of runs not yet collapsed against step (runs that never
    collapsed censored at their last step)."""
    ax = axes(ax, MAP_SIZE)
    colors = palette(arms(classes))
    for arm, frame in classes.groupby("arm", sort=False):
        curve = survival(frame)
        last = max(float(curve["step"].max()), float(frame["last_step"].max()))
        ax.step([*curve["step"], last], [*curve["surviving"], curve["surviving"].iloc[-1]], where="post",
                color=colors[str(arm)], label=f"{arm} ({int((frame['outcome'] == COLLAPSED).sum())} of {len(frame)} "
                                              "collapsed)")
    ax.set_ylim(-0.02, 1.05)
    ax.set_xlabel("step")
    ax.set_ylabel("share of runs not yet collapsed")
    ax.set_title("Collapse over steps (Kaplan-Meier;\nruns that did not collapse censored at their last step)",
                 fontsize=8)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    return ax
