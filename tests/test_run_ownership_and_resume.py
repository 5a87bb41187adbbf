"""Reliability as a demanding user meets it: one owner per run folder, resume refuses an edited suite,
validate catches what run would, every error is one line, damaged results are read around."""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from analysis.data.load import load_results
from gspo_bench.cli import app
from gspo_bench.config import SuiteError, parse_suite
from gspo_bench.rundir.folder import RunDir
from gspo_bench.rundir.lock import RunBusyError, RunLock, check_free
from gspo_bench.suite.preflight import check_runnable
from tests.helpers.runs import metrics, run_suite, tiny_suite

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def cache(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("warmstart-cache")


def write_suite(path: Path, data: dict) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(data))
    return path


def cli(*args: str):
    return CliRunner().invoke(app, list(args))


def one_line_error(result, code: int = 2) -> str:
    assert result.exit_code == code, result.output
    assert "Traceback" not in result.output
    return result.output


# ------------------------------------------------------------------ 1. one owner per run folder

def test_a_run_folder_held_by_a_live_process_is_refused_and_a_dead_holder_is_taken_over(tmp_path, cache):
    data = tiny_suite(cache, objectives=[{"name": "grpo"}], budget={"kind": "steps", "value": 1})
    suite = write_suite(tmp_path / "suite.yaml", data)
    run_dir = tmp_path / "out" / "tiny" / "grpo-s0"
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time; from gspo_bench.rundir.lock import RunLock; held = RunLock(sys.argv[1]).acquire(); "
         "print('held', flush=True); time.sleep(120)", str(run_dir)], stdout=subprocess.PIPE, text=True, cwd=ROOT)
    try:
        assert holder.stdout.readline().strip() == "held"
        for args in ([], ["--resume"]):
            output = one_line_error(cli("run", str(suite), "--out", str(tmp_path / "out"), *args))
            assert f"pid {holder.pid}" in output and "in use" in output
        with pytest.raises(RunBusyError, match=f"pid {holder.pid}"):
            RunLock(run_dir).acquire()
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    assert cli("run", str(suite), "--out", str(tmp_path / "out")).exit_code == 0  # the dead holder's lock is free
    assert RunDir(run_dir).read_status()["status"] == "done"


def test_deleting_the_lock_file_of_a_held_run_lets_no_second_owner_in(tmp_path):
    """The lock is the run folder's own (flock on the folder): deleting its `.lock` record (or replacing
    it) while a run holds the folder lets no other process take it; once released it is free, the record
    or not. flock conflicts between two open files of one process too, so one process can check it."""
    run_dir = tmp_path / "out" / "tiny" / "grpo-s0"
    held = RunLock(run_dir).acquire()
    assert json.loads((run_dir / ".lock").read_text())["pid"] == os.getpid()
    (run_dir / ".lock").unlink()
    with pytest.raises(RunBusyError, match=f"{run_dir} is in use by pid \\? on host \\?"):
        RunLock(run_dir).acquire()
    (run_dir / ".lock").write_text("{}")  # a new record in its place
    with pytest.raises(RunBusyError):
        RunLock(run_dir).acquire()
    with pytest.raises(RunBusyError):
        check_free(run_dir)
    held.release()
    RunLock(run_dir).acquire().release()
    check_free(run_dir)


def test_two_runs_started_together_never_share_a_folder(tmp_path, cache):
    data = tiny_suite(cache, objectives=[{"name": "grpo"}], budget={"kind": "steps", "value": 4})
    suite = write_suite(tmp_path / "suite.yaml", data)
    run_suite(tiny_suite(cache, objectives=[{"name": "grpo"}], budget={"kind": "steps", "value": 1}),
              tmp_path / "warm")  # the warm start, cached: both processes below only train
    cmd = [sys.executable, "-m", "gspo_bench.cli", "run", str(suite), "--out", str(tmp_path / "out")]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    first, second = (subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                                      cwd=ROOT) for _ in range(2))
    outputs = [p.communicate(timeout=300)[0] for p in (first, second)]
    codes = sorted(p.returncode for p in (first, second))
    assert codes == [0, 2], outputs  # one trains, the other is refused with a message
    refused = outputs[[first.returncode, second.returncode].index(2)]
    assert "in use by pid" in refused or "already holds a run" in refused
    prov = json.loads((tmp_path / "out" / "tiny" / "grpo-s0" / "provenance.json").read_text())
    assert "resumed" not in prov and len(metrics(tmp_path / "out", "tiny", "grpo-s0")) == 4


