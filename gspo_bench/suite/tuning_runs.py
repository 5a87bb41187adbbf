"""A tuned suite's trials on disk: their runs (OUT/<suite>/tuning/<arm>.tNN-s<seed>/), the table of
their validation scores, the choice written to OUT/<suite>/tuning/chosen.json, and the comparison
suite built from it. `gspo-bench run` runs the trials first, then chooses, then the comparison;
`--resume` continues either phase, and a comparison never starts on settings other than those in
chosen.json (the file is written once, from finished trials, and read back on resume).

A trial's settings are what its runs ran: chosen.json takes them from each trial run's recorded
config.yaml, never from the plan, and a trial run whose recorded entry is not the one the suite plans
for it now (the tuning space, its seed or the arm edited since) is refused (`check_trials_as_planned`),
--allow-changed or not: its score belongs to the settings it ran, and pairing it with others would
compare the arms at values no trial tried."""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from gspo_bench.config import RunSpec, SuiteConfig
from gspo_bench.config.changes import entry_differences
from gspo_bench.config.tuning import (
    TRIALS_FOLDER,
    Trial,
    arms_ruleset,
    comparison_suite,
    entry_setting,
    plan_trials,
    trial_suite,
)
from gspo_bench.rundir.folder import RunDir, atomic_write_text
from gspo_bench.rundir.records import StatusRecord
from gspo_bench.suite.runner import plan_runs
from gspo_bench.suite.selection import choose, trial_scores

CHOSEN = "chosen.json"
ENDED = ("done", "collapsed")  # trial runs that spent their budget or collapsed on the way: scored as they are


