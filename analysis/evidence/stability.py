"""The stability map: each run's outcome class, fixed before any run, and where each arm stops being
stable as the training-inference mismatch grows.

**Runs judged.** Every run that finished (`done`, at least one step) or that the harness stopped as
`collapsed` (at least one step). Running and failed runs (a crash says nothing about stability) are not.

**The outcome and its points.** A run is judged on the reward its group is compared on
(`analysis.evidence.learning.source`, decided over the group's finished runs): the held-out reward, whose points
are its evaluations (step, score, lm-eval's standard error), the first one the start; or, where the
group has no held-out evaluations, the training reward `reward/mean`, whose points are the gate's
windows: the start window (the first START_STEPS steps, fewer if it would overlap the end window), then
consecutive blocks as long as the end window (the last FINAL_FRACTION of steps), counted back from the
last step and stopping before the start window; each block's score is its mean and its standard error
the sample standard deviation over sqrt(steps) (none for a one-step window).

**The classes**, in precedence order (a run gets the first that holds):
1. **collapsed**, at the earliest step where one of these holds:
   (i) the harness stopped it: its status is `collapsed` (non-finite loss or gradients for
   `collapse.nonfinite_patience` steps in a row, non-finite parameters or logits, or its reward fell to
   `collapse.reward_floor`: `gspo_bench.train.state.collapse_reason`), at its last step;
   (ii) `grad/norm` above SPIKE_FACTOR (100) times the run's median grad norm for SPIKE_STEPS (3) steps
   in a row, at the first of them (the median is over the steps with a finite, non-zero grad norm: a step
   whose advantages were all zero has no gradient and says nothing about the run's scale);
   (iii) degraded without recovery by the end: the score fell below the degraded threshold at one point
   and stayed below it at every later point to the end, with at least SUSTAINED (2) points below (a
   sustained drop, not one final dip), at the first point of that drop.
2. **degraded**: the last point is below the start by more than max(DROP_FLOOR, DROP_SE x SE) =
   max(0.05, 3 SE), SE = hypot(start's standard error, last point's standard error), the standard error
   of the difference as `analysis.evidence.learning.held_out_rise` uses (0.05 alone where a window has no standard
   error); at the first point of the final run of points below their thresholds.
3. **learned**: the existing gate (`analysis.evidence.learning`): the held-out rise's one-sided z-test, or the
   training reward's Welch test, p < 0.05.
4. **flat**: none of the above.
A point's threshold is start - max(0.05, 3 hypot(se_start, se_point)). A non-finite loss the harness
survived (a skipped minibatch, fewer than `nonfinite_patience` steps in a row) is not a collapse: the
harness's rule decides, and (ii) catches a run that diverges without a non-finite value.

**The map's axis is measured**, not set: each run sits at its level's dose per token (AXIS, the `dose`
column: the median `mismatch/k3_kl` over the first steps of every judged run at the level, pooled;
analysis.evidence.dose), which no run's outcome moves; its per-response dose (`dose_response`) is
reported beside it. The run's own median over steps of `mismatch/k3_kl` (RUN_MEDIAN, the `kl` column)
grows as a run fails, so it is partly an outcome: it is kept as a secondary view (`axis="kl"`), never
the fitted one. Runs without an axis value above KL_FLOOR (1e-8: below it the KL
is float rounding, as a noise-free engine measures) are left off the axis and the fit (counted in the text). **Failure** is degraded or collapsed; the logistic fit of P(failure)
against log10 of the axis per arm is by maximum likelihood, with a 95% Wald band for the curve (the covariance the
inverse of the observed information at the optimum) and Fieller's interval for the dose where the curve
crosses 0.5 (the doses whose band contains 0.5); only where the arm has both outcomes at two or more
doses and they are not separated by dose (then the maximum-likelihood slope is infinite). With no
failure, each cell's failure rate is at most 1 - 0.05^(1/n) at 95% for its n runs (exact one-sided
Clopper-Pearson), never pooled across cells: Boundary.bound is the loosest of them, at the arm's fewest runs
in a cell.

**Degenerate cells** carry no information about any arm and are left out of the fits, bounds and paired
tests (kept in the per-run table, named in the answer): a cell (a level and a seed) where every run's
training reward and gradient norm are 0 at every step (INERT: nothing was ever rewarded, no update moved
any policy, so each run's outcome is its warm start's under the level's noise), or where runs of two or
more arms all have the same metrics bit for bit (IDENTICAL: every column all of them logged, less those
that measure the machine: time, throughput, GPU memory). A level whose every cell is degenerate leaves the
map; a map whose every cell is, is not drawn. The level's dose stays the one its runs' first steps measured: their mismatch is measured alike.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd
from scipy import stats

from analysis.data.groups import group_subset, group_title, groups
from analysis.data.load import Results, finished, is_finished
from analysis.evidence.dose import DOSE, DOSE_RESPONSE, with_doses
from analysis.evidence.learning import HELD_OUT, START_STEPS, learning_rows, own_evals, source
from analysis.evidence.outcome_rules import collapse_share, evaluation_draws, suite_rules
from analysis.stats.library import ALPHA
from analysis.stats.logistic import LogisticFit, fit_logistic, no_fit_reason, zero_event_bound
from analysis.stats.metrics import FINAL_FRACTION

COLLAPSED, DEGRADED, LEARNED, FLAT = "collapsed", "degraded", "learned", "flat"
TOO_SHORT = "too short"  # a finished run the training reward's gate cannot judge: not on the map
CLASSES = (COLLAPSED, DEGRADED, LEARNED, FLAT)  # precedence order
FAILED = (COLLAPSED, DEGRADED)  # what the fit and the bound count
DROP_FLOOR = 0.05  # a drop smaller than this is never "degraded"
DROP_SE = 3.0  # ... nor one within this many standard errors of the difference
SPIKE_FACTOR = 100.0
SPIKE_STEPS = 3
SUSTAINED = 2
KL = "mismatch/k3_kl"
AXIS = DOSE  # the map's fitted axis: the run's level dose per token (analysis.evidence.dose)
RUN_MEDIAN = "kl"  # the run's median KL over steps: a secondary view, partly an outcome, never fitted
PER_RESPONSE = {DOSE: DOSE_RESPONSE}  # an axis's per-response column, where it has one
AXIS_NAMES = {DOSE: "level dose", RUN_MEDIAN: "run-median mismatch KL"}  # what the text calls each axis
# a measured KL at or below this is float rounding between two computations of one distribution (a
# noise-free engine measures ~3e-14; the smallest engine noise of the stability suites, 9.5e-5): no mismatch
KL_FLOOR = 1e-8
LN2_SHARE = "mismatch/frac_gt_ln2"
DRIFT_EXPERT, DRIFT_TOKEN = "moe/drift_expert_1", "moe/drift_1"
# swept fields that move the mismatch or the routing's volatility: sweeping one shows the map
REWARD, GRAD_NORM = "reward/mean", "grad/norm"
MACHINE = ("time/", "perf/", "gpu/")  # columns that measure the machine a run ran on, not its training
# why a cell (a level and a seed) is degenerate: it carries no information about any arm
INERT = "reward and gradient zero at every step"
IDENTICAL = "every arm's run the same metrics bit for bit"
KNOBS = ("rollout.engine_options.router_noise", "rollout.engine_options.logit_noise", "rollout.temperature",
         "train.router_lr_scale", "train.lr")


# ------------------------------------------------------------------------------ the classes of one run


def drop_margin(se: float) -> float:
    """How far below the start a point must be to count: max(0.05, 3 SE); 0.05 where SE is unknown."""
    return max(DROP_FLOOR, DROP_SE * se) if np.isfinite(se) else DROP_FLOOR


def below_start(points: pd.DataFrame) -> np.ndarray:
    """Per point after the first (the start): its score is below start - drop_margin(hypot(se_start,
    se_point)). `points`: columns step, score, stderr, in step order."""
    start = points.iloc[0]
    later = points.iloc[1:]
    margins = [drop_margin(float(np.hypot(start["stderr"], se))) for se in later["stderr"]]
    return (later["score"].to_numpy(dtype=float) < start["score"] - np.array(margins, dtype=float)).astype(bool)


def final_drop(points: pd.DataFrame) -> tuple[int, float]:
    """(how many points at the end are all below their thresholds, the step of the first of them; NaN
    when none)."""
    below = below_start(points)
    n = len(below) - int(np.flatnonzero(~below)[-1]) - 1 if (~below).any() else len(below)
    return n, float(points["step"].iloc[len(points) - n]) if n else float("nan")


def grad_spike_step(steps: np.ndarray, norms: np.ndarray) -> float:
    """The first step of the first SPIKE_STEPS consecutive steps whose grad norm exceeds SPIKE_FACTOR x
    the run's median over its finite, non-zero grad norms; NaN when there is none."""
    scale = norms[np.isfinite(norms) & (norms != 0)]
    if not len(scale):
        return float("nan")
    above = np.asarray(norms > SPIKE_FACTOR * np.median(scale), dtype=int)  # NaN: not above; +inf: above
    streak = np.convolve(above, np.ones(SPIKE_STEPS, dtype=int), mode="valid")  # [steps - SPIKE_STEPS + 1]
    hits = np.flatnonzero(streak == SPIKE_STEPS)
    return float(steps[hits[0]]) if len(hits) else float("nan")


