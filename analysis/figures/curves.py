"""Paper-style figures from tidy results. Every function takes `ax=None` (a new figure when None)
and returns the axes; nothing here saves files (the report and figures commands do).

Bands around a mean over seeds are the range over seeds (min to max) below MIN_BOOTSTRAP_SEEDS seeds
and a 95% bootstrap interval from there on (`band_words` says which, in every title); heavy-tailed
per-step columns (ratio variances) are drawn as medians over seeds of a rolling median, on a log scale
(analysis.data.robust), so that one token in one step does not draw the curve."""

from __future__ import annotations

import re
from collections.abc import Sequence

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns

from analysis.data.robust import robust_curves
from analysis.figures.style import axes, labels_of, palette
from analysis.stats.library import MIN_BOOTSTRAP_SEEDS, bootstrap_ci
from analysis.stats.metrics import ema

COMPUTE = "compute/cum_flops"



def band_words(metrics: pd.DataFrame) -> str:
    """What the bands of a figure of `metrics` show: the range over seeds, or a 95% bootstrap interval
    where every label has MIN_BOOTSTRAP_SEEDS seeds."""
    seeds = metrics.groupby("label")["seed"].nunique() if len(metrics) else pd.Series(dtype=int)
    enough = len(seeds) and seeds.min() >= MIN_BOOTSTRAP_SEEDS
    return "band: 95% bootstrap CI over seeds" if enough else "band: range over seeds"


