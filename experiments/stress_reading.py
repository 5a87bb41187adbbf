"""The numbers of results/stress_cpu/README.md that the report does not print as numbers: reward over
the first 10 steps, the engine's median log-prob mismatch, GRPO's drift and predicted flip rate by
number of updates and by layer, the largest token ratios of each objective, and the floor.

    python experiments/stress_reading.py [results/stress_cpu]
"""

from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd


def read(root: Path, name: str) -> pd.DataFrame:
    return pd.concat([pd.read_parquet(path) for path in sorted(root.glob(f"*-s*/{name}"))], ignore_index=True)


def main(root: Path) -> None:
    metrics, layers = read(root, "metrics.parquet"), read(root, "layers.parquet")
    by_label = metrics.sort_values("step").groupby("label", sort=False)
    print("reward, first 10 steps (mean over seeds):")
    print(by_label.apply(lambda f: f[f["step"] <= 10]["reward/mean"].mean(), include_groups=False).round(4).to_string())
    print("\nengine log-prob mismatch, k3, median over steps and seeds:")
    print(by_label["mismatch/k3_kl"].median().to_string(float_format="%.2g"))
    grpo = layers[layers["label"] == "grpo"]
    columns = ["moe/drift", "moe/flip_pred", "moe/margin_crossed", "moe/margin_lt_0.1", "moe/margin_median"]
    print("\nGRPO by updates since the old policy (means over steps, layers, seeds):")
    print(grpo.groupby("updates")[columns[:3]].mean().round(4).T.to_string())
    print("\nGRPO by layer (means over steps, updates, seeds):")
    print(grpo.groupby("layer")[columns].mean().round(4).to_string())
    print("\nlargest token ratio per objective:")
    top = metrics.loc[metrics.groupby("label")["ratio/token_max"].idxmax()]
    print(top[["label", "seed", "step", "ratio/token_max", "kl/old_new", "grad/norm"]].to_string(index=False))
    floor = metrics[metrics["step"] == 1][["floor/drift_repeat", "floor/logp_repeat_max"]]
    print(f"\nfloor (step 1, {len(floor)} runs): drift max {floor.iloc[:, 0].max()}, log-prob max {floor.iloc[:, 1].max()}")


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else "results/stress_cpu"))
