"""A suite session as `gspo-bench run` and `validate` drive it: load the suite with its `--set`
overrides, check it is runnable, plan its runs and pick those to do (`plan_session`), then conduct it
(`Session.run`: a tuned suite's trials, the choice, the comparison), and map the runs' outcomes to an
exit code. Problems are raised as the library's errors (SuiteError, ValueError, FileExistsError,
RunBusyError); the command line turns them into one line each, and draws what the session shows."""

from __future__ import annotations

import dataclasses
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol

from gspo_bench.config import RunSpec, SuiteConfig, load_suite, parse_overrides
from gspo_bench.rundir.lock import RunBusyError
from gspo_bench.runtime.distributed import World

if TYPE_CHECKING:  # imported where used: `validate` loads no pandas
    from gspo_bench.suite.adaptive import PlacerType
    from gspo_bench.suite.launch import Observer
    from gspo_bench.suite.tuning_runs import Trials

# exit codes of a finished `run`: a refused run (a user error) outranks a failed one
EXIT_OK, EXIT_FAILED, EXIT_REFUSED = 0, 1, 2


def load_with_overrides(suite_path: Path, items: list[str] | None) -> tuple[SuiteConfig, dict[str, Any]]:
    """The suite file with its `--set` overrides applied; and the overrides, {path: value}."""
    overrides = parse_overrides(items or [])
    return load_suite(suite_path, overrides), overrides


def load_runnable(suite_path: Path, items: list[str] | None) -> tuple[SuiteConfig, dict[str, Any]]:
    """`load_with_overrides`, then the checks `run` makes before any compute (models, tasks, objectives,
    devices, engines, eval tasks, the sweep): SuiteError on a problem."""
    from gspo_bench.suite.preflight import check_runnable

    suite, overrides = load_with_overrides(suite_path, items)
    check_runnable(suite, str(suite_path))
    return suite, overrides


class TuningError(ValueError):
    """A tuned suite whose arms cannot be chosen from their trials (or whose comparison cannot start)."""


@dataclass(frozen=True)
class Launch:
    """How a session's runs are launched: resumed or fresh, one after another (`parallel` 1), side by side as
    local processes (0: as many as the cores allow at train.threads each), or as Ray tasks (`ray_address`:
    None for a local cluster, an address, False for no Ray); `world`: this process's torchrun rank, under
    which every rank trains the same run (ValueError for --parallel or --ray there)."""

    resume: bool = False
    allow_changed: bool = False
    world: World = field(default_factory=World)
    parallel: int = 1
    ray_address: str | None | Literal[False] = False

    def __post_init__(self) -> None:
        if self.world.distributed and (self.parallel != 1 or self.ray_address is not False):
            raise ValueError("--parallel and --ray run whole runs side by side; under torchrun every rank trains the "
                             "same run")


class Show(Protocol):
    """What a session shows as it runs (the command line draws it; the library prints nothing)."""

    def say(self, text: str) -> None: ...

    def progress(self, runs: list[RunSpec]) -> AbstractContextManager[Observer]: ...

    def statuses(self, outcomes: list[tuple[RunSpec, dict]], title: str) -> None: ...


