"""Where the runs of a suite execute: one after another in this process, side by side as local
processes (`--parallel N`), or as Ray tasks on a local or existing Ray cluster (`--ray`). Runs are
independent (objective x seed x sweep value) and seeded from (seed, step) alone, so each writes
the same results wherever it runs, given the same `train.threads` (the thread count changes the
order of floating-point sums). Scheduling is the engines' (concurrent.futures, Ray), not ours.

Local processes end with the suite: a stop signal (Ctrl-C, SIGTERM) lets no queued run start and
the runs in progress record themselves failed (resumable), and after a `kill -9` of the suite's
process the kernel kills its workers too, so no process trains on or holds a run's lock.
"""

from __future__ import annotations

import _thread
import ctypes
import functools
import multiprocessing
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from types import FrameType
from typing import TYPE_CHECKING, Any

from gspo_bench.rundir.folder import RunDir
from gspo_bench.runtime.stopping import (
    Stopped,
    raise_stopped,
    signals_ignored,
    stop_on_signals,
    stops_deferred,
)
from gspo_bench.suite.outcomes import broken_pool_statuses

if TYPE_CHECKING:
    from gspo_bench.config import RunSpec
    from gspo_bench.config.schema import WarmStartConfig

# the signals the live early warnings may watch (analysis.evidence.early_warnings' shipped rules read them from
# the rows the display receives: tests/test_early_warnings_live.py holds every shipped rule's signal among them)
WATCHED_COLUMNS = ("grad/norm", "response/len_mean", "kl/old_new", "mismatch/k3_kl", "entropy/mean", "lag/ess",
                   "lag/k3_response", "grad/cos_prev", "grad/cos_prev_router", "clip/grad_weak_frac")
# the step columns a progress display needs: all that crosses a process boundary every step
PROGRESS_COLUMNS = ("step", "label", "seed", "reward/mean", "clip/frac", "moe/drift", "compute/cum_flops",
                    "compute/cum_tokens", "gpu/peak_mem_gib") + WATCHED_COLUMNS


class Observer:
    """What the launchers report to (a progress display): no-ops by default."""

    def start_run(self, name: str) -> None: ...

    def step(self, name: str, row: dict) -> None: ...

    def end_run(self, name: str, status: dict) -> None: ...

    def warm_start(self, seed: int, step: int, accuracy: float, cfg: WarmStartConfig) -> None:
        """An evaluation of the warm start of seed `seed`'s starting model (`cfg`: its WarmStartConfig)."""

    def warm_start_done(self, seed: int) -> None: ...


def run_one(spec: RunSpec, mode: dict[str, Any], report: Callable[[str, str, dict], None] | None = None) -> dict:
    """Train one run to its budget (`mode`: train_run's resume and allow_changed); returns its final
    status. A crash comes back as a `failed` status (the run's folder has its traceback) and a run
    folder another process holds as `refused`, so the other runs go on. What other libraries print
    meanwhile goes to the run's run.log (`gspo_bench.rundir.runlog`)."""
    from gspo_bench.rundir.lock import RunBusyError
    from gspo_bench.rundir.runlog import LOG_NAME, library_output
    from gspo_bench.train import train_run

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
    except Exception as err:  # the line its status.json ends with too (a full disk named as such)
        from gspo_bench.rundir.failure import failure_message

        recorded = RunDir(spec.run_dir).status_if_readable()
        return {"status": "failed", "message": failure_message(err, spec.run_dir), "step": recorded.get("step", 0)}


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


# ---------------------------------------------------------------------- local processes (--parallel)
# Workers are forked from a multiprocessing fork server that imported torch and the training code
# once, and is started before the suite is even read (`start_process_server`): its imports overlap
# the parent's, and each worker starts in milliseconds instead of importing torch again. The server
# only imports (no torch thread pool exists yet), so the workers hold no forked OpenMP state.
PRELOAD = ["gspo_bench.suite.process_server", "gspo_bench.train.loop"]


def start_process_server() -> None:
    """Start the fork server of `--parallel` workers now (it preloads the training code). Started
    with stop signals ignored, which it and its workers inherit: a SIGTERM sent to the whole process
    group cannot take the server (and with it every worker) down; the suite's process stops them."""
    import multiprocessing.forkserver

    multiprocessing.set_forkserver_preload(PRELOAD)
    with signals_ignored():
        multiprocessing.forkserver.ensure_running()


