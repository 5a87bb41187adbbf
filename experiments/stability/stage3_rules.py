"""Stage 3's pilot rules (experiments/stability/README.md, "Stage 3 pilot") read off its runs:
GRPO's outcome per level (rule 1), the learning rate whose old-to-new KL is nearest GSPO's (rule 2) and
the clip range whose clipped share is nearest GRPO's (rule 3), at the two lowest levels.

    python experiments/stability/stage3_rules.py results/stability_cpu/stage3_pilot
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import typer

from analysis.data.load import load_results
from analysis.evidence.stability import stability_map


def run_medians(metrics: pd.DataFrame) -> pd.DataFrame:
    """Per run: its arm, its logit noise, and the medians over steps of kl/old_new, clip/frac and
    mismatch/k3_kl."""
    runs = metrics.groupby(["label", "seed"]).agg(kl=("kl/old_new", "median"), clip=("clip/frac", "median"),
                                                   mismatch=("mismatch/k3_kl", "median")).reset_index()
    runs["arm"] = runs["label"].str.split("@").str[0]
    runs["noise"] = runs["label"].str.extract(r"logit_noise=([\d.]+)")[0].astype(float)
    return runs


def nearest(values: pd.Series, target: float, arms: list[str]) -> pd.DataFrame:
    """`values` of `arms` with their distance in log to `target`, nearest first."""
    table = pd.DataFrame({"value": values[arms], "log distance": np.abs(np.log(values[arms] / target))})
    return table.sort_values("log distance")


def main(results: Path) -> None:
    loaded = load_results(results)
    classes = stability_map(loaded).classes
    grpo = classes[classes["arm"] == "grpo"].sort_values(["cell", "seed"])
    print("rule 1, GRPO's outcome per level:")
    print(grpo[["cell", "seed", "outcome", "change"]].to_string(index=False))
    runs = run_medians(loaded.metrics)
    grpo_mismatch = runs[runs["arm"] == "grpo"].groupby("noise")["mismatch"].median()
    print("\nGRPO's run-median mismatch KL per level:", grpo_mismatch.round(3).to_dict())
    low = runs[runs["noise"].isin(sorted(runs["noise"].unique())[:2])].groupby("arm")[["kl", "clip"]].median()
    print(f"\nrule 2, old-to-new KL against GSPO's {low.loc['gspo', 'kl']:.4g}:")
    print(nearest(low["kl"], low.loc["gspo", "kl"], [a for a in low.index if a.startswith("grpo")]).to_string())
    print(f"\nrule 3, clipped share against GRPO's {low.loc['grpo', 'clip']:.4g}:")
    print(nearest(low["clip"], low.loc["grpo", "clip"], [a for a in low.index if a.startswith("gspo")]).to_string())


if __name__ == "__main__":
    typer.run(main)
