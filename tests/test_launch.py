"""Runs side by side (`--parallel`, local processes) and as Ray tasks (`--ray`) write exactly what
one-after-another runs write; `--resume` works the same under them."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pandas as pd
import pytest
import yaml
from safetensors.torch import load_file
from typer.testing import CliRunner

from gspo_bench.cli import app
from gspo_bench.rundir.folder import RunDir
from tests.helpers.launch import TIME_COLUMNS
from tests.helpers.runs import signal_suite

RUNS = ("grpo_rr-s0", "gspo-s0", "grpo_rr-s1")


@pytest.fixture(scope="module")
def suite_file(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("launch")
    data = signal_suite(root / "cache", steps=3, objectives=[{"name": "grpo_rr"}, {"name": "gspo"}], seeds=[0, 1])
    path = root / "suite.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def run(suite_file: Path, out: Path, *args: str) -> str:
    result = CliRunner().invoke(app, ["run", str(suite_file), "--out", str(out), *args])
    assert result.exit_code == 0, result.output
    return result.output


def assert_same_results(a: Path, b: Path) -> None:
    for name in RUNS:
        left, right = a / "tiny" / name, b / "tiny" / name
        assert RunDir(right).read_status()["status"] == "done"
        pd.testing.assert_frame_equal(pd.read_parquet(left / "metrics.parquet").drop(columns=TIME_COLUMNS),
                                      pd.read_parquet(right / "metrics.parquet").drop(columns=TIME_COLUMNS))
        pd.testing.assert_frame_equal(pd.read_parquet(left / "layers.parquet"), pd.read_parquet(right / "layers.parquet"))
        weights_a = load_file(left / "checkpoint" / "model" / "model.safetensors")
        weights_b = load_file(right / "checkpoint" / "model" / "model.safetensors")
        assert weights_a.keys() == weights_b.keys()
        assert all((weights_a[k] == weights_b[k]).all() for k in weights_a), name


@pytest.fixture(scope="module")
def sequential(suite_file, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("sequential")
    run(suite_file, out)
    return out


@pytest.mark.slow
def test_parallel_local_processes_write_what_sequential_runs_write(suite_file, sequential, tmp_path):
    output = run(suite_file, tmp_path, "--parallel", "2")
    assert all(f"[{name}] done" in output for name in RUNS)  # every run's progress reached the console
    assert_same_results(sequential, tmp_path)


@pytest.mark.slow
def test_resume_under_parallel_finishes_only_what_is_unfinished(suite_file, sequential, tmp_path):
    run(suite_file, tmp_path, "--only", "gspo", "--seeds", "0")
    status = RunDir(tmp_path / "tiny" / "gspo-s0").read_status()
    output = run(suite_file, tmp_path, "--parallel", "2", "--resume")
    assert "[gspo-s0]" not in output  # finished: not run again
    assert RunDir(tmp_path / "tiny" / "gspo-s0").read_status()["updated"] == status["updated"]
    assert_same_results(sequential, tmp_path)


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("ray") is None, reason="Ray is not installed (pip install -e '.[ray]')")
def test_ray_tasks_write_what_sequential_runs_write(suite_file, sequential, tmp_path):
    output = run(suite_file, tmp_path, "--ray")
    assert all(f"[{name}] done" in output for name in RUNS)
    assert_same_results(sequential, tmp_path)


def test_parallel_is_refused_with_a_message_under_torchrun(suite_file, monkeypatch):
    from gspo_bench.runtime import distributed
    from gspo_bench.runtime.distributed import World
    from gspo_bench.suite.session import Launch

    monkeypatch.setattr(distributed, "joined_world", lambda device: World(rank=0, size=2))
    result = CliRunner().invoke(app, ["run", str(suite_file), "--out", "/nonexistent/x", "--parallel", "2"])
    assert result.exit_code == 2 and "under torchrun every rank trains the same run" in result.output
    for refused in ({"parallel": 2}, {"parallel": 0}, {"ray_address": None}):
        with pytest.raises(ValueError, match="under torchrun every rank trains the same run"):
            Launch(world=World(rank=0, size=2), **refused)
    assert Launch(world=World(rank=0, size=2)).parallel == 1


def test_parallel_zero_fits_the_cores_at_the_suite_threads(monkeypatch):
    from gspo_bench.suite import launch

    monkeypatch.setattr(launch.os, "cpu_count", lambda: 16)
    assert launch.default_parallel(2) == 8 and launch.default_parallel(None) == 16
    assert launch.default_parallel(32) == 1  # never fewer than one run


# ------------------------------------------------------------------ a worker's stop, in process (no real signal)

@pytest.fixture
def worker(monkeypatch):
    """A `--parallel` worker's state as `_start_worker` sets it, without the process around it."""
    import multiprocessing
    import threading

    from gspo_bench.suite import launch

    state = {"messages": None, "stop": threading.Event(), "reason": multiprocessing.Value("i", 0), "running": False,
             "stopping": False, "exit_after": False, "stopped": False}
    monkeypatch.setattr(launch, "_WORKER", state)
    monkeypatch.setattr(launch, "run_one", lambda spec, mode, report: pytest.fail("a run started after the stop"))
    return state