def window_point(step: float, rewards: np.ndarray) -> dict:
    se = float(np.std(rewards, ddof=1) / np.sqrt(len(rewards))) if len(rewards) > 1 else float("nan")
    return {"step": step, "score": float(np.mean(rewards)), "stderr": se}


def training_points(steps: np.ndarray, rewards: np.ndarray) -> pd.DataFrame:
    """The training reward's points (see the module): the start window, then end-window-long blocks
    counted back from the last step, in step order."""
    n = len(rewards)
    n_end = max(1, int(np.ceil(n * FINAL_FRACTION)))  # the windows of analysis.evidence.learning.training_rise
    n_start = max(1, min(START_STEPS, n - n_end))
    blocks = []
    first = n - n_end
    while first >= n_start:
        blocks.append(window_point(steps[first], rewards[first:first + n_end]))
        first -= n_end
    return pd.DataFrame([window_point(steps[0], rewards[:n_start]), *reversed(blocks)])


def held_out_points(evals: pd.DataFrame) -> pd.DataFrame:
    """One run's evaluations as points, in step order (standard errors NaN where not written)."""
    stderr = evals["stderr"] if "stderr" in evals else pd.Series(np.nan, index=evals.index)
    frame = pd.DataFrame({"step": evals["step"].astype(float), "score": evals["score"].astype(float),
                          "stderr": stderr.astype(float)})
    return frame.sort_values("step", kind="stable").reset_index(drop=True)


