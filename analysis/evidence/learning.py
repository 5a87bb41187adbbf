"""What the report compares objectives on, per finished run, and whether RL learned at all.

**The outcome** of a run is its held-out reward where the group's runs were evaluated (eval.parquet:
the policy on the task's test split through lm-eval, which samples from the training model itself,
so without the rollout engine's router noise): the score of its last evaluation. Otherwise it is the
training reward (`reward/mean`): the mean over the last FINAL_FRACTION of steps. Every run of a
group uses the same one; `Source` says which, and why not the held-out one.

**The learnability gate.** A run learned when its outcome rose from its start, one-sided at 5%:
- training reward: the last FINAL_FRACTION of steps against the first START_STEPS steps (fewer if the
  two would overlap), Welch's t-test over the per-step rewards (each step's reward is the mean over
  fresh prompts and samples; runs too short for two steps in each window are not judged);
- held-out reward: the last evaluation against the first (step 0), a z-test with lm-eval's standard
  errors, z = (last - first) / sqrt(se_first^2 + se_last^2).
An objective learned when every one of its finished seeds did. Which objective leads is asked only
in groups where some objective learned; elsewhere the answer says that nothing learned.

**The chance baseline** of the task (`gspo_bench.tasks.task_baseline`: the reward of well-formed
responses with random choices) as the runs recorded it (provenance.json's `task_baseline`), or the
runs' own `reward/baseline` column where they wrote one. Runs from before that record use the
package's own task's; a plugin's task is never built here (the report runs no plugin code).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy import stats

from analysis.data.groups import Group, group_subset, groups
from analysis.data.load import Results
from analysis.stats.library import ALPHA
from analysis.stats.metrics import FINAL_FRACTION
from gspo_bench.tasks import task_baseline
from gspo_bench.tasks.registry import is_package_task

START_STEPS = 10  # steps a training-reward start is the mean of
EVAL_PREFIX = "gspo_"  # lm-eval name of a suite's own task: gspo_bench.train.evaluation.lm_eval_name
TRAINING, HELD_OUT = "training reward", "held-out reward"
TRAINING_TEXT = "reward/mean, the mean of the last 25% of steps"


@dataclass(frozen=True)
class Source:
    """Which reward a group's runs are compared on: `kind` TRAINING or HELD_OUT, `text` the column
    or evaluation task in words, `why` the reason a group with evaluations is not compared on them."""

    kind: str
    text: str
    why: str = ""


@dataclass(frozen=True)
class Baseline:
    mean: float
    std: float
    text: str


def eval_task(runs: pd.DataFrame) -> str:
    """The lm-eval name of the group's own task (the suite's `task.name`)."""
    tasks = set(runs["task"].dropna())
    return EVAL_PREFIX + next(iter(tasks)) if len(tasks) == 1 else ""


def own_evals(results: Results) -> pd.DataFrame:
    """Evaluation rows of the suite's own task, sorted by step."""
    task, evals = eval_task(results.runs), results.evals
    if evals.empty or not task:
        return evals.iloc[0:0]
    return evals[evals["task"] == task].sort_values("step")


def source(results: Results) -> Source:
    """The held-out reward when every run of `results` (one group) has two or more evaluations of the
    suite's own task with standard errors; else the training reward, saying why."""
    evals = own_evals(results)
    if evals.empty:
        return Source(TRAINING, TRAINING_TEXT,
                      "" if results.evals.empty else "no evaluation of the suite's own task")
    stderr = evals["stderr"].astype(float) if "stderr" in evals else pd.Series(np.nan, index=evals.index)
    counts = evals[np.isfinite(stderr)].groupby(["label", "seed"]).size()
    if any(counts.get(run, 0) < 2 for run in zip(results.runs["label"], results.runs["seed"])):
        return Source(TRAINING, TRAINING_TEXT,
                      "not every run has two evaluations of the suite's task with standard errors")
    return Source(HELD_OUT, f"{eval_task(results.runs)} on the task's test split ({engine_text(evals)}), last "
                            "evaluation")


def engine_text(evals: pd.DataFrame) -> str:
    """What sampled the evaluations, from eval.parquet's `engine` column (`lm_eval`, `rollout:<name>`;
    runs written before the column existed were lm-eval's)."""
    engines = sorted(set(evals["engine"].fillna("lm_eval"))) if "engine" in evals else ["lm_eval"]
    return ", ".join("lm-eval" if e == "lm_eval" else f"the {e.split(':', 1)[-1]} rollout engine, router noise off"
                     for e in engines)


