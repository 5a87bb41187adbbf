"""How numbers go into the report's sentences and cells: a mean with its t-interval and the per-seed
values, a paired difference with its interval and per-seed differences, p-values. One place, so the
answer, the tables and the paper checks write them alike."""

from __future__ import annotations

import numpy as np
import pandas as pd

from analysis.stats.library import EXACT_PAIRS, Paired, t_interval


def seeds_text(values: pd.Series, spec: str = ".3g", sign: bool = False) -> str:
    """"s0 0.21, s1 0.19" (index: seed)."""
    plus = "+" if sign else ""
    return ", ".join(f"s{seed} {value:{plus}{spec}}" for seed, value in values.items())


def mean_text(values: pd.Series, spec: str = ".3g") -> str:
    """"0.203 [0.15, 0.26] (s0 0.21, s1 0.19, s2 0.21)": the mean over seeds, its 95% t-interval (from
    2 seeds) and every seed's value; "-" without values."""
    values = values[np.isfinite(values.astype(float))]
    if not len(values):
        return "-"
    low, high = t_interval(values.to_numpy())
    interval = f" [{low:{spec}}, {high:{spec}}]" if np.isfinite(low) else ""
    return f"{values.mean():{spec}}{interval} ({seeds_text(values, spec)})"


def difference_text(result: Paired, spec: str = ".3g") -> str:
    """"+0.0113 [+0.0079, +0.0146] (s0 +0.0116, s1 +0.0124, s2 +0.0098)": the mean paired difference,
    its 95% paired t-interval (from 2 seeds) and every seed's difference."""
    if not result.n:
        return "-"
    interval = f" [{result.low:+{spec}}, {result.high:+{spec}}]" if np.isfinite(result.low) else ""
    differences = pd.Series(result.differences, index=list(result.seeds))
    return f"{result.mean:+{spec}}{interval} ({seeds_text(differences, spec, sign=True)})"


def p_text(p: float, pairs: int = 0) -> str:
    """A p-value in 2 significant digits ("-" for NaN); a sign-flip p of more than EXACT_PAIRS `pairs`
    is marked "(Monte Carlo)" (analysis.stats.library.p_method; the report's summary says how many draws). Every
    table's sign-flip p column gives `pairs` (the result's n), so that every table marks it."""
    if not np.isfinite(p):
        return "-"
    return f"{p:.2g}" + (" (Monte Carlo)" if pairs > EXACT_PAIRS else "")


def fmt(frame: pd.DataFrame) -> pd.DataFrame:
    """A table's cells as the renderers show them: floats to 4 significant digits, NaN as "-", everything
    else as text."""
    def cell(v):
        if isinstance(v, float | np.floating):
            return "-" if np.isnan(v) else f"{v:.4g}"
        return str(v)

    return frame.map(cell)


def count(n: int, noun: str) -> str:
    """"1 comparison", "3 comparisons" (`noun` singular, plural with an s)."""
    return f"{n} {noun}" + ("" if n == 1 else "s")
