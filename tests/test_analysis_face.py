"""The analysis package's face: a few entry points, each from its room, loaded on first use so that
importing the bottom room does not import the figures' libraries."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import analysis

ROOT = Path(__file__).resolve().parent.parent


def test_the_face_is_the_entry_points_from_their_rooms():
    from analysis.checks.regress import compare, load_tolerances
    from analysis.checks.reproduce import compare_results
    from analysis.data.load import load_results
    from analysis.evidence.adaptive_suite import AdaptivePlacer
    from analysis.evidence.early_warnings import LiveWarnings
    from analysis.report.sections import console_answer
    from analysis.report.writer import write_figures, write_report

    assert analysis.__all__ == ["AdaptivePlacer", "LiveWarnings", "ResultsError", "UnmatchedComputeError", "check_cells", "check_notes", "compare",
                                "compare_results", "console_answer", "load_results", "load_tolerances", "other_suite",
                                "regressions_text", "update_baseline", "write_figures", "write_report"]
    assert (analysis.load_results, analysis.write_report, analysis.write_figures, analysis.console_answer,
            analysis.compare, analysis.load_tolerances, analysis.compare_results, analysis.LiveWarnings,
            analysis.AdaptivePlacer) == (
        load_results, write_report, write_figures, console_answer, compare, load_tolerances, compare_results,
        LiveWarnings, AdaptivePlacer)


def test_a_name_off_the_face_is_refused():
    with pytest.raises(AttributeError, match="no attribute 'gather'"):
        analysis.gather  # noqa: B018


def test_the_statistics_import_no_plotting_library():
    probe = ("import sys, analysis.stats.library, analysis.stats.metrics, analysis.stats.logistic\n"
             "print(sorted({m.split('.')[0] for m in sys.modules} & {'matplotlib', 'plotly', 'seaborn', 'torch'}))")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, cwd=ROOT)
    assert done.stdout.strip() == "[]"
