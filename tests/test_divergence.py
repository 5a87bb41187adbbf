"""Late-divergence signals: the first spike of clip fraction, k3 KL and gradient norm, per run."""

from __future__ import annotations

import numpy as np
import pandas as pd

from analysis.evidence.divergence import (
    SIGNALS,
    WINDOW,
    Signal,
    divergence_table,
    first_spike,
    thresholds_text,
)


def test_a_spike_is_dated_against_the_median_of_the_steps_before():
    steps = np.arange(1, 16)
    values = np.array([0.01] * 10 + [0.05, 0.07, 0.2, 0.3, 0.1])
    # step 11: 0.05 > 3 x median(0.01) but not > floor 0.05; step 12: 0.07 > 3 x 0.01 and > 0.05
    assert first_spike(steps, values, Signal("burst", factor=3.0, floor=0.05), window=10) == 12
    assert first_spike(steps, values, Signal("burst", factor=3.0, floor=0.1), window=10) == 13
    assert first_spike(steps, values, Signal("burst", factor=40.0, floor=0.0), window=10) is None


def test_one_earlier_spike_does_not_hide_a_later_burst():
    steps = np.arange(1, 13)
    values = np.array([0.01] * 9 + [1.0, 0.01, 0.06])  # the baseline of step 12 is the median: 0.01
    assert first_spike(steps, values, Signal("burst", factor=3.0, floor=0.05), window=10) == 12


def test_no_spike_is_called_before_a_full_window_and_nan_steps_are_skipped():
    steps = np.arange(1, 8)
    values = np.array([0.01, 1.0, 0.01, np.nan, 0.01, 0.01, 0.5])
    # with a window of 3: step 2's jump has no history; step 7 (0.5) against median(0.01, 0.01, 0.01)
    assert first_spike(steps, values, Signal("s", factor=5.0, floor=0.0), window=3) == 7
    assert first_spike(steps, values, Signal("s", factor=5.0, floor=0.0), window=6) is None  # 6 finite values only


def test_the_table_dates_each_run_and_its_earliest_signal():
    n = WINDOW + 5
    quiet = {"clip/frac": [0.01] * n, "kl/old_new": [1e-4] * n, "grad/norm": [1.0] * n}
    loud = {k: list(v) for k, v in quiet.items()}
    loud["grad/norm"][WINDOW + 1] = 50.0  # step WINDOW + 2
    loud["clip/frac"][WINDOW + 3] = 0.4  # step WINDOW + 4
    frames = [pd.DataFrame({"label": label, "seed": 0, "step": np.arange(1, n + 1), **cols})
              for label, cols in (("grpo", quiet), ("gspo", loud))]
    table = divergence_table(pd.concat(frames)).set_index("objective")
    assert table.loc["grpo", "first signal"] == "-"
    assert table.loc["gspo", "grad-norm spike"] == WINDOW + 2 and table.loc["gspo", "clip-fraction burst"] == WINDOW + 4
    assert table.loc["gspo", "k3 KL spike"] == "-" and table.loc["gspo", "first signal"] == WINDOW + 2


def test_the_thresholds_are_stated():
    text = thresholds_text()
    for column, signal in SIGNALS.items():
        assert column in text and signal.name in text and f"{signal.factor:g} x" in text


def test_the_runs_are_listed_in_the_order_they_were_loaded():
    """Thirty runs of 40 steps, one after another in the metrics (the load order: folders sorted): the table
    lists them in that order. An unstable sort by step put runs of equal steps in an order of its own, which
    moved with the data's layout (the committed reports' rows came out shuffled)."""
    runs = [(f"arm{i % 3}@lr={i}", i % 2) for i in range(30)]
    metrics = pd.DataFrame([{"label": label, "seed": seed, "step": step, **{c: 0.01 for c in SIGNALS}}
                            for label, seed in runs for step in range(1, 41)])
    table = divergence_table(metrics)
    assert isinstance(table, pd.DataFrame)
    assert list(zip(table["objective"], table["seed"], strict=True)) == runs