def drop_span_share(points: pd.DataFrame, dropped: int) -> float:
    """The share of the points' steps (first to last) that the last `dropped` points span (the first of
    them to the last point): how much of the run a sustained drop covers."""
    steps = points["step"].to_numpy(dtype=float)
    whole = steps[-1] - steps[0]
    return float((steps[-1] - steps[len(steps) - dropped]) / whole) if dropped and whole > 0 else 0.0


@dataclass(frozen=True)
class RunClass:
    outcome: str  # one of CLASSES
    step: float  # the step it happened (NaN for learned and flat)
    why: str


def classify(points: pd.DataFrame, stopped_at: float, stop_message: str, spike_at: float, p_rise: float,
             min_span: float = 0.0) -> RunClass:
    """A run's class (see the module). `points`: its outcome's points (the start first); `stopped_at`:
    its last step if the harness stopped it as collapsed, else NaN; `spike_at`: grad_spike_step's
    answer; `p_rise`: the gate's one-sided p (NaN where not judged); `min_span`: the share of the points'
    steps a sustained drop must span to be a collapse (analysis.evidence.outcome_rules: 0 under v1)."""
    dropped, drop_step = final_drop(points) if len(points) > 1 else (0, float("nan"))  # no evaluation: no drop
    reasons = []
    if np.isfinite(stopped_at):
        reasons.append((stopped_at, f"the harness stopped it at step {stopped_at:g}" +
                        (f" ({stop_message})" if stop_message else "")))
    if np.isfinite(spike_at):
        reasons.append((spike_at, f"grad/norm above {SPIKE_FACTOR:g}x its median for {SPIKE_STEPS} steps from step "
                                  f"{spike_at:g}"))
    if dropped >= SUSTAINED and drop_span_share(points, dropped) >= min_span:
        reasons.append((drop_step, f"below start - max({DROP_FLOOR:g}, {DROP_SE:g} SE) from step {drop_step:g} to the "
                                   f"end ({dropped} points)"))
    if reasons:
        reasons.sort(key=lambda r: r[0])
        return RunClass(COLLAPSED, reasons[0][0], "; ".join(why for _, why in reasons))
    if dropped:
        return RunClass(DEGRADED, drop_step, f"the last point is below start - max({DROP_FLOOR:g}, {DROP_SE:g} SE)")
    if np.isfinite(p_rise) and p_rise < ALPHA:
        return RunClass(LEARNED, float("nan"), f"rose from its start, one-sided p = {p_rise:.2g}")
    return RunClass(FLAT, float("nan"), "neither rose nor fell beyond the thresholds")


