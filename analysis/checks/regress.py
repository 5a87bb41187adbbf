"""CI regression: compare fresh results of experiments/ci.yaml with a committed baseline.

Three kinds of check, rules in analysis/checks/regress_tolerances.yaml (shipped with the package; also
reachable as experiments/regress_tolerances.yaml):

- first step: each run's step 1 against the baseline run of the same label and seed. The same
  weights and the same batch give step 1's loss, gradient norm, ratio, clip and drift statistics to
  float noise on any x86-64 CPU with AVX2, since the command line pins the CPU kernels
  (gspo_bench.runtime.kernels; the runs' provenance says which kernels computed them, and the check
  refuses runs computed with other kernels than the baseline's). A bug in a loss, a sign, a
  normaliser or the replay moves these by orders of magnitude more than `rtol`: this is the check
  with margin.
- trajectory bands: per label and metric, a statistic over a run's steps (its final value, mean or
  median) must lie in the band the baseline's seeds span, widened by `width` times that spread
  (with a floor); `log: true` metrics are banded in log space (a factor). These are for long-run
  behaviour after a change that moved float order on purpose (then the first step moves too and the
  baseline is updated).
- invariants that must hold on any platform.

Each check's `excess` says where its value landed: 0 inside the baseline's own spread or exactly on
the baseline, 1 at the tolerance's edge, 40 forty times past it; a check passes at excess <= 1.
Never imports torch.
"""

from __future__ import annotations

import math
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from analysis.data.load import Results, find_run_dirs, is_run_dir, load_results
from analysis.data.matching import MATCH_TOLERANCE, UnmatchedComputeError, check_matched
from analysis.data.suites import shown, suite_differences
from analysis.stats.metrics import final_value, first_value
from gspo_bench.config.yamlread import read_yaml

# the package's own tolerances (package data), so that `regress` works from any working directory
DEFAULT_TOLERANCES = Path(__file__).with_name("regress_tolerances.yaml")
RUN_FILES = ("metrics.parquet", "layers.parquet", "eval.parquet", "config.yaml", "provenance.json", "status.json")
FIRST_STEP = "first step"
TOLERANCE_KEYS = ("first_step", "trajectory", "min_reward_rise")  # a tolerance file's top-level keys


@dataclass(frozen=True)
class Check:
    label: str
    metric: str
    baseline: float | None
    current: float | None
    tolerance: str
    ok: bool
    excess: float | None = None  # where the value landed, in units of its tolerance (passes at <= 1)
    note: str = ""  # why a check could not be made


STATISTICS: dict[str, Callable[[pd.DataFrame, str], float]] = {
    "final": final_value,  # the report's "final" value (last FINAL_FRACTION of steps)
    "mean": lambda frame, column: float(frame[column].mean()),
    "median": lambda frame, column: float(frame[column].median()),  # robust to a few outlying steps
}


def other_suite(current: Results, baseline: Results) -> str:
    """How the baseline's suite differs from the current results' (name or resolved settings), a few
    differences named; "" where it is the same suite."""
    return shown(suite_differences(current.runs, baseline.runs))


def check_cells(check: Check) -> list[str]:
    """A check's row as `regress` shows it, its result aside: label, metric, baseline, current, tolerance and
    the excess in units of it."""
    shown = lambda value: "-" if value is None else f"{value:.4g}"  # noqa: E731
    return [check.label, check.metric, shown(check.baseline), shown(check.current), check.tolerance,
            excess_text(check.excess)]


def check_notes(checks: list[Check]) -> list[str]:
    """The lines under `regress`'s table: each check's note (why it could not be made), then how close the
    passing checks came to their tolerance."""
    lines = [f"{c.label} {c.metric}: {c.note}" for c in checks if c.note]
    margins = [c.excess for c in checks if c.ok and c.excess is not None]
    return lines + ([f"closest pass: {excess_text(max(margins))} of its tolerance"] if margins else [])


def regressions_text(checks: list[Check]) -> str:
    """"N regression(s): label metric (x its tolerance), ..." naming each failed check; "" where none failed."""
    failed = [c for c in checks if not c.ok]
    if not failed:
        return ""
    return f"{len(failed)} regression(s): " + ", ".join(
        f"{c.label} {c.metric}" + ("" if c.excess is None else f" ({excess_text(c.excess)} x its tolerance)")
        for c in failed)


def excess_text(excess: float | None) -> str:
    """A check's excess for a table: "-" where there is none, "0" exactly on the baseline."""
    if excess is None:
        return "-"
    if excess == 0:
        return "0"
    return "inf" if math.isinf(excess) else f"{excess:.2g}"


