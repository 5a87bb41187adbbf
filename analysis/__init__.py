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
    from analysis.checks.regress import (
        check_cells,
        check_notes,
        compare,
        load_tolerances,
        other_suite,
        regressions_text,
        update_baseline,
    )
    from analysis.checks.reproduce import compare_results
    from analysis.data.errors import ResultsError
    from analysis.data.load import load_results
    from analysis.data.matching import UnmatchedComputeError
    from analysis.evidence.adaptive_suite import AdaptivePlacer
    from analysis.evidence.early_warnings import LiveWarnings
    from analysis.report.sections import console_answer
    from analysis.report.writer import write_figures, write_report

FACE = {
    "ResultsError": "analysis.data.errors",  # every error for results that cannot be analysed as asked
    "UnmatchedComputeError": "analysis.data.matching",  # one of them: runs that spent different compute
    "load_results": "analysis.data.load",
    "AdaptivePlacer": "analysis.evidence.adaptive_suite",  # `gspo-bench run`'s rule for an adaptive suite
    "LiveWarnings": "analysis.evidence.early_warnings",  # `gspo-bench run`'s live alarms (docs/warnings.md)
    "console_answer": "analysis.report.sections",
    "write_report": "analysis.report.writer",
    "write_figures": "analysis.report.writer",
    "compare": "analysis.checks.regress",
    "check_cells": "analysis.checks.regress",
    "check_notes": "analysis.checks.regress",
    "regressions_text": "analysis.checks.regress",
    "load_tolerances": "analysis.checks.regress",
    "other_suite": "analysis.checks.regress",
    "update_baseline": "analysis.checks.regress",
    "compare_results": "analysis.checks.reproduce",
}
__all__ = ["AdaptivePlacer", "LiveWarnings", "ResultsError", "UnmatchedComputeError", "check_cells", "check_notes", "compare", "compare_results",
           "console_answer", "load_results", "load_tolerances", "other_suite", "regressions_text", "update_baseline",
           "write_figures", "write_report"]


def __getattr__(name: str) -> Any:
    if name not in FACE:
        raise AttributeError(f"module 'analysis' has no attribute {name!r}")
    return getattr(import_module(FACE[name]), name)