# ------------------------------------------------------------------------------ every run's class


def judged(results: Results) -> Results:
    """The runs the map judges: finished, or stopped by the harness as collapsed, with one step or more."""
    runs = results.runs
    return results.select(is_finished(runs) | ((runs["status"] == COLLAPSED) & (runs["steps"] > 0)))


def run_median(frame: pd.DataFrame, column: str) -> float:
    """The median over one run's steps (`frame`) of `column`'s finite values; NaN where there is none."""
    values = frame[column].to_numpy(dtype=float) if column in frame else np.array([])
    values = values[np.isfinite(values)]
    return float(np.median(values)) if len(values) else float("nan")


def run_classes(results: Results) -> pd.DataFrame:
    """One row per judged run (class_rows without the runs too short to judge)."""
    rows = class_rows(results)
    return rows[rows["outcome"] != TOO_SHORT].reset_index(drop=True) if len(rows) else rows


def class_rows(results: Results) -> pd.DataFrame:
    """One row per run judged() keeps, those too short for the gate with the class TOO_SHORT: its group's cell, arm, seed, class with its step and why, the
    reward it was judged on (start, final, change), and what the map plots against: the median over steps
    of `mismatch/k3_kl` (`kl`) and `mismatch/frac_gt_ln2`, the median drift after one update
    (`drift_expert_1`, `drift_1`), `router_lr_scale` (config.yaml `train.router_lr_scale`, 1 where absent),
    its last step, its suite's outcome rules and evaluation draws (`eval_problems`, `eval_samples`), its
    sweep values (`sweep/<name>` columns) and its level's dose (`dose`, `dose_response`)."""
    ended = judged(results)
    every = groups(ended)
    rows = []
    for group in every:
        subset = group_subset(ended, group)
        done = finished(subset)
        found = source(done if len(done.runs) else subset)
        gate = learning_rows(done)[0] if len(done.runs) else pd.DataFrame(columns=["label", "seed", "p_rise"])
        p_of = dict(zip(zip(gate["label"], gate["seed"]), gate["p_rise"]))
        evals = own_evals(subset) if found.kind == HELD_OUT else None
        for run, scale in zip(subset.runs.itertuples(), subset.runs["router_lr_scale"].to_numpy(dtype=float)):
            steps = subset.metrics[(subset.metrics["label"] == run.label) & (subset.metrics["seed"] == run.seed)]
            steps = steps.sort_values("step")
            step_numbers = steps["step"].to_numpy(dtype=float)
            if evals is not None:
                points = held_out_points(evals[(evals["label"] == run.label) & (evals["seed"] == run.seed)])
            else:
                points = training_points(step_numbers, steps["reward/mean"].to_numpy(dtype=float))
            stopped = step_numbers[-1] if run.status == COLLAPSED else float("nan")
            p_rise = float(p_of.get((run.label, run.seed), float("nan")))
            short = "too short for the gate's windows" if np.isfinite(steps["reward/mean"].to_numpy(dtype=float)).any() \
                else "no finite training reward to judge"
            verdict = RunClass(TOO_SHORT, float("nan"), short) \
                if evals is None and run.status != COLLAPSED and not np.isfinite(p_rise) else \
                classify(points, stopped, str(run.message or ""),
                         grad_spike_step(step_numbers, steps["grad/norm"].to_numpy(dtype=float)), p_rise,
                         collapse_share(suite_rules(run.settings)))
            start = float(points["score"].iloc[0]) if len(points) else float("nan")
            final = float(points["score"].iloc[-1]) if len(points) > 1 else float("nan")
            sweep = {c: steps[c].iloc[0] for c in steps.columns if c.startswith("sweep/") and steps[c].notna().any()}
            rows.append({"suite": run.suite, "facet": run.facet, "cell": group_title(group, every) or "(no sweep)",
                         "arm": run.arm, "label": run.label, "seed": run.seed, "status": run.status,
                         "outcome": verdict.outcome, "step": verdict.step, "why": verdict.why, "source": found.kind,
                         "start": start, "final": final, "change": final - start,
                         "kl": run_median(steps, KL), "frac_gt_ln2": run_median(steps, LN2_SHARE),
                         "drift_expert_1": run_median(steps, DRIFT_EXPERT), "drift_1": run_median(steps, DRIFT_TOKEN),
                         "router_lr_scale": float(scale), "last_step": float(step_numbers[-1]),
                         "rules": suite_rules(run.settings), **evaluation_draws(run.settings), **sweep})
    frame = pd.DataFrame(rows)  # each level's dose (analysis.evidence.dose), from the runs on the map only
    return with_doses(frame, ended.metrics, pooled=frame[frame["outcome"] != TOO_SHORT]) if rows else frame


