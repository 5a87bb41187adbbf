"""How a launcher reports a run whose worker process died under it (killed, out of memory): the run
by name, what happened, and that `--resume` continues it."""

from __future__ import annotations

from concurrent.futures import Future
from concurrent.futures.process import BrokenProcessPool

from gspo_bench.rundir.folder import RunDir


def worker_outcome(future: Future, spec) -> dict:
    """The final status of a finished future of `spec`'s run: its result, or, when the process pool
    broke (a worker died), a failed status from `worker_died`."""
    try:
        return future.result()
    except BrokenProcessPool:
        return worker_died(spec)


def worker_died(spec) -> dict:
    """A failed status naming the run and `--resume`. A run that had started (status.json: running)
    is marked failed in its folder too, at its recorded step; one that never started is left as it is."""
    out = RunDir(spec.run_dir)
    name = spec.run_dir.name
    recorded = out.read_status()
    if recorded is None or recorded.get("status") != "running":
        return {"status": "failed", "step": 0, "message": f"run {name} did not start: a worker process of "
                "--parallel died and the others were stopped; run the suite again with --resume"}
    step = recorded.get("step", 0)
    message = (f"run {name}: its worker process died at step {step} (killed, or out of memory); its last "
               "checkpoint is kept: continue it with --resume")
    out.write_status("failed", message, step=step)
    return {"status": "failed", "step": step, "message": message}