def test_a_worker_that_saw_a_stop_starts_no_further_run(worker, tmp_path):
    """Ctrl-C reaches an idle worker before the suite's process sets the shared flag: the worker
    ignores it there (the suite decides), yet takes no queued run after it."""
    import signal
    from types import SimpleNamespace

    from gspo_bench.suite import launch

    launch._worker_signal(signal.SIGINT, None)  # idle: no exception
    assert worker["stopped"] and not worker["stop"].is_set()
    outcome = launch._run_in_process(SimpleNamespace(run_dir=tmp_path / "queued"), {})
    assert outcome["status"] == "not started" and not (tmp_path / "queued").exists()


def test_a_stop_outside_the_training_loop_records_the_run_failed(tmp_path):
    """A run whose folder still says `running` when a stop ends it outside the loop is marked failed
    there, resumable; a run that never wrote a status gets none."""
    import signal
    from types import SimpleNamespace

    from gspo_bench.runtime.stopping import Stopped
    from gspo_bench.suite.launch import _record_stopped

    started = RunDir(tmp_path / "started")
    started.write_status("running", step=3)
    outcome = _record_stopped(SimpleNamespace(run_dir=started.path), Stopped(signal.SIGTERM))
    recorded = started.read_status()
    assert recorded["status"] == "failed" and recorded["step"] == 3 and outcome["status"] == "failed"
    assert "stopped by SIGTERM" in recorded["message"] and "--resume" in recorded["message"]
    never = tmp_path / "never"
    assert _record_stopped(SimpleNamespace(run_dir=never), Stopped(signal.SIGINT))["status"] == "failed"
    assert RunDir(never).read_status() is None
    damaged = tmp_path / "damaged"
    damaged.mkdir()
    (damaged / "status.json").write_bytes(b'{"status": "runn')
    outcome = _record_stopped(SimpleNamespace(run_dir=damaged), Stopped(signal.SIGTERM))
    assert outcome["status"] == "failed" and "stopped by SIGTERM" in outcome["message"]


class StoppedPool:
    """What `run_local_processes` uses of its ProcessPoolExecutor, in process: run 0 has finished, run
    1 is running and run 2 is queued when a stop (KeyboardInterrupt) comes, while run 3 is submitted.
    Once the suite's stop event is set (a few seconds at most: a missing stop fails, never hangs), the
    pool does what a process pool and its workers do: the queued run, unless cancelled, goes to a
    worker that starts no run after a stop; the running run records its end as failed."""

    def __init__(self, max_workers, mp_context, initializer, initargs):
        self.stop = initargs[1]
        self.futures = []

    def submit(self, fn, spec, mode):
        import threading
        from concurrent.futures import Future

        if len(self.futures) == 3:
            threading.Thread(target=self._stop_running, daemon=True).start()
            raise KeyboardInterrupt
        future = Future()
        if len(self.futures) < 2:
            future.set_running_or_notify_cancel()
        if not self.futures:
            future.set_result({"status": "done", "message": "", "step": 3})
        self.futures.append(future)
        return future

    def _stop_running(self):
        stopped = self.stop.wait(timeout=5)
        if self.futures[2].set_running_or_notify_cancel():  # not cancelled: a worker takes it
            self.futures[2].set_result({"status": "not started", "message": "the suite was stopped", "step": None})
        self.futures[1].set_result({"status": "failed", "message": "stopped by Ctrl-C (SIGINT)", "step": 1} if stopped
                                   else {"status": "done", "message": "", "step": 3})

    def shutdown(self, wait=True, cancel_futures=False):
        pass