def training_rise(rewards: np.ndarray) -> tuple[float, float, float]:
    """(start, final, one-sided p of final > start) of one run's per-step rewards (see the module), over
    the steps whose reward is finite (NaN or infinite: not measured, never a score); none finite: NaN."""
    rewards = rewards[np.isfinite(rewards)]
    n = len(rewards)
    if n == 0:
        return float("nan"), float("nan"), float("nan")
    n_end = max(1, int(np.ceil(n * FINAL_FRACTION)))
    n_start = max(1, min(START_STEPS, n - n_end))
    start, end = rewards[:n_start], rewards[-n_end:]
    if n_start < 2 or n_end < 2 or n < n_start + n_end:
        return float(start.mean()), float(end.mean()), float("nan")
    if np.ptp(start) == 0 and np.ptp(end) == 0:  # constant windows: rose or not, with certainty
        return float(start[0]), float(end[0]), 0.0 if end[0] > start[0] else 1.0
    p = stats.ttest_ind(end, start, equal_var=False, alternative="greater").pvalue
    return float(start.mean()), float(end.mean()), float(p)


def held_out_rise(evals: pd.DataFrame) -> tuple[float, float, float]:
    """(first score, last score, one-sided p of last > first) of one run's evaluations (z-test)."""
    first, last = evals.iloc[0], evals.iloc[-1]
    rise, se = last["score"] - first["score"], float(np.hypot(first["stderr"], last["stderr"]))
    p = (0.0 if rise > 0 else 1.0) if se == 0 else float(stats.norm.sf(rise / se))
    return float(first["score"]), float(last["score"]), p


def learning_rows(results: Results) -> tuple[pd.DataFrame, Source]:
    """One row per run of one group (finished runs): its start, outcome and rise test, and how many of its
    compared rewards were finite (`finite_rewards`: steps, or of the first and last evaluations)."""
    found = source(results)
    evals = own_evals(results) if found.kind == HELD_OUT else None
    rows = []
    for run in results.runs.itertuples():
        if evals is not None:
            start, final, p = held_out_rise(evals[(evals["label"] == run.label) & (evals["seed"] == run.seed)])
            finite = int(np.isfinite(start) and np.isfinite(final))
        else:
            steps = results.metrics[(results.metrics["label"] == run.label) & (results.metrics["seed"] == run.seed)]
            rewards = steps.sort_values("step")["reward/mean"].to_numpy(dtype=float)
            start, final, p = training_rise(rewards)
            finite = int(np.isfinite(rewards).sum())
        rows.append({"suite": run.suite, "facet": run.facet, "arm": run.arm, "label": run.label,
                     "objective": run.objective, "replay": run.replay, "replay_from": run.replay_from,
                     "seed": run.seed, "start": start, "final": final, "rise": final - start, "p_rise": p,
                     "learned": bool(p < ALPHA) if np.isfinite(p) else None, "finite_rewards": finite})
    return pd.DataFrame(rows), found


def baseline(results: Results) -> Baseline | None:
    """The group's chance baseline: the runs' `reward/baseline` column where written, else the task's as
    the runs recorded it, else (runs from before that record) the package's own task's."""
    written = results.metrics["reward/baseline"].dropna() if "reward/baseline" in results.metrics else pd.Series()
    if len(written):
        return Baseline(float(written.mean()), float("nan"), "reward/baseline, as the runs wrote it")
    tasks = results.runs.dropna(subset=["task"])
    if tasks.empty or tasks["task"].nunique() > 1:
        return None
    recorded = [r for r in tasks.get("task_baseline", pd.Series(dtype=object)) if isinstance(r, dict)]
    if recorded:
        return Baseline(float(recorded[0]["mean"]), float(recorded[0]["std"]), str(recorded[0]["policy"]))
    if not is_package_task(tasks["task"].iloc[0]):
        return None
    found = task_baseline(tasks["task"].iloc[0], tasks["task_params"].iloc[0])
    return None if found is None else Baseline(found.mean, found.std, found.policy)


@dataclass(frozen=True)
class Learning:
    """One group's compared rewards and gate: `per_run` one row per finished run, `arms` per objective
    (arm): seeds, seeds that learned, and whether all did."""

    group: Group
    source: Source
    per_run: pd.DataFrame
    baseline: Baseline | None

    @property
    def arms(self) -> pd.DataFrame:
        o = self.per_run
        return o.groupby("arm", sort=False).agg(
            seeds=("seed", "size"), learned_seeds=("learned", lambda x: int(sum(v is True for v in x))),
            final=("final", "mean"),
            start=("start", "mean")).assign(learned=lambda a: (a["learned_seeds"] == a["seeds"]) & (a["seeds"] > 0))

    @property
    def learned(self) -> list[str]:
        arms = self.arms
        return list(arms.index[arms["learned"]])

    def values(self, arm: str) -> pd.Series:
        """The outcome per seed of one objective."""
        rows = self.per_run[self.per_run["arm"] == arm]
        return pd.Series(rows["final"].to_numpy(dtype=float), index=rows["seed"].to_numpy())


def learning(results: Results) -> dict[Group, Learning]:
    """Every group's outcomes and gate (finished runs only: `results` should hold no others)."""
    out = {}
    for group in groups(results):
        subset = group_subset(results, group)
        per_run, found = learning_rows(subset)
        out[group] = Learning(group, found, per_run, baseline(subset))
    return out