def failed(classes: pd.DataFrame) -> pd.Series:
    """Degraded or collapsed, per run."""
    return classes["outcome"].isin(FAILED)


def sweep_names(frame: pd.DataFrame) -> list[str]:
    """The swept fields' short names among `frame`'s columns (`sweep/<name>`)."""
    return [c.split("/", 1)[1] for c in frame.columns if c.startswith("sweep/") and frame[c].notna().any()]


def knob_swept(name: str) -> bool:
    """Whether a sweep's short name (the path's last part, or the whole path) is one of KNOBS."""
    return any(name in (knob, knob.rsplit(".", 1)[-1]) for knob in KNOBS)


def map_applies(results: Results) -> bool:
    """The map is shown where the judged runs span more than one group (suite and sweep point), or
    sweep one of KNOBS."""
    ended = judged(results)
    return len(groups(ended)) > 1 or any(knob_swept(n) for n in sweep_names(ended.metrics))


# ------------------------------------------------------------------------------ failure against the dose


def on_kl_axis(classes: pd.DataFrame, axis: str = AXIS) -> pd.Series:
    """Per run: whether it has a place on the map's axis (its `axis` column, its level's dose per token
    or, as the secondary view, the run's median KL, above KL_FLOOR)."""
    return classes[axis] > KL_FLOOR


def kl_axis(classes: pd.DataFrame, axis: str = AXIS) -> pd.DataFrame:
    """The runs on the axis (on_kl_axis), with `log_kl` = log10 of their `axis` value and `failed`."""
    placed = classes[on_kl_axis(classes, axis)]
    return placed.assign(log_kl=np.log10(placed[axis].to_numpy(dtype=float)), failed=failed(placed).to_numpy())


def arm_fit(classes: pd.DataFrame, axis: str = AXIS) -> LogisticFit | str:
    """One arm's fit of P(failure) on log10 of `axis` (the level's dose per token; the run-median KL
    only as the secondary view), or the reason it has none."""
    placed = kl_axis(classes, axis)
    x, y = placed["log_kl"].to_numpy(dtype=float), placed["failed"].to_numpy(dtype=bool)
    reason = f"no run has a {AXIS_NAMES[axis]} above {KL_FLOOR:g}" if len(x) == 0 else no_fit_reason(x, y)
    if reason:
        return reason
    try:
        return fit_logistic(x, y)
    except (ValueError, np.linalg.LinAlgError) as err:  # the report says why, and reads the cells instead
        return str(err).removeprefix("no logistic fit: ")


def survival(classes: pd.DataFrame) -> pd.DataFrame:
    """Kaplan-Meier share of `classes`' runs not yet collapsed against step (scipy.stats.ecdf): a
    collapsed run is an event at its collapse step, every other run censored at its last step. Columns
    step, surviving; starts at (0, 1)."""
    collapsed = classes["outcome"] == COLLAPSED
    data = stats.CensoredData(uncensored=classes.loc[collapsed, "step"].to_numpy(dtype=float),
                              right=classes.loc[~collapsed, "last_step"].to_numpy(dtype=float))
    sf = stats.ecdf(data).sf
    return pd.DataFrame({"step": [0.0, *sf.quantiles], "surviving": [1.0, *sf.probabilities]})


# ------------------------------------------------------------------------------ degenerate cells


def inert(steps: pd.DataFrame) -> bool:
    """Whether one run's training reward (`reward/mean`) and gradient norm (`grad/norm`) are 0 at every
    step: no response was ever rewarded, no update ever moved the policy (a run that logged neither, or
    has no step, is not said to be inert)."""
    if not len(steps) or any(c not in steps for c in (REWARD, GRAD_NORM)):
        return False
    return bool((steps[REWARD].to_numpy(dtype=float) == 0).all() and (steps[GRAD_NORM].to_numpy(dtype=float) == 0).all())


