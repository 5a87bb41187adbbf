"""Running a suite: a session loads the suite with its overrides and checks it (`session`,
`preflight`), plans its runs and their compute and memory (`plan`), gives each its starting weights
and runs them one after another, side by side or on Ray (`runner`, `launch`, `process_server`,
`outcomes`), draws the progress (`progress`) on a console that shows user text's control characters
as escapes (`console`), and lists what is registered (`catalog`). The library packages below know
nothing of it."""

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
        default_parallel as default_parallel,
    )
    from gspo_bench.suite.launch import (
        start_process_server as start_process_server,
    )
    from gspo_bench.suite.plan import (
        PlanError as PlanError,
    )
    from gspo_bench.suite.plan import (
        plan_rows as plan_rows,
    )
    from gspo_bench.suite.plan import (
        plan_suite as plan_suite,
    )
    from gspo_bench.suite.plan import (
        plans_by_suite as plans_by_suite,
    )
    from gspo_bench.suite.probe import (
        ProbeConfig as ProbeConfig,
    )
    from gspo_bench.suite.probe import (
        run_probe as run_probe,
    )
    from gspo_bench.suite.progress import (
        SuiteProgress as SuiteProgress,
    )
    from gspo_bench.suite.runner import (
        PlannedRun as PlannedRun,
    )
    from gspo_bench.suite.runner import (
        plan_runs as plan_runs,
    )
    from gspo_bench.suite.runner import (
        run_suite as run_suite,
    )
    from gspo_bench.suite.session import (
        Session as Session,
    )
    from gspo_bench.suite.session import (
        check_seeds as check_seeds,
    )
    from gspo_bench.suite.session import (
        choose_and_plan as choose_and_plan,
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
        settings_text as settings_text,
    )
    from gspo_bench.suite.tuning_runs import (
        tuning_rows as tuning_rows,
    )

FACE = {  # name -> the module of this package that defines it, imported on first use (no torch at import)
    "PlanError": "plan",
    "PlannedRun": "runner",
    "PrintableConsole": "console",
    "ProbeConfig": "probe",
    "Session": "session",
    "SuiteProgress": "progress",
    "check_seeds": "session",
    "choose_and_plan": "session",
    "default_parallel": "launch",
    "exit_code": "session",
    "load_runnable": "session",
    "load_with_overrides": "session",
    "plan_rows": "plan",
    "plan_runs": "runner",
    "plan_session": "session",
    "plan_suite": "plan",
    "plans_by_suite": "plan",
    "registry_tables": "catalog",
    "run_probe": "probe",
    "run_suite": "runner",
    "settings_text": "tuning_runs",
    "start_process_server": "launch",
    "tuning_rows": "tuning_runs",
}
__all__ = sorted(FACE)


def __getattr__(name: str) -> Any:
    if name not in FACE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{FACE[name]}"), name)


def __dir__() -> list[str]:
    return sorted([*globals(), *FACE])
