"""gspo_bench.rundir.records: status.json and provenance.json as typed records, defined once. What the
writers write and what the committed results hold are the declared fields, nothing else."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gspo_bench.rundir.folder import RunDir, provenance
from gspo_bench.rundir.records import (
    GitState,
    ProvenanceRecord,
    ResumeRecord,
    StatusRecord,
    WarmStartRecord,
    as_status,
)

RESULTS = Path(__file__).resolve().parents[1] / "results"


def undeclared(body: dict, record: type) -> set[str]:
    """The fields of `body` that `record` (a TypedDict) does not declare."""
    return set(body) - set(record.__annotations__)


def provenance_problems(body: dict) -> list[str]:
    """Fields of a provenance.json object, or of the records nested in it, that are not declared."""
    found = [f"provenance.{k}" for k in undeclared(body, ProvenanceRecord)]
    found += [f"git.{k}" for k in undeclared(body.get("git") or {}, GitState)]
    found += [f"warm_start.{k}" for k in undeclared(body.get("warm_start") or {}, WarmStartRecord)]
    found += [f"resumed.{k}" for entry in body.get("resumed") or [] for k in undeclared(entry, ResumeRecord)]
    return found


def test_status_json_is_written_and_read_as_the_record(tmp_path):
    run = RunDir(tmp_path)
    run.write_status("done", "", step=3, cum_flops=1.5, cum_tokens=2.0)
    body = json.loads((tmp_path / "status.json").read_text())
    assert set(body) == set(StatusRecord.__annotations__) and body["step"] == 3 and body["cum_flops"] == 1.5
    assert run.read_status() == body
    run.write_status("running", step=4)
    assert set(json.loads((tmp_path / "status.json").read_text())) == StatusRecord.__required_keys__ | {
        "schema_version", "message", "updated", "step"}
    with pytest.raises(ValueError, match="status.json has no field flops"):
        run.write_status("done", step=3, flops=1.0)
    with pytest.raises(ValueError, match="status must be one of"):
        run.write_status("finished", step=3)
    with pytest.raises(ValueError, match="unknown status 'finished'"):
        as_status({"status": "finished"})


def test_provenance_json_is_written_and_read_as_the_record(tmp_path):
    start = provenance("cpu")
    assert provenance_problems(dict(start)) == [] and start["device"] == "cpu" and start["end"] is None
    assert set(start["git"]) == set(GitState.__annotations__)
    record: ProvenanceRecord = {**start, "resumed": [{"at_step": 2, "time": "t", "changed": [], "overrides": {},
                                                      "kernels": {}, "suite_sha256": None}]}
    RunDir(tmp_path).write_provenance(record)
    assert RunDir(tmp_path).read_provenance() == record
    assert RunDir(tmp_path / "none").read_provenance() is None


@pytest.mark.parametrize("folder", ["ci-baseline", "quickstart", "paper_cpu", "stability_cpu", "stress_cpu", "regime"])
def test_the_committed_results_hold_only_declared_fields(folder):
    """Every run folder the project ships, written by releases old and new: a field a writer added
    without declaring it (or a record renamed on one side) fails here."""
    statuses = sorted((RESULTS / folder).rglob("status.json"))
    assert statuses
    for path in statuses:
        body = json.loads(path.read_text())
        assert undeclared(body, StatusRecord) == set() and StatusRecord.__required_keys__ <= set(body), path
        assert provenance_problems(json.loads((path.parent / "provenance.json").read_text())) == [], path


def test_a_run_whose_task_fails_to_build_ends_failed_with_its_error_and_frees_its_folder(tmp_path, monkeypatch):
    """The task is built as the run opens (a file gone since `validate`, a plugin's task raising): the run
    stayed `running` for good, its folder locked by the suite's process, with no error.log. It must end
    `failed`, the error in status.json and its traceback in error.log, the lock released."""
    from gspo_bench.config import parse_suite
    from gspo_bench.config.schema import TaskConfig
    from gspo_bench.rundir.lock import RunLock
    from gspo_bench.suite.launch import run_one
    from gspo_bench.suite.runner import plan_runs, starting_weights
    from tests.helpers.runs import tiny_suite

    def broken(self):
        raise RuntimeError("the task's data went missing")

    suite = parse_suite(tiny_suite(tmp_path / "cache", warm_start={"enabled": False}, objectives=[{"name": "grpo"}]))
    planned = plan_runs(suite, tmp_path / "out")[0]
    spec = planned.with_weights(starting_weights(planned.suite, planned.seed, log=lambda m: None))
    monkeypatch.setattr(TaskConfig, "instance", broken)
    outcome = run_one(spec, {"resume": False, "allow_changed": False})
    assert outcome["status"] == "failed" and "RuntimeError: the task's data went missing" in outcome["message"]
    status = RunDir(spec.run_dir).read_status()
    assert status is not None and status["status"] == "failed"
    assert status["message"].startswith("RuntimeError: the task's data went missing")
    assert "RuntimeError: the task's data went missing" in (spec.run_dir / "error.log").read_text()
    RunLock(spec.run_dir).acquire().release()  # RunBusyError while the failed run's process still held it