def band(ys: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """[seeds, points] -> (low, high) per point: min and max below MIN_BOOTSTRAP_SEEDS seeds, else the
    95% bootstrap interval of the mean (the same resampled seeds at every point)."""
    if len(ys) < MIN_BOOTSTRAP_SEEDS:
        return ys.min(axis=0), ys.max(axis=0)
    return bootstrap_ci(ys, rng, reps=500)


def curve_with_band(metrics: pd.DataFrame, column: str, x: str = COMPUTE, smooth: float | None = 0.2,
                    points: int = 100, rng: np.random.Generator | None = None) -> pd.DataFrame:
    """Per label: mean over seeds of `column` (EMA-smoothed per run) on a common x grid, with a band
    over seeds (`band`). Columns: label, x, mean, low, high."""
    rng = rng or np.random.default_rng(0)
    rows = []
    for label, frame in metrics.groupby("label", sort=False):
        runs = [f.sort_values("step") for _, f in frame.groupby("seed")]
        runs = [r for r in runs if r[column].notna().any()]
        if not runs:
            continue
        end = min(r[x].iloc[-1] for r in runs)
        start = max(r[x].iloc[0] for r in runs)
        grid = np.linspace(start, end, points) if end > start else np.array([end])
        ys = []
        for r in runs:
            r = r[r[column].notna()]
            y = ema(r[column].to_numpy(), smooth) if smooth else r[column].to_numpy()
            ys.append(np.interp(grid, r[x].to_numpy(), y))
        seed_curves = np.array(ys)  # [seeds, points]
        low, high = band(seed_curves, rng)
        rows += [{"label": label, "x": g, "mean": m, "low": lo, "high": hi}
                 for g, m, lo, hi in zip(grid, seed_curves.mean(axis=0), low, high)]
    return pd.DataFrame(rows, columns=["label", "x", "mean", "low", "high"])  # none where no run measured `column`


def curves(metrics: pd.DataFrame, column: str, ax: plt.Axes | None = None, x: str = COMPUTE, smooth: float | None = 0.2,
                labels: list[str] | None = None, ylabel: str | None = None, log: bool = False,
                linestyle: str = "-") -> plt.Axes:
    ax = axes(ax)
    labels = labels or labels_of(metrics)
    colors = palette(labels_of(metrics))
    data = curve_with_band(metrics[metrics["label"].isin(labels)], column, x=x, smooth=smooth)
    for label in labels:
        d = data[data["label"] == label]
        if d.empty:
            continue
        ax.plot(d["x"], d["mean"], label=label, color=colors[label], linestyle=linestyle)
        ax.fill_between(d["x"], d["low"], d["high"], color=colors[label], alpha=0.2, linewidth=0)
    ax.set_xlabel("training compute (FLOPs)" if x == COMPUTE else x)
    ax.set_ylabel(ylabel or column)
    if log:
        ax.set_yscale("log")
    ax.grid(alpha=0.3)
    return ax


def reward_vs_compute(metrics: pd.DataFrame, ax: plt.Axes | None = None,
                           evals: pd.DataFrame | None = None) -> plt.Axes:
    """Figure 1: training reward against training compute, one line per objective, 95% CI band over
    seeds. With held-out evaluations, a second panel per eval task: score vs compute (mean over seeds)."""
    tasks = list(dict.fromkeys(evals["task"])) if evals is not None and len(evals) else []
    if ax is None:
        _, axes = plt.subplots(1, 1 + len(tasks), figsize=(6.0 * (1 + len(tasks)), 4.0), layout="constrained",
                               squeeze=False)
        ax, eval_axes = axes[0][0], list(axes[0][1:])
    else:
        eval_axes = []
    ax = curves(metrics, "reward/mean", ax=ax, ylabel="training reward")
    ax.set_title(f"Training reward vs compute (mean over seeds; {band_words(metrics)})", fontsize=9)
    ax.legend(fontsize=8)
    colors = palette(labels_of(metrics))
    for task, eval_ax in zip(tasks, eval_axes):
        frame = evals[evals["task"] == task] if evals is not None else evals  # (tasks come from evals)
        if frame is None:
            continue
        for label, runs in frame.groupby("label", sort=False):
            agg = runs.groupby("step").agg(x=(COMPUTE, "mean"), score=("score", "mean")).reset_index()
            eval_ax.plot(agg["x"], agg["score"], marker="o", color=colors.get(str(label)), label=label)
        eval_ax.set_xlabel("training compute (FLOPs)")
        eval_ax.set_ylabel("held-out score (avg Pass@1)")
        eval_ax.set_title(f"Eval: {task}")
        eval_ax.grid(alpha=0.3)
        eval_ax.legend(fontsize=8)
    return ax


def reward_by_point(metrics: pd.DataFrame, axes: list[plt.Axes] | None = None) -> list[plt.Axes]:
    """Training reward vs compute, one panel per sweep point (facet), one line per arm with a
    95% CI band over seeds. Returns the axes, one per facet."""
    facets = list(dict.fromkeys(metrics["facet"]))
    if axes is None:
        cols = min(3, len(facets))
        rows = -(-len(facets) // cols)
        _, grid = plt.subplots(rows, cols, figsize=(5.0 * cols, 3.6 * rows), layout="constrained", squeeze=False,
                               sharey=True)
        axes = list(grid.ravel())
    for ax in axes[len(facets):]:
        ax.set_visible(False)
    for facet, ax in zip(facets, axes):
        frame = metrics[metrics["facet"] == facet].assign(label=lambda f: f["arm"])
        curves(frame, "reward/mean", ax=ax, ylabel="training reward")
        ax.set_title(facet or "(no sweep)", fontsize=9)
        ax.legend(fontsize=7)
    return axes


def logged(metrics: pd.DataFrame, columns: Sequence[str]) -> bool:
    """Whether any row of `metrics` holds a value of any of `columns` (a figure of none would be empty:
    the report leaves it out and says so, analysis.report.figure_table)."""
    present = [c for c in columns if c in metrics.columns]
    return bool(present) and bool(metrics[present].notna().to_numpy().any())


def seed_means(metrics: pd.DataFrame, column: str) -> dict[str, np.ndarray]:
    """Per label (in order), each seed's mean over steps of `column`, the seeds that logged it only; a label
    none of whose seeds logged it is left out."""
    found = {}
    for label in labels_of(metrics):
        per_seed = metrics[metrics["label"] == label].groupby("seed")[column].mean().dropna().to_numpy()
        if len(per_seed):
            found[label] = per_seed
    return found


def no_data(ax: plt.Axes, column: str) -> plt.Axes:
    """`ax` saying that no run logged `column` (no axis drawn)."""
    ax.text(0.5, 0.5, f"no run logged {column}", ha="center", va="center", transform=ax.transAxes)
    ax.set_axis_off()
    return ax


WEAK_GRADIENT = "clip/grad_weak_frac"


def clip_fraction(metrics: pd.DataFrame, ax: plt.Axes | None = None) -> plt.Axes:
    """Figure 2: fraction of clipped tokens per objective: the mean over seeds of each seed's mean over
    steps (bar), every seed (dots) and the band (`band`), log scale; where runs logged it, beside it the
    share one measure counts as cut for every family (`clip/grad_weak_frac`, `weak_bars`). Objectives that
    never logged it are named in the title, not drawn; with none that did, the axes say so."""
    ax = axes(ax)
    colors = palette(labels_of(metrics))
    found = seed_means(metrics, "clip/frac")
    if not found:
        return no_data(ax, "clip/frac")
    labels, seeds = list(found), list(found.values())
    rng = np.random.default_rng(0)
    values, errs = [], []
    for per_seed in seeds:
        low, high = band(per_seed[:, None], rng)
        values.append(per_seed.mean())
        errs.append((per_seed.mean() - low[0], high[0] - per_seed.mean()))
    weak = seed_means(metrics, WEAK_GRADIENT) if WEAK_GRADIENT in metrics.columns else {}
    floor = min([v for v in values if v > 0] + [w.mean() for w in weak.values() if w.mean() > 0], default=1e-6) / 10
    shown = [max(v, floor) for v in values]
    offset = 0.2 if weak else 0.0  # with the gradient-weight share, each objective's two bars side by side
    where = np.arange(len(labels)) - offset
    if weak:
        ax.bar(where, shown, width=0.4, color=[colors[lbl] for lbl in labels], yerr=np.array(errs).T, capsize=3,
               label="clip/frac (the family's own cut)")
        ax.set_xticks(np.arange(len(labels)), labels)
    else:
        ax.bar(labels, shown, color=[colors[lbl] for lbl in labels], yerr=np.array(errs).T, capsize=3)
    for i, (v, per_seed) in enumerate(zip(values, seeds)):
        ax.scatter([where[i]] * len(per_seed), np.maximum(per_seed, floor), color="#222", s=10, zorder=3)
        ax.annotate(f"{v:.2g}", (where[i], shown[i]), ha="center", va="bottom", fontsize=8,
                    xytext=(0, 3), textcoords="offset points")
    tops = list(shown)
    if weak:
        tops += weak_bars(ax, labels, weak, floor, colors)
    ax.set_yscale("log")
    ax.set_ylim(top=max(tops) * 4)  # room for the value labels under the title
    ax.set_ylabel("clipped token fraction")
    missing = [label for label in labels_of(metrics) if label not in found]
    ax.set_title(f"Clipping fraction (dots: seeds; {band_words(metrics)})"
                 + (f"\nnot logged by {', '.join(missing)}" if missing else ""), fontsize=9)
    ax.tick_params(axis="x", rotation=20)
    return ax


def weak_bars(ax: plt.Axes, labels: list[str], weak: dict[str, np.ndarray], floor: float,
              colors: dict[str, tuple]) -> list[float]:
    """Figure 2's second bar per objective: `clip/grad_weak_frac`, the share of tokens with an advantage whose
    gradient is under half the plain policy gradient's (one measure for hard clips, masks and soft gates
    alike), hatched, right of the objective's own `clip/frac`; its seeds as open dots. Returns the heights."""
    heights: list[float] = []
    for i, label in enumerate(labels):
        if label not in weak:
            continue
        per_seed = weak[label]
        height = max(float(per_seed.mean()), floor)
        ax.bar([i + 0.2], [height], width=0.4, color=colors[label], alpha=0.45, hatch="//", edgecolor="#222",
               label=("clip/grad_weak_frac (gradient < 1/2 of the plain one)" if not heights else None))
        ax.scatter([i + 0.2] * len(per_seed), np.maximum(per_seed, floor), facecolors="none", edgecolors="#222",
                   s=10, zorder=3)
        ax.annotate(f"{per_seed.mean():.2g}", (i + 0.2, height), ha="center", va="bottom", fontsize=8,
                    xytext=(0, 3), textcoords="offset points")
        heights.append(height)
    ax.legend(fontsize=7, loc="upper left")
    return heights


def replay(metrics: pd.DataFrame, ax: plt.Axes | None = None) -> plt.Axes:
    """Figure 3: GRPO with and without Routing Replay: training reward vs compute."""
    ax = axes(ax)
    grpo = metrics[metrics["objective"] == "grpo"]
    if grpo.empty:
        ax.text(0.5, 0.5, "no GRPO runs in these results", ha="center", va="center", transform=ax.transAxes)
        return ax
    ax = curves(grpo, "reward/mean", ax=ax, ylabel="training reward")
    ax.set_title("GRPO with / without Routing Replay")
    ax.legend(fontsize=8)
    return ax


def ratio_variance(metrics: pd.DataFrame, ax: plt.Axes | None = None, window: int = 5) -> plt.Axes:
    """Token (solid) and sequence (dashed) importance-ratio variance over steps, log scale: the median
    over seeds of each seed's trailing `window`-step median (analysis.data.robust.robust_curves), the band
    the range over seeds. One token in one step moves a mean over steps, not this."""
    ax = axes(ax)
    colors = palette(labels_of(metrics))
    for column, style, kind in (("ratio/token_var", "-", "token"), ("ratio/seq_var", "--", "seq")):
        data = robust_curves(metrics, column, window)
        for label, d in data.groupby("label", sort=False):
            ax.plot(d["x"], d["mean"], linestyle=style, color=colors[str(label)], label=f"{label} {kind}")
            ax.fill_between(d["x"], d["low"], d["high"], color=colors[str(label)], alpha=0.15, linewidth=0)
    ax.set_yscale("log")
    ax.set_xlabel("step")
    ax.set_ylabel("importance-ratio variance")
    ax.set_title(f"Ratio variance, token (solid) vs sequence (dashed)\nmedian over seeds of {window}-step rolling "
                 "medians; band: range over seeds", fontsize=8)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    return ax


def drift(metrics: pd.DataFrame, ax: plt.Axes | None = None) -> plt.Axes:
    """Expert-activation drift (fraction of (token, layer) routings changed vs the old policy) over a
    step's minibatch forwards (solid) and, where measured, after exactly one update (`moe/drift_1`,
    dashed: the paper's "per update")."""
    ax = curves(metrics, "moe/drift", ax=ax, x="step", smooth=0.3, ylabel="expert drift (moe/drift)")
    if "moe/drift_1" in metrics and metrics["moe/drift_1"].notna().any():
        n = len(ax.get_lines())
        curves(metrics, "moe/drift_1", ax=ax, x="step", smooth=0.3, linestyle="--",
                    ylabel="token-layer drift: all updates (solid), after one update (dashed)")
        for line in ax.get_lines()[n:]:
            line.set_label(f"{line.get_label()}, after one update")
    ax.set_title(f"Expert-activation drift per step ({band_words(metrics)})", fontsize=9)
    ax.legend(fontsize=8)
    return ax


def drift_heatmap(layers: pd.DataFrame, label: str, ax: plt.Axes | None = None) -> plt.Axes:
    """Layer x step heatmap of drift for one objective (mean over seeds)."""
    ax = axes(ax, size=(7.0, 3.5))
    data = layers[layers["label"] == label]
    if data.empty:
        ax.text(0.5, 0.5, f"no per-layer drift for {label}", ha="center", va="center", transform=ax.transAxes)
        return ax
    grid = data.pivot_table(index="layer", columns="step", values="moe/drift", aggfunc="mean")
    sns.heatmap(grid, ax=ax, cmap="viridis", cbar_kws={"label": "drift"}, xticklabels=max(1, grid.shape[1] // 10))
    ax.invert_yaxis()
    ax.set_title(f"Drift by layer and step: {label}")
    return ax


_BUCKET = re.compile(r"^count/tokens_len(\d+)-(\d+)$")


def clip_by_length_table(metrics: pd.DataFrame) -> pd.DataFrame:
    """Clip fraction per objective and response-length bucket (summed counts over steps and seeds)."""
    rows = []
    for column in metrics.columns:
        match = _BUCKET.match(column)
        if not match:
            continue
        lo, hi = int(match[1]), int(match[2])
        clipped = column.replace("count/tokens_", "count/clipped_")
        for label, frame in metrics.groupby("label", sort=False):
            tokens = frame[column].fillna(0).sum()
            if tokens > 0:
                rows.append({"label": label, "bucket": f"{lo}-{hi}", "lo": lo, "tokens": tokens,
                             "clip_frac": frame[clipped].fillna(0).sum() / tokens})
    return pd.DataFrame(rows).sort_values(["lo", "label"]) if rows else pd.DataFrame(
        columns=["label", "bucket", "lo", "tokens", "clip_frac"])


def clip_by_length(metrics: pd.DataFrame, ax: plt.Axes | None = None) -> plt.Axes:
    """Clip fraction by response-length bucket per objective (the length-bias critique of GSPO)."""
    ax = axes(ax)
    table = clip_by_length_table(metrics)
    if table.empty:
        ax.text(0.5, 0.5, "no length-bucket counts", ha="center", va="center", transform=ax.transAxes)
        return ax
    labels = labels_of(metrics)
    sns.barplot(table, x="bucket", y="clip_frac", hue="label", hue_order=labels, palette=palette(labels), ax=ax)
    if (table["clip_frac"] > 0).any():
        ax.set_yscale("log")
    ax.set_xlabel("response length (tokens)")
    ax.set_ylabel("clipped token fraction")
    ax.set_title("Clipping by response length")
    ax.legend(fontsize=8)
    return ax


def kl_entropy(metrics: pd.DataFrame, axes: Sequence[plt.Axes] | None = None) -> Sequence[plt.Axes]:
    """Two panels: KL(pi_old || pi_theta) per step, and policy entropy per step."""
    if axes is None:
        _, axes = plt.subplots(1, 2, figsize=(10.0, 3.8), layout="constrained")
    curves(metrics, "kl/old_new", ax=axes[0], x="step", smooth=0.3, ylabel="KL(old || new), k3", log=True)
    curves(metrics, "entropy/mean", ax=axes[1], x="step", smooth=0.3, ylabel="entropy (nats / token)")
    axes[0].set_title("KL between old and new policy")
    axes[1].set_title("Policy entropy")
    axes[1].legend(fontsize=8)
    return axes


FOREST_COLUMNS = ("comparison", "mean", "low", "high", "seeds", "differences", "holm")


def seed_offsets(n: int, height: float = 0.36) -> np.ndarray:
    """Vertical offsets that spread a row's n per-seed points over `height` (0 for one point)."""
    return np.linspace(-height / 2, height / 2, n) if n > 1 else np.zeros(n)


def forest(rows: pd.DataFrame, ax: plt.Axes | None = None) -> plt.Axes:
    """A forest plot, one row per comparison (FOREST_COLUMNS; the first row at the top): the paired mean
    difference (dot) and its 95% t-interval (bar), every seed's difference (grey points, spread over the
    row's height in seed order), a dashed line at 0, and the Holm-adjusted p written at the right."""
    ax = axes(ax, size=(7.5, 1.2 + 0.5 * max(len(rows), 1)))
    for i, row in enumerate(rows.to_dict("records")):
        differences = np.asarray(row["differences"], dtype=float)
        mean, low, high = float(row["mean"]), float(row["low"]), float(row["high"])
        ax.scatter(differences, -i + seed_offsets(len(differences)), s=14, color="0.55", zorder=2,
                   label="per-seed difference" if i == 0 else None)
        if np.isfinite(low):
            ax.hlines(-i, low, high, color="C0", lw=3, zorder=3, label="95% t-interval" if i == 0 else "_nolegend_")
        if np.isfinite(mean):
            ax.plot([mean], [-i], "o", color="C0", ms=7, zorder=4, label="mean difference" if i == 0 else None)
        ax.annotate(f"Holm p = {row['holm']}", xy=(1.02, -i), xycoords=("axes fraction", "data"), va="center", fontsize=8)
    ax.axvline(0.0, color="0.3", lw=0.8, ls="--")
    ax.set_yticks(-np.arange(len(rows)), list(rows["comparison"]), fontsize=8)
    ax.set_ylim(-max(len(rows), 1) + 0.5, 0.5)
    ax.set_xlabel("final reward, first minus second (paired by seed)")
    ax.set_title("Primary comparisons: mean difference, 95% t-interval, per-seed differences", fontsize=9)
    if len(rows):
        ax.legend(fontsize=7, loc="lower left", bbox_to_anchor=(0.0, 1.06), ncol=3, frameon=False)
    return ax
