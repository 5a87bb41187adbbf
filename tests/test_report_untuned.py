"""A report of a suite with no `tuning:` section says its arms ran untuned (issue 47: the quickstart's
arms run at each objective's paper clip range at an lr 100x the paper's), and a tuned suite's report
does not say it of that suite."""

from __future__ import annotations

from types import SimpleNamespace

import pandas as pd

from analysis.report import tuning as TU


def results_of(*suites: str) -> SimpleNamespace:
    return SimpleNamespace(runs=pd.DataFrame({"suite": list(suites), "path": [f"/nowhere/{s}/run" for s in suites]}))


def test_an_untuned_suite_is_named_as_untuned_with_the_step_size_caveat(monkeypatch):
    monkeypatch.setattr(TU, "tuning_records", lambda results: {})
    text = TU.untuned_text(results_of("quickstart", "quickstart", "paper_cpu"))
    assert text.startswith("Untuned: every arm of quickstart, paper_cpu ran at its declared settings")
    assert "step size rather than of objective" in text


def test_a_tuned_suite_is_not_called_untuned(monkeypatch):
    monkeypatch.setattr(TU, "tuning_records", lambda results: {"tuned": (None, {})})
    assert TU.untuned_text(results_of("tuned")) == ""
    assert TU.untuned_text(results_of("tuned", "quickstart")).startswith("Untuned: every arm of quickstart ran")
