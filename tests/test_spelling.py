"""gspo_bench.config.spelling: one spelling (`params:`) for a registered thing's parameters in a suite
file; the old spellings (an objective's `kwargs:`, a correction's parameters beside its `kind:`) still
read, each with a one-line note, and a run recorded with them is the same run to `--resume` and the
report."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest
import yaml

from gspo_bench.config import SuiteError, apply_overrides, parse_suite
from gspo_bench.config.changes import run_settings, settings_changes
from gspo_bench.config.run import RunSpec, resolved_config
from gspo_bench.config.spelling import SpellingNote, respell_entry, respell_path

ROOT = Path(__file__).resolve().parents[1]
NEW = [{"name": "dppo_binary_tv", "params": {"delta": 0.1}},
       {"name": "grpo", "label": "grpo_icepop", "correction": {"kind": "icepop", "params": {"low": 0.5, "high": 5.0}}}]
OLD = [{"name": "dppo_binary_tv", "kwargs": {"delta": 0.1}},
       {"name": "grpo", "label": "grpo_icepop", "correction": {"kind": "icepop", "low": 0.5, "high": 5.0}}]


def suite(objectives: list[dict]) -> dict:
    return {"name": "t", "task": {"name": "sort", "params": {"max_len": 3}}, "budget": {"kind": "steps", "value": 1},
            "objectives": objectives}


def notes(call) -> tuple[object, list[str]]:
    """`call()`'s value and the spelling notes it gave."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        value = call()
    return value, [str(w.message) for w in caught if issubclass(w.category, SpellingNote)]


def test_the_old_spellings_read_as_params_each_with_a_one_line_note():
    new, new_notes = notes(lambda: parse_suite(suite(NEW)))
    old, old_notes = notes(lambda: parse_suite(suite(OLD)))
    assert new_notes == [] and old == new
    assert new.objectives[0].params == {"delta": 0.1}
    assert new.objectives[1].correction == {"kind": "icepop", "params": {"low": 0.5, "high": 5.0}}
    assert new.objectives[1].correction_fn().keywords == {"low": 0.5, "high": 5.0}  # bound to the correction
    assert len(old_notes) == 2 and all("\n" not in n and "old spelling" in n for n in old_notes)
    assert "objectives.0: `kwargs:` is the old spelling of `params:`" in old_notes[0]
    assert "objectives.1.correction: `low, high beside kind:` is the old spelling of `params:`" in old_notes[1]


def test_both_spellings_at_once_are_refused():
    with pytest.raises(SuiteError, match="kwargs and params: the same parameters spelled twice"):
        parse_suite(suite([{"name": "dppo_binary_tv", "kwargs": {"delta": 0.1}, "params": {"delta": 0.2}}]))
    with pytest.raises(SuiteError, match="correction: low beside params"):
        parse_suite(suite([{"name": "grpo", "correction": {"kind": "icepop", "low": 0.5, "params": {"high": 5.0}}}]))


def test_set_paths_in_the_old_spelling_read_as_params():
    assert respell_path("objectives.0.kwargs.delta") == "objectives.0.params.delta"
    assert respell_path("suite.objectives.3.correction.high") == "suite.objectives.3.correction.params.high"
    assert respell_path("run.kwargs") == "run.params" and respell_path("run.correction.kind") == "run.correction.kind"
    assert respell_path("task.params.kwargs") == "task.params.kwargs"  # a task param named kwargs is one
    base = parse_suite(suite(NEW))
    old, old_notes = notes(lambda: apply_overrides(base, {"objectives.1.correction.high": 3.0}))
    new, new_notes = notes(lambda: apply_overrides(base, {"objectives.1.correction.params.high": 3.0}))
    assert old == new and new.objectives[1].correction["params"] == {"low": 0.5, "high": 3.0}
    assert new_notes == [] and old_notes == [
        "--set: `objectives.1.correction.high` is the old spelling of `objectives.1.correction.params.high` (it still "
        "reads; new suite files write `objectives.1.correction.params.high`: docs/suites.md)"]


def test_a_run_recorded_in_the_old_spelling_is_the_same_run_to_resume_and_the_report():
    """config.yaml as the release before wrote it (`run.kwargs`, `suite.objectives.N.kwargs`, a correction's
    parameters beside its kind) against the run resolved now from a file in the one spelling."""
    now = parse_suite(suite(NEW))
    for entry in now.objectives:
        spec = RunSpec(suite=now, entry=entry, seed=0, run_dir=Path("unused"))
        current = yaml.safe_load(resolved_config(spec))
        recorded = yaml.safe_load(resolved_config(spec))
        for section in (recorded["run"], *recorded["suite"]["objectives"]):
            section["kwargs"] = section.pop("params")
            if section["correction"]:
                section["correction"] = {"kind": "icepop", "low": 0.5, "high": 5.0}
        assert settings_changes(recorded, current) == []
        assert run_settings(recorded["suite"], "suite") == run_settings(current["suite"], "suite")
        moved = yaml.safe_load(yaml.safe_dump(recorded).replace("0.5", "0.25"))
        assert ("suite.objectives.1.correction.params.low: 0.25 -> 0.5" in settings_changes(moved, current)
                or entry.correction is None)


def test_the_project_suite_files_use_the_one_spelling():
    """Every suite file in experiments/ reads without a note: new suites are copied from them."""
    files = [p for p in sorted((ROOT / "experiments").rglob("*.yaml")) if "objectives" in p.read_text()]
    assert len(files) > 10
    for path in files:
        data = yaml.safe_load(path.read_text())
        entries = data.get("objectives") or []
        _, found = notes(lambda entries=entries: [respell_entry(e) for e in entries])
        assert found == [], (path, found)