# ---------------------------------------------------------------------------------------- first step
def first_step_excess(baseline: float, current: float, rtol: float, atol: float) -> float:
    """|current - baseline| in units of `atol + rtol |baseline|` (inf where either is not finite
    and they differ)."""
    if baseline == current or (math.isnan(baseline) and math.isnan(current)):
        return 0.0
    if not (math.isfinite(baseline) and math.isfinite(current)):
        return math.inf
    return abs(current - baseline) / (atol + rtol * abs(baseline))


def step_one(metrics: pd.DataFrame) -> pd.DataFrame:
    """Each run's step-1 row, indexed by (label, seed)."""
    rows = metrics[metrics["step"] == 1]
    return rows.set_index(["label", "seed"])


def first_step_checks(current: Results, baseline: Results, rule: dict) -> list[Check]:
    """Step 1 of every (label, seed) both hold: each of `rule["metrics"]` within `rtol`/`atol` of the
    baseline's; a run computed with other CPU kernels than its baseline run is a failed check that
    says so (its step 1 cannot be compared to float noise)."""
    rtol, atol = float(rule["rtol"]), float(rule["atol"])
    def runs(results: Results) -> dict[tuple[str, int], Any]:  # (label, seed) -> the kernels that computed it
        table = results.runs
        return {(str(label), int(seed)): kernels
                for label, seed, kernels in zip(table["label"], table["seed"], table["kernels"], strict=True)}

    kernels = runs(baseline)
    now, then = step_one(current.metrics), step_one(baseline.metrics)
    tolerance = f"rtol {rtol:g}, atol {atol:g}"
    checks = []
    for (label, seed), mine in runs(current).items():
        if (label, seed) not in then.index:
            continue  # a seed the baseline lacks: the trajectory bands still judge it
        if (label, seed) not in now.index:
            checks.append(Check(label, f"{FIRST_STEP}: run has step 1", None, None, "must exist", False, math.inf))
            continue
        theirs = kernels[(label, seed)]
        if mine is None or mine != theirs:
            checks.append(Check(label, f"{FIRST_STEP}: same CPU kernels", None, None, "must match", False, math.inf,
                                note=f"seed {seed}: the baseline ran with {theirs}, this run with {mine}; step 1 "
                                "matches only with the same kernels and threads"))
            continue
        names = list(rule["metrics"])
        base_row = then.loc[[(label, seed)], names].to_numpy(dtype=float)[0]
        new_row = now.loc[[(label, seed)], names].to_numpy(dtype=float)[0]
        for metric, b, c in zip(names, base_row, new_row, strict=True):
            excess = first_step_excess(float(b), float(c), rtol, atol)
            checks.append(Check(label, f"{FIRST_STEP} {metric}", float(b), float(c), tolerance, excess <= 1.0, excess))
    return checks


# ---------------------------------------------------------------------------------------- trajectory
def check_name(metric: str, rule: dict) -> str:
    return f"{rule['statistic']} {metric}"


def per_seed(results: Results, rules: dict[str, dict]) -> pd.DataFrame:
    """One row per (label, seed): each checked metric reduced over the run's steps by its rule's
    `statistic`; columns are named "<statistic> <metric>"."""
    rows = []
    for (label, seed), frame in results.metrics.groupby(["label", "seed"], sort=False):
        row: dict[str, Any] = {"label": label, "seed": seed}
        for metric, rule in rules.items():
            row[check_name(metric, rule)] = STATISTICS[rule["statistic"]](frame, metric) if metric in frame else np.nan
        rows.append(row)
    return pd.DataFrame(rows)


def band(values: np.ndarray, rule: dict, width: float) -> tuple[float, float, float]:
    """(low, high, half-width) of the band around the baseline seeds' `values`, in the metric's scale
    (log where `rule["log"]`): the seeds' range [low, high], widened on each side by `width` times
    that range, or by `width` times the rule's `floor` where the range is narrower (one seed, or
    seeds that agree)."""
    x = np.log(values) if rule.get("log") else np.asarray(values, dtype=float)
    floor = math.log(rule["floor"]) if rule.get("log") else rule["floor"]
    low, high = float(np.min(x)), float(np.max(x))
    return low, high, width * max(high - low, floor)


def band_excess(low: float, high: float, half: float, value: float, log: bool) -> float:
    """How far `value` lies outside the seeds' range [low, high], in units of the widening `half`
    (0 inside the range; inf for a value that cannot be placed: NaN, or <= 0 on a log scale)."""
    if not math.isfinite(value) or (log and value <= 0):
        return math.inf
    x = math.log(value) if log else value
    return max(low - x, x - high, 0.0) / half


