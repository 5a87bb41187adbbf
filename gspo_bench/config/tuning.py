"""Tuning: every arm tuned on the same declared budget before the comparison (the suite's `tuning:`).

    tuning:
      trials: 8                       # per arm, each a short run of `budget` (or `budget_share` of the suite's)
      budget_share: 0.25
      seed: 0                         # of the quasi-random draw: the plan is known before any run
      seeds: [100, 101]               # trial seeds, disjoint from the comparison's
      select: {metric: countdown, rule: final}   # the suite task's validation score; final or auc
      spaces:
        all:  {lr: {log_uniform: [5.0e-5, 1.0e-3]}}
        gspo: {clip_low: {log_uniform: [3.0e-4, 3.0e-2]}, clip_high: {log_uniform: [4.0e-4, 4.0e-2]}}
        grpo: {clip_low: [0.1, 0.2, 0.3]}

A space maps an arm's own settings to a range, each by its dotted path inside the arm's entry, as a
sweep or `--set` spells it after `objectives.N.`: `clip_low`, `clip_high`, `lr`, `step_penalty` (the
entry's fields), `params.NAME` (an objective keyword), `correction.params.NAME` (its correction's),
or a `rollout.`/`train.` path the entry's `set:` may hold. The old spellings `kwargs.NAME` and
`correction.NAME` read as these, with a note (`gspo_bench.config.spelling`), so every record (the
trial plan, chosen.json, the report) holds the one spelling. `all` applies to every arm, an arm's own
space adds to it (and wins on a path both name). Trials are drawn from a scrambled Halton sequence
seeded with `seed` (one dimension per setting; a list is categorical), so the plan is deterministic
and every setting lies in its declared range. Trial runs score on the task's validation split
(`gspo_bench.tasks.validation`), never its test split; selection is `gspo_bench.suite.selection`.
This module is pure: no torch, no files.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

MAX_TRIALS = 1024  # per arm
ALL_ARMS = "all"  # the space key that applies to every arm
ENTRY_FIELDS = ("clip_low", "clip_high", "lr", "step_penalty")  # an entry's own numeric settings a space may tune
TRIALS_FOLDER = "tuning"  # OUT/<suite>/tuning/: the trial runs and chosen.json
_IN_ENTRY = "objectives.0"  # a space's paths are inside an entry: respelled as a suite's path under it


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class LogUniform(_Strict):
    log_uniform: tuple[float, float] = Field(description="[low, high], 0 < low < high: drawn uniformly in log space")

    @field_validator("log_uniform")
    @classmethod
    def _ordered(cls, v: tuple[float, float]) -> tuple[float, float]:
        if not 0 < v[0] < v[1]:
            raise ValueError(f"expected 0 < low < high, got {list(v)}")
        return v

    def value(self, u: float) -> float:
        low, high = self.log_uniform
        return float(math.exp(math.log(low) + u * (math.log(high) - math.log(low))))


class Uniform(_Strict):
    uniform: tuple[float, float] = Field(description="[low, high], low < high")

    @field_validator("uniform")
    @classmethod
    def _ordered(cls, v: tuple[float, float]) -> tuple[float, float]:
        if not v[0] < v[1]:
            raise ValueError(f"expected low < high, got {list(v)}")
        return v

    def value(self, u: float) -> float:
        low, high = self.uniform
        return float(low + u * (high - low))


Space = LogUniform | Uniform | Annotated[list[Any], Field(min_length=1)]


def space_points(space: Space) -> list[Any]:
    """The values of `space` a check tries: a list's every value, a range's two ends (every draw lies
    between them)."""
    if isinstance(space, list):
        return list(space)
    return list(space.log_uniform if isinstance(space, LogUniform) else space.uniform)


def space_value(space: Space, u: float) -> Any:
    """The setting a draw `u` in [0, 1) gives: a point of the range, or a list's ceil(u * n)-th value."""
    if isinstance(space, list):
        return space[min(int(u * len(space)), len(space) - 1)]
    return space.value(u)


class SelectConfig(_Strict):
    metric: str = Field(description="the evaluated score trials are chosen by: the suite's task by name (its "
                        "validation split's reward; the task must be in eval.tasks)")
    rule: Literal["final", "auc"] = Field("final", description="final: the score at a trial's last evaluation; "
                                          "auc: its mean over the trial's evaluations (area under the curve per step)")


