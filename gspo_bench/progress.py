"""Progress of a suite: a rich bar per active run on a terminal, plain lines otherwise (logs, CI).
Runs may be active side by side (`--parallel`, `--ray`): every call names its run."""

from __future__ import annotations

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

    def end_run(self, name: str, status: dict) -> None:
        if self.progress is not None and name in self.tasks:
            self.progress.update(self.tasks[name], info=status["status"])
        message = f": {status['message']}" if status.get("message") else ""
        self.say(f"[{name}] {status['status']} at step {status['step']}{message}")