def run_local_processes(specs: Sequence, mode: dict, observer: Observer, workers: int) -> list[dict]:
    """Up to `workers` runs at once, each in its own process; progress of every active run comes
    back through a queue. A stop signal (Stopped, or a plain KeyboardInterrupt) stops the suite: no
    queued run starts, the runs in progress record themselves failed (resumable), then it is re-raised."""
    start_process_server()
    context = multiprocessing.get_context("forkserver")
    messages, stop, reason = context.SimpleQueue(), context.Event(), context.Value("i", 0)
    pool = ProcessPoolExecutor(max_workers=workers, mp_context=context, initializer=_start_worker,
                               initargs=(messages, stop, reason, os.getpid()))
    futures: dict = {}
    reported: set[int] = set()  # the runs whose end the observer has had
    settle = functools.partial(pool.shutdown, wait=True, cancel_futures=True)  # returns once every worker is gone
    try:
        for i, spec in enumerate(specs):
            futures[pool.submit(_run_in_process, spec, mode)] = i
        return _every_status(_collect_stoppable(futures, specs, lambda: _next_local(messages), observer, settle,
                                                reported, functools.partial(_stop_workers, stop, reason)))
    except KeyboardInterrupt as err:
        with signals_ignored():  # the stop under way finishes: runs record their ends
            reason.value = getattr(err, "signum", signal.SIGINT)
            stop.set()
            _collect(_unreported(futures, reported), specs, lambda: _next_local(messages), observer, settle)
            pool.shutdown(wait=True, cancel_futures=True)
        raise
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def _next_local(messages):
    return messages.get() if not messages.empty() else None


_WORKER: dict = {}  # in a worker process: its queue, the suite's stop event and reason, its run state


def _start_worker(messages: Any, stop: Any, reason: Any, suite_pid: int) -> None:  # multiprocessing's queue, event, value
    """A worker's set-up: it dies with the suite's process, and stop signals end its run as failed."""
    _die_with_parent(suite_pid)
    _WORKER.update(messages=messages, stop=stop, reason=reason, running=False, stopping=False, exit_after=False,
                   stopped=False)
    stop_on_signals(_worker_signal)
    threading.Thread(target=_watch_stop, args=(stop,), daemon=True, name="stop-watcher").start()


def _die_with_parent(suite_pid: int) -> None:
    """A worker is killed (SIGKILL) the moment its parent, the fork server, dies, and the server the
    moment the suite's process dies (`gspo_bench.suite.process_server`): Linux's PR_SET_PDEATHSIG, sent by
    the kernel, so a worker busy in a long C call (no Python thread would run then) goes too, and
    nothing it holds (run locks: released by the OS) outlives a `kill -9` of the suite. A catchable
    signal instead would leave the worker to tell an orphaning from a stop and to leave the
    executor's loop, which blocks on a queue it holds both ends of. The server also exits (more
    slowly: it finalizes torch) once no process holds its "alive" pipe, which it hands to every
    child; a worker closes its copy, so that this holds where PR_SET_PDEATHSIG does not exist too."""
    import multiprocessing.forkserver

    server = getattr(multiprocessing.forkserver, "_forkserver", None)
    alive = getattr(server, "_forkserver_alive_fd", None)
    if server is not None and alive is not None:  # set in the processes the server forks
        os.close(alive)
        server._forkserver_alive_fd = None
    if not die_with_parent():  # elsewhere than Linux: a thread ends the process once the suite's is gone
        threading.Thread(target=_watch_parent, args=(suite_pid,), daemon=True, name="parent-watcher").start()
    _exit_if_gone(suite_pid)  # the suite's process died before the above took hold


def die_with_parent() -> bool:
    """SIGKILL this process when its parent dies (Linux: PR_SET_PDEATHSIG); False where not available."""
    if not sys.platform.startswith("linux"):
        return False
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(1, signal.SIGKILL, 0, 0, 0) != 0:  # 1: PR_SET_PDEATHSIG
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG) failed")
    return True


def _exit_if_gone(pid: int) -> None:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        os._exit(1)


def _watch_parent(suite_pid: int) -> None:
    while True:
        _exit_if_gone(suite_pid)
        time.sleep(1.0)


def _watch_stop(stop: Any) -> None:  # a multiprocessing Event
    """When the suite stops, the run in progress here gets the stop in its main thread."""
    stop.wait()
    _thread.interrupt_main(signal.SIGINT)


def _worker_signal(signum: int, frame: FrameType | None) -> None:
    """A stop reaches a worker from the terminal (Ctrl-C goes to the whole process group), from
    `_watch_stop`, or by SIGTERM. A run in progress raises Stopped once (with the suite's reason);
    while it records its end further signals wait (SIGTERM: the worker exits after); an idle worker
    ignores SIGINT (the suite's process decides) and exits on SIGTERM."""
    _WORKER["stopped"] = True  # this worker starts no run after a stop, even before the suite's flag is set
    if _WORKER["running"] and not _WORKER["stopping"]:
        _WORKER["stopping"] = True
        raise Stopped(_WORKER["reason"].value or signum)
    if signum == signal.SIGTERM:
        if _WORKER["running"]:
            _WORKER["exit_after"] = True
        else:
            raise SystemExit(128 + signum)