@dataclass(frozen=True)
class Trials:
    """A tuned suite's trials under the results root `root`, planned once (`Trials.of`): every phase of a
    tuned suite (checking the started trial runs, running them, choosing, planning the comparison) reads
    this one plan."""

    suite: SuiteConfig
    root: Path
    plan: list[Trial]  # `plan_trials(suite)`
    trial_suite: SuiteConfig  # the suite of the trial runs (`config.tuning.trial_suite`)

    @classmethod
    def of(cls, suite: SuiteConfig, root: Path) -> Trials:
        trials = plan_trials(suite)
        return cls(suite=suite, root=root, plan=trials, trial_suite=trial_suite(suite, trials))

    @property
    def folder(self) -> Path:
        return self.root / self.suite.name / TRIALS_FOLDER

    @property
    def seeds(self) -> list[int]:
        assert self.suite.tuning is not None
        return list(self.suite.tuning.seeds)

    def run_dir(self, label: str, seed: int) -> Path:
        from gspo_bench.rundir.names import run_folder_name

        return self.folder / run_folder_name(label, seed)

    def runs(self) -> list[RunSpec]:
        """Every trial x trial seed as a run of the trial suite, under OUT/<suite>/tuning/; each starts from
        the weights the comparison's runs of its seed start from (the suite's warm start, not one of a task
        with another held-out split)."""
        runs = plan_runs(self.trial_suite, self.root / self.suite.name)
        return [dataclasses.replace(run, weights_suite=self.suite) for run in runs]

    def table(self) -> pd.DataFrame:
        """One row per evaluation of the selection metric of each finished trial run: arm, trial, seed,
        step, score (columns of `gspo_bench.suite.selection`); a trial run that failed or is unfinished gives none."""
        from gspo_bench.train import lm_eval_name

        assert self.suite.tuning is not None
        task = lm_eval_name(self.suite.tuning.select.metric)
        frames = []
        for trial in self.plan:
            for seed in self.seeds:
                run = RunDir(self.run_dir(trial.label, seed))
                status = run.read_status()
                if status is None or status["status"] not in ENDED or not (run.path / "eval.parquet").is_file():
                    continue
                rows = pd.read_parquet(run.path / "eval.parquet")
                rows = rows[rows["task"] == task]
                frames.append(pd.DataFrame({"arm": trial.arm, "trial": trial.index, "seed": seed,
                                            "step": rows["step"].to_numpy(), "score": rows["score"].to_numpy()}))
        columns = ["arm", "trial", "seed", "step", "score"]
        return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=columns)

    def ran_settings(self, trial: Trial) -> dict[str, Any] | None:
        """The settings (the paths the plan tunes) trial `trial` ran with, read from its runs' recorded
        config.yaml (None where none of them started); ValueError naming a trial run whose recorded entry is
        not the one planned for it now (`check_as_planned`)."""
        planned = trial.entry.model_dump(mode="json")
        ran = None
        for seed in self.seeds:
            run_dir = self.run_dir(trial.label, seed)
            entry = recorded_entry(run_dir, trial.label)
            if entry is None:
                continue
            differences = entry_differences(entry, planned)
            if differences:
                raise ValueError(f"{run_dir}: trial {trial.label} ran other settings than the suite plans for it now "
                                 f"({'; '.join(differences[:3])}{'; ...' if len(differences) > 3 else ''}): the "
                                 "tuning space, its seed or the arm changed since the trials ran, and a trial's score "
                                 "belongs to the settings it ran; put them back as they were, or run the edited suite "
                                 "into another folder (--out) to tune it anew")
            ran = {path: entry_setting(entry, path) for path in trial.settings}
        return ran

    def ran(self, trial: Trial) -> dict[str, Any]:
        """`ran_settings` of a trial whose runs ended; ValueError where none of them recorded its config."""
        ran = self.ran_settings(trial)
        if ran is None:
            raise ValueError(f"{self.folder}: no run of trial {trial.label} records its config.yaml, so what it ran "
                             "is unknown: move its run folders away and `gspo-bench run SUITE --resume` runs it again")
        return ran

    def check_as_planned(self) -> None:
        """ValueError naming the first started trial run whose recorded entry differs from its planned one
        (`ran_settings`), before any run starts: --resume --allow-changed continues runs with new settings,
        but never scores a trial under settings it did not run."""
        for trial in self.plan:
            self.ran_settings(trial)

    def chosen_record(self, table: pd.DataFrame) -> dict[str, Any]:
        """What chosen.json holds: the rule, each tuned arm's chosen trial and settings, and every trial's
        settings and score (NaN where its runs did not finish: written as null); the settings are those the
        trial's runs recorded (`ran_settings`), never the plan's."""
        suite = self.suite
        assert suite.tuning is not None
        select = suite.tuning.select
        trials = [dataclasses.replace(t, settings=self.ran(t)) for t in self.plan]
        scores = trial_scores(table, select.rule) if not table.empty else pd.DataFrame(columns=["arm", "trial", "score", "runs"])
        by_trial = {(str(r["arm"]), int(r["trial"])): (float(r["score"]), int(r["runs"])) for r in scores.to_dict("records")}
        expected = {t.arm for t in trials}
        best = choose(scores.merge(pd.DataFrame({"arm": sorted(expected)}), how="right", on="arm"))
        chosen = {t.arm: t for r in best.to_dict("records") for t in trials if t.arm == r["arm"] and t.index == int(r["trial"])}
        rows = [{"arm": t.arm, "trial": t.index, "label": t.label, "settings": t.settings,
                 "score": finite(by_trial.get((t.arm, t.index), (math.nan, 0))[0]),
                 "runs": by_trial.get((t.arm, t.index), (math.nan, 0))[1]} for t in trials]
        return {"metric": select.metric, "rule": select.rule, "split": "validation", "seeds": suite.tuning.seeds,
                "trial_budget": {"kind": suite.budget.kind, "value": suite.tuning.trial_value(suite.budget.value)},
                "ruleset": arms_ruleset(suite),
                "chosen": {arm: {"trial": t.index, "label": t.label, "settings": t.settings,
                                 "score": finite(by_trial[(arm, t.index)][0])} for arm, t in chosen.items()},
                "trials": rows}

    def statuses(self) -> dict[str, list[tuple[str, StatusRecord | None]]]:
        """{arm: [(trial run folder name, its status or None), ...]} of every planned trial run."""
        found: dict[str, list[tuple[str, StatusRecord | None]]] = {}
        for trial in self.plan:
            for seed in self.seeds:
                status = RunDir(self.run_dir(trial.label, seed)).read_status()
                found.setdefault(trial.arm, []).append((f"{trial.label}-s{seed}", status))
        return found

    def unended(self) -> list[str]:
        """Folder names of the trial runs that have not ended (failed, running, or not started): every arm
        is chosen from all of its trials or not at all, so that no arm is tuned on fewer than declared."""
        return [name for statuses in self.statuses().values() for name, status in statuses
                if status is None or status["status"] not in ENDED]

    def check_some_ran(self) -> None:
        """ValueError naming an arm every trial run of which failed, and the first failure: nothing to choose
        from, and a --resume would run the same trials to the same end (a suite that could never finish)."""
        for arm, statuses in self.statuses().items():
            if all(status is not None and status["status"] == "failed" for _, status in statuses):
                name, first = statuses[0]
                assert first is not None
                raise ValueError(f"every trial run of arm {arm} failed ({len(statuses)} of {len(statuses)}; the "
                                 f"first, {name}: {first.get('message') or 'no message'}): no setting of its space "
                                 "trained, so there is nothing to choose from, and a --resume runs them again to the "
                                 f"same end; fix what failed them first (their error.log under {self.folder}; "
                                 "`gspo-bench validate SUITE` checks every value of a space), or give the arm a space "
                                 "it can train in and run the suite into another folder (--out)")

    def write_chosen(self) -> dict[str, Any]:
        """Choose from the trials and write chosen.json; ValueError where every trial run of an arm failed
        (`check_some_ran`), a trial run has not ended (`run --resume` continues it) or an arm has no
        scored trial."""
        self.check_some_ran()
        unended = self.unended()
        if unended:
            raise ValueError(f"{len(unended)} trial run(s) did not end ({', '.join(unended[:4])}"
                             f"{', ...' if len(unended) > 4 else ''}): every arm is chosen from all its trials; "
                             "`gspo-bench run SUITE --resume` continues them, then chooses")
        record = self.chosen_record(self.table())
        atomic_write_text(self.folder / CHOSEN, json.dumps(record, indent=1) + "\n")
        return record

    def read_chosen(self) -> dict[str, Any] | None:
        """chosen.json of this suite's trials, or None before the trials have been chosen from."""
        path = self.folder / CHOSEN
        return json.loads(path.read_text()) if path.is_file() else None

    def compared_suite(self) -> SuiteConfig | None:
        """The suite the comparison runs: its arms with chosen.json's settings (None before the choice)."""
        record = self.read_chosen()
        if record is None:
            return None
        return comparison_suite(self.suite, {arm: c["settings"] for arm, c in record["chosen"].items()})