def band_checks(current: Results, baseline: Results, rules: dict[str, dict], width: float) -> list[Check]:
    """Every run of `current` against its label's band of baseline seeds, metric by metric."""
    now, then = per_seed(current, rules), per_seed(baseline, rules)
    checks = []
    for label in dict.fromkeys(then["label"]):
        mine = now[now["label"] == label]
        if mine.empty:
            checks.append(Check(label, "run present", None, None, "must exist", False, math.inf))
            continue
        theirs = then[then["label"] == label]
        for metric, rule in rules.items():
            name = check_name(metric, rule)
            seeds = theirs[name].to_numpy(dtype=float)
            if not np.isfinite(seeds).all() or (rule.get("log") and (seeds <= 0).any()):
                checks.append(Check(label, name, None, None, "baseline", False, math.inf,
                                    note=f"the baseline's values {seeds.tolist()} cannot make a band"))
                continue
            low, high, half = band(seeds, rule, width)
            shown = (lambda v: math.exp(v)) if rule.get("log") else (lambda v: v)
            text = f"[{shown(low - half):.4g}, {shown(high + half):.4g}] ({len(seeds)} seeds)"
            for value in mine[name].to_numpy(dtype=float):
                excess = band_excess(low, high, half, value, bool(rule.get("log")))
                checks.append(Check(label, name, float(np.mean(seeds)), float(value), text, excess <= 1.0, excess))
    return checks


# ---------------------------------------------------------------------------------------- invariants
REWARD_TOP = 1.0  # every task's reward lies in [0, 1] (gspo_bench.tasks: a verifier's score)


def reward_rise_check(label: str, first: float, final: float, share: float) -> Check:
    """The invariant "reward rises" of one run: its final reward above its first-quarter reward by at
    least `share` of the room it had left to the top reward. One rule for every start: a run that
    starts at 0.5 must gain 0.05 at share 0.1, one that starts at 0.72 (closer to the top, where
    every task learns slower) 0.028, one at the top must hold it."""
    room = max(REWARD_TOP - first, 0.0)
    return Check(label, "invariant: reward rises", first, final, f"final - first >= {share:g} x (1 - first)",
                 bool(final - first >= share * room))


def invariants(current: Results, baseline: Results, min_reward_rise: float = 0.0) -> list[Check]:
    runs, metrics = current.runs, current.metrics
    out = []
    done = set(runs.loc[runs["status"] == "done", "label"])
    for label in dict.fromkeys(baseline.runs["label"]):
        out.append(Check(label, "invariant: run finished", None, None, "status done", label in done))
    for (label, _seed), frame in metrics.groupby(["label", "seed"], sort=False):
        first, final = first_value(frame, "reward/mean"), final_value(frame, "reward/mean")
        out.append(reward_rise_check(str(label), first, final, min_reward_rise))
    by_objective = metrics.groupby(["objective", "replay"])["clip/frac"].mean()
    if ("gspo", False) in by_objective and ("grpo", False) in by_objective:
        g, r = by_objective[("gspo", False)], by_objective[("grpo", False)]
        out.append(Check("gspo vs grpo", "invariant: gspo clips more", r, g, "gspo > grpo", bool(g > r)))
    for label, frame in metrics[~metrics["replay"].astype(bool)].groupby("label", sort=False):
        d = frame["moe/drift"].mean()
        out.append(Check(str(label), "invariant: 0 < drift < 1", None, float(d), "(0, 1)", bool(0 < d < 1)))
    try:
        spread = check_matched(current)
        out.append(Check("all", "invariant: compute matched", None, spread, f"<= {MATCH_TOLERANCE:.0%} or one step", True))
    except UnmatchedComputeError as err:
        out.append(Check("all", "invariant: compute matched", None, None, str(err), False))
    return out


def compare(current: Results, baseline: Results, tolerances: dict) -> list[Check]:
    """Every check of `current` against `baseline` under `tolerances` (load_tolerances' mapping)."""
    trajectory = tolerances["trajectory"]
    return [*first_step_checks(current, baseline, tolerances["first_step"]),
            *band_checks(current, baseline, trajectory["metrics"], float(trajectory.get("width", 1.0))),
            *invariants(current, baseline, float(tolerances.get("min_reward_rise", 0.0)))]


# ---------------------------------------------------------------------------------------- the file
def _number(path: Path, where: str, value: Any, positive: bool = False) -> float:
    """`value` as a finite float (> 0 with `positive`); ValueError naming the file and the field."""
    ok = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
    if not ok or (positive and value <= 0):
        raise ValueError(f"{path}: {where}: expected a finite number{' > 0' if positive else ''}, got {value!r}")
    return float(value)


