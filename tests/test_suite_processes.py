"""The processes of a suite, as real processes: `--parallel` workers die with the suite's process
(kill -9 leaves nothing behind, no lock held); SIGTERM and Ctrl-C stop the suite (no queued run
starts, the runs in progress are recorded failed) and `--resume` under `--parallel` then finishes
it from the checkpoints, with the results of a sequential run."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from gspo_bench.cli import app
from gspo_bench.rundir.folder import RunDir
from gspo_bench.rundir.lock import check_free
from tests.helpers.interrupts import interrupted, quick_suite
from tests.helpers.launch import TIME_COLUMNS
from tests.helpers.runs import parallel_suite

ROOT = Path(__file__).resolve().parent.parent
RUNS = ("grpo_rr-s0", "gspo-s0", "grpo_rr-s1", "gspo-s1")  # with --parallel 2: two run, two wait
STEPS = parallel_suite(Path("cache"))["budget"]["value"]  # each run's steps (6)


@pytest.fixture(scope="module")
def suite_file(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("process")
    data = parallel_suite(root / "cache")
    path = root / "suite.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


@pytest.fixture(scope="module")
def sequential(suite_file, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("sequential")
    result = CliRunner().invoke(app, ["run", str(suite_file), "--out", str(out)])
    assert result.exit_code == 0, result.output
    for name in RUNS:
        assert_weights_change(out / "tiny" / name, suite_file.parent / "cache")
    return out / "tiny"


def assert_weights_change(run_dir: Path, cache: Path) -> None:
    """The run learned: rewards differed and updates had a gradient (GSPO's narrow clip range may zero
    one step's), and its checkpoint's weights are not its starting weights (a resume from a wrong state
    would show)."""
    import pandas as pd
    from safetensors.torch import load_file

    frame = pd.read_parquet(run_dir / "metrics.parquet")
    assert (frame["reward/std"] > 0).any() and (frame["grad/norm"] > 0).any(), frame[["reward/std", "grad/norm"]]
    after = load_file(run_dir / "checkpoint" / "model" / "model.safetensors")
    starts = [p / "model.safetensors" for p in cache.iterdir() if p.name.startswith("warmstart-")]
    assert starts  # the starting weights of every seed: the run's own is one of them, and it moved away from it
    for start in starts:
        before = load_file(start)
        assert any(not (before[k] == after[k]).all() for k in before), (run_dir, start)


def start(suite_file: Path, out: Path, *args: str) -> subprocess.Popen:
    """`gspo-bench run` as its own process group (as a shell starts a command: Ctrl-C reaches the
    group), its output in OUT.log (a file: a pipe would wait for every process that inherited it)."""
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "run.log", "w") as log:
        return subprocess.Popen([sys.executable, "-m", "gspo_bench.cli", "run", str(suite_file), "--out", str(out),
                                 *args], stdout=log, stderr=subprocess.STDOUT, cwd=ROOT,
                                env={**os.environ, "OMP_NUM_THREADS": "1"}, start_new_session=True)


def output(proc: subprocess.Popen, out: Path) -> str:
    proc.wait(timeout=120)
    return (out / "run.log").read_text()


def status(run_dir: Path) -> dict | None:
    try:
        return json.loads((run_dir / "status.json").read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return None


def wait_until_running(out: Path, n: int, proc: subprocess.Popen, step: int = 1) -> list[str]:
    """The names of the first `n` runs seen at `step` or later (and still running)."""
    deadline = time.time() + 180
    while time.time() < deadline and proc.poll() is None:
        running = [name for name in RUNS if (s := status(out / "tiny" / name)) and s["status"] == "running"
                   and s["step"] >= step]
        if len(running) >= n:
            return running
        time.sleep(0.05)
    raise AssertionError(f"no {n} runs at step {step}: {(out / 'run.log').read_text()[-3000:]}")


def descendants(pid: int) -> set[int]:
    """Every live process under `pid` (from /proc)."""
    parents = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            fields = stat.rsplit(")", 1)[1].split()
            if fields[0] != "Z":
                parents.setdefault(int(fields[1]), []).append(int(entry.name))
    found, todo = set(), [pid]
    while todo:
        for child in parents.get(todo.pop(), []):
            found.add(child)
            todo.append(child)
    return found


def alive(pids: set[int]) -> set[int]:
    """Those of `pids` that still run (a zombie has ended)."""
    left = set()
    for pid in pids:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state != "Z":
            left.add(pid)
    return left


def resume(suite_file: Path, out: Path) -> str:
    result = CliRunner().invoke(app, ["run", str(suite_file), "--out", str(out), "--resume", "--parallel", "2"])
    assert result.exit_code == 0, result.output
    return result.output


def assert_same_as_sequential(sequential: Path, out: Path) -> None:
    import pandas as pd

    for name in RUNS:
        assert RunDir(out / name).read_status()["status"] == "done", name
        pd.testing.assert_frame_equal(pd.read_parquet(sequential / name / "metrics.parquet").drop(columns=TIME_COLUMNS),
                                      pd.read_parquet(out / name / "metrics.parquet").drop(columns=TIME_COLUMNS))


@pytest.mark.slow
def test_kill_9_of_the_parallel_parent_leaves_no_process_and_no_lock(suite_file, sequential, tmp_path):
    proc = start(suite_file, tmp_path, "--parallel", "2")
    wait_until_running(tmp_path, 1, proc)
    children = descendants(proc.pid)
    assert len(children) >= 3, children  # the workers, and multiprocessing's helpers
    proc.kill()
    output(proc, tmp_path)
    deadline = time.time() + 10
    while alive(children) and time.time() < deadline:
        time.sleep(0.1)
    assert not alive(children), f"left behind: {alive(children)}"
    for name in RUNS:
        check_free(tmp_path / "tiny" / name)  # RunBusyError if a lock outlived the suite
    resume(suite_file, tmp_path)
    assert_same_as_sequential(sequential, tmp_path / "tiny")


@pytest.mark.slow
@pytest.mark.parametrize("how", ["SIGTERM", "Ctrl-C"])
def test_a_stop_signal_stops_the_parallel_suite_and_resume_finishes_it(suite_file, sequential, tmp_path, how):
    proc = start(suite_file, tmp_path, "--parallel", "2")
    wait_until_running(tmp_path, 2, proc, step=2)  # each has a checkpoint (step 1's at least)
    before = {run: status(tmp_path / "tiny" / run) for run in RUNS}  # a run may end between this and the stop
    if how == "SIGTERM":
        proc.send_signal(signal.SIGTERM)  # the suite's process alone: it stops its workers
    else:
        os.killpg(proc.pid, signal.SIGINT)  # a terminal's Ctrl-C: every process of the group
    said = " ".join(output(proc, tmp_path).split())  # the console wraps long lines
    name = "SIGTERM" if how == "SIGTERM" else "Ctrl-C (SIGINT)"
    assert proc.returncode == (143 if how == "SIGTERM" else 130), said
    assert f"stopped by {name}: no further run starts" in said and "--resume` continues the suite" in said
    time.sleep(1.0)  # a queued run that (wrongly) started after the stop would show by now
    stopped = {}
    for run in RUNS:
        recorded, seen = status(tmp_path / "tiny" / run), before[run]
        if seen is not None and seen["status"] == "done":
            assert recorded == seen, f"{run} ended before the stop: {recorded}"
        elif recorded is not None and recorded["status"] == "done":  # it was on its last step when stopped
            assert seen is not None and seen["status"] == "running" and seen["step"] == STEPS, (run, seen, recorded)
        elif recorded is not None or seen is not None:  # running at the stop (or starting just then): stopped
            assert recorded["status"] == "failed" and f"stopped by {name}" in recorded["message"], (run, seen, recorded)
            assert "--resume" in recorded["message"]
            stopped[run] = recorded["step"]
    assert len(stopped) >= 1 and sum(before[run] is None for run in RUNS) >= 1, before  # something to stop and to queue
    resume(suite_file, tmp_path)
    for run, step in stopped.items():  # continued from its checkpoint, not started again
        provenance = json.loads((tmp_path / "tiny" / run / "provenance.json").read_text())
        [resumed] = provenance["resumed"]
        assert 1 <= resumed["at_step"] and resumed["at_step"] in (step - 1, step)  # a stop may precede its checkpoint
    assert_same_as_sequential(sequential, tmp_path / "tiny")


def lock_pid(run_dir: Path) -> int:
    """The pid of the process that holds the run's lock (its worker)."""
    return json.loads((run_dir / ".lock").read_text())["pid"]


def all_threads_stopped(pid: int) -> bool:
    """Whether every thread of `pid` has stopped (state T in /proc: SIGSTOP takes effect as each thread
    next leaves the kernel, not when os.kill returns)."""
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            state = (task / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:  # the thread ended
            continue
        if state not in ("T", "t", "Z", "X"):
            return False
    return True


def worker_pids(out: Path, proc: subprocess.Popen) -> set[int]:
    """The pids of the pool's two workers, read from the locks of two runs in progress (again if one
    of them ended, and its lock went, between the two reads)."""
    while True:
        try:
            return {lock_pid(out / "tiny" / name) for name in wait_until_running(out, 2, proc)}
        except (FileNotFoundError, json.JSONDecodeError):
            continue


def frozen_runs(out: Path, workers: set[int], proc: subprocess.Popen) -> dict[str, dict | None]:
    """Every run's status with all `workers` stopped (SIGSTOP), at a moment when some run is in
    progress: nothing can end or start until they continue, so what it says holds at the kill."""
    while proc.poll() is None:
        for pid in workers:
            os.kill(pid, signal.SIGSTOP)
        while not all(all_threads_stopped(pid) for pid in workers):
            time.sleep(0.01)
        found = {name: status(out / "tiny" / name) for name in RUNS}
        if any(s and s["status"] == "running" for s in found.values()):
            return found
        for pid in workers:  # between two runs: let them go on and look again
            os.kill(pid, signal.SIGCONT)
        time.sleep(0.05)
    raise AssertionError(f"the suite ended before a run could be frozen: {(out / 'run.log').read_text()[-3000:]}")


@pytest.mark.slow
def test_kill_9_of_one_parallel_worker_fails_its_run_alone_and_resume_finishes_it(suite_file, sequential, tmp_path):
    """The worker of one run is killed (as the OOM killer would): that run is reported as the one whose
    worker died, a run in progress beside it as stopped because of it (or done, had it just ended), the
    queued ones as not started; `--resume` finishes the suite with the results of a sequential run and no
    half-written checkpoint is left. Both workers are frozen (SIGSTOP) while the runs in progress are read
    and one is killed, so the test knows which runs were in progress then however loaded the machine (a
    run expected to be stopped may otherwise have ended before the kill)."""
    proc = start(suite_file, tmp_path, "--parallel", "2")
    workers = worker_pids(tmp_path, proc)
    assert len(workers) == 2  # the pool's two processes
    try:
        frozen = frozen_runs(tmp_path, workers, proc)
        running = [name for name, s in frozen.items() if s and s["status"] == "running"]
        victim = running[0]
        pid = lock_pid(tmp_path / "tiny" / victim)
        assert pid in workers
        os.kill(pid, signal.SIGKILL)
    finally:
        for other in workers:
            with contextlib.suppress(ProcessLookupError):
                os.kill(other, signal.SIGCONT)
    said = " ".join(output(proc, tmp_path).split())
    assert proc.returncode == 1, said
    recorded = status(tmp_path / "tiny" / victim)
    assert recorded["status"] == "failed" and f"run {victim}: its worker process died" in recorded["message"]
    assert f"run {victim}: its worker process died" in said
    stopped_text = f"stopped because the worker process of run {victim} died"
    for name in set(RUNS) - {victim}:
        before, after = frozen[name], status(tmp_path / "tiny" / name)
        if before is not None and before["status"] == "done":
            assert after == before  # ended before the kill: its own end is kept
        elif before is not None:  # in progress beside the victim: stopped because of it, unless it ended first
            assert after["status"] == "done" or (after["status"] == "failed" and stopped_text in after["message"]), after
        elif after is None:  # queued: never started (the usual case), or started just as the pool broke
            assert f"run {name} did not start" in said or f"run {name} ended before it recorded anything" in said
        else:
            assert after["status"] == "done" or stopped_text in after["message"], after
    resume(suite_file, tmp_path)
    assert not list((tmp_path / "tiny").glob("*/.checkpoint-new-*"))
    assert_same_as_sequential(sequential, tmp_path / "tiny")


def test_a_broken_pool_tells_the_run_whose_worker_died_from_those_it_stopped(tmp_path):
    """After a worker dies, the pool stops the others (they record themselves stopped): the run still
    `running` is the dead one; a run that recorded its stop was stopped because of it; a run that
    never started this time (whatever an earlier session left in its folder) did not start."""
    from types import SimpleNamespace

    from gspo_bench.suite.outcomes import broken_pool_statuses

    specs = [SimpleNamespace(run_dir=tmp_path / "tiny" / name) for name in ("a-s0", "b-s0", "c-s0", "d-s0")]
    RunDir(specs[0].run_dir).write_status("running", step=3)
    RunDir(specs[1].run_dir).write_status("failed", "stopped by SIGTERM; `gspo-bench run ... --resume` continues it",
                                          step=2)
    RunDir(specs[2].run_dir).write_status("failed", "an earlier session's failure", step=5)
    RunDir(specs[3].run_dir).write_status("done", step=6)
    outcomes = broken_pool_statuses(specs, started={"a-s0", "b-s0", "d-s0"})
    assert [o["status"] for o in outcomes] == ["failed", "failed", "failed", "done"]
    assert [o["step"] for o in outcomes] == [3, 2, 0, 6]
    assert outcomes[0]["message"].startswith("run a-s0: its worker process died at step 3 (killed, or out of memory)")
    assert outcomes[1]["message"].startswith("run b-s0: stopped because the worker process of run a-s0 died")
    assert outcomes[2]["message"].startswith("run c-s0 did not start: the worker process of run a-s0 died")
    assert all("--resume" in o["message"] for o in outcomes[:3])
    recorded = [RunDir(spec.run_dir).read_status() for spec in specs]
    assert [r["message"] for r in recorded[:2]] == [o["message"] for o in outcomes[:2]]
    assert recorded[2]["message"] == "an earlier session's failure" and recorded[3]["status"] == "done"


# ------------------------------------------------------------------ damaged files: warm-start cache, checkpoints

@pytest.fixture(scope="module")
def cache(tmp_path_factory) -> Path:
    """One warm-start cache for the module's interrupted runs: their warm start is trained once."""
    return tmp_path_factory.mktemp("warmstart-cache")




def cache_entry(cache: Path) -> Path:
    [entry] = [p for p in cache.iterdir() if p.name.startswith("warmstart-")]
    return entry


@pytest.mark.parametrize("also_info", [False, True], ids=["model-cut-short", "and-warmstart.json-gone"])
def test_a_damaged_warm_start_cache_is_named_removed_and_rebuilt(tmp_path, also_info):
    from safetensors.torch import load_file

    from gspo_bench.config import parse_suite
    from gspo_bench.rundir.checksums import damage
    from gspo_bench.suite.runner import starting_weights

    suite = parse_suite(quick_suite(tmp_path / "cache", warm_start={"band": [0.0, 1.0]}))  # a fresh init: quick
    first = starting_weights(suite, 0, log=lambda m: None)
    weights = {k: v.clone() for k, v in load_file(first / "model.safetensors").items()}  # not a view of the file
    with open(first / "model.safetensors", "r+b") as handle:
        handle.truncate(100)
    if also_info:
        (first / "warmstart.json").unlink()
    said = []
    again = starting_weights(suite, 0, log=said.append)
    assert again == first and damage(again) is None
    [line] = [m for m in said if "removed and rebuilt" in m]
    assert "the cached warm start was damaged" in line
    assert ("warmstart.json is missing" if also_info else "model.safetensors has 100 bytes") in line
    rebuilt = load_file(again / "model.safetensors")
    assert all((rebuilt[k] == weights[k]).all() for k in weights)  # the same warm start, rebuilt
    assert [p.name for p in (tmp_path / "cache").iterdir()] == [first.name]  # no broken folder kept
    said.clear()
    starting_weights(suite, 0, log=said.append)
    assert not any("rebuilt" in m for m in said) and any("reused" in m for m in said)




def test_a_damaged_checkpoint_fails_the_resume_in_one_line_and_the_status_ends_failed(tmp_path, cache):
    data, run_dir = interrupted(cache, tmp_path / "out")
    with open(run_dir / "checkpoint" / "model" / "model.safetensors", "r+b") as handle:
        handle.truncate(64)
    suite = tmp_path / "suite.yaml"
    suite.write_text(yaml.safe_dump(data))
    result = CliRunner().invoke(app, ["run", str(suite), "--out", str(tmp_path / "out"), "--resume"])
    assert result.exit_code == 1 and "Traceback" not in result.output
    recorded = RunDir(run_dir).read_status()
    assert recorded["status"] == "failed" and recorded["step"] == 2
    assert "checkpoint is damaged" in recorded["message"]
    assert f"{run_dir / 'checkpoint' / 'model' / 'model.safetensors'} has 64 bytes" in recorded["message"]
    assert "CheckpointError" in result.output.replace("\n", "")


def test_a_damaged_newest_checkpoint_falls_back_to_the_one_a_crash_left_before_it(tmp_path, cache):
    import shutil

    from tests.helpers.runs import assert_same_metrics, metrics, run_suite

    data, run_dir = interrupted(cache, tmp_path / "out")
    run_suite(data, tmp_path / "whole")
    shutil.copytree(run_dir / "checkpoint", run_dir / ".checkpoint-old")  # a crash in the swap left it
    with open(run_dir / "checkpoint" / "state.pt", "r+b") as handle:
        handle.truncate(handle.seek(0, 2) // 2)
    statuses = run_suite(data, tmp_path / "out", resume=True)
    assert statuses["gspo-s0"]["status"] == "done"
    assert_same_metrics(metrics(tmp_path / "whole", "tiny", "gspo-s0"), metrics(tmp_path / "out", "tiny", "gspo-s0"))


def test_a_new_checkpoint_that_reads_back_wrong_never_replaces_the_previous(tmp_path, cache, monkeypatch):
    import torch

    from gspo_bench.models import build_char_tokenizer, build_tiny_moe
    from gspo_bench.rundir.checksums import damage
    from gspo_bench.train import checkpoint

    _, run_dir = interrupted(cache, tmp_path / "out")
    before = (run_dir / "checkpoint" / "checksums.json").read_text()
    monkeypatch.setattr(checkpoint, "damage", lambda folder: f"{folder}/state.pt differs from what was written")
    model = build_tiny_moe(num_layers=1)
    with pytest.raises(OSError, match="reads back wrong .*the previous one is kept"):
        checkpoint.save_checkpoint(run_dir, model, build_char_tokenizer(), torch.optim.AdamW(model.parameters()), step=3)
    assert (run_dir / "checkpoint" / "checksums.json").read_text() == before and damage(run_dir / "checkpoint") is None
    assert not list(run_dir.glob(".checkpoint-new-*"))
