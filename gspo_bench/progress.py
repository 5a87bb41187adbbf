"""Progress of a suite: a rich bar per run on a terminal, plain lines otherwise (logs, CI)."""

from __future__ import annotations

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from gspo_bench.config import SuiteConfig


def budget_fraction(suite: SuiteConfig, row: dict) -> float:
    spent = {"steps": row["step"], "tokens": row["compute/cum_tokens"], "flops": row["compute/cum_flops"]}
    return min(spent[suite.budget.kind] / suite.budget.value, 1.0)


def step_summary(row: dict) -> str:
    return (f"step {row['step']:>4}  reward {row['reward/mean']:.3f}  clip {row.get('clip/frac', float('nan')):.4f}  "
            f"drift {row.get('moe/drift', float('nan')):.3f}")


class SuiteProgress:
    def __init__(self, suite: SuiteConfig, console: Console):
        self.suite = suite
        self.console = console
        self.live = console.is_terminal
        self.progress = Progress(
            TextColumn("{task.fields[run]:<18}"), BarColumn(), MofNCompleteColumn(), TextColumn("{task.fields[info]}"),
            TimeElapsedColumn(), console=console,
        ) if self.live else None
        self.task = None
        self.run_name = ""

    def __enter__(self):
        if self.progress is not None:
            self.progress.start()
        return self

    def __exit__(self, *exc):
        if self.progress is not None:
            self.progress.stop()

    def start_run(self, name: str) -> None:
        self.run_name = name
        if self.progress is not None:
            self.task = self.progress.add_task("", total=1000, run=name, info="")
        else:
            self.console.print(f"[{name}] started", markup=False)

    def step(self, row: dict) -> None:
        if self.progress is not None:
            self.progress.update(self.task, completed=int(1000 * budget_fraction(self.suite, row)), info=step_summary(row))
        else:
            self.console.print(f"[{self.run_name}] {step_summary(row)}", markup=False, highlight=False)

    def end_run(self, status: dict) -> None:
        text = f"[{self.run_name}] {status['status']} at step {status['step']}" + (
            f": {status['message']}" if status.get("message") else "")
        if self.progress is not None:
            self.progress.update(self.task, info=status["status"])
            self.progress.console.print(text, markup=False, highlight=False)
        else:
            self.console.print(text, markup=False, highlight=False)