@dataclass(frozen=True)
class Session:
    """A loaded, checked suite; the results root; the runs to do (finished ones left out), and what `run`
    was asked (`only`, `seeds`, the `--set` `overrides`, `resume`, `allow_changed`). A tuned suite (`tuning:`)
    also has its trials, planned once (`tuning`), their runs to do (`trials`), and until its trials are chosen
    from (chosen.json) no comparison runs: `awaiting_choice`, and `todo` empty (`Session.run` plans them after
    the trials). `Session.run` conducts it all: trials -> choice -> comparison."""

    suite: SuiteConfig
    root: Path
    todo: list[RunSpec]
    trials: list[RunSpec] = field(default_factory=list)
    awaiting_choice: bool = False
    tuning: Trials | None = None
    only: list[str] | None = None
    seeds: list[int] | None = None
    overrides: dict[str, Any] = field(default_factory=dict)
    resume: bool = False
    allow_changed: bool = False
    grid: list[RunSpec] = field(default_factory=list)  # an adaptive suite's every possible run (`adaptive:`)

    @property
    def suite_dir(self) -> Path:
        return self.root / self.suite.name

    def run(self, launch: Launch, show: Show, placer: PlacerType | None = None) -> list[tuple[RunSpec, dict]]:
        """Run the session: a tuned suite's trial runs, each arm's choice (chosen.json), then the comparison's
        runs; an adaptive suite's rounds as the placer built from `placer` (the command line's
        analysis.AdaptivePlacer) places them (gspo_bench.suite.adaptive); every run's (planned run, final
        status). OSError where results cannot be written; a stop (Ctrl-C, SIGTERM) leaves the runs in progress
        failed and resumable, and goes up."""
        if self.suite.adaptive is not None:
            return self.run_adaptive(launch, show, placer)
        outcomes = []
        if self.trials:
            assert self.tuning is not None
            show.say(f"tuning: {len(self.trials)} trial runs to do (OUT/{self.suite.name}/tuning/)")
            outcomes += launch_runs(self.tuning.trial_suite, self.trials, self.suite_dir, launch, show,
                                    f"trials of {self.suite.name} -> {self.tuning.folder}")
        todo = self.chosen_todo() if self.trials or self.awaiting_choice else self.todo
        if not todo:
            show.say("nothing to do: every planned run is finished")
            return outcomes
        return outcomes + launch_runs(self.suite, todo, self.root, launch, show,
                                      f"suite {self.suite.name} -> {self.suite_dir}")

    def run_adaptive(self, launch: Launch, show: Show, placer: PlacerType | None) -> list[tuple[RunSpec, dict]]:
        """An adaptive suite's rounds (gspo_bench.suite.adaptive), each launched as `launch` says."""
        from gspo_bench.suite.adaptive import run_adaptive, still_to_do

        if placer is None:
            raise ValueError(f"suite {self.suite.name} is adaptive: its runs need a placer (the command line's "
                             "analysis.AdaptivePlacer)")

        def run_round(names: list[str], index: int) -> list[tuple[RunSpec, dict]]:
            todo = still_to_do(self, names)
            show.say(f"adaptive round {index + 1}: {len(names)} runs ({len(todo)} to do)")
            return launch_runs(self.suite, todo, self.root, launch, show,
                               f"round {index + 1} of {self.suite.name}") if todo else []

        values = next(iter(self.suite.sweep.values()))
        return run_adaptive(self, placer(self.suite.adaptive, values), show.say, run_round)

    def chosen_todo(self) -> list[RunSpec]:
        """After a tuned suite's trials: each arm's choice written to chosen.json (kept where it already is),
        then the comparison's runs to do with the chosen settings; ValueError (`tuning: ...`) where no choice
        can be made."""
        assert self.tuning is not None
        try:
            if self.awaiting_choice:
                self.tuning.write_chosen()
            compared = self.tuning.compared_suite()
            assert compared is not None  # chosen.json is there now
            return comparison_todo(compared, self)
        except (ValueError, FileExistsError, RunBusyError) as err:
            raise TuningError(f"tuning: {err}") from None


def launch_runs(suite: SuiteConfig, todo: list[RunSpec], root: Path, launch: Launch, show: Show, title: str
                ) -> list[tuple[RunSpec, dict]]:
    """Run `todo` (runs of `suite` under `root`) as `launch` says, its progress and its statuses (`title`) shown."""
    from gspo_bench.suite.launch import default_parallel
    from gspo_bench.suite.runner import run_suite

    with show.progress(todo) as observer:
        outcomes = run_suite(suite, todo, root, resume=launch.resume, allow_changed=launch.allow_changed,
                             world=launch.world, log=show.say, observer=observer,
                             parallel=launch.parallel or default_parallel(suite.train.threads),
                             ray_address=launch.ray_address)
    show.statuses(outcomes, title)
    return outcomes


def plan_session(suite_path: Path, items: list[str] | None, out: Path | None = None, only: list[str] | None = None,
                 seeds: list[int] | None = None, resume: bool = False, allow_changed: bool = False) -> Session:
    """The suite (its `--set` overrides applied and recorded with each run), the results root (`out`,
    else the suite's output_dir) and the runs to do. Raises SuiteError, ValueError (an unknown --only
    label, a changed suite on resume, another suite of the same name in the results root, --seeds that
    are trial seeds, a trial run that ran other settings than planned now), FileExistsError (results
    already there without resume) or RunBusyError (a run folder held by a live process)."""
    from gspo_bench.suite.folder_checks import (
        check_outputs,
        check_suite_folder,
        check_unstarted_keep_settings,
    )
    from gspo_bench.suite.preflight import check_seeds
    from gspo_bench.suite.runner import plan_runs
    from gspo_bench.suite.tuning_runs import Trials

    suite, overrides = load_runnable(suite_path, items)
    check_seeds(suite, seeds)
    root = out if out is not None else Path(suite.output_dir)
    check_suite_folder(suite, root, allow_changed=resume and allow_changed)
    session = Session(suite=suite, root=root, todo=[], only=only, seeds=seeds, overrides=overrides, resume=resume,
                      allow_changed=allow_changed)
    if suite.tuning is not None:
        tuning = Trials.of(suite, root)
        tuning.check_as_planned()  # --allow-changed or not: a trial is scored on what it ran
        compared = tuning.compared_suite()
        session = dataclasses.replace(session, tuning=tuning, trials=check_outputs(tuning.runs(), resume, allow_changed),
                                      awaiting_choice=compared is None)
    else:
        compared = suite
    runs = [] if compared is None else plan_runs(compared, root, only=only, seeds=seeds, overrides=overrides)
    if suite.adaptive is not None:
        return adaptive_session(session, runs)
    todo = check_outputs(runs, resume, allow_changed=allow_changed)
    if resume and allow_changed:
        check_unstarted_keep_settings(suite, root, todo)
    return dataclasses.replace(session, todo=todo)


