"""The lag pilot's rules (experiments/lag/README.md, "Pilot") read off its runs: GRPO naive's outcome per lag
(rule 1: stage 5's levels) and the routing drift between sampler and learner against lag, with the lag at
which it crosses 10% (rule 2); the rest exploratory.

    python experiments/lag/pilot_rules.py runs/lag/lag_pilot [--csv results/lag_cpu/pilot/calibration.csv]
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import typer

from analysis.data.load import load_results
from analysis.evidence.lag import PAPER_ROUTE_SHARE as PAPER_SHARE
from analysis.evidence.lag import route_crossing
from analysis.evidence.stability import FAILED, class_rows


def past_warm_up(metrics: pd.DataFrame) -> pd.DataFrame:
    """The steps at their run's full lag (step > lag: the first `lag` steps train on the starting policy's
    batches, at lag step - 1)."""
    lag = metrics["sweep/lag"].astype(float)
    return metrics[metrics["step"] > lag]


def run_medians(metrics: pd.DataFrame) -> pd.DataFrame:
    """Per run (arm, lag, seed): the medians over its steps past the warm-up of lag/route_diff, lag/k3_response,
    lag/ess and clip/frac."""
    steps = past_warm_up(metrics).assign(lag=lambda f: f["sweep/lag"].astype(int),
                                         arm=lambda f: f["label"].str.split("@").str[0])
    return steps.groupby(["arm", "lag", "seed"]).agg(
        route_diff=("lag/route_diff", "median"), k3_response=("lag/k3_response", "median"),
        ess=("lag/ess", "median"), clip=("clip/frac", "median")).reset_index()


def main(results: Path, csv: Path | None = None) -> None:
    loaded = load_results(results)
    classes = class_rows(loaded)
    classes = classes.assign(lag=classes["sweep/lag"].astype(int), failed=classes["outcome"].isin(FAILED))
    pd.set_option("display.width", 160)
    print("outcome per arm, lag and seed (rules v2):")
    print(classes.pivot_table(index="lag", columns=["arm", "seed"], values="outcome", aggfunc="first").to_string())
    naive = classes[classes["arm"] == "grpo_naive"].groupby("lag")["failed"].agg(["sum", "count"])
    both = naive[(naive["sum"] == naive["count"]) & (naive["count"] >= 2)]
    first = int(both.index.min()) if len(both) else None
    print(f"\nrule 1: GRPO naive fails on every seed first at lag {first}" if first is not None else
          "\nrule 1: GRPO naive fails on every seed at no lag up to the largest tried")
    runs = run_medians(loaded.metrics)
    curve = runs.groupby(["arm", "lag"])[["route_diff", "k3_response", "ess", "clip"]].median().reset_index()
    print("\nper arm and lag, medians over seeds of the run medians past the warm-up:")
    print(curve.to_string(index=False, float_format=lambda v: f"{v:.4g}"))
    recomputed = curve[curve["arm"] == "grpo"].set_index("lag")["route_diff"]
    at = route_crossing(recomputed)
    print(f"\nrule 2: GRPO recomputed's lag/route_diff reaches {PAPER_SHARE:.0%} at lag {at:.3g}" if at is not None else
          f"\nrule 2: GRPO recomputed's lag/route_diff reaches {PAPER_SHARE:.0%} at no lag tried "
          f"(largest {recomputed.max():.3g}, at lag {int(recomputed.idxmax())})")
    if csv is not None:
        csv.parent.mkdir(parents=True, exist_ok=True)
        runs.to_csv(csv, index=False, float_format="%.6g")


if __name__ == "__main__":
    typer.run(main)