class TrialBudget(_Strict):
    value: float = Field(gt=0, description="what one trial run spends, in the suite budget's kind")


class TuningConfig(_Strict):
    trials: int = Field(ge=1, le=MAX_TRIALS, description="trials per arm (each a setting drawn from the arm's space)")
    arm_trials: dict[str, int] = Field(default_factory=dict, description="another count of trials for an arm by "
                                       "label (unequal tuning budgets: refused unless allow_unequal)")
    budget: TrialBudget | None = Field(None, description="{value: V}: each trial spends V in the suite budget's kind")
    budget_share: float | None = Field(None, gt=0, le=1, description="each trial spends this share of the suite's "
                                       "budget (instead of budget)")
    seed: int = Field(0, ge=0, le=2**32 - 1, description="seed of the quasi-random draw of the trials")
    seeds: list[Annotated[int, Field(ge=0, le=2**32 - 1)]] = Field(
        min_length=1, description="seeds of every trial's runs (disjoint from the suite's seeds)")
    select: SelectConfig
    spaces: dict[str, dict[str, Space]] = Field(min_length=1, description="arm label (or all) -> {setting: "
                                                "{log_uniform: [lo, hi]} | {uniform: [lo, hi]} | [values]}")
    allow_unequal: bool = Field(False, description="compare arms whose tuning budgets differ (an arm untuned, or "
                                "other trial counts), saying so in the report")

    @field_validator("spaces", mode="before")
    @classmethod
    def _one_spelling(cls, v: Any) -> Any:
        """Every space's paths in the one spelling (`space_path`), each old spelling noted; a setting
        spelled both ways in one space is refused."""
        from gspo_bench.config.spelling import note

        if not isinstance(v, dict):
            return v
        spaces: dict[Any, Any] = {}
        for arm, space in v.items():
            if not isinstance(space, dict):
                spaces[arm] = space
                continue
            spelled: dict[str, str] = {}  # one spelling -> as the space wrote it
            for path in space:
                new = space_path(path) if isinstance(path, str) else path
                if new in spelled:
                    raise ValueError(f"{arm}: {spelled[new]} and {path} are one setting spelled twice; write {new} only")
                if new != path:
                    note(f"tuning.spaces.{arm}", path, new)
                spelled[new] = path
            spaces[arm] = {new: space[path] for new, path in spelled.items()}
        return spaces

    @model_validator(mode="after")
    def _well_formed(self) -> TuningConfig:
        if (self.budget is None) == (self.budget_share is None):
            raise ValueError("give budget ({value: V}) or budget_share (a share of the suite's), one of them")
        if len(set(self.seeds)) != len(self.seeds):
            raise ValueError(f"seeds must be distinct, got {self.seeds}")
        empty = [arm for arm, space in self.spaces.items() if not space]
        if empty:
            raise ValueError(f"spaces.{empty[0]}: empty search space (name at least one setting and its range)")
        low = {arm: n for arm, n in self.arm_trials.items() if not 1 <= n <= MAX_TRIALS}
        if low:
            raise ValueError(f"arm_trials: {low}: each count must be in 1..{MAX_TRIALS}")
        return self

    def trial_value(self, suite_value: float) -> float:
        """What one trial spends, in the suite budget's kind."""
        return self.budget.value if self.budget is not None else float(self.budget_share or 0) * suite_value

    def arm_space(self, label: str) -> dict[str, Space]:
        """The settings arm `label` is tuned over ({} for an untuned arm): `all`'s, then its own."""
        return {**self.spaces.get(ALL_ARMS, {}), **self.spaces.get(label, {})}

    def arm_trial_count(self, label: str) -> int:
        """Trials of arm `label` (0 for an arm without a space)."""
        return self.arm_trials.get(label, self.trials) if self.arm_space(label) else 0


def draws(dimensions: int, n: int, seed: int) -> list[list[float]]:
    """n points of a scrambled Halton sequence in [0, 1)^dimensions, deterministic for `seed`."""
    from scipy.stats import qmc

    return qmc.Halton(d=dimensions, scramble=True, seed=seed).random(n).tolist()


