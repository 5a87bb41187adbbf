"""Late-divergence signals: the first step at which a run's clip fraction, k3 KL between the old and
the new policy, or gradient norm jumps far above its own recent past, so that a failure is dated
and not only seen in the final reward.

Step t of a series x is a spike when, with at least `WINDOW` earlier finite values,
    x_t > factor * median(the WINDOW previous values)   and   x_t > floor.
The median of the previous steps is the baseline: robust to one earlier spike, and a slow drift
upwards moves it along. The thresholds are stated in `SIGNALS` and printed with the table.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

WINDOW = 10  # earlier steps the baseline is the median of


@dataclass(frozen=True)
class Signal:
    name: str
    factor: float  # how many times the baseline
    floor: float  # and above this absolute value (a jump from 0.001 to 0.004 is no burst)


SIGNALS: dict[str, Signal] = {
    "clip/frac": Signal("clip-fraction burst", factor=3.0, floor=0.05),
    "kl/old_new": Signal("k3 KL spike", factor=10.0, floor=1e-3),
    "grad/norm": Signal("grad-norm spike", factor=5.0, floor=0.0),
}


def first_spike(steps: np.ndarray, values: np.ndarray, signal: Signal, window: int = WINDOW) -> int | None:
    """The first step whose value is a spike of `signal` against the median of the `window` finite
    values before it; None if there is none (or fewer than `window` + 1 finite values)."""
    finite = np.isfinite(values)
    steps, values = steps[finite], values[finite]
    for i in range(window, len(values)):
        baseline = float(np.median(values[i - window : i]))
        if values[i] > signal.factor * baseline and values[i] > signal.floor:
            return int(steps[i])
    return None


def divergence_table(metrics: pd.DataFrame, window: int = WINDOW) -> pd.DataFrame | str:
    """Per run (label, seed), in the order the runs were loaded: the first step of each signal ("-": none) and
    the earliest of them."""
    present = [column for column in SIGNALS if column in metrics.columns]
    if not present or metrics.empty:
        return "These results carry no clip, KL or gradient-norm columns."
    rows = []
    for (label, seed), run in metrics.sort_values("step", kind="stable").groupby(["label", "seed"], sort=False):
        found = {SIGNALS[c].name: first_spike(run["step"].to_numpy(), run[c].to_numpy(dtype=float), SIGNALS[c], window)
                 for c in present}
        dated = [step for step in found.values() if step is not None]
        rows.append({"objective": label, "seed": seed, "steps": int(run["step"].max()),
                     **{name: "-" if step is None else step for name, step in found.items()},
                     "first signal": min(dated) if dated else "-"})
    return pd.DataFrame(rows)


def thresholds_text(window: int = WINDOW) -> str:
    rules = "; ".join(f"{s.name}: {column} > {s.factor:g} x the median of the {window} steps before and > {s.floor:g}"
                      for column, s in SIGNALS.items())
    return f"A step is a spike when {rules}."
