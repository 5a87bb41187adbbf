"""A suite session as `gspo-bench run` and `validate` drive it: load the suite with its `--set`
overrides, check it is runnable, plan its runs, pick those to do, and map the runs' outcomes to an
exit code. Problems are raised as the library's errors (SuiteError, ValueError, FileExistsError,
RunBusyError); the command line turns them into one line each."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gspo_bench.config import SuiteConfig, load_suite, parse_overrides

if TYPE_CHECKING:
    from gspo_bench.suite.runner import PlannedRun

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


@dataclass(frozen=True)
class Session:
    """A loaded, checked suite; the results root; the runs to do (finished ones left out). A tuned suite
    (`tuning:`) also has its trial runs to do, and until its trials are chosen from (chosen.json) no
    comparison runs: `awaiting_choice`, and `todo` empty (`choose_and_plan` plans them after the trials)."""

    suite: SuiteConfig
    root: Path
    todo: list[PlannedRun]
    trials: list[PlannedRun] = field(default_factory=list)
    awaiting_choice: bool = False


def plan_session(suite_path: Path, items: list[str] | None, out: Path | None = None, only: list[str] | None = None,
                 seeds: list[int] | None = None, resume: bool = False, allow_changed: bool = False) -> Session:
    """The suite (its `--set` overrides applied and recorded with each run), the results root (`out`,
    else the suite's output_dir) and the runs to do. Raises SuiteError, ValueError (an unknown --only
    label, a changed suite on resume, another suite of the same name in the results root, --seeds that
    are trial seeds, a trial run that ran other settings than planned now), FileExistsError (results
    already there without resume) or RunBusyError (a run folder held by a live process)."""
    from gspo_bench.suite.runner import check_outputs, check_suite_folder
    from gspo_bench.suite.tuning_runs import check_trials_as_planned, compared_suite, trial_runs

    suite, overrides = load_runnable(suite_path, items)
    root = out if out is not None else Path(suite.output_dir)
    check_suite_folder(suite, root, allow_changed=resume and allow_changed)
    check_seeds(suite, seeds)
    if suite.tuning is not None:
        check_trials_as_planned(suite, root)  # --allow-changed or not: a trial is scored on what it ran
    trials = check_outputs(trial_runs(suite, root), resume, allow_changed) if suite.tuning is not None else []
    compared = compared_suite(suite, root)
    todo = [] if compared is None else comparison_todo(compared, root, only, seeds, overrides, resume, allow_changed)
    if resume and allow_changed:
        check_unstarted_keep_settings(suite, root, todo)
    return Session(suite=suite, root=root, todo=todo, trials=trials, awaiting_choice=compared is None)


def check_seeds(suite: SuiteConfig, seeds: list[int] | None) -> None:
    """ValueError for --seeds that are a tuned suite's trial seeds (the comparison runs on other seeds)."""
    if suite.tuning is not None and set(seeds or []) & set(suite.tuning.seeds):
        raise ValueError(f"--seeds {seeds}: {sorted(set(seeds or []) & set(suite.tuning.seeds))} are trial seeds "
                         "(tuning.seeds); the comparison runs on other seeds")


def comparison_todo(compared: SuiteConfig, root: Path, only: list[str] | None, seeds: list[int] | None,
                    overrides: dict[str, Any], resume: bool, allow_changed: bool) -> list[PlannedRun]:
    """The comparison's runs to do, of `compared` (the suite, or a tuned suite with its chosen settings)."""
    from gspo_bench.suite.runner import check_outputs, plan_runs

    runs = plan_runs(compared, root, only=only, seeds=seeds, overrides=overrides)
    return check_outputs(runs, resume, allow_changed=allow_changed)


def choose_and_plan(session: Session, items: list[str] | None, only: list[str] | None, seeds: list[int] | None,
                    resume: bool, allow_changed: bool) -> list[PlannedRun]:
    """After a tuned suite's trials: each arm's choice written to chosen.json (kept where it already is),
    then the comparison's runs to do with the chosen settings."""
    from gspo_bench.suite.tuning_runs import compared_suite, write_chosen

    if session.awaiting_choice:
        write_chosen(session.suite, session.root)
    compared = compared_suite(session.suite, session.root)
    assert compared is not None  # chosen.json is there now
    return comparison_todo(compared, session.root, only, seeds, parse_overrides(items or []), resume, allow_changed)


def check_unstarted_keep_settings(suite: SuiteConfig, root: Path, todo: list[PlannedRun]) -> None:
    """ValueError where --resume --allow-changed would start runs under settings other than those the
    suite folder's suite.yaml records: --allow-changed continues started runs (each records its change),
    but a run that never started would train under the new settings beside finished runs under the old
    ones, silently, and the report would then refuse the folder as two suites."""
    from gspo_bench.config.changes import settings_changes
    from gspo_bench.config.yamlread import read_yaml
    from gspo_bench.rundir.folder import RunDir

    path = root / suite.name / "suite.yaml"
    recorded = read_yaml(path.read_text()) if path.is_file() else None
    if not isinstance(recorded, dict):
        return
    changes = settings_changes({"suite": recorded}, {"suite": suite.model_dump(mode="json")})
    unstarted = [run.run_dir.name for run in todo if RunDir(run.run_dir).read_status() is None]
    if changes and unstarted:
        raise ValueError(f"{path} records other settings ({'; '.join(changes)}); --allow-changed continues started "
                         f"runs with new settings, but {len(unstarted)} run(s) have not started ({', '.join(unstarted)}) "
                         "and would start under them beside runs of the old ones (two suites in one folder): resume "
                         "the started ones alone (--only, --seeds), or run the new settings into another folder")


def exit_code(outcomes: list[tuple[Any, dict]]) -> int:
    """The exit code of a suite from its runs' (planned, status) outcomes: 2 if any run was refused,
    else 1 if any failed, else 0."""
    statuses = {status["status"] for _, status in outcomes}
    if "refused" in statuses:
        return EXIT_REFUSED
    if "failed" in statuses:
        return EXIT_FAILED
    return EXIT_OK