def trial_settings(space: dict[str, Space], n: int, seed: int) -> list[dict[str, Any]]:
    """The settings of n trials of `space`, {path: value} each, in the order drawn (trial 0 first)."""
    paths = sorted(space)
    return [{p: space_value(space[p], u) for p, u in zip(paths, point, strict=True)} for point in draws(len(paths), n, seed)]


def space_path(path: str) -> str:
    """`path` (a setting as a space names it) in the one spelling: `kwargs.NAME` -> `params.NAME`,
    `correction.NAME` -> `correction.params.NAME` (`gspo_bench.config.spelling`, as for `--set` and sweeps)."""
    from gspo_bench.config.spelling import respell_path

    return respell_path(f"{_IN_ENTRY}.{path}").removeprefix(f"{_IN_ENTRY}.")


def correction_param(path: str) -> str | None:
    """NAME of a `correction.params.NAME` path (in the one spelling), None for any other path."""
    head, _, name = path.partition("correction.params.")
    return name if not head and name else None


def with_settings(entry: Any, settings: dict[str, Any]) -> Any:
    """`entry` (an ObjectiveEntry) with `settings` ({path: value}, paths as a space names them, old
    spellings read: `space_path`) applied and validated; ValueError naming a path the entry cannot take."""
    data = entry.model_dump(mode="json")
    for given, value in settings.items():
        path = space_path(given)
        head, _, rest = path.partition(".")
        if path in ENTRY_FIELDS:
            data[path] = value
        elif head == "params" and rest:
            data["params"] = {**data["params"], rest: value}
        elif correction_param(path):
            correction = data["correction"] or {}
            name = correction_param(path)
            data["correction"] = {**correction, "params": {**correction.get("params", {}), name: value}}
        elif head in ("rollout", "train") and rest:
            data["set"] = {**data["set"], path: value}
        else:
            raise ValueError(f"{given}: not a setting a space can tune (one of {', '.join(ENTRY_FIELDS)}, params.NAME, "
                             "correction.params.NAME, rollout.PATH, train.PATH)")
    return type(entry).model_validate(data)


def entry_setting(data: dict[str, Any], path: str) -> Any:
    """The value at `path` (as a space names it) of an entry as `model_dump(mode="json")` holds it: where
    `with_settings` writes that setting; KeyError where the entry holds none."""
    path = space_path(path)
    head, _, rest = path.partition(".")
    if path in ENTRY_FIELDS:
        return data[path]
    if head == "params" and rest:
        return data["params"][rest]
    name = correction_param(path)
    if name:
        return (data.get("correction") or {}).get("params", {})[name]
    if head in ("rollout", "train") and rest:
        return data["set"][path]
    raise KeyError(path)


@dataclass(frozen=True)
class Trial:
    """One trial of one arm: its index among the arm's trials, its settings and the entry it runs."""

    arm: str
    index: int
    settings: dict[str, Any]
    entry: Any  # ObjectiveEntry, labelled `<arm>.t<index>`

    @property
    def label(self) -> str:
        return trial_label(self.arm, self.index)


def trial_label(arm: str, index: int) -> str:
    return f"{arm}.t{index:02d}"


def plan_trials(suite: Any) -> list[Trial]:
    """Every trial of every tuned arm of `suite` (a SuiteConfig with `tuning`), arms in suite order; the
    same plan for the same suite, whatever the machine."""
    tuning: TuningConfig = suite.tuning
    trials = []
    for entry in suite.objectives:
        arm = entry.run_label
        space = tuning.arm_space(arm)
        for index, settings in enumerate(trial_settings(space, tuning.arm_trial_count(arm), tuning.seed) if space else []):
            tuned = with_settings(entry, settings).model_copy(update={"label": trial_label(arm, index)})
            trials.append(Trial(arm=arm, index=index, settings=settings, entry=tuned))
    return trials


