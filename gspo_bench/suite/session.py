"""A suite session as `gspo-bench run` and `validate` drive it: load the suite with its `--set`
overrides, check it is runnable, plan its runs, pick those to do, and map the runs' outcomes to an
exit code. Problems are raised as the library's errors (SuiteError, ValueError, FileExistsError,
RunBusyError); the command line turns them into one line each."""

from __future__ import annotations

from dataclasses import dataclass
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
    """A loaded, checked suite; the results root; the runs to do (finished ones left out)."""

    suite: SuiteConfig
    root: Path
    todo: list[PlannedRun]


def plan_session(suite_path: Path, items: list[str] | None, out: Path | None = None, only: list[str] | None = None,
                 seeds: list[int] | None = None, resume: bool = False, allow_changed: bool = False) -> Session:
    """The suite (its `--set` overrides applied and recorded with each run), the results root (`out`,
    else the suite's output_dir) and the runs to do. Raises SuiteError, ValueError (an unknown --only
    label, a changed suite on resume, another suite of the same name in the results root),
    FileExistsError (results already there without resume) or
    RunBusyError (a run folder held by a live process)."""
    from gspo_bench.suite.runner import check_outputs, check_suite_folder, plan_runs

    suite, overrides = load_runnable(suite_path, items)
    root = out if out is not None else Path(suite.output_dir)
    check_suite_folder(suite, root, allow_changed=resume and allow_changed)
    runs = plan_runs(suite, root, only=only, seeds=seeds, overrides=overrides)
    todo = check_outputs(runs, resume, allow_changed=allow_changed)
    if resume and allow_changed:
        check_unstarted_keep_settings(suite, root, todo)
    return Session(suite=suite, root=root, todo=todo)


def check_unstarted_keep_settings(suite: SuiteConfig, root: Path, todo: list[PlannedRun]) -> None:
    """ValueError where --resume --allow-changed would start runs under settings other than those the
    suite folder's suite.yaml records: --allow-changed continues started runs (each records its change),
    but a run that never started would train under the new settings beside finished runs under the old
    ones, silently, and the report would then refuse the folder as two suites."""
    from gspo_bench.config.yamlread import read_yaml
    from gspo_bench.rundir.folder import RunDir
    from gspo_bench.train.setup import settings_changes

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
