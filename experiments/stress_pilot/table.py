"""The stress pilot's tables: one row per run and one per setting, from the run folders of the
settings tried (each setting is one `--out` folder of `gspo-bench run experiments/stress_pilot/control.yaml
--set ...`; its `--set` values are in every run's config.yaml).

    python experiments/stress_pilot/table.py OUT [OUT ...] --csv results/stress_pilot

runs.csv: reward over the first 10 steps and over the last 25% of steps, the least-squares slope
of the step reward (per 100 steps), the held-out eval (eval.parquet: clean reward on the test split)
at step 0 and at the last evaluation, the step time (median, and the 10th percentile as the figure
least touched by other processes on the CPU), the mean evaluation time and the run's wall clock.
settings.csv: per setting, the means over its runs, on how many runs the eval rose and on how many
it passed the report's learnability gate (`eval_passed`: one-sided p < 5%, `eval_p` per run).
"""

from __future__ import annotations

import argparse
import json
from datetime import datetime
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

from analysis.evidence.learning import held_out_rise
from analysis.stats.library import ALPHA
from gspo_bench.config.schema import WarmStartConfig


def reward_figures(metrics: pd.DataFrame) -> dict[str, float]:
    """Reward over the first 10 steps and the last 25% of steps (at least one), and the slope per
    100 steps of a least-squares line through every step's mean reward."""
    m = metrics.sort_values("step")
    reward, steps = m["reward/mean"].to_numpy(), m["step"].to_numpy()
    last = max(1, int(np.ceil(len(m) * 0.25)))
    slope = np.polyfit(steps, reward, 1)[0] * 100 if len(m) > 1 else np.nan
    return {"reward_first10": reward[:10].mean(), "reward_last25": reward[-last:].mean(),
            "reward_slope_per100": slope}


def eval_figures(evals: pd.DataFrame | None) -> dict[str, float]:
    """Held-out reward at step 0 and at the last evaluation, their difference, the report's
    learnability gate on it (`eval_p`: one-sided p of a rise, analysis.evidence.learning.held_out_rise; NaN
    without standard errors), the mean seconds per evaluation and the number of evaluations (NaN
    and 0 without an eval.parquet)."""
    if evals is None or evals.empty:
        return {"eval_start": np.nan, "eval_end": np.nan, "eval_rise": np.nan, "eval_p": np.nan, "eval_s": np.nan,
                "evals": 0}
    e = evals.sort_values("step")
    start, end = e["score"].iloc[0], e["score"].iloc[-1]
    p = held_out_rise(e)[2] if "stderr" in e else np.nan
    return {"eval_start": start, "eval_end": end, "eval_rise": end - start, "eval_p": p,
            "eval_s": e["time/eval_s"].mean(), "evals": len(e)}


def wall_minutes(provenance: dict) -> float:
    if not provenance.get("end"):
        return np.nan
    start, end = (datetime.fromisoformat(provenance[k]) for k in ("start", "end"))
    return (end - start).total_seconds() / 60


def run_row(setting: str, run_dir: Path) -> dict:
    config = yaml.safe_load((run_dir / "config.yaml").read_text())
    suite, metrics = config["suite"], pd.read_parquet(run_dir / "metrics.parquet")
    eval_path = run_dir / "eval.parquet"
    provenance = json.loads((run_dir / "provenance.json").read_text())
    status = json.loads((run_dir / "status.json").read_text())["status"]
    step_s = metrics["time/step_s"]
    return {"setting": setting, "run": run_dir.name, "warm_start_seed": WarmStartConfig.model_validate(suite["warm_start"]).seed_for(config["run"]["seed"]),
            "seed": config["run"]["seed"], "status": status, "steps": len(metrics),
            "updates": len(metrics) * suite["train"]["minibatches"],
            "response_len": metrics["response/len_mean"].mean(), **reward_figures(metrics),
            **eval_figures(pd.read_parquet(eval_path) if eval_path.exists() else None),
            "step_s_median": step_s.median(), "step_s_p10": step_s.quantile(0.1),
            "wall_min": wall_minutes(provenance),
            "overrides": " ".join(f"{k}={json.dumps(v)}" for k, v in config["run"]["overrides"].items())}


def runs_table(outs: list[Path]) -> pd.DataFrame:
    """One row per run folder (OUT/<suite>/<run>/ with a metrics.parquet) of every OUT, in order."""
    rows = [run_row(out.name, path.parent) for out in outs for path in sorted(out.glob("*/*/metrics.parquet"))]
    return pd.DataFrame(rows)


def settings_table(runs: pd.DataFrame) -> pd.DataFrame:
    """Per setting (in the order tried): runs, means over them, and runs whose held-out eval rose."""
    grouped = runs.groupby("setting", sort=False)
    means = grouped[["reward_first10", "reward_last25", "reward_slope_per100", "eval_start", "eval_end",
                     "eval_rise", "step_s_median", "step_s_p10", "eval_s", "wall_min"]].mean()
    counts = grouped.agg(runs=("run", "size"), eval_rose=("eval_rise", lambda r: int((r > 0).sum())),
                         eval_passed=("eval_p", lambda p: int((p < ALPHA).sum())),
                         min_eval_rise=("eval_rise", "min"), overrides=("overrides", "first"))
    return counts.join(means).reset_index()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("outs", nargs="+", type=Path)
    parser.add_argument("--csv", type=Path, required=True, help="folder for runs.csv and settings.csv")
    args = parser.parse_args()
    runs = runs_table(args.outs)
    settings = settings_table(runs)
    args.csv.mkdir(parents=True, exist_ok=True)
    runs.to_csv(args.csv / "runs.csv", index=False, float_format="%.4g")
    settings.to_csv(args.csv / "settings.csv", index=False, float_format="%.4g")
    with pd.option_context("display.width", 250, "display.max_columns", 30):
        print(settings.drop(columns="overrides").to_string(index=False, float_format="%.4g"))


if __name__ == "__main__":
    main()