def recorded_entry(run_dir: Path, label: str) -> dict[str, Any] | None:
    """The objective entry run `label` ran, as its run folder's config.yaml records it (its entry among
    the recorded suite's objectives), read through the schema as the plan's entries are (a field added
    since reads as its default, an old spelling as the one spelling); None for a run that recorded no
    config (not started). ValueError naming the file where the entry is missing or no longer validates."""
    import warnings

    from pydantic import ValidationError

    from gspo_bench.config import ObjectiveEntry
    from gspo_bench.config.run import read_run_config
    from gspo_bench.config.spelling import SpellingNote

    config = read_run_config(run_dir)
    if config is None:
        return None
    objectives = (config.get("suite") or {}).get("objectives") or []
    found = [o for o in objectives if isinstance(o, dict) and (o.get("label") or o.get("name")) == label]
    if not found:
        raise ValueError(f"{run_dir / 'config.yaml'} records no objective entry {label!r}: move the run folder away "
                         "and run it again")
    try:
        with warnings.catch_warnings():  # the record's spelling is not the user's to change
            warnings.simplefilter("ignore", SpellingNote)
            return ObjectiveEntry.model_validate(found[0]).model_dump(mode="json")
    except ValidationError as err:
        raise ValueError(f"{run_dir / 'config.yaml'}: its entry {label!r} no longer validates "
                         f"({err.errors()[0]['msg']}): move the run folder away and run it again") from None


