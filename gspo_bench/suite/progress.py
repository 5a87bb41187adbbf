"""Progress of a suite, drawn by the process that started it (runs in worker processes or Ray tasks
report their steps back to it: `gspo_bench.suite.launch`).

On a terminal: a rich bar per active run (the share of its budget spent, reward, clip fraction,
drift, time left), one for the warm start of each starting model (its sampled accuracy) and one for
the suite; a finished run leaves one line. Elsewhere (CI, `> log`): plain lines, at most one per run
(and per warm start) every `interval` seconds; every step is in the run's metrics.parquet anyway.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.progress import (
    BarColumn,
    Progress,
    Task,
    TaskID,
    TaskProgressColumn,
    TextColumn,
    TimeRemainingColumn,
)
from rich.table import Table
from rich.text import Text

from gspo_bench.config import BudgetConfig, RunSpec, SuiteConfig, WarmStartConfig
from gspo_bench.rundir.folder import RunDir
from gspo_bench.suite.launch import PROGRESS_COLUMNS, Observer

# the live early warnings (analysis.evidence.early_warnings.LiveWarnings, given by the command line): per row
# of a run (its name, the row's PROGRESS_COLUMNS, its task), the lines of the alarms that fire there
Watch = Callable[[str, dict, str | None], list[str]]

# seconds between two plain lines of one run: a minute keeps a log of `make quickstart` (8 runs of
# about 75 s, two at a time) under 60 lines, and a long run to a line a minute
PLAIN_INTERVAL_S = 60.0


def budget_fraction(budget: BudgetConfig, row: dict) -> float:
    """The share of `budget` a run has spent at `row` (the step cap counts too: the run stops there)."""
    spent = {"steps": row["step"], "tokens": row["compute/cum_tokens"], "flops": row["compute/cum_flops"]}
    return min(max(spent[budget.kind] / budget.value, row["step"] / budget.max_steps), 1.0)


def step_summary(row: dict) -> str:
    def fmt(key: str, spec: str) -> str:
        value = row.get(key)
        return "-" if value is None else format(value, spec)

    return (f"step {row['step']:>4}  reward {fmt('reward/mean', '.3f')}  clip {fmt('clip/frac', '.4f')}  "
            f"drift {fmt('moe/drift', '.3f')}")


def format_seconds(seconds: float | None) -> str:
    if seconds is None:
        return "-:--:--"
    seconds = int(round(seconds))
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


class Throttle:
    """At most one pass per key every `interval` seconds of `clock`. The first pass of a key is free,
    or, with `first_free=False`, comes `interval` after the key is first seen."""

    def __init__(self, interval: float, clock: Callable[[], float] = time.monotonic, first_free: bool = True):
        self.interval, self.clock, self.first_free = interval, clock, first_free
        self.last: dict[str, float] = {}

    def ready(self, key: str) -> bool:
        now = self.clock()
        if key not in self.last and not self.first_free:
            self.last[key] = now
            return False
        if key in self.last and now - self.last[key] < self.interval:
            return False
        self.last[key] = now
        return True


class TimeLeft:
    """Seconds left per key, from the rate the spent share grew since the key's first report."""

    def __init__(self, clock: Callable[[], float] = time.monotonic):
        self.clock = clock
        self.first: dict[str, tuple[float, float]] = {}

    def __call__(self, key: str, fraction: float) -> float | None:
        now = self.clock()
        start_time, start_fraction = self.first.setdefault(key, (now, fraction))
        if fraction <= start_fraction or now <= start_time:
            return None
        return (now - start_time) * (1.0 - fraction) / (fraction - start_fraction)


class _TimeLeftColumn(TimeRemainingColumn):
    """rich's time left, blank for a bar whose end is not known (a warm start stops inside its band)."""

    def render(self, task: Task) -> Text:
        return super().render(task) if task.fields.get("eta", True) else Text("")


