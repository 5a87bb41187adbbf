"""gspo-bench analysis: results directories -> tidy tables, statistics across seeds, figures, reports.

This package reads what runs wrote and never imports torch, so reports can be made on any machine
with pandas and seaborn. Six rooms, each importing only the rooms below it (docs/architecture.md):
stats (arrays to estimates) < data (results folders to tables) < evidence (judgements on runs and
arms) < figures < report (words, tables, rendering, the writer) < checks (regress, reproduce).

    from analysis import load_results, write_report
    write_report(load_results("runs/quickstart"), "runs/quickstart/report")

The names below are the package's face; they load their room on first use, so that importing one
room (say analysis.stats) does not import matplotlib and plotly with the rest.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from analysis.checks.regress import compare, load_tolerances
    from analysis.checks.reproduce import compare_results
    from analysis.data.load import load_results
    from analysis.report.writer import write_figures, write_report

FACE = {
    "load_results": "analysis.data.load",
    "write_report": "analysis.report.writer",
    "write_figures": "analysis.report.writer",
    "compare": "analysis.checks.regress",
    "load_tolerances": "analysis.checks.regress",
    "compare_results": "analysis.checks.reproduce",
}
__all__ = ["compare", "compare_results", "load_results", "load_tolerances", "write_figures", "write_report"]


def __getattr__(name: str) -> Any:
    if name not in FACE:
        raise AttributeError(f"module 'analysis' has no attribute {name!r}")
    return getattr(import_module(FACE[name]), name)