def adaptive_session(session: Session, runs: list[RunSpec]) -> Session:
    """An adaptive suite's session: every possible run checked as a suite's are, none to do until the rule
    places it (gspo_bench.suite.adaptive); ValueError for --only or --seeds, FileExistsError for results already
    there without --resume."""
    from gspo_bench.suite.adaptive import LOG
    from gspo_bench.suite.folder_checks import check_outputs

    if session.only or session.seeds is not None:
        raise ValueError(f"suite {session.suite.name} is adaptive: its rule chooses the runs, so --only and --seeds "
                         "do not apply")
    if not session.resume and (session.suite_dir / LOG).exists():
        raise FileExistsError(f"{session.suite_dir / LOG} is there: use --resume to continue the adaptive suite, or "
                              "--out to write elsewhere")
    check_outputs(runs, session.resume, allow_changed=session.allow_changed)
    return dataclasses.replace(session, grid=runs)


def dry_run_rows(suite_path: Path, items: list[str] | None = None, only: list[str] | None = None,
                 seeds: list[int] | None = None) -> tuple[SuiteConfig, list[tuple[str, str]]]:
    """The suite and the dry run's rows: the plan of the runs `run` would do with these options (`--only`
    labels, `--seeds`: the runs, their count and the suite's FLOPs are theirs alone), a tuned suite's trials
    after them. Needs no weights and no GPU; SuiteError, PlanError or ValueError on a problem."""
    from gspo_bench.suite.plan import plan_rows, plan_suite, plans_by_suite
    from gspo_bench.suite.preflight import check_seeds
    from gspo_bench.suite.runner import plan_runs
    from gspo_bench.suite.tuning_runs import tuning_rows

    suite, _ = load_with_overrides(suite_path, items)
    check_seeds(suite, seeds)
    runs = plan_runs(suite, Path(suite.output_dir), only=only, seeds=seeds)
    plan = dataclasses.replace(plan_suite(suite), runs=len(runs))
    groups = plans_by_suite([(run.name, run.suite) for run in runs], known=(suite, plan))  # arms' set:, sweep points
    return suite, plan_rows(suite, plan, [run.name for run in runs], groups) + tuning_rows(suite, plan) + adaptive_rows(
        suite, len(runs))


def adaptive_rows(suite: SuiteConfig, grid: int) -> list[tuple[str, str]]:
    """The dry run's line on an adaptive suite: the runs above are the grid the rule places runs on."""
    rule = suite.adaptive
    if rule is None:
        return []
    arms, first = len(suite.objectives), 2 * rule.first_seeds
    most = min(grid, rule.budget) if rule.budget is not None else grid
    return [("adaptive", f"the rule places at most {most} of these {grid} runs, round by round: the first round "
                         f"{arms * first} ({arms} arms x the lowest and highest level x {rule.first_seeds} seeds); "
                         "the others as the outcomes decide (docs/suites.md)")]


def comparison_todo(compared: SuiteConfig, session: Session) -> list[RunSpec]:
    """The comparison's runs to do, of `compared` (the suite, or a tuned suite with its chosen settings)."""
    from gspo_bench.suite.folder_checks import check_outputs
    from gspo_bench.suite.runner import plan_runs

    runs = plan_runs(compared, session.root, only=session.only, seeds=session.seeds, overrides=session.overrides)
    return check_outputs(runs, session.resume, allow_changed=session.allow_changed)


def exit_code(outcomes: list[tuple[Any, dict]]) -> int:
    """The exit code of a suite from its runs' (planned, status) outcomes: 2 if any run was refused,
    else 1 if any failed, else 0."""
    statuses = {status["status"] for _, status in outcomes}
    if "refused" in statuses:
        return EXIT_REFUSED
    if "failed" in statuses:
        return EXIT_FAILED
    return EXIT_OK