def _stop_is_set(stop: Any) -> bool:  # a multiprocessing Event
    """Whether the suite's stop is set, read with stops deferred: `_worker_signal` raises in this thread,
    and a raise inside the Event's internal lock (Ctrl-C to the group, or the stop watcher's
    `interrupt_main`, landing in `is_set`) left the lock taken and the other worker, and so the suite,
    waiting on it for ever. A blocked signal mask was not enough: the watcher's interrupt and a signal
    the kernel hands to another thread of the worker both bypass it."""
    with stops_deferred():
        return bool(stop.is_set())


def _run_in_process(spec: RunSpec, mode: dict[str, Any]) -> dict[str, Any]:
    """`run_one` in a worker; a run queued when the suite stopped is not started."""
    worker = _WORKER
    try:
        worker["running"] = True
        if _stop_is_set(worker["stop"]) or worker["stopped"]:  # checked once `running` is set: a later stop reaches the run
            return {"status": "not started", "message": "the suite was stopped", "step": None}
        return run_one(spec, mode, _QueueReport(worker["messages"]))
    except Stopped as err:  # the loop records a stopped run itself; a stop before or after it reached the loop:
        return _record_stopped(spec, err)  # here
    finally:
        worker["running"] = worker["stopping"] = False
        if worker["exit_after"]:
            os._exit(128 + signal.SIGTERM)


def _record_stopped(spec: RunSpec, err: Stopped) -> dict[str, Any]:
    """The failed status of a run a stop ended; a run whose folder still says `running` (stopped outside
    the training loop, which records its own end) is marked failed there too; a damaged status.json
    gives the stop's own message (a second error would hide the stop)."""
    from gspo_bench.rundir.failure import failure_message

    out = RunDir(spec.run_dir)
    recorded = out.status_if_readable()
    message = recorded.get("message") or failure_message(err, spec.run_dir)
    if recorded.get("status") == "running":
        out.write_status("failed", message, step=recorded.get("step", 0))
    return {"status": "failed", "message": message, "step": recorded.get("step")}


def _run_in_ray(spec: RunSpec, mode: dict[str, Any], report: Callable[[str, str, dict[str, Any]], None]) -> dict[str, Any]:
    """`run_one` in a Ray worker: SIGTERM ends the run as Ctrl-C would (recorded as failed)."""
    try:
        signal.signal(signal.SIGTERM, raise_stopped)
    except ValueError:  # not the main thread (some Ray workers): the engine's own handling applies
        pass
    return run_one(spec, mode, report)


class _QueueReport:
    """A picklable `report` callable that puts progress messages on a queue."""

    def __init__(self, messages):
        self.messages = messages

    def __call__(self, kind: str, name: str, row: dict) -> None:
        with stops_deferred():  # a stop raised inside the put would leave the queue's lock, shared by every worker, taken
            self.messages.put((kind, name, row))
            missed = _stop_missed() if kind == "step" else 0
        if missed:
            _WORKER["stopping"] = True
            raise Stopped(missed)


def _stop_missed() -> int:
    """The stop's signal where a run still trains after its stop (0 where none): the suite's stop is
    set, or this worker raised Stopped before, yet the run reports another step. The stop signal
    raises once, wherever the run is, and Python drops an exception raised inside a finalizer
    (`__del__`, a weakref callback) or a library's bare `except:`, after which further signals
    wait (`stopping`); so each step's report checks again. Read inside `stops_deferred` (the Event's
    and the Value's locks)."""
    worker = _WORKER
    stop = worker.get("stop")
    if worker.get("running") and (worker.get("stopping") or (stop is not None and stop.is_set())):
        return worker["reason"].value or signal.SIGINT
    return 0


def _unreported(futures: dict, reported: set[int]) -> dict:
    """The futures of runs whose end the observer has not had, less the queued ones (cancelled here):
    what a stop waits for (a run that ended before the stop is not counted twice)."""
    return {future: i for future, i in futures.items() if i not in reported and not future.cancel()}