# ------------------------------------------------------------------ 2. resume after an edit

def interrupted_run(cache, out: Path, **changes) -> dict:
    data = tiny_suite(cache, objectives=[{"name": "gspo"}], budget={"kind": "steps", "value": 3}, **changes)

    def stop(row):
        if row["step"] == 2:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_suite(data, out, on_step=stop)
    return data


def test_resume_refuses_an_edited_suite_unless_told_and_then_applies_and_records_the_change(tmp_path, cache):
    data = interrupted_run(cache, tmp_path / "out", train={"lr": 2e-4})
    edited = write_suite(tmp_path / "edited.yaml", {**data, "train": {**data["train"], "lr": 5e-3}})
    output = one_line_error(cli("run", str(edited), "--out", str(tmp_path / "out"), "--resume"))
    assert "suite.train.lr: 0.0002 -> 0.005" in output.replace("\n", " ") and "--allow-changed" in output
    assert cli("run", str(edited), "--out", str(tmp_path / "out"), "--resume", "--allow-changed").exit_code == 0
    frame = metrics(tmp_path / "out", "tiny", "gspo-s0")
    assert frame["lr"].tolist() == [2e-4, 5e-3, 5e-3]  # step 2 was never checkpointed: redone at the new lr
    prov = json.loads((tmp_path / "out" / "tiny" / "gspo-s0" / "provenance.json").read_text())
    assert any("suite.train.lr" in change for change in prov["resumed"][-1]["changed"])
    config = yaml.safe_load((tmp_path / "out" / "tiny" / "gspo-s0" / "config.yaml").read_text())
    assert config["run"]["lr"] == config["suite"]["train"]["lr"] == 5e-3


def test_a_worker_refuses_a_resume_under_changed_settings_before_loading_any_weights(tmp_path, cache, monkeypatch):
    """The suite's own check aside (a worker may be handed a run directly), train_run refuses to resume a
    run whose settings changed since it started, naming the change, before it loads the model."""
    import gspo_bench.train.setup as setup

    data = interrupted_run(cache, tmp_path / "out", train={"lr": 2e-4})
    edited = {**data, "train": {**data["train"], "lr": 5e-3}}

    def no_weights(*args, **kwargs):
        raise AssertionError("weights loaded before the settings were checked")

    monkeypatch.setattr(setup, "load_policy", no_weights)
    with pytest.raises(ValueError, match=r"suite changed since this run started \(run.lr: 0.0002 -> 0.005; suite.train.lr"):
        run_suite(edited, tmp_path / "out", resume=True)
    assert RunDir(tmp_path / "out" / "tiny" / "gspo-s0").read_status()["status"] == "failed"


# ------------------------------------------------------------------ 3. schema independent of progress

def test_a_run_that_collapses_in_its_first_step_has_every_column_and_is_reported(tmp_path, cache):
    data = tiny_suite(cache, objectives=[{"name": "grpo", "label": "boom", "lr": 1e38}, {"name": "gspo"}],
                      budget={"kind": "steps", "value": 2})
    statuses = run_suite(data, tmp_path)
    assert statuses["boom-s0"]["status"] == "collapsed"
    from gspo_bench.rundir.folder import REQUIRED_COLUMNS

    frame = metrics(tmp_path, "tiny", "boom-s0")
    assert set(REQUIRED_COLUMNS) <= set(frame.columns)
    result = cli("report", str(tmp_path / "tiny"), "--out", str(tmp_path / "report"), "--allow-unmatched")
    assert result.exit_code == 0, result.output
    assert "boom" in (tmp_path / "report" / "report.md").read_text()


# ------------------------------------------------------------------ 4, 5, 9. validate catches what run would
# (every refusal of a suite goes through validate and run alike: tests/test_validate_refusals.py)

@pytest.mark.parametrize("content, match", [(None, "no file"), ("", "no records"), ("{not json\n", "not valid JSON")])
def test_a_missing_empty_or_broken_jsonl_file_is_refused_by_validate(tmp_path, content, match):
    path = tmp_path / "data.jsonl"
    if content is not None:
        path.write_text(content)
    suite = parse_suite(tiny_suite(tmp_path, task={"name": "jsonl", "params": {"path": str(path)}}), "s.yaml")
    with pytest.raises(SuiteError, match=match):
        check_runnable(suite, "s.yaml")