def test_a_stop_waits_for_the_running_runs_and_reports_them_not_the_cancelled_ones(tmp_path, monkeypatch):
    from types import SimpleNamespace

    from gspo_bench.suite import launch

    ended = []

    class Recorder(launch.Observer):
        def end_run(self, name: str, status: dict) -> None:
            ended.append((name, status["status"], status["step"]))

    pools = []
    monkeypatch.setattr(launch, "start_process_server", lambda: None)
    monkeypatch.setattr(launch, "ProcessPoolExecutor", lambda **kw: pools.append(StoppedPool(**kw)) or pools[-1])
    specs = [SimpleNamespace(run_dir=tmp_path / f"r{i}") for i in range(4)]
    with pytest.raises(KeyboardInterrupt):
        launch.run_local_processes(specs, {}, Recorder(), workers=2)
    assert sorted(ended) == [("r0", "done", 3), ("r1", "failed", 1)]  # the queued run 2 is not reported
    assert pools[0].futures[2].cancelled() and pools[0].stop.is_set()


@pytest.mark.parametrize("recorded,expected", [
    ({"status": "done", "step": 4}, ("done", 4, "")),  # finished, then its worker was stopped before replying
    ({"status": "collapsed", "step": 2, "message": "reward collapsed"}, ("collapsed", 2, "reward collapsed")),
    ({"status": "failed", "step": 2, "message": "stopped by SIGTERM"}, ("failed", 2, "stopped by SIGTERM")),
    ({"status": "running", "step": 1}, ("failed", 1, "Stopped: stopped by Ctrl-C (SIGINT)")),
    (None, ("failed", 0, "Stopped: stopped by Ctrl-C (SIGINT)")),  # never wrote a status
    (b'{"status": "runn', ("failed", 0, "Stopped: stopped by Ctrl-C (SIGINT)")),  # a damaged status.json
])
def test_a_worker_stopped_after_its_run_reports_what_the_run_folder_records(tmp_path, recorded, expected):
    import signal
    from concurrent.futures import Future
    from types import SimpleNamespace

    from gspo_bench.runtime.stopping import Stopped
    from gspo_bench.suite.launch import _outcome

    if isinstance(recorded, bytes):
        (tmp_path / "run").mkdir()
        (tmp_path / "run" / "status.json").write_bytes(recorded)
    elif recorded is not None:
        RunDir(tmp_path / "run").write_status(recorded.pop("status"), recorded.pop("message", ""), **recorded)
    future = Future()
    future.set_exception(Stopped(signal.SIGINT))
    outcome = _outcome(future, SimpleNamespace(run_dir=tmp_path / "run"))
    assert (outcome["status"], outcome["step"], outcome["message"]) == expected


def test_a_run_that_fails_on_its_damaged_status_json_is_reported_failed_and_the_suite_goes_on(tmp_path, monkeypatch):
    """The failure's own message names the damaged file; reading the step from that file again must not
    raise a second error out of the handler (which would stop the whole suite)."""
    from types import SimpleNamespace

    import gspo_bench.train.loop as loop
    from gspo_bench.suite.launch import run_one

    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "status.json").write_bytes(b'{"status": "runn')
    monkeypatch.setattr(loop, "train_run", lambda spec, **mode: RunDir(spec.run_dir).read_status())
    outcome = run_one(SimpleNamespace(run_dir=run_dir), {})
    assert outcome["status"] == "failed" and outcome["step"] == 0
    assert f"{run_dir / 'status.json'} is damaged" in outcome["message"]


@pytest.mark.parametrize("missed", ["stop set, no signal arrived", "Stopped raised and swallowed"])
def test_a_run_that_trains_on_after_its_stop_stops_at_its_next_step(worker, missed):
    """A stop that never reached the run (a signal lost) or whose Stopped was dropped (raised inside a
    finalizer: Python prints it and goes on, and `stopping` holds off further signals) still ends the
    run: each step's report checks the stop again. Before the stop, and for other messages, it does not."""
    import queue
    import signal

    from gspo_bench.runtime.stopping import Stopped
    from gspo_bench.suite import launch

    messages = queue.Queue()
    report = launch._QueueReport(messages)
    worker["running"] = True
    report("step", "grpo-s0", {"step": 1})  # no stop yet: the run goes on
    worker["reason"].value = signal.SIGTERM
    if missed == "stop set, no signal arrived":
        worker["stop"].set()
    else:
        worker["stopping"] = True
    report("start", "grpo-s1", {})  # not a step: no stop raised here
    with pytest.raises(Stopped) as raised:
        report("step", "grpo-s0", {"step": 2})
    assert raised.value.signum == signal.SIGTERM and worker["stopping"]
    assert [messages.get_nowait()[2] for _ in range(3)] == [{"step": 1}, {}, {"step": 2}]  # each sent whole
    worker["running"] = False
    report("step", "grpo-s0", {"step": 3})  # an idle worker's process raises nothing
