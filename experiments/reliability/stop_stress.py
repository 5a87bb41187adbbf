"""Ctrl-C a `--parallel 2` suite at random moments and see it end: each round starts the 4-run suite of
tests/test_suite_processes.py (experiments/tiny_suites.py: `parallel_suite`, grpo_rr and gspo, 2 seeds,
6 steps, a checkpoint every step; written to --out as suite.yaml, its warm start cached there) as its
own process group, waits until two runs train, sleeps a random 0-1.5 s, sends SIGINT to the group (as a
terminal's Ctrl-C does) and waits up to 60 s for the suite to exit. A round that does not end is
reported with its process tree, its processes are sent SIGABRT (PYTHONFAULTHANDLER prints every
thread's stack to the run's log) and the rounds stop.

    python experiments/reliability/stop_stress.py --rounds 30 --out /tmp/stop-stress
"""

from __future__ import annotations

import json
import os
import random
import runpy
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import typer
import yaml

ROOT = Path(__file__).resolve().parents[2]
SUITES = Path(__file__).resolve().parents[1] / "tiny_suites.py"  # the tests' tiny suites (experiments/ is no package)


def running(out: Path) -> int:
    """How many runs of `out` are training at step 1 or later."""
    count = 0
    for path in out.glob("*/*/status.json"):
        try:
            status = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError):
            continue
        count += status["status"] == "running" and status["step"] >= 1
    return count


def one_round(suite: Path, out: Path, rng: random.Random) -> int | None:
    """One start, Ctrl-C and wait; the exit code, None where the suite did not end within 60 s."""
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    with open(out / "run.log", "w") as log:
        proc = subprocess.Popen([sys.executable, "-m", "gspo_bench.cli", "run", str(suite), "--out", str(out),
                                 "--parallel", "2"], stdout=log, stderr=subprocess.STDOUT, cwd=ROOT,
                                start_new_session=True, env={**os.environ, "OMP_NUM_THREADS": "1",
                                                             "PYTHONFAULTHANDLER": "1"})
    deadline = time.time() + 180
    while time.time() < deadline and proc.poll() is None and running(out) < 2:
        time.sleep(0.02)
    time.sleep(rng.uniform(0, 1.5))
    os.killpg(proc.pid, signal.SIGINT)
    try:
        return proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        subprocess.run(["ps", "-o", "pid,ppid,stat,cmd", "-g", str(proc.pid)], check=False)
        os.killpg(proc.pid, signal.SIGABRT)
        time.sleep(3)
        os.killpg(proc.pid, signal.SIGKILL)
        return None


def main(rounds: int = typer.Option(30, min=1), out: Path = typer.Option(Path("/tmp/stop-stress")),
         seed: int = typer.Option(0)) -> None:
    out.mkdir(parents=True, exist_ok=True)
    suite = out / "suite.yaml"
    suite.write_text(yaml.safe_dump(runpy.run_path(str(SUITES))["parallel_suite"](out.resolve() / "cache")))
    rng, codes = random.Random(seed), []
    for i in range(rounds):
        code = one_round(suite, out / "round", rng)
        print(f"round {i}: {'did not end within 60 s' if code is None else f'exit {code}'}", flush=True)
        if code is None:
            print((out / "round" / "run.log").read_text()[-20000:])
            break
        codes.append(code)
    print(f"{len(codes)} of {rounds} rounds ended; exit codes {sorted(set(codes))}")


if __name__ == "__main__":
    typer.run(main)
