"""Where the runs of a suite execute: one after another in this process, side by side as local
processes (`--parallel N`), or as Ray tasks on a local or existing Ray cluster (`--ray`). Runs are
independent (objective x seed x sweep value) and seeded from (seed, step) alone, so each writes
the same results wherever it runs, given the same `train.threads` (the thread count changes the
order of floating-point sums). Scheduling is the engines' (concurrent.futures, Ray), not ours.
"""

from __future__ import annotations

import multiprocessing
import os
import queue
import signal
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait

from gspo_bench.outcomes import worker_outcome
from gspo_bench.results import RunDir

# the step columns a progress display needs: all that crosses a process boundary every step
PROGRESS_COLUMNS = ("step", "label", "seed", "reward/mean", "clip/frac", "moe/drift", "compute/cum_flops",
                    "compute/cum_tokens", "gpu/peak_mem_gib")


class Observer:
    """What the launchers report to (a progress display): no-ops by default."""

    def start_run(self, name: str) -> None: ...

    def step(self, name: str, row: dict) -> None: ...

    def end_run(self, name: str, status: dict) -> None: ...

    def warm_start(self, seed: int, step: int, accuracy: float, cfg) -> None:
        """An evaluation of the warm start of seed `seed`'s starting model (`cfg`: its WarmStartConfig)."""

    def warm_start_done(self, seed: int) -> None: ...


def run_one(spec, mode: dict, report: Callable[[str, str, dict], None] | None = None) -> dict:
    """Train one run to its budget (`mode`: train_run's resume and allow_changed); returns its final
    status. A crash comes back as a `failed` status (the run's folder has its traceback) and a run
    folder another process holds as `refused`, so the other runs go on. What other libraries print
    meanwhile goes to the run's run.log (`gspo_bench.runlog`)."""
    from gspo_bench.lock import RunBusyError
    from gspo_bench.runlog import LOG_NAME, library_output
    from gspo_bench.train.loop import train_run

    name = spec.run_dir.name
    on_step = None
    if report is not None:
        report("start", name, {})
        on_step = lambda row: report("step", name, {k: row.get(k) for k in PROGRESS_COLUMNS})  # noqa: E731
    try:
        with library_output(spec.run_dir / LOG_NAME):
            return train_run(spec, on_step=on_step, **mode)
    except RunBusyError as err:
        return {"status": "refused", "message": str(err), "step": None}
    except Exception as err:
        recorded = RunDir(spec.run_dir).read_status() or {}
        return {"status": "failed", "message": f"{type(err).__name__}: {err}", "step": recorded.get("step", 0)}


def run_sequential(specs: Sequence, mode: dict, observer: Observer) -> list[dict]:
    statuses = []
    for spec in specs:
        name = spec.run_dir.name
        observer.start_run(name)
        status = run_one(spec, mode, report=lambda kind, n, row: observer.step(n, row) if kind == "step" else None)
        observer.end_run(name, status)
        statuses.append(status)
    return statuses


def default_parallel(threads: int | None) -> int:
    """Runs side by side that fit this machine's cores at `threads` torch threads each."""
    return max(1, (os.cpu_count() or 1) // (threads or 1))


def run_local_processes(specs: Sequence, mode: dict, observer: Observer, workers: int) -> list[dict]:
    """Up to `workers` runs at once, each in its own (spawned) process; progress of every active run
    comes back through a queue."""
    context = multiprocessing.get_context("spawn")  # no forked torch/OpenMP state in the workers
    with context.Manager() as manager, ProcessPoolExecutor(max_workers=workers, mp_context=context) as pool:
        messages = manager.Queue()
        futures = {pool.submit(_run_in_worker, spec, mode, _QueueReport(messages)): i for i, spec in enumerate(specs)}
        return _collect(futures, specs, messages, observer)


_EMPTY = (queue.Empty, EOFError, BrokenPipeError)


def _run_in_worker(spec, mode: dict, report) -> dict:
    """`run_one` in a worker process: SIGTERM ends the run as Ctrl-C would (recorded as failed)."""
    try:
        signal.signal(signal.SIGTERM, _terminated)
    except ValueError:  # not the main thread (some Ray workers): the engine's own handling applies
        pass
    return run_one(spec, mode, report)


def _terminated(signum, frame):
    raise KeyboardInterrupt("terminated by SIGTERM")


class _QueueReport:
    """A picklable `report` callable that puts progress messages on a queue."""

    def __init__(self, messages):
        self.messages = messages

    def __call__(self, kind: str, name: str, row: dict) -> None:
        self.messages.put((kind, name, row))


def _collect(futures: dict, specs: Sequence, messages, observer: Observer) -> list[dict]:
    """Relay progress messages until every future is done; statuses in the order of `specs`."""
    statuses: list[dict | None] = [None] * len(specs)
    pending = set(futures)
    while pending:
        done, pending = wait(pending, timeout=0.2, return_when=FIRST_COMPLETED)
        _relay(messages, observer, _EMPTY)
        for future in done:
            index = futures[future]
            statuses[index] = worker_outcome(future, specs[index])  # a dead worker: named, with --resume
            observer.end_run(specs[index].run_dir.name, statuses[index])
    _relay(messages, observer, _EMPTY)
    return statuses


def _relay(messages, observer: Observer, empty: tuple[type, ...]) -> None:
    """Hand every waiting progress message to the observer."""
    while True:
        try:
            kind, name, row = messages.get_nowait()
        except empty:
            return
        if kind == "start":
            observer.start_run(name)
        else:
            observer.step(name, row)


def run_on_ray(specs: Sequence, mode: dict, observer: Observer, address: str | None) -> list[dict]:
    """Each run as a Ray task with the resources its suite asks for (`train.threads` CPUs, one GPU
    on cuda) on the cluster at `address` (None: start a local one with this machine's CPUs). On a
    cluster of several machines the results root and the warm-start cache must be on a shared
    filesystem."""
    try:
        import ray
        from ray.util.queue import Empty, Queue
    except ImportError:
        raise RuntimeError("--ray needs Ray: pip install -e '.[ray]'") from None
    started = not ray.is_initialized()
    if started:
        ray.init(address=address, include_dashboard=False, log_to_driver=False,
                 **({} if address else {"num_cpus": os.cpu_count()}))
    try:
        messages = Queue()
        tasks = {}
        for i, spec in enumerate(specs):
            train = spec.suite.train
            task = ray.remote(num_cpus=train.threads or 1, num_gpus=1 if train.device.startswith("cuda") else 0,
                              max_retries=0)(_run_in_worker)
            tasks[task.remote(spec, mode, _QueueReport(messages))] = i
        statuses: list[dict | None] = [None] * len(specs)
        pending = list(tasks)
        while pending:
            done, pending = ray.wait(pending, num_returns=1, timeout=0.2)
            _relay(messages, observer, (Empty,))
            for ref in done:
                index = tasks[ref]
                statuses[index] = ray.get(ref)
                observer.end_run(specs[index].run_dir.name, statuses[index])
        _relay(messages, observer, (Empty,))
        return statuses
    finally:
        if started:
            ray.shutdown()
