"""The sampling mask's per-step mismatch, read from a suite's run folders: per run, the mean over its steps of
`mismatch/k3_kl` (the learner at the step's start against the sampler), `mismatch/max_abs` and, where the
mask is on, `mismatch/k3_kl_unmasked` (the learner over the full vocabulary: the gap the mask removes).

    python experiments/sampling_mask/read.py results/sampling_mask/pilot
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import typer

COLUMNS = ("mismatch/k3_kl", "mismatch/k3_kl_unmasked", "mismatch/max_abs")


def per_run(folder: Path) -> pd.DataFrame:
    rows = []
    for run in sorted(p for p in folder.iterdir() if (p / "metrics.parquet").exists()):
        metrics = pd.read_parquet(run / "metrics.parquet")
        rows.append({"run": run.name, "steps": len(metrics),
                     **{c: metrics[c].mean() if c in metrics else float("nan") for c in COLUMNS}})
    return pd.DataFrame(rows)


def main(folder: Path) -> None:
    typer.echo(per_run(folder).to_string(index=False, float_format=lambda v: f"{v:.3g}"))


if __name__ == "__main__":
    typer.run(main)
