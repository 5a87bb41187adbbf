"""What a results folder already holds, checked before any run of a suite starts: another suite of the same
name in it (`check_suite_folder`), runs that are finished, held by a live process or started under other
settings (`check_outputs`), and runs a `--resume --allow-changed` would start under settings other than the
folder's (`check_unstarted_keep_settings`). Each compares settings by the one rule of
`gspo_bench.config.changes`, as the report groups suites."""

from __future__ import annotations

from pathlib import Path

from gspo_bench.config import RunSpec, SuiteConfig
from gspo_bench.config.changes import settings_changes
from gspo_bench.config.run import changes_since, optimizer_layout_change, read_run_config
from gspo_bench.config.yamlread import read_yaml
from gspo_bench.rundir.folder import RunDir
from gspo_bench.rundir.lock import check_free


def suite_file_changes(path: Path, suite: SuiteConfig) -> list[str]:
    """"field: recorded -> now" for each setting in which the suite file `path` (a suite folder's suite.yaml)
    and `suite` differ; ValueError where the file holds no mapping of a suite's fields (a damaged suite.yaml
    says nothing of the settings its runs ran: it is refused, --allow-changed or not)."""
    recorded = read_yaml(path.read_text())
    if not isinstance(recorded, dict):
        raise ValueError(f"{path}: expected the mapping of a suite's fields, found a {type(recorded).__name__}: move "
                         "the folder away or give --out another folder")
    return settings_changes({"suite": recorded}, {"suite": suite.model_dump(mode="json")})


def check_suite_folder(suite: SuiteConfig, root: Path, allow_changed: bool = False) -> None:
    """ValueError where ROOT/<name>/suite.yaml records another suite of the same name (different settings:
    `gspo_bench.config.changes`, as a resume compares a run's config), naming the
    differences: two suites never share a suite folder, whose runs the report reads as one suite. The
    same suite (resumed, more runs of it) passes; so does another with `allow_changed` (--resume
    --allow-changed: continue the suite with the new settings)."""
    path = root / suite.name / "suite.yaml"
    if allow_changed or not path.is_file():
        return
    changes = suite_file_changes(path, suite)
    if changes:
        raise ValueError(f"{path}: another suite named {suite.name} ran into {root} ({'; '.join(changes)}); give --out "
                         "another folder or the suite another name (--resume --allow-changed continues that suite "
                         "with these settings)")


def check_outputs(runs: list[RunSpec], resume: bool, allow_changed: bool = False) -> list[RunSpec]:
    """Runs to execute. Without --resume, existing results are never overwritten; a run folder held by
    a live process is refused (RunBusyError); with --resume, a run whose suite was edited since it
    started is refused unless `allow_changed` (ValueError listing the changes), and so is one whose
    config.yaml, what the check compares with, is missing."""
    todo = []
    for run in runs:
        check_free(run.run_dir)
        status = RunDir(run.run_dir).read_status()
        if status is None:
            todo.append(run)
        elif not resume:
            raise FileExistsError(
                f"{run.run_dir} already holds a run ({status['status']}); use --resume to continue unfinished "
                "runs, or --out to write elsewhere"
            )
        elif status["status"] in ("running", "failed"):
            recorded = read_run_config(run.run_dir)
            if recorded is None and not allow_changed:
                raise ValueError(f"{run.run_dir / 'config.yaml'} is missing: --resume cannot check that the suite is "
                                 "the one the run started with; pass --allow-changed to continue it anyway")
            layout = optimizer_layout_change(recorded or {}, run)
            changes = changes_since(recorded, run) if recorded is not None else []
            if changes and not allow_changed:
                raise ValueError(f"{run.run_dir}: the suite changed since this run started ({'; '.join(changes)}); "
                                 "resume it unchanged, or pass --allow-changed to continue with the new settings")
            if layout:
                raise ValueError(f"{run.run_dir}: {layout}")
            todo.append(run)
    return todo


def check_unstarted_keep_settings(suite: SuiteConfig, root: Path, todo: list[RunSpec]) -> None:
    """ValueError where --resume --allow-changed would start runs under settings other than those the
    suite folder's suite.yaml records: --allow-changed continues started runs (each records its change),
    but a run that never started would train under the new settings beside finished runs under the old
    ones, silently, and the report would then refuse the folder as two suites."""
    path = root / suite.name / "suite.yaml"
    changes = suite_file_changes(path, suite) if path.is_file() else []
    unstarted = [run.run_dir.name for run in todo if RunDir(run.run_dir).read_status() is None]
    if changes and unstarted:
        raise ValueError(f"{path} records other settings ({'; '.join(changes)}); --allow-changed continues started "
                         f"runs with new settings, but {len(unstarted)} run(s) have not started ({', '.join(unstarted)}) "
                         "and would start under them beside runs of the old ones (two suites in one folder): resume "
                         "the started ones alone (--only, --seeds), or run the new settings into another folder")
