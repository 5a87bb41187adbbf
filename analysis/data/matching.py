"""Compute matching: what each run spent of its budget, and the refusal to compare runs of one sweep
point whose spent compute differs by more than MATCH_TOLERANCE, or than one step where a step is more.

A FLOPs or tokens budget stops a run at the first step that reaches it, so two runs of one budget
differ by up to one step's compute whatever the tolerance: at 45 steps a run (the quickstart's) a
step is ~2.2% of the budget, and two runs one step apart were refused at 2% though each had stopped
at its budget as closely as a step allows."""

from __future__ import annotations

import numpy as np
import pandas as pd

from analysis.data.errors import ResultsError
from analysis.data.load import Results, is_finished

MATCH_TOLERANCE = 0.02  # relative spread of spent compute allowed between runs


class UnmatchedComputeError(ResultsError):
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


CUMULATIVE = {"flops": "compute/cum_flops", "tokens": "compute/cum_tokens"}  # per-step columns of each budget kind


def largest_step(metrics: pd.DataFrame, runs: pd.DataFrame) -> float:
    """The largest one step's compute (in the budget's unit) over `runs` (one budget kind), from their
    per-step cumulative column; 0 for a steps budget, which no run overshoots, or without the column."""
    column = CUMULATIVE.get(str(runs["budget_kind"].fillna("flops").iloc[0]))
    if column is None or column not in metrics or not len(runs):
        return 0.0
    key = ["suite", "label", "seed"]
    rows = metrics.merge(runs[key].drop_duplicates(), on=key).sort_values([*key, "step"], kind="stable")
    if not len(rows):
        return 0.0
    steps = rows.groupby(key, sort=False)[column].diff().fillna(rows[column])  # a run's first step: its total
    return float(steps.max())


def is_unmatched(spread: float) -> bool:
    """Whether `check_matched`'s spread says compute was not matched: above the tolerance, or NaN (budgets
    of different kinds, allowed by flag), which is no match either."""
    return not spread <= MATCH_TOLERANCE


def check_matched(results: Results, allow_unmatched: bool = False) -> float:
    """The largest relative spread (max - min) / min of spent compute between the finished runs of one
    sweep point (facet; the whole suite without a sweep); raises above 2%, or above the facet's largest
    step where that is more (`largest_step`), unless allowed. Points are
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
        allowed = max(MATCH_TOLERANCE, largest_step(results.metrics, runs) / max(values.min(), 1e-12))
        if spread > allowed and not allow_unmatched:
            ordered = runs.assign(spent=values).sort_values("spent")
            low, high = ordered.iloc[0], ordered.iloc[-1]
            raise UnmatchedComputeError(
                f"spent compute differs by {spread:.1%} between runs{where} (> {MATCH_TOLERANCE:.0%} and > one "
                f"step, {allowed:.1%}): "
                f"{low['label']}-s{low['seed']} spent {low['spent']:.4g}, {high['label']}-s{high['seed']} "
                f"{high['spent']:.4g}")
        worst = max(worst, spread)
    return worst
