"""What each method of experiments/moe_rl_methods.yaml saw, means over the run, as a markdown table.

    gspo-bench run experiments/moe_rl_methods.yaml --out runs
    python experiments/moe_rl_methods_table.py runs/moe_rl_methods
"""

from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd

COLUMNS = {  # column: the metrics it shows, "a / b" when two
    "IcePop masked / ESS": ("correction/masked_frac", "correction/ess"),
    "RSPO gamma / shift d": ("rspo/gamma_mean", "rspo/shift_mean"),
    "RSPO at floor": ("rspo/gamma_floor_frac",),
    "M2PO trust-region M2": ("m2po/m2_trust",),
    "DPPO mean abs(pi - mu)": ("dppo/tv_mean",),
    "mismatch k3": ("mismatch/k3_kl",),
    "rollout routing gap": ("moe/rollout_gap",),
    "reward, last 5 steps": ("reward/mean",),
}


def cell(frame: pd.DataFrame, metrics: tuple[str, ...]) -> str:
    if not all(m in frame for m in metrics):
        return ""
    if metrics == ("reward/mean",):
        return f"{frame['reward/mean'].tail(5).mean():.3f}"
    return " / ".join(f"{frame[m].mean():.4g}" for m in metrics)


def table(results: Path) -> str:
    runs = sorted(results.glob("*/metrics.parquet"))
    if not runs:
        raise SystemExit(f"{results}: no */metrics.parquet (run the suite first)")
    lines = ["| run | " + " | ".join(COLUMNS) + " |", "|---" * (len(COLUMNS) + 1) + "|"]
    for path in runs:
        frame = pd.read_parquet(path)
        lines.append(f"| {path.parent.name} | " + " | ".join(cell(frame, m) for m in COLUMNS.values()) + " |")
    return "\n".join(lines)


if __name__ == "__main__":
    print(table(Path(sys.argv[1] if len(sys.argv) > 1 else "runs/moe_rl_methods")))