def memory_check(suite: SuiteConfig, row: dict) -> str | None:
    """At step 1 on a GPU (a measured `gpu/peak_mem_gib`), the dry run's memory estimate beside the
    measured peak; None at other steps and off CUDA."""
    from gspo_bench.suite.plan import PlanError, plan_suite, plan_vs_peak

    peak = row.get("gpu/peak_mem_gib")
    if row.get("step") != 1 or peak is None or math.isnan(peak):
        return None
    try:
        memory = plan_suite(suite).memory
    except PlanError as err:
        return f"GPU memory at step 1: measured peak {peak:.1f} GiB; no plan to compare with ({err})"
    return plan_vs_peak(memory, peak)


def rows_before(run_dir: Path, step: int) -> list[dict]:
    """The PROGRESS_COLUMNS of the rows a run's folder holds before `step` (a resumed run's steps before it
    resumed), in step order; none where its metrics.parquet is absent or unreadable."""
    try:
        rows = RunDir(run_dir, writable=False).read_rows("metrics.parquet")
    except (OSError, ValueError):
        return []
    earlier = sorted((row for row in rows if row.get("step") is not None and row["step"] < step), key=lambda row: row["step"])
    return [{k: row.get(k) for k in PROGRESS_COLUMNS} for row in earlier]