def load_tolerances(path: Path | None = None) -> dict:
    """The rules of `path` (None: the package's own, DEFAULT_TOLERANCES), checked: ValueError naming the
    file and the field of the first problem."""
    path = DEFAULT_TOLERANCES if path is None else path
    try:
        data = read_yaml(Path(path).read_text(encoding="utf-8"))
    except UnicodeDecodeError:
        raise ValueError(f"{path}: not UTF-8 text") from None
    except ValueError as err:  # read_yaml's one line: not valid YAML (a repeated key too), or its alias bound
        raise ValueError(f"{path}: {err}") from None
    if not isinstance(data, dict):
        raise ValueError(f"{path}: expected a mapping of rules, got {type(data).__name__}")
    first, trajectory = data.get("first_step"), data.get("trajectory")
    if not isinstance(first, dict) or not isinstance(trajectory, dict) or \
            not isinstance(trajectory.get("metrics"), dict) or not trajectory["metrics"]:
        raise ValueError(f"{path}: expected `first_step:` {{rtol, atol, metrics: [...]}} and `trajectory:` "
                         "{width, metrics: {metric: {statistic, floor, log}}}")
    _number(path, "first_step.rtol", first.get("rtol"), positive=True)
    _number(path, "first_step.atol", first.get("atol"))
    names = first.get("metrics")
    if not isinstance(names, list) or not names or not all(isinstance(m, str) for m in names):
        raise ValueError(f"{path}: first_step.metrics: expected a list of metric names, got {names!r}")
    _number(path, "trajectory.width", trajectory.get("width", 1.0), positive=True)
    for metric, rule in trajectory["metrics"].items():
        where = f"trajectory.metrics.{metric}"
        if not isinstance(rule, dict):
            raise ValueError(f"{path}: {where}: expected {{statistic, floor, log}}, got {rule!r}")
        unknown = set(rule) - {"statistic", "floor", "log"}
        if unknown:
            raise ValueError(f"{path}: {where}: unknown keys {sorted(unknown)} (statistic, floor, log)")
        if rule.get("statistic") not in STATISTICS:
            raise ValueError(f"{path}: {where}.statistic: one of {', '.join(STATISTICS)}, got {rule.get('statistic')!r}")
        if not isinstance(rule.get("log", False), bool):
            raise ValueError(f"{path}: {where}.log: true or false, got {rule['log']!r}")
        floor = _number(path, f"{where}.floor", rule.get("floor"), positive=True)
        if rule.get("log") and floor <= 1:
            raise ValueError(f"{path}: {where}.floor: a factor above 1 on a log band, got {floor!r}")
    if "min_reward_gain" in data:  # an absolute gain: refused a run that started close to the top
        raise ValueError(f"{path}: min_reward_gain is now min_reward_rise, a share of the room to reward 1 "
                         "(final - first >= share x (1 - first))")
    extra = sorted(set(map(str, data)) - set(TOLERANCE_KEYS))
    if extra:  # a misspelt rule would be no rule at all, silently
        raise ValueError(f"{path}: unknown keys {extra} (the rules are {', '.join(TOLERANCE_KEYS)})")
    if "min_reward_rise" in data:
        _number(path, "min_reward_rise", data["min_reward_rise"])
    return data


def check_baseline_folder(baseline_dir: Path) -> None:
    """ValueError unless `baseline_dir` is absent, empty, or a regress baseline (what `update_baseline`
    writes: nothing but run folders holding nothing but RUN_FILES, status.json and metrics.parquet
    among them), naming the first entry that is not: `--update` replaces the folder whole, and must
    never delete one that holds anything else (`--baseline results`)."""
    path = Path(baseline_dir)
    if not path.exists() and not path.is_symlink():
        return
    if not path.is_dir() or path.is_symlink():
        raise ValueError(f"{path} is not a regress baseline (not a folder); --update writes a baseline folder")
    for entry in sorted(path.iterdir()):
        inside = sorted(entry.iterdir()) if entry.is_dir() and not entry.is_symlink() else None
        if inside is None or not is_run_dir(entry) or any(p.name not in RUN_FILES or not p.is_file() for p in inside):
            raise ValueError(f"{path} is not a regress baseline ({entry} is not a run folder of run files only: "
                             f"{', '.join(RUN_FILES)}); --update replaces the whole folder, so it only replaces a "
                             "baseline: give a new folder or an existing baseline")


def update_baseline(current_dir: Path, baseline_dir: Path) -> list[Path]:
    """Replace the baseline with the run files of `current_dir` (no checkpoints, no eval caches).
    ValueError, before anything is written or deleted, where `baseline_dir` is not a baseline
    (`check_baseline_folder`) or `current_dir` holds the runs of several suites (a baseline is one
    suite's runs, one folder each: two suites' `grpo-s0` would be one)."""
    check_baseline_folder(baseline_dir)
    run_dirs = find_run_dirs(Path(current_dir))
    if not run_dirs:
        load_results(current_dir)  # raises the clear NotResultsError
    suites = sorted({str(run_dir.parent) for run_dir in run_dirs})
    if len(suites) > 1:
        raise ValueError(f"{current_dir} holds the runs of {len(suites)} suites ({', '.join(suites)}): a baseline is "
                         "one suite's runs; give that suite's folder")
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
