"""How a launcher reports the runs of a `--parallel` pool that broke because a worker process died
under its run (killed, out of memory): the pool then stops every other worker (SIGTERM: their runs
record themselves stopped) and fails every run it had not finished. Once every worker is gone, each
run's folder tells which it was: the run whose worker died still says `running` (nothing recorded its
end), a run the pool stopped says so, a run that did not start this time was never reported started.
Each is named, and told that `--resume` continues it."""

from __future__ import annotations

from collections.abc import Sequence

from gspo_bench.rundir.folder import RunDir

RESUME = "its last checkpoint is kept: continue it with --resume"


def broken_pool_statuses(specs: Sequence, started: set[str]) -> list[dict]:
    """The final statuses of the runs of `specs` that a broken pool ended, once every worker has
    exited; `started`: the names of the runs that reported their start in this session. The run
    whose worker died and the runs it stopped are marked failed in their folders with why; a run
    that never started keeps what its folder holds; one that ended first keeps its end."""
    recorded = {spec.run_dir.name: RunDir(spec.run_dir).status_if_readable() for spec in specs}
    dead = sorted(name for name in started if recorded.get(name, {}).get("status") == "running")
    cause = f"the worker process of run {', '.join(dead)}" if dead else "a worker process of --parallel"
    outcomes = []
    for spec in specs:
        name, status = spec.run_dir.name, recorded[spec.run_dir.name]
        step = status.get("step", 0)
        if name not in started or not status:
            what = "did not start" if name not in started else "ended before it recorded anything"
            outcomes.append({"status": "failed", "step": 0, "message": f"run {name} {what}: {cause} died and "
                             "--parallel stopped the others; run the suite again with --resume"})
            continue
        if name in dead:
            message = f"run {name}: its worker process died at step {step} (killed, or out of memory); {RESUME}"
        elif status.get("status") == "failed" and status.get("message", "").startswith("stopped by"):
            message = f"run {name}: stopped because {cause} died (--parallel stops every run then); {RESUME}"
        else:  # it ended by itself before the pool broke: its own end
            outcomes.append({"status": status.get("status", "failed"), "step": step,
                             "message": status.get("message", "")})
            continue
        RunDir(spec.run_dir).write_status("failed", message, step=step)
        outcomes.append({"status": "failed", "step": step, "message": message})
    return outcomes
