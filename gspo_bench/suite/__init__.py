"""Running a suite: a session loads the suite with its overrides and checks it (`session`,
`preflight`), checks what its results folder already holds (`folder_checks`), plans its runs and their
compute and memory (`plan`), and conducts it (`session.Session.run`): a tuned suite's trials and choice
(`tuning_runs`, `selection`), then each run from its starting weights, one after another, side by side
or on Ray (`runner`, `launch`, `process_server`, `outcomes`); it draws the progress (`progress`) on a
console that shows user text's control characters as escapes (`console`), and lists what is registered
(`catalog`). The library packages below know nothing of it."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gspo_bench.suite.catalog import (
        registry_tables as registry_tables,
    )
    from gspo_bench.suite.console import (
        PrintableConsole as PrintableConsole,
    )
    from gspo_bench.suite.launch import (
        start_process_server as start_process_server,
    )
    from gspo_bench.suite.plan import (
        PlanError as PlanError,
    )
    from gspo_bench.suite.probe import (
        PROBE_COLUMNS as PROBE_COLUMNS,
    )
    from gspo_bench.suite.probe import (
        ProbeConfig as ProbeConfig,
    )
    from gspo_bench.suite.probe import (
        probe_cells as probe_cells,
    )
    from gspo_bench.suite.probe import (
        run_probe as run_probe,
    )
    from gspo_bench.suite.progress import (
        ConsoleShow as ConsoleShow,
    )
    from gspo_bench.suite.progress import (
        SuiteProgress as SuiteProgress,
    )
    from gspo_bench.suite.runner import (
        plan_runs as plan_runs,
    )
    from gspo_bench.suite.runner import (
        run_suite as run_suite,
    )
    from gspo_bench.suite.session import (
        Launch as Launch,
    )
    from gspo_bench.suite.session import (
        Session as Session,
    )
    from gspo_bench.suite.session import (
        Show as Show,
    )
    from gspo_bench.suite.session import (
        dry_run_rows as dry_run_rows,
    )
    from gspo_bench.suite.session import (
        exit_code as exit_code,
    )
    from gspo_bench.suite.session import (
        load_runnable as load_runnable,
    )
    from gspo_bench.suite.session import (
        load_with_overrides as load_with_overrides,
    )
    from gspo_bench.suite.session import (
        plan_session as plan_session,
    )
    from gspo_bench.suite.tuning_runs import (
        trial_lines as trial_lines,
    )

FACE = {  # name -> the module of this package that defines it, imported on first use (no torch at import)
    "ConsoleShow": "progress",
    "PlanError": "plan",
    "PrintableConsole": "console",
    "PROBE_COLUMNS": "probe",
    "ProbeConfig": "probe",
    "Launch": "session",
    "Session": "session",
    "Show": "session",
    "SuiteProgress": "progress",
    "dry_run_rows": "session",
    "exit_code": "session",
    "load_runnable": "session",
    "load_with_overrides": "session",
    "plan_runs": "runner",
    "plan_session": "session",
    "probe_cells": "probe",
    "registry_tables": "catalog",
    "run_probe": "probe",
    "run_suite": "runner",
    "trial_lines": "tuning_runs",
    "start_process_server": "launch",
}
__all__ = sorted(FACE)


def __getattr__(name: str) -> Any:
    if name not in FACE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{FACE[name]}"), name)


def __dir__() -> list[str]:
    return sorted([*globals(), *FACE])
