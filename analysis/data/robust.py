"""Heavy-tailed measurements read without letting one step speak for a run.

Importance-ratio variances, the largest ratio, gradient norms and losses are heavy-tailed over steps:
one token in one step can hold almost all of a run's sum (a token ratio of 1e4 squares into the
variance), and then a mean over steps ranks objectives by that one step. Beside every such mean the
report gives the median and the 10% trimmed mean over steps and the largest step's share of its
run's total, so a reader sees at once whether the mean is a typical step or one outlier; and, where
the runs measured them, per step counts of tokens with ratios above 10 / 100 / 1,000 and the steps
where one token dominates its minibatch's loss (`loss/max_token_share` > 0.5).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from scipy.stats import trim_mean

HEAVY = ("ratio/token_var", "ratio/token_max", "ratio/seq_var", "logratio/token_var", "ratio/token_var_rerouted",
         "ratio/token_var_stable", "grad/norm", "loss")
TRIM = 0.1  # cut from each side for the trimmed mean
DOMINATES = 0.5  # loss/max_token_share above this: one token dominates its minibatch's loss
SHOWN = 5  # flagged steps named in a cell
EXTREME = {"ratio/token_gt_10": "tokens with ratio > 10", "ratio/token_gt_100": "tokens with ratio > 100",
           "ratio/token_gt_1000": "tokens with ratio > 1,000"}
PER_STEP = {"ratio/token_median": "token ratio, step median (median over steps)",
            "ratio/token_trimmed_mean": "token ratio, step 10% trimmed mean (median over steps)"}


def largest_share(run: pd.DataFrame, column: str) -> tuple[float, int]:
    """One run's largest step's share of the sum of |column| over its steps, and that step."""
    values = run[["step", column]].dropna()
    total = values[column].abs().sum()
    if not len(values) or total == 0:
        return float("nan"), -1
    top = int(values[column].abs().to_numpy().argmax())  # the first largest, as idxmax finds it
    return float(abs(values[column].iloc[top]) / total), int(values["step"].iloc[top])


def heavy_rows(label: str, frame: pd.DataFrame, column: str) -> dict:
    """One objective's statistics over the steps of all its seeds of one heavy-tailed column."""
    values = frame[column].dropna().to_numpy(dtype=float)
    shares = [(*largest_share(run, column), seed) for seed, run in frame.groupby("seed")]
    share, step, seed = max(shares, key=lambda s: -1.0 if np.isnan(s[0]) else s[0])
    return {"objective": label, "column": column, "steps": len(values), "mean over steps": values.mean(),
            "median over steps": float(np.median(values)), "10% trimmed mean": float(trim_mean(values, TRIM)),
            "largest step's share of its run's total": share,
            "that step": f"s{seed} step {step}" if step >= 0 else "-"}


def heavy_table(metrics: pd.DataFrame) -> pd.DataFrame | str:
    """Per objective and heavy-tailed column present: mean, median and 10% trimmed mean over steps (all
    seeds' steps together) and the largest single step's share of its run's sum of |values|."""
    present = [c for c in HEAVY if c in metrics.columns and metrics[c].notna().any()]
    if not present or metrics.empty:
        return "These results carry none of the heavy-tailed columns."
    rows = [heavy_rows(str(label), frame, column) for column in present
            for label, frame in metrics.groupby("label", sort=False) if frame[column].notna().any()]
    return pd.DataFrame(rows)


def extremes_table(metrics: pd.DataFrame) -> pd.DataFrame | str:
    """Per objective: tokens with ratios above 10 / 100 / 1,000 (summed over steps and seeds), steps
    where one token dominates its loss, and the per-step token-ratio median and trimmed mean."""
    counts = [c for c in EXTREME if c in metrics.columns and metrics[c].notna().any()]
    typical = [c for c in PER_STEP if c in metrics.columns and metrics[c].notna().any()]
    dominance = "loss/max_token_share" in metrics.columns and metrics["loss/max_token_share"].notna().any()
    if not (counts or typical or dominance):
        return ("These runs carry no counts of extreme token ratios, per-step ratio medians or loss shares "
                "(written before those measurements).")
    rows = []
    for label, frame in metrics.groupby("label", sort=False):
        row = {"objective": label, "steps": len(frame)}
        row.update({EXTREME[c]: frame[c].sum() for c in counts})
        if dominance:
            share = frame.dropna(subset=["loss/max_token_share"])
            flagged = share[share["loss/max_token_share"] > DOMINATES].sort_values(["seed", "step"])
            row["steps where one token dominates its loss (share > 0.5)"] = f"{len(flagged)} of {len(share)}"
            row["those steps"] = ", ".join(f"s{r.seed} step {r.step}" for r in flagged.head(SHOWN).itertuples()) + \
                (f" and {len(flagged) - SHOWN} more" if len(flagged) > SHOWN else "") or "-"
            row["largest one-token share of a loss"] = share["loss/max_token_share"].max()
        row.update({PER_STEP[c]: frame[c].median() for c in typical})
        rows.append(row)
    return pd.DataFrame(rows)


def rolling_median(values: np.ndarray, window: int) -> np.ndarray:
    """Trailing median over `window` steps (fewer at the start), NaN steps skipped."""
    return pd.Series(values).rolling(window, min_periods=1).median().to_numpy()


def robust_curves(metrics: pd.DataFrame, column: str, window: int = 5) -> pd.DataFrame:
    """Per label and step: each seed's trailing `window`-step median of `column`, then the median over
    seeds and the range (min, max) over seeds. Columns: label, x (step), mean (the median), low, high."""
    rows = []
    for label, frame in metrics.groupby("label", sort=False):
        per_seed = frame.pivot_table(index="step", columns="seed", values=column, aggfunc="mean")
        if per_seed.empty:
            continue
        smooth = per_seed.apply(lambda s: pd.Series(rolling_median(s.to_numpy(dtype=float), window), index=s.index))
        rows.append(pd.DataFrame({"label": label, "x": smooth.index, "mean": smooth.median(axis=1).to_numpy(),
                                  "low": smooth.min(axis=1).to_numpy(), "high": smooth.max(axis=1).to_numpy()}))
    return pd.concat(rows, ignore_index=True) if rows else pd.DataFrame(columns=["label", "x", "mean", "low", "high"])
