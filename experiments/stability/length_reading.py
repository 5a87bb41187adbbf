"""The response-length point read off its runs (experiments/stability/README.md, "The response-length
point"): the level's dose per token and per response (the noisy arms' first 5 steps pooled, as the map's
level dose), and per arm its outcome classes (rules v2), runs failed of its seeds with the exact 95%
interval, and its median response length; then each seed's final held-out reward per arm.

    python experiments/stability/length_reading.py results/stability_cpu/length
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import typer

from analysis.data.load import load_results
from analysis.evidence.dose import DOSE, DOSE_RESPONSE, failure_interval, first_steps, level_doses
from analysis.evidence.learning import learning
from analysis.evidence.stability import failed, run_classes

NOISE_FREE = "grpo_clean"


def main(results: Path) -> None:
    loaded = load_results(results)
    classes = run_classes(loaded)
    noisy = classes[classes["arm"] != NOISE_FREE].assign(cell="logit_noise=3")
    dose = level_doses(first_steps(loaded.metrics), noisy).iloc[0]
    print(f"level dose (first 5 steps of {', '.join(sorted(noisy['arm'].unique()))}, pooled): "
          f"{dose[DOSE]:.3g} per token, {dose[DOSE_RESPONSE]:.3g} per response")
    lengths = loaded.metrics.groupby("arm")["response/len_mean"].median()
    rows = []
    for arm, frame in classes.groupby("arm"):
        failures, runs = int(failed(frame).sum()), len(frame)
        low, high = failure_interval(failures, runs)
        rows.append({"arm": arm, **frame["outcome"].value_counts().to_dict(), "failed": f"{failures} of {runs}",
                     "failure rate 95%": f"[{low:.2f}, {high:.2f}]", "response length": round(lengths[arm], 1)})
    with pd.option_context("display.width", 200):
        print(pd.DataFrame(rows).fillna(0).to_string(index=False))
        per_run = pd.concat([found.per_run for found in learning(loaded).values()])
        print("\nheld-out reward, start and end, per seed:")
        print(per_run.pivot(index="seed", columns="arm", values="final").round(3).to_string())
        print("starts:", per_run.groupby("seed")["start"].first().round(3).to_dict())


if __name__ == "__main__":
    typer.run(main)
