"""Synthetic results of several arms and seeds (synth) for the report's verdicts."""

from __future__ import annotations

from pathlib import Path

from tests.helpers.results import make_run


def synth(root: Path, bonuses: dict[str, list[float]], **kwargs) -> Path:
    """One run per (label, seed) with the given reward bonus per seed; returns the suite folder."""
    for label, per_seed in bonuses.items():
        for seed, bonus in enumerate(per_seed):
            make_run(root, label, seed, bonus=bonus, **kwargs)
    return root / "synth"


JITTER = [0.0, -0.01, 0.01, 0.0, -0.01, 0.01, -0.01, 0.01]  # per-seed wobble of a gain; sums to 0 over 6 and 8 seeds