def space_entries(suite: Any) -> list[tuple[str, Any]]:
    """(where, entry) for each value a tuning space of `suite` can give (`space_points`): its arm's entry
    with that one value set, `where` naming the space's key, the path and the value; ValueError (naming
    them) for a value the entry refuses, as it would refuse the setting in the suite itself."""
    tuning: TuningConfig = suite.tuning
    found = []
    for entry in suite.objectives:
        arm = entry.run_label
        for path, space in tuning.arm_space(arm).items():
            key = arm if path in tuning.spaces.get(arm, {}) else ALL_ARMS
            for value in space_points(space):
                where = f"tuning.spaces.{key}.{path} = {value!r} (arm {arm})"
                try:
                    found.append((where, with_settings(entry, {path: value})))
                except ValueError as err:
                    problem = err.errors()[0]["msg"].removeprefix("Value error, ") if hasattr(err, "errors") else str(err)
                    raise ValueError(f"{where}: {problem}") from None
    return found


def arms_ruleset(suite: Any) -> dict[str, str]:
    """Each arm's ruleset by label: `tuned` (a search space in `tuning:`) or `defaults` (run as declared)."""
    tuning: TuningConfig | None = suite.tuning
    return {e.run_label: "tuned" if tuning is not None and tuning.arm_space(e.run_label) else "defaults"
            for e in suite.objectives}


def trial_suite(suite: Any, trials: list[Trial] | None = None) -> Any:
    """The suite of `suite`'s trial runs: every trial (`trials`, planned already, else `plan_trials`) an arm
    (labelled `<arm>.tNN`), on the trial seeds, at the trial budget, scored on the task's validation split
    (`held_out: validation`); named `tuning`, so its runs go to OUT/<suite>/tuning/."""
    from gspo_bench.tasks.validation import HELD_OUT_PARAM

    tuning: TuningConfig = suite.tuning
    data = suite.model_dump(mode="json")
    data |= {"name": TRIALS_FOLDER, "tuning": None, "analysis": None, "seeds": list(tuning.seeds),
             "objectives": [t.entry.model_dump(mode="json") for t in (plan_trials(suite) if trials is None else trials)]}
    data["task"]["params"] = {**data["task"]["params"], HELD_OUT_PARAM: "validation"}
    data["budget"]["value"] = tuning.trial_value(suite.budget.value)
    return type(suite).model_validate(data)


def comparison_suite(suite: Any, chosen: dict[str, dict[str, Any]]) -> Any:
    """`suite` with each tuned arm's entry carrying its chosen settings (`chosen`: arm label -> {path:
    value}, as chosen.json holds them); ValueError for a tuned arm without a choice or a choice for no arm."""
    tuned = [arm for arm, rule in arms_ruleset(suite).items() if rule == "tuned"]
    missing, extra = sorted(set(tuned) - set(chosen)), sorted(set(chosen) - set(tuned))
    if missing or extra:
        raise ValueError(f"chosen settings for arms {sorted(chosen)}, but the tuned arms are {tuned}"
                         + (f": no choice for {missing}" if missing else f": {extra} not tuned"))
    entries = [with_settings(e, chosen[e.run_label]) if e.run_label in chosen else e for e in suite.objectives]
    return suite.model_copy(update={"objectives": entries})


def check_tuning(suite: Any) -> None:
    """ValueError (one line, naming the `tuning.` field) for a tuning section this suite cannot run:
    a sweep, an arm that is not the suite's, a setting an arm's objective does not take, a space value
    its arm's entry refuses, a trial budget beyond the suite's, trial seeds shared with the comparison,
    a selection metric the trials do not evaluate, unequal tuning budgets (without allow_unequal), a
    validation split overlapping the test split."""
    tuning: TuningConfig = suite.tuning
    if suite.sweep:
        raise ValueError("tuning: a suite with a sweep cannot be tuned (each sweep point would need its own "
                         "trials): tune one point per suite")
    arms = [e.run_label for e in suite.objectives]
    for where, keys in (("spaces", [k for k in tuning.spaces if k != ALL_ARMS]), ("arm_trials", list(tuning.arm_trials))):
        unknown = [k for k in keys if k not in arms]
        if unknown:
            raise ValueError(f"tuning.{where}.{unknown[0]}: not an arm of this suite; its arms: {', '.join(arms)} "
                             f"(or {ALL_ARMS})")
    shared = sorted(set(tuning.seeds) & set(suite.seeds))
    if shared:
        raise ValueError(f"tuning.seeds: {shared} also seed the comparison; trial seeds must be disjoint from seeds "
                         f"{suite.seeds} (choices are scored on other runs than the ones compared)")
    if tuning.budget is not None and tuning.budget.value > suite.budget.value:
        raise ValueError(f"tuning.budget.value ({tuning.budget.value:g}) is larger than the suite's budget "
                         f"({suite.budget.kind} = {suite.budget.value:g}): a trial is at most one comparison run")
    check_metric(suite)
    check_equal_budgets(tuning, arms)
    for entry in suite.objectives:
        check_space(suite, entry, tuning.arm_space(entry.run_label))
    space_entries(suite)  # every value a space can give validates as its arm's entry (preflight runs them)
    plan_trials(suite)  # and so does every drawn setting
    check_validation_split(suite)


