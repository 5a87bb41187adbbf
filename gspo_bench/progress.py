"""Progress of a suite: a rich bar per active run on a terminal, plain lines otherwise (logs, CI).
Runs may be active side by side (`--parallel`, `--ray`): every call names its run."""

from __future__ import annotations

import math

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeElapsedColumn

from gspo_bench.config import SuiteConfig
from gspo_bench.launch import Observer


def budget_fraction(suite: SuiteConfig, row: dict) -> float:
    spent = {"steps": row["step"], "tokens": row["compute/cum_tokens"], "flops": row["compute/cum_flops"]}
    return min(spent[suite.budget.kind] / suite.budget.value, 1.0)


def step_summary(row: dict) -> str:
    def fmt(key: str, spec: str) -> str:
        value = row.get(key)
        return "-" if value is None else format(value, spec)

    return (f"step {row['step']:>4}  reward {fmt('reward/mean', '.3f')}  clip {fmt('clip/frac', '.4f')}  "
            f"drift {fmt('moe/drift', '.3f')}")


def memory_check(suite: SuiteConfig, row: dict) -> str | None:
    """At step 1 on a GPU (a measured `gpu/peak_mem_gib`), the dry run's memory estimate beside the
    measured peak; None at other steps and off CUDA."""
    from gspo_bench.plan import PlanError, plan_suite, plan_vs_peak

    peak = row.get("gpu/peak_mem_gib")
    if row.get("step") != 1 or peak is None or math.isnan(peak):
        return None
    try:
        memory = plan_suite(suite).memory
    except PlanError as err:
        return f"GPU memory at step 1: measured peak {peak:.1f} GiB; no plan to compare with ({err})"
    return plan_vs_peak(memory, peak)


class SuiteProgress(Observer):
    def __init__(self, suite: SuiteConfig, console: Console):
        self.suite = suite
        self.console = console
        self.live = console.is_terminal
        self.progress = Progress(
            TextColumn("{task.fields[run]:<24}"), BarColumn(), MofNCompleteColumn(), TextColumn("{task.fields[info]}"),
            TimeElapsedColumn(), console=console,
        ) if self.live else None
        self.tasks: dict[str, TaskID] = {}

    def __enter__(self):
        if self.progress is not None:
            self.progress.start()
        return self

    def __exit__(self, *exc):
        if self.progress is not None:
            self.progress.stop()

    def say(self, text: str) -> None:
        (self.progress.console if self.progress is not None else self.console).print(text, markup=False, highlight=False)

    def start_run(self, name: str) -> None:
        if self.progress is not None:
            self.tasks[name] = self.progress.add_task("", total=1000, run=name, info="")
        else:
            self.say(f"[{name}] started")

    def step(self, name: str, row: dict) -> None:
        if self.progress is not None and name in self.tasks:
            self.progress.update(self.tasks[name], completed=int(1000 * budget_fraction(self.suite, row)),
                                 info=step_summary(row))
        else:
            self.say(f"[{name}] {step_summary(row)}")
        line = memory_check(self.suite, row)
        if line is not None:
            self.say(f"[{name}] {line}")

    def end_run(self, name: str, status: dict) -> None:
        if self.progress is not None and name in self.tasks:
            self.progress.update(self.tasks[name], info=status["status"])
        message = f": {status['message']}" if status.get("message") else ""
        self.say(f"[{name}] {status['status']} at step {status['step']}{message}")