class SuiteProgress(Observer):
    """The display of a suite's runs, `budgets`: {run name: its budget} of every run to do; `suites`:
    {run name: its suite}, for the memory plan printed beside a GPU run's measured peak at step 1;
    `run_dirs`: {run name: its folder}, where a resumed run's earlier rows are read for the live warnings."""

    def __init__(self, console: Console, budgets: dict[str, BudgetConfig], clock: Callable[[], float] = time.monotonic,
                 interval: float = PLAIN_INTERVAL_S, suites: dict[str, SuiteConfig] | None = None,
                 watch: Watch | None = None, run_dirs: dict[str, Path] | None = None):
        self.console, self.budgets, self.suites = console, budgets, suites or {}
        self.watch = watch  # the live early warnings: a line per alarm, the run's bar marked
        self.run_dirs = run_dirs or {}
        self.watched: set[str] = set()  # the runs whose earlier rows the watch has had
        self.fractions: dict[str, float] = {}
        self.finished = 0
        # a run's first plain line comes after `interval` (its end has a line of its own), a warm start's at once
        self.throttle, self.time_left = Throttle(interval, clock, first_free=False), TimeLeft(clock)
        self.warm_throttle = Throttle(interval, clock)
        self.progress = Progress(
            TextColumn("{task.description:<26}"), BarColumn(bar_width=20), TaskProgressColumn(),
            TextColumn("{task.fields[info]}"), _TimeLeftColumn(compact=True), console=console,
        ) if console.is_terminal else None
        self.tasks: dict[str, TaskID] = {}

    def __enter__(self):
        if self.progress is not None:
            self.tasks["suite"] = self.progress.add_task("suite", total=float(len(self.budgets)), info=self._runs_done())
            self.progress.start()
        return self

    def __exit__(self, *exc):
        if self.progress is not None:
            self.progress.stop()

    def say(self, text: str) -> None:
        self.console.print(text, markup=False, highlight=False, soft_wrap=True)  # one line, however long

    def _runs_done(self) -> str:
        return f"{self.finished}/{len(self.budgets)} runs finished"

    def _advance_suite(self) -> None:
        if self.progress is not None:
            self.progress.update(self.tasks["suite"], completed=sum(self.fractions.values()), info=self._runs_done())

    # ------------------------------------------------------------------ warm start
    def warm_start(self, seed: int, step: int, accuracy: float, cfg: WarmStartConfig) -> None:
        key = f"warm start s{seed}"
        total = cfg.steps or cfg.max_steps
        rule = f"{cfg.steps} steps" if cfg.steps else f"stops in {cfg.band[0]:g}-{cfg.band[1]:g}"
        info = f"step {step}/{total}  accuracy {accuracy:.3f} ({rule})"
        if self.progress is None:
            if self.warm_throttle.ready(key):
                self.say(f"  {key}: {info}")
        elif key in self.tasks:
            self.progress.update(self.tasks[key], completed=step, info=info)
        else:
            self.tasks[key] = self.progress.add_task(key, total=total, completed=step, info=info, eta=False)

    def warm_start_done(self, seed: int) -> None:
        task = self.tasks.pop(f"warm start s{seed}", None)
        if self.progress is not None and task is not None:
            self.progress.remove_task(task)

    # ------------------------------------------------------------------ runs (the launchers call these)
    def start_run(self, name: str) -> None:
        self.fractions[name] = 0.0
        if self.progress is not None:
            self.tasks[name] = self.progress.add_task(name, total=1.0, info="starting")

    def step(self, name: str, row: dict) -> None:
        memory = memory_check(self.suites[name], row) if name in self.suites else None
        if memory is not None:
            self.say(f"[{name}] {memory}")
        task = self.suites[name].task.name if name in self.suites else None
        if self.watch is not None and name not in self.watched:
            self.watched.add(name)
            self._watch_before(name, row, task)
        for line in self.watch(name, row, task) if self.watch is not None else []:
            self.say(f"[{name}] {line}")
            if self.progress is not None and name in self.tasks:
                self.progress.update(self.tasks[name], description=f"! {name}")
        fraction = budget_fraction(self.budgets[name], row)
        self.fractions[name] = fraction
        left = self.time_left(name, fraction)
        if self.progress is None:
            if fraction < 1.0 and self.throttle.ready(name):
                self.say(f"[{name}] {fraction:4.0%}  {step_summary(row)}  left {format_seconds(left)}")
            return
        if name in self.tasks:
            self.progress.update(self.tasks[name], completed=fraction, info=step_summary(row))
        self._advance_suite()

    def _watch_before(self, name: str, row: dict, task: str | None) -> None:
        """A resumed run's rows before its first new one, through the watch as if they had just come: a
        rule's streak and the clip history carry over the stop, and a rule that fired before it is said
        once, as such, and not again."""
        if self.watch is None or name not in self.run_dirs:
            return
        for earlier in rows_before(self.run_dirs[name], int(row["step"])):
            for line in self.watch(name, earlier, task):
                self.say(f"[{name}] before the resume: {line}")

    def end_run(self, name: str, status: dict) -> None:
        self.finished += 1
        self.fractions[name] = 1.0
        task = self.tasks.pop(name, None)
        if self.progress is not None and task is not None:
            self.progress.remove_task(task)
        self._advance_suite()
        message = f": {status['message']}" if status.get("message") else ""
        self.say(f"[{name}] {status['status']} at step {status['step']}{message}  ({self._runs_done()})")


class ConsoleShow:
    """What a session shows as it runs (`gspo_bench.suite.session.Show`), drawn on `console`: plain lines (no
    markup read in them), a suite's progress (`SuiteProgress`) and the table of its runs' statuses."""

    def __init__(self, console: Console, watch: Callable[[], Watch] | None = None):
        self.console, self.watch = console, watch  # watch: makes a suite's live early warnings

    def say(self, text: str) -> None:
        self.console.print(text, markup=False, highlight=False)

    def progress(self, runs: list[RunSpec]) -> SuiteProgress:
        return SuiteProgress(self.console, {run.run_dir.name: run.suite.budget for run in runs},
                             suites={run.run_dir.name: run.suite for run in runs},
                             watch=self.watch() if self.watch is not None else None,
                             run_dirs={run.run_dir.name: run.run_dir for run in runs})

    def statuses(self, outcomes: list[tuple[RunSpec, dict]], title: str) -> None:
        """One row per run: (planned run, its final status.json) as the suite left it."""
        table = Table(title=escape(title))
        for column in ("run", "status", "steps", "message"):
            table.add_column(column)
        for run, status in outcomes:
            table.add_row(escape(run.name), status["status"], str(status["step"]), escape(status.get("message", "")))
        self.console.print(table)
