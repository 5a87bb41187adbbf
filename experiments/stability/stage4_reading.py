"""Stage 4's arms read off their runs (experiments/stability/README.md, "Stage 4"): per arm, the outcome
classes of its seeds (rules v2), the sustained drift after one update (median over each run's steps of
`moe/drift_expert_1`, then over seeds), the old-to-new KL and the clipped share (medians likewise). The
declared comparisons are the report's (results/stability_cpu/stage4/report).

    python experiments/stability/stage4_reading.py results/stability_cpu/stage4
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import typer

from analysis.data.load import load_results
from analysis.evidence.stability import run_classes


def main(results: Path) -> None:
    loaded = load_results(results)
    classes = run_classes(loaded)
    outcomes = classes.groupby("arm")["outcome"].value_counts().unstack(fill_value=0)
    runs = loaded.metrics.groupby(["arm", "seed"]).agg(drift=("moe/drift_expert_1", "median"),
                                                       kl=("kl/old_new", "median"), clip=("clip/frac", "median"))
    table = outcomes.join(runs.groupby("arm").median())
    with pd.option_context("display.width", 200, "display.float_format", "{:.4g}".format):
        print(table.to_string())
        failed = classes[classes["outcome"] != "learned"][["arm", "seed", "outcome", "change"]]
        print("\nruns not classed learned:\n" + failed.to_string(index=False))


if __name__ == "__main__":
    typer.run(main)