def finite(value: float) -> float | None:
    return value if math.isfinite(value) else None


def steps_at(suite: SuiteConfig, plan: Any, value: float) -> int:
    """Steps a run of `suite` (planned as `plan`, a SuitePlan) takes to spend `value` of its budget's kind,
    as `gspo_bench.suite.plan.plan_suite` counts them."""
    from gspo_bench.suite.plan import step_compute

    per_step = {"steps": 1.0, "tokens": float(step_compute(suite, plan.prompt_tokens_per_step).tokens),
                "flops": plan.flops_per_step}[suite.budget.kind]
    return min(suite.budget.max_steps, math.ceil(value / per_step))


def tuning_flops(suite: SuiteConfig, plan: Any) -> dict[str, tuple[float, float]]:
    """Per arm: (FLOPs its trials spend, FLOPs its comparison runs spend), at the suite's FLOPs per step."""
    assert suite.tuning is not None
    trial_steps = steps_at(suite, plan, suite.tuning.trial_value(suite.budget.value))
    per_trial = plan.flops_per_step * trial_steps * len(suite.tuning.seeds)
    compared = plan.flops_per_step * plan.steps_per_run * len(suite.seeds)
    return {e.run_label: (per_trial * suite.tuning.arm_trial_count(e.run_label), compared) for e in suite.objectives}


def settings_text(settings: dict[str, Any]) -> str:
    return ", ".join(f"{path}={value:.3g}" if isinstance(value, float) else f"{path}={value}"
                     for path, value in settings.items())


def trial_lines(suite: SuiteConfig) -> list[str]:
    """What `validate` says of a tuned suite's trials ([] untuned): their count, seeds and rulesets, then
    each trial's settings."""
    if suite.tuning is None:
        return []
    trials = plan_trials(suite)
    rulesets = ", ".join(f"{arm} {rule}" for arm, rule in arms_ruleset(suite).items())
    return [f"  tuning first: {len(trials)} trials x seeds {suite.tuning.seeds} on the validation split (the runs "
            f"above then use each arm's chosen settings); {rulesets}",
            *(f"    {trial.label}: {settings_text(trial.settings)}" for trial in trials)]


def tuning_rows(suite: SuiteConfig, plan: Any) -> list[tuple[str, str]]:
    """The dry run's rows of a tuned suite: the rule, each trial's settings, and each arm's tuning
    FLOPs beside its comparison FLOPs."""
    if suite.tuning is None:
        return []
    tuning = suite.tuning
    trial_steps = steps_at(suite, plan, tuning.trial_value(suite.budget.value))
    rows = [("tuning", f"{len(plan_trials(suite))} trials x seeds {tuning.seeds}, each {suite.budget.kind} = "
                       f"{tuning.trial_value(suite.budget.value):g} (>= {trial_steps:,} steps); chosen by "
                       f"{tuning.select.rule} {tuning.select.metric} on the validation split; draw seed {tuning.seed}"),
            ("ruleset", ", ".join(f"{arm} {rule}" for arm, rule in arms_ruleset(suite).items()))]
    rows += [(f"  {t.label}", settings_text(t.settings)) for t in plan_trials(suite)]
    flops = tuning_flops(suite, plan)
    rows += [("FLOPs, tuning vs comparison", ", ".join(f"{arm} {t:.3g} vs {c:.3g}" for arm, (t, c) in flops.items())),
             ("FLOPs, all tuning", f"{sum(t for t, _ in flops.values()):.3g}")]
    return rows
