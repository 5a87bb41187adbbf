"""The numbers of results/stress_cpu/README.md that the report does not print as numbers: each run's
held-out reward at its first and last evaluation with the learnability gate's one-sided p (the
report's test, analysis.evidence.learning.held_out_rise) and, per arm, the means, the seeds that passed, the
clip fraction, the engine's routing gap, the extreme token ratios and the drift after one update;
reward over the first 10 steps, the engine's median log-prob mismatch, GRPO's drift and predicted flip rate by
number of updates and by layer, the largest token ratios of each objective, and the floor.

    python experiments/stress_reading.py [results/stress_cpu]
"""

from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd

from analysis.evidence.learning import held_out_rise
from analysis.stats.library import ALPHA


def read(root: Path, name: str) -> pd.DataFrame:
    return pd.concat([pd.read_parquet(path) for path in sorted(root.glob(f"*-s*/{name}"))], ignore_index=True)


def held_out(evals: pd.DataFrame) -> pd.DataFrame:
    """One row per run (label, seed): held-out reward at the first and last evaluation, the rise and
    the gate's one-sided p of it."""
    rows = []
    for (label, seed), run in evals.sort_values("step").groupby(["label", "seed"], sort=False):
        start, end, p = held_out_rise(run)
        rows.append({"label": label, "seed": seed, "start": start, "end": end, "rise": end - start, "p": p})
    return pd.DataFrame(rows)


def arm_summary(runs: pd.DataFrame, metrics: pd.DataFrame) -> pd.DataFrame:
    """Per arm: held-out means, seeds whose rise passed the gate, mean clip fraction, median routing gap,
    tokens with ratio > 10 / 100 / 1,000 over every step and seed, mean expert drift after one update."""
    by_label = metrics.groupby("label")
    table = runs.groupby("label").agg(start=("start", "mean"), end=("end", "mean"), rose=("p", lambda p: int((p < ALPHA).sum())),
                                      seeds=("seed", "size"))
    return table.join(pd.DataFrame({
        "clip": by_label["clip/frac"].mean(), "gap_median": by_label["moe/rollout_gap"].median(),
        "gt_10": by_label["ratio/token_gt_10"].sum(), "gt_100": by_label["ratio/token_gt_100"].sum(),
        "gt_1000": by_label["ratio/token_gt_1000"].sum(), "drift_expert_1": by_label["moe/drift_expert_1"].mean(),
        "drift_1": by_label["moe/drift_1"].mean()}))


def main(root: Path) -> None:
    metrics, layers = read(root, "metrics.parquet"), read(root, "layers.parquet")
    runs = held_out(read(root, "eval.parquet"))
    with pd.option_context("display.width", 200):
        print("held-out reward per run (first and last evaluation; gate: one-sided p of the rise):")
        print(runs.pivot(index="seed", columns="label", values="end").round(3).to_string())
        print(runs.pivot(index="seed", columns="label", values="p").to_string(float_format="%.2g"))
        print(f"\nper arm (rose: seeds with p < {ALPHA}):")
        print(arm_summary(runs, metrics).to_string(float_format="%.4g"))
    by_label = metrics.sort_values("step").groupby("label", sort=False)
    print("\nreward, first 10 steps (mean over seeds):")
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