def test_check_runnable_names_a_missing_gpu(tmp_path, monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(SuiteError, match="no CUDA device"):
        check_runnable(parse_suite(tiny_suite(tmp_path, train={"device": "cuda"})), "s.yaml")


# ------------------------------------------------------------------ 6. OS errors are messages

def test_out_under_a_file_is_a_message(tmp_path, cache):
    suite = write_suite(tmp_path / "s.yaml", tiny_suite(cache, objectives=[{"name": "grpo"}]))
    (tmp_path / "file").write_text("x")
    output = one_line_error(cli("run", str(suite), "--out", str(tmp_path / "file" / "out")))
    assert "cannot write results under" in output


def test_a_full_disk_is_named_and_the_console_agrees_with_status_json(tmp_path, cache, monkeypatch):
    from gspo_bench.train import loop

    def full(*args, **kwargs):
        raise RuntimeError("[enforce fail at inline_container.cc:664] . unexpected pos 128 vs 0")

    monkeypatch.setattr(loop, "save_checkpoint", full)
    monkeypatch.setattr("shutil.disk_usage", lambda path: type("Usage", (), {"free": 0})())
    suite = write_suite(tmp_path / "s.yaml", tiny_suite(cache, objectives=[{"name": "grpo"}]))
    result = cli("run", str(suite), "--out", str(tmp_path / "out"))
    assert result.exit_code == 1
    status = RunDir(tmp_path / "out" / "tiny" / "grpo-s0").read_status()
    assert status["status"] == "failed" and "no space left" in status["message"] and status["step"] == 1
    shown = " ".join(result.output.split())  # the console wraps long lines
    assert "failed at step 1: no space left on the device" in shown and "unexpected pos" in shown


def test_a_read_only_results_folder_is_a_message(tmp_path, cache):
    if os.geteuid() == 0:
        pytest.skip("root writes to read-only folders: nothing to observe")
    suite = write_suite(tmp_path / "s.yaml", tiny_suite(cache, objectives=[{"name": "grpo"}]))
    (tmp_path / "ro").mkdir()
    (tmp_path / "ro").chmod(0o555)
    assert "cannot write results under" in one_line_error(cli("run", str(suite), "--out", str(tmp_path / "ro")))


# ------------------------------------------------------------------ 7. paths with markup characters

def test_paths_with_brackets_print_as_they_are(tmp_path, cache):
    folder = tmp_path / "a[/x]b"
    suite = write_suite(folder / "s.yaml", tiny_suite(cache, objectives=[{"name": "grpo"}],
                                                     budget={"kind": "steps", "value": 1}))
    result = cli("validate", str(suite))
    assert result.exit_code == 0 and "a[/x]b" in result.output
    result = cli("run", str(suite), "--out", str(folder / "out"))
    assert result.exit_code == 0 and "a[/x]b" in result.output.replace("\n", "")


# ------------------------------------------------------------------ 8. damaged results

def test_report_reads_around_a_damaged_run_and_refuses_a_folder_of_random_files(tmp_path, cache):
    run_suite(tiny_suite(cache, objectives=[{"name": "grpo"}, {"name": "gspo"}], budget={"kind": "steps", "value": 1}),
              tmp_path / "out")
    damaged = tmp_path / "out" / "tiny" / "gspo-s0" / "metrics.parquet"
    damaged.write_bytes(damaged.read_bytes()[:40])
    assert load_results(tmp_path / "out" / "tiny").unreadable[0].startswith(str(damaged.parent))
    result = cli("report", str(tmp_path / "out" / "tiny"), "--out", str(tmp_path / "r"))
    assert result.exit_code == 0 and f"unreadable: {damaged.parent}" in result.output.replace("\n", "")
    assert "unreadable:" in (tmp_path / "r" / "report.md").read_text()
    junk = tmp_path / "junk"
    junk.mkdir()
    (junk / "notes.txt").write_text("hello")
    assert "junk holds no gspo-bench results" in one_line_error(cli("report", str(junk))).replace("\n", "")
    output = one_line_error(cli("regress", str(junk), "--baseline", str(tmp_path / "out" / "tiny")))
    assert str(junk) in output.replace("\n", "") and "--allow-unmatched" not in output


# ------------------------------------------------------------------ 10. the smaller items

def test_resume_cleans_up_and_the_status_follows_the_run(tmp_path, cache):
    interrupted_run(cache, tmp_path / "out")
    run_dir = tmp_path / "out" / "tiny" / "gspo-s0"
    assert (run_dir / "error.log").is_file() and RunDir(run_dir).read_status()["step"] == 2
    (run_dir / ".checkpoint-new-stale").mkdir()
    data = tiny_suite(cache, objectives=[{"name": "gspo"}], budget={"kind": "steps", "value": 3})
    steps_seen = []
    run_suite(data, tmp_path / "out", resume=True, on_step=lambda row: steps_seen.append(RunDir(run_dir).read_status()))
    assert [s["step"] for s in steps_seen] == [2, 3] and all(s["status"] == "running" for s in steps_seen)
    assert not (run_dir / ".checkpoint-new-stale").exists() and not (run_dir / "error.log").exists()
    for name in ("metrics.parquet", "status.json", "config.yaml", "provenance.json"):
        assert stat.S_IMODE((run_dir / name).stat().st_mode) == 0o666 & ~_umask(), name


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def test_sigterm_ends_a_run_as_failed_with_a_message(tmp_path, cache):
    run_suite(tiny_suite(cache, objectives=[{"name": "grpo"}], budget={"kind": "steps", "value": 1}), tmp_path / "w")
    suite = write_suite(tmp_path / "s.yaml", tiny_suite(cache, objectives=[{"name": "grpo"}],
                                                       budget={"kind": "steps", "value": 200}))
    proc = subprocess.Popen([sys.executable, "-m", "gspo_bench.cli", "run", str(suite), "--out", str(tmp_path / "out")],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT,
                            env={**os.environ, "OMP_NUM_THREADS": "1"})
    status_file = tmp_path / "out" / "tiny" / "grpo-s0" / "status.json"
    deadline = time.time() + 120
    while time.time() < deadline and not (status_file.is_file() and json.loads(status_file.read_text())["step"] >= 1):
        time.sleep(0.2)
    proc.send_signal(signal.SIGTERM)
    output = proc.communicate(timeout=60)[0]
    status = json.loads(status_file.read_text())
    assert status["status"] == "failed" and "SIGTERM" in status["message"]
    assert proc.returncode == 143 and "SIGTERM" in output and "--resume" in output


def test_an_interrupt_says_what_happened(tmp_path, cache, monkeypatch):
    from gspo_bench.suite import runner as suite_module

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(suite_module, "run_suite", interrupted)
    suite = write_suite(tmp_path / "s.yaml", tiny_suite(cache, objectives=[{"name": "grpo"}]))
    output = one_line_error(cli("run", str(suite), "--out", str(tmp_path / "out")), code=130)
    assert "interrupted" in output and "--resume" in output


def test_small_cli_mistakes_are_named(tmp_path, cache):
    assert "is a directory" in one_line_error(cli("validate", str(tmp_path)))
    suite = write_suite(tmp_path / "s.yaml", tiny_suite(cache, objectives=[{"name": "grpo"}]))
    assert "--seeds" in one_line_error(cli("run", str(suite), "--seeds", "abc"))
    assert "--seeds" in one_line_error(cli("run", str(suite), "--seeds", "0,0"))
    model = tmp_path / "model"
    from gspo_bench.models import build_char_tokenizer, build_tiny_moe, save_model

    save_model(build_tiny_moe(num_layers=1), build_char_tokenizer(), model)
    assert "no_such_task" in one_line_error(cli("eval", str(model), "--tasks", "no_such_task"))


def test_an_unexpected_error_is_one_line_unless_debug(tmp_path, cache, monkeypatch):
    from gspo_bench.suite import runner as suite_module

    def broken(*args, **kwargs):
        raise ZeroDivisionError("something deep")

    monkeypatch.setattr(suite_module, "plan_runs", broken)
    suite = write_suite(tmp_path / "s.yaml", tiny_suite(cache, objectives=[{"name": "grpo"}]))
    output = one_line_error(cli("validate", str(suite)))
    assert "ZeroDivisionError: something deep" in output and "--debug" in output
    debug = cli("--debug", "validate", str(suite))
    assert isinstance(debug.exception, ZeroDivisionError)