def training_columns(steps: pd.DataFrame) -> set[str]:
    """The numeric columns of one run's steps that it logged (a value at one step or more), less those that
    measure the machine (MACHINE: time, throughput, GPU memory)."""
    return {c for c in steps.columns if pd.api.types.is_numeric_dtype(steps[c]) and not pd.api.types.is_bool_dtype(steps[c])
            and not c.startswith(MACHINE) and steps[c].notna().any()}


def bits(values: pd.Series) -> bytes:
    """A column's values as float64 bytes, every NaN the same NaN: equal bytes are the same values bit for bit."""
    x = values.to_numpy(dtype=float)
    return np.where(np.isnan(x), np.nan, x).tobytes()


def same_bit_for_bit(runs: list[pd.DataFrame]) -> bool:
    """Whether every run of `runs` (each its steps in step order) has the same steps and the same values,
    bit for bit, in every column all of them logged (training_columns)."""
    shared = set.intersection(*(training_columns(r) for r in runs)) | {"step"}
    if any(len(r) != len(runs[0]) or "step" not in r for r in runs):
        return False
    return all(len({bits(r[c]) for r in runs}) == 1 for c in sorted(shared))


def degenerate_cells(classes: pd.DataFrame, metrics: pd.DataFrame) -> pd.DataFrame:
    """The cells (suite, level, seed) of `classes` (run_classes' rows) that carry no information about any
    arm: every run there is inert, or the cell holds runs of two or more arms and all of them have the same
    metrics bit for bit. One row each: suite, cell, seed, runs, why (INERT or IDENTICAL)."""
    columns = ["suite", "cell", "seed", "runs", "why"]
    if not len(classes):
        return pd.DataFrame(columns=columns)
    steps = {key: frame.sort_values("step", kind="stable").reset_index(drop=True)
             for key, frame in metrics.groupby(["suite", "label", "seed"], sort=False)}
    rows = []
    for (suite, cell, seed), runs in classes.groupby(["suite", "cell", "seed"], sort=False):
        frames = [steps.get((suite, label, seed), pd.DataFrame()) for label in runs["label"]]
        if all(inert(f) for f in frames):
            rows.append({"suite": suite, "cell": cell, "seed": seed, "runs": len(runs), "why": INERT})
        elif runs["arm"].nunique() > 1 and same_bit_for_bit(frames):
            rows.append({"suite": suite, "cell": cell, "seed": seed, "runs": len(runs), "why": IDENTICAL})
    return pd.DataFrame(rows, columns=columns)


def in_cells(classes: pd.DataFrame, cells: pd.DataFrame) -> pd.Series:
    """Per row of `classes`: whether its run lies in one of `cells` (rows suite, cell, seed)."""
    keys = set(zip(cells["suite"], cells["cell"], cells["seed"]))
    return pd.Series([key in keys for key in zip(classes["suite"], classes["cell"], classes["seed"])],
                     index=classes.index, dtype=bool)


# ------------------------------------------------------------------------------ the boundary per arm


@dataclass(frozen=True)
class Boundary:
    """Where one arm stops being stable: its runs, failures, the range of the axis measured, and either the
    fit's 0.5 crossing (`fit`) or, without a fit (`why_no_fit`), the largest cell with no failed seed and
    the smallest where most seeds failed (cells: sweep points; a cell's place the median of its runs':
    its level dose). Values are on `axis` (the level dose per token by default); the `response_*` fields
    are the same cells' doses per response (NaN on an axis without one)."""

    arm: str
    runs: int
    failures: int
    collapses: int
    off_axis: int  # runs off the axis (no value above KL_FLOOR)
    kl_low: float
    kl_high: float
    fit: LogisticFit | None
    why_no_fit: str
    largest_held: float  # NaN where every cell had a failure
    smallest_majority: float  # NaN where no cell had a majority of failures
    cells: int = 1  # the cells (sweep points) its runs are in
    fewest_in_cell: int = 0  # the fewest runs in one of them
    axis: str = AXIS
    response_low: float = float("nan")
    response_high: float = float("nan")
    response_held: float = float("nan")
    response_majority: float = float("nan")

    @property
    def bound(self) -> float:
        """With no failure: the upper bound at 95% on the failure rate in each cell (the loosest cell's: its
        fewest runs), never one over runs pooled across cells (NaN otherwise)."""
        return zero_event_bound(self.fewest_in_cell) if self.failures == 0 and self.fewest_in_cell else float("nan")


