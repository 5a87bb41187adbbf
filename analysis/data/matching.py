"""Compute matching: what each run spent of its budget, and the refusal to compare runs of one sweep
point whose spent compute differs by more than MATCH_TOLERANCE."""

from __future__ import annotations

import numpy as np
import pandas as pd

from analysis.data.load import Results, is_finished

MATCH_TOLERANCE = 0.02  # relative spread of spent compute allowed between runs


class UnmatchedComputeError(ValueError):
    """Runs spent different compute: comparing them would not be a matched-compute comparison."""


def spent(runs: pd.DataFrame) -> np.ndarray:
    """Spent compute per run in the unit of its budget (FLOPs, tokens or steps)."""
    kind = runs["budget_kind"].fillna("flops")
    return np.where(kind == "steps", runs["steps"], np.where(kind == "tokens", runs["cum_tokens"], runs["cum_flops"]))


def compute_table(results: Results) -> pd.DataFrame:
    runs = results.runs.copy()
    runs["spent"] = spent(runs)
    runs["spent / budget"] = runs["spent"] / runs["budget_value"]
    return runs[["suite", "label", "seed", "status", "steps", "budget_kind", "budget_value", "spent",
                 "spent / budget", "cum_flops", "cum_tokens"]]


def compute_by_arm(results: Results) -> pd.DataFrame:
    """`compute_table` folded to one row per arm (suite and label): its runs, their statuses, and the
    range over them of steps and of spent / budget."""
    runs = results.runs.assign(ratio=lambda r: spent(r) / r["budget_value"])

    def span(values: pd.Series, spec: str) -> str:
        low, high = values.min(), values.max()
        return f"{low:{spec}}" if low == high else f"{low:{spec}} to {high:{spec}}"

    rows = [{"suite": suite, "label": label, "runs": len(arm),
             "status": ", ".join(f"{n} {s}" for s, n in arm["status"].value_counts(sort=False).items()),
             "steps": span(arm["steps"], "d"), "budget": f"{arm['budget_kind'].iloc[0]} = {arm['budget_value'].iloc[0]:.4g}",
             "spent / budget": span(arm["ratio"], ".4f")}
            for (suite, label), arm in runs.groupby(["suite", "label"], sort=False)]
    return pd.DataFrame(rows)


def is_unmatched(spread: float) -> bool:
    """Whether `check_matched`'s spread says compute was not matched: above the tolerance, or NaN (budgets
    of different kinds, allowed by flag), which is no match either."""
    return not spread <= MATCH_TOLERANCE


def check_matched(results: Results, allow_unmatched: bool = False) -> float:
    """The largest relative spread (max - min) / min of spent compute between the finished runs of one
    sweep point (facet; the whole suite without a sweep); raises above 2% unless allowed. Points are
    never compared with each other: a sweep over the number of minibatches or experts changes the
    compute of a step on purpose. Unfinished runs are not compared, so they are not checked."""
    finished = results.runs[is_finished(results.runs)]
    worst = 0.0
    for facet, runs in finished.groupby("facet", sort=False):
        where = f" (sweep point {facet!s})" if facet else ""
        if runs["budget_kind"].nunique() > 1:
            if not allow_unmatched:
                raise UnmatchedComputeError(f"runs{where} have different budget kinds")
            return float("nan")
        values = spent(runs)
        spread = float((values.max() - values.min()) / max(values.min(), 1e-12))
        if spread > MATCH_TOLERANCE and not allow_unmatched:
            ordered = runs.assign(spent=values).sort_values("spent")
            low, high = ordered.iloc[0], ordered.iloc[-1]
            raise UnmatchedComputeError(
                f"spent compute differs by {spread:.1%} between runs{where} (> {MATCH_TOLERANCE:.0%}): "
                f"{low['label']}-s{low['seed']} spent {low['spent']:.4g}, {high['label']}-s{high['seed']} "
                f"{high['spent']:.4g}")
        worst = max(worst, spread)
    return worst