def _collect(futures: dict, specs: Sequence, next_message: Callable, observer: Observer,
             settle: Callable[[], None] = lambda: None, stops: list[int] | None = None,
             reported: set[int] | None = None) -> list[dict | None]:
    """Relay progress messages until every future is done; statuses in the order of `specs` (None
    for the runs of no future). `stops`: the stop signals `stops_deferred` recorded; the first is
    raised (Stopped) between two waits, where no message is half read and no lock half taken.
    `reported` gets the index of every run whose end the observer had. Where
    the pool broke (a worker died), `settle` waits until every worker has exited (the ones the pool
    stopped have recorded it), then `outcomes.broken_pool_statuses` tells the run whose worker died
    from those it stopped."""
    statuses: list[dict | None] = [None] * len(specs)
    started: set[str] = set()
    broken: list[int] = []
    pending = set(futures)
    while pending:
        done, pending = wait(pending, timeout=0.2, return_when=FIRST_COMPLETED)
        _relay(next_message, observer, started)
        if stops:
            raise Stopped(stops[0])
        for future in done:
            index = futures[future]
            if not future.cancelled() and isinstance(future.exception(), BrokenProcessPool):
                broken.append(index)
                continue
            statuses[index] = _outcome(future, specs[index])
            if statuses[index]["status"] != "not started":
                observer.end_run(specs[index].run_dir.name, statuses[index])
            if reported is not None:
                reported.add(index)
    if broken:
        settle()
        _relay(next_message, observer, started)
        for index, status in zip(broken, broken_pool_statuses([specs[i] for i in broken], started), strict=True):
            statuses[index] = status
            observer.end_run(specs[index].run_dir.name, status)
            if reported is not None:
                reported.add(index)
    _relay(next_message, observer, started)
    return statuses


def _collect_stoppable(futures: dict, specs: Sequence, next_message: Callable, observer: Observer,
                       settle: Callable[[], None], reported: set[int],
                       on_stop: Callable[[int], object] | None = None) -> list[dict | None]:
    """`_collect` with stop signals deferred: a stop is raised between two waits, never inside a
    queue's read (half a message left in the pipe), a future's condition or the progress display's
    lock (a lock left held: the executor's thread, and so the suite, then wait for ever). `on_stop`
    runs as the signal arrives (`_stop_workers`: the runs stop at once, not at the next wait)."""
    with stops_deferred(on_stop) as stops:
        return _collect(futures, specs, next_message, observer, settle, stops, reported)


def _stop_workers(stop: Any, reason: Any, signum: int) -> None:  # multiprocessing's Event and Value
    """Tell the workers to stop their runs now, with the signal's reason. Called in the suite's signal
    handler: safe there, as the suite's main thread takes the Event's and the Value's locks nowhere else
    while its runs go on (only in the stop that follows, with stop signals ignored)."""
    reason.value = signum
    stop.set()


def _outcome(future: Future[dict[str, Any]], spec: RunSpec) -> dict[str, Any]:
    """A run's final status; a worker stopped between its run's end and its reply gives what the run's
    folder records."""
    try:
        return future.result()
    except BaseException as err:
        recorded = RunDir(spec.run_dir).status_if_readable()
        if recorded.get("status") in ("done", "collapsed", "failed"):  # the run had ended: its own end, as recorded
            return {"status": recorded["status"], "message": recorded.get("message", ""), "step": recorded.get("step", 0)}
        message = recorded.get("message") or f"{type(err).__name__}: {err}"
        return {"status": "failed", "message": message, "step": recorded.get("step", 0)}


def _next_ray(messages: Any, empty: type[BaseException]) -> Any:  # a ray Queue, its Empty; a message or None
    try:
        return messages.get_nowait()
    except empty:
        return None


def _relay(next_message: Callable, observer: Observer, started: set[str] | None = None) -> None:
    """Hand every waiting progress message to the observer (the names of runs that start to `started`)."""
    while (message := next_message()) is not None:
        kind, name, row = message
        if kind == "start":
            observer.start_run(name)
            if started is not None:
                started.add(name)
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
                 num_cpus=None if address else os.cpu_count())
    try:
        messages = Queue()
        tasks = {}
        for i, spec in enumerate(specs):
            train = spec.suite.train
            task = ray.remote(num_cpus=train.threads or 1, num_gpus=1 if train.device.startswith("cuda") else 0,
                              max_retries=0)(_run_in_ray)
            tasks[task.remote(spec, mode, _QueueReport(messages))] = i
        statuses: list[dict | None] = [None] * len(specs)
        pending = list(tasks)
        while pending:
            done, pending = ray.wait(pending, num_returns=1, timeout=0.2)
            _relay(lambda: _next_ray(messages, Empty), observer)
            for ref in done:
                index = tasks[ref]
                status = ray.get(ref)
                statuses[index] = status
                observer.end_run(specs[index].run_dir.name, status)
        _relay(lambda: _next_ray(messages, Empty), observer)
        return _every_status(statuses)
    finally:
        if started:
            ray.shutdown()



def _every_status(statuses: list[dict[str, Any] | None]) -> list[dict[str, Any]]:
    """The runs' final statuses once every run has one; RuntimeError naming a run left without one."""
    missing = [i for i, status in enumerate(statuses) if status is None]
    if missing:
        raise RuntimeError(f"runs {missing} ended without a status")
    return [status for status in statuses if status is not None]