def extreme(frame: pd.DataFrame, largest: bool) -> tuple[float, float]:
    """(`at`, `per_response`) of `frame`'s row with the largest (else smallest) `at`; NaNs for no row."""
    if not len(frame):
        return float("nan"), float("nan")
    at = frame["at"].to_numpy(dtype=float)
    i = int(np.argmax(at) if largest else np.argmin(at))  # the first of equals, as idxmax
    return float(at[i]), float(frame["per_response"].to_numpy(dtype=float)[i])


def boundary(arm: str, classes: pd.DataFrame, axis: str = AXIS) -> Boundary:
    """The boundary of one arm's runs (`classes`: rows of run_classes) on `axis`."""
    placed = kl_axis(classes, axis)
    response = PER_RESPONSE.get(axis, "")  # "": no per-response column
    placed = placed.assign(at=placed[axis], per_response=placed[response] if response in placed else float("nan"))
    cells = placed.groupby("cell", sort=False).agg(at=("at", "median"), per_response=("per_response", "median"),
                                                   share=("failed", "mean"))
    held, majority = extreme(cells[cells["share"] == 0], True), extreme(cells[cells["share"] > 0.5], False)
    low, high = extreme(placed, False), extreme(placed, True)
    fit = arm_fit(classes, axis)
    per_cell = classes.groupby("cell", sort=False).size()
    return Boundary(arm, len(classes), int(failed(classes).sum()), int((classes["outcome"] == COLLAPSED).sum()),
                    len(classes) - len(placed), low[0], high[0],
                    fit if isinstance(fit, LogisticFit) else None, fit if isinstance(fit, str) else "",
                    held[0], majority[0], len(per_cell), int(per_cell.min()) if len(per_cell) else 0,
                    axis, low[1], high[1], held[1], majority[1])


def boundaries(classes: pd.DataFrame, axis: str = AXIS) -> list[Boundary]:
    """Every arm's boundary on `axis`, in the order the arms first appear."""
    return [boundary(str(arm), frame, axis) for arm, frame in classes.groupby("arm", sort=False)]


@dataclass(frozen=True)
class StabilityMap:
    classes: pd.DataFrame  # run_classes, less the runs of degenerate cells: what the fits, bounds and tests read
    bounds: list[Boundary]  # one per arm
    too_short: int = 0  # finished runs too short for the gate, left off the map
    left_out: pd.DataFrame = field(default_factory=pd.DataFrame)  # run_classes' rows of the degenerate cells
    degenerate: pd.DataFrame = field(default_factory=pd.DataFrame)  # degenerate_cells' rows

    @property
    def every_run(self) -> pd.DataFrame:
        """Every judged run, those of degenerate cells marked (`degenerate`: the cell's why, "" elsewhere)."""
        cells = self.degenerate
        why: dict[tuple, str] = dict(zip(zip(cells["suite"], cells["cell"], cells["seed"]), cells["why"].astype(str))) \
            if len(cells) else {}
        both = pd.concat([self.classes, self.left_out], ignore_index=True) if len(self.left_out) else self.classes
        marks = pd.Series([why.get(key, "") for key in zip(both["suite"], both["cell"], both["seed"])], index=both.index,
                          dtype=object)
        return both.assign(degenerate=marks)


def stability_map(results: Results) -> StabilityMap | None:
    """The map of `results` (every run: it judges the finished and the collapsed ones), or None where it
    does not apply (map_applies), no run is long enough to judge or every judged run lies in a degenerate
    cell (degenerate_cells: nothing would be left to place or compare). The runs of degenerate cells are
    left out of `classes`, so of every fit, bound and test, and kept in `left_out`."""
    if not map_applies(results):
        return None
    rows = class_rows(results)
    short = rows["outcome"] == TOO_SHORT if len(rows) else pd.Series(dtype=bool)
    judged_rows = rows[~short].reset_index(drop=True)
    if not len(judged_rows):
        return None
    cells = degenerate_cells(judged_rows, judged(results).metrics)
    out = in_cells(judged_rows, cells)
    if out.all():  # nothing on the map says anything about an arm: no map
        return None
    classes, left_out = judged_rows[~out].reset_index(drop=True), judged_rows[out].reset_index(drop=True)
    return StabilityMap(classes, boundaries(classes), int(short.sum()), left_out, cells)