def check_metric(suite: Any) -> None:
    """The selection metric is the suite task's evaluated score (the one trials compute on the validation split)."""
    metric = suite.tuning.select.metric
    if metric != suite.task.name or metric not in suite.eval.tasks:
        scored = [t for t in suite.eval.tasks if t == suite.task.name]
        valid = f"the only one is {scored[0]!r}" if scored else (
            f"add the suite's task {suite.task.name!r} to eval.tasks to have one")
        raise ValueError(f"tuning.select.metric {metric!r}: not a score the trials evaluate on the validation "
                         f"split; {valid}")


def check_equal_budgets(tuning: TuningConfig, arms: list[str]) -> None:
    """Every arm tuned with the same number of trials (an untuned arm has 0), unless allow_unequal."""
    counts = {arm: tuning.arm_trial_count(arm) for arm in arms}
    if len(set(counts.values())) > 1 and not tuning.allow_unequal:
        listed = ", ".join(f"{arm} {n}" for arm, n in counts.items())
        raise ValueError(f"tuning: arms tuned on unequal budgets (trials: {listed}); give every arm a space and the "
                         "same trials, or set tuning.allow_unequal: true to compare them anyway")


def check_space(suite: Any, entry: Any, space: dict[str, Space]) -> None:
    """ValueError naming a setting of `space` that arm `entry`'s objective (or correction) does not take."""
    import inspect

    from gspo_bench.config import sweep
    spec = entry.spec()
    takes = set(inspect.signature(spec.fn).parameters)
    for path in space:
        head, _, rest = path.partition(".")
        where = f"tuning.spaces ({entry.run_label}).{path}"
        if path in ("clip_low", "clip_high") and path not in takes:
            raise ValueError(f"{where}: objective {entry.objective} takes no {path}")
        if head == "params" and rest not in spec.params():
            raise ValueError(f"{where}: objective {entry.objective} takes no keyword {rest!r}; it takes: "
                             f"{', '.join(sorted(spec.params())) or 'none'}")
        if head == "correction":
            check_correction_path(where, entry, correction_param(path))
        if head in ("rollout", "train"):
            try:
                sweep.field_of(suite.model_dump(mode="json"), path)
            except KeyError as err:
                raise ValueError(f"{where}: {err.args[0]}") from None


def check_correction_path(where: str, entry: Any, name: str | None) -> None:
    """ValueError at `where` (the space's path) unless arm `entry` has a correction that takes parameter
    `name` (None: the path names no parameter, `correction.kind`; a wrong name was refused as the
    suite's own `correction:`, naming no tuning path)."""
    from gspo_bench.objectives.corrections import correction_spec

    if entry.correction is None:
        raise ValueError(f"{where}: arm {entry.run_label} has no correction to tune")
    kind = entry.correction["kind"]
    takes = sorted(correction_spec(kind).params())
    if name is None:
        raise ValueError(f"{where}: not a parameter of correction {kind}; a space tunes one as "
                         f"correction.params.NAME, NAME one of: {', '.join(takes) or 'none'}")
    if name not in takes:
        raise ValueError(f"{where}: correction {kind} takes no parameter {name!r}; it takes: {', '.join(takes) or 'none'}")


def check_validation_split(suite: Any) -> None:
    """The task's validation split holds eval.limit problems, none of them in its test split."""
    from gspo_bench.tasks import make_task
    from gspo_bench.tasks.validation import HELD_OUT_PARAM

    try:
        make_task(suite.task.name, **{**suite.task.params, HELD_OUT_PARAM: "validation"}).test_examples(suite.eval.limit)
    except (ValueError, OSError, RuntimeError) as err:
        raise ValueError(f"tuning: task {suite.task.name!r} validation split: {err}") from None
