"""CI regression: compare fresh results of experiments/ci.yaml with a committed baseline.

Per objective label and metric, a declared statistic over a run's steps (its final value, mean or
median) and tolerance (analysis/regress_tolerances.yaml, shipped with the package; also reachable as
experiments/regress_tolerances.yaml: an absolute band or a factor); plus
invariants that must hold on any platform. Never imports torch.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

from analysis.load import Results, find_run_dirs, load_results
from analysis.matching import MATCH_TOLERANCE, UnmatchedComputeError, check_matched
from analysis.stats import final_value, first_value

# the package's own tolerances (package data), so that `regress` works from any working directory
DEFAULT_TOLERANCES = Path(__file__).with_name("regress_tolerances.yaml")
RUN_FILES = ("metrics.parquet", "layers.parquet", "eval.parquet", "config.yaml", "provenance.json", "status.json")


@dataclass(frozen=True)
class Check:
    label: str
    metric: str
    baseline: float | None
    current: float | None
    tolerance: str
    ok: bool


STATISTICS: dict[str, Callable[[pd.DataFrame, str], float]] = {
    "final": final_value,  # the report's "final" value (last FINAL_FRACTION of steps)
    "mean": lambda frame, column: float(frame[column].mean()),
    "median": lambda frame, column: float(frame[column].median()),  # robust to a few outlying steps
}


def summarise(results: Results, rules: dict[str, dict]) -> pd.DataFrame:
    """Per label (mean over seeds), each checked metric reduced over a run's steps by its rule's
    `statistic`; columns are named "<statistic> <metric>"."""
    rows = []
    for (label, seed), frame in results.metrics.groupby(["label", "seed"], sort=False):
        row = {"label": label, "seed": seed}
        for metric, rule in rules.items():
            row[check_name(metric, rule)] = STATISTICS[rule["statistic"]](frame, metric) if metric in frame else np.nan
        rows.append(row)
    return pd.DataFrame(rows).groupby("label", sort=False).mean(numeric_only=True).drop(columns="seed")


def check_name(metric: str, rule: dict) -> str:
    return f"{rule['statistic']} {metric}"


def within(baseline: float, current: float, rule: dict, floor: float) -> bool:
    if not (np.isfinite(baseline) and np.isfinite(current)):
        return False
    if "absolute" in rule:
        return abs(current - baseline) <= rule["absolute"]
    if abs(baseline) < floor and abs(current) < floor:
        return True
    lo, hi = sorted((abs(baseline), abs(current)))
    return lo > 0 and hi / lo <= rule["factor"]


def compare(current: Results, baseline: Results, tolerances: dict) -> list[Check]:
    floor = float(tolerances.get("floor", 0.0))
    rules = tolerances["metrics"]
    cur, base = summarise(current, rules), summarise(baseline, rules)
    checks = []
    for label in base.index:
        if label not in cur.index:
            checks.append(Check(label, "run present", None, None, "must exist", False))
            continue
        for metric, rule in rules.items():
            name = check_name(metric, rule)
            b, c = float(base.loc[label, name]), float(cur.loc[label, name])
            text = f"±{rule['absolute']:g}" if "absolute" in rule else f"x{rule['factor']:g}"
            checks.append(Check(label, name, b, c, text, within(b, c, rule, floor)))
    checks += invariants(current, baseline, float(tolerances.get("min_reward_gain", 0.0)))
    return checks


def invariants(current: Results, baseline: Results, min_reward_gain: float = 0.0) -> list[Check]:
    runs, metrics = current.runs, current.metrics
    out = []
    done = set(runs.loc[runs["status"] == "done", "label"])
    for label in dict.fromkeys(baseline.runs["label"]):
        out.append(Check(label, "invariant: run finished", None, None, "status done", label in done))
    for (label, _seed), frame in metrics.groupby(["label", "seed"], sort=False):
        first, final = first_value(frame, "reward/mean"), final_value(frame, "reward/mean")
        out.append(Check(str(label), "invariant: reward rises", first, final, f"final - first > {min_reward_gain:g}",
                         bool(final - first > min_reward_gain)))
    by_objective = metrics.groupby(["objective", "replay"])["clip/frac"].mean()
    if ("gspo", False) in by_objective and ("grpo", False) in by_objective:
        g, r = by_objective[("gspo", False)], by_objective[("grpo", False)]
        out.append(Check("gspo vs grpo", "invariant: gspo clips more", r, g, "gspo > grpo", bool(g > r)))
    for label, frame in metrics[~metrics["replay"].astype(bool)].groupby("label", sort=False):
        d = frame["moe/drift"].mean()
        out.append(Check(str(label), "invariant: 0 < drift < 1", None, float(d), "(0, 1)", bool(0 < d < 1)))
    try:
        spread = check_matched(current)
        out.append(Check("all", "invariant: compute matched", None, spread, f"<= {MATCH_TOLERANCE:.0%}", True))
    except UnmatchedComputeError as err:
        out.append(Check("all", "invariant: compute matched", None, None, str(err), False))
    return out


def load_tolerances(path: Path) -> dict:
    data = yaml.safe_load(Path(path).read_text())
    if not isinstance(data, dict) or "metrics" not in data:
        raise ValueError(f"{path}: expected a `metrics:` mapping of metric -> {{statistic, absolute|factor}}")
    for metric, rule in data["metrics"].items():
        if not isinstance(rule, dict) or len(set(rule) & {"absolute", "factor"}) != 1:
            raise ValueError(f"{path}: metrics.{metric}: give exactly one of `absolute` or `factor`")
        if rule.get("statistic") not in STATISTICS:
            raise ValueError(f"{path}: metrics.{metric}.statistic: one of {', '.join(STATISTICS)}")
    return data


def update_baseline(current_dir: Path, baseline_dir: Path) -> list[Path]:
    """Replace the baseline with the run files of `current_dir` (no checkpoints, no eval caches)."""
    run_dirs = find_run_dirs(Path(current_dir))
    if not run_dirs:
        load_results(current_dir)  # raises the clear NotResultsError
    tmp = Path(str(baseline_dir) + ".new")
    shutil.rmtree(tmp, ignore_errors=True)
    written = []
    for run_dir in run_dirs:
        for name in RUN_FILES:
            if (run_dir / name).is_file():
                target = tmp / run_dir.name / name
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(run_dir / name, target)
                written.append(target)
    shutil.rmtree(baseline_dir, ignore_errors=True)
    tmp.rename(baseline_dir)
    return [Path(str(p).replace(str(tmp), str(baseline_dir), 1)) for p in written]
