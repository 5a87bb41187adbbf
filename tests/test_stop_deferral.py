"""A stop signal never lands inside a queue's read or write, a lock or a future's condition: where
it did, half a message stayed in the pipe or a lock stayed held, and a Ctrl-C to a `--parallel`
suite could hang it (the suite waiting on a worker, or on itself, for ever). `stops_deferred`
records stops and delivers them after; the suite's loop raises a recorded stop between two waits.
Every case here sends a real signal (`signal.raise_signal`) at the worst moment: inside the
critical call. (A blocked signal mask, tried first for the stop flag, was not enough: a signal the
kernel hands to another thread, or the stop watcher's `interrupt_main`, still ran the handler in
the main thread inside the lock.)"""

from __future__ import annotations

import _thread
import signal
import threading
from concurrent.futures import Future
from pathlib import Path
from types import SimpleNamespace

import pytest

from gspo_bench.runtime.stopping import STOP_SIGNALS, Stopped, raise_stopped, stops_deferred
from gspo_bench.suite import launch


@pytest.fixture
def stop_handlers():
    """The command line's handlers (a stop raises Stopped) for the test; the test process's own after."""
    before = {signum: signal.getsignal(signum) for signum in STOP_SIGNALS}
    for signum in STOP_SIGNALS:
        signal.signal(signum, raise_stopped)
    yield
    for signum, handler in before.items():
        signal.signal(signum, handler)


def test_a_stop_inside_is_recorded_and_raised_as_the_block_ends(stop_handlers):
    reached = []
    with pytest.raises(Stopped) as stopped:
        with stops_deferred() as stops:
            signal.raise_signal(signal.SIGTERM)
            reached.append("after SIGTERM")
            _thread.interrupt_main(signal.SIGINT)  # how a worker's stop watcher interrupts its run
            reached.append("after the interrupt")
            assert stops == [signal.SIGTERM, signal.SIGINT]
    assert reached == ["after SIGTERM", "after the interrupt"]
    assert stopped.value.signum == signal.SIGTERM  # the first to arrive
    assert all(signal.getsignal(signum) is raise_stopped for signum in STOP_SIGNALS)


def test_a_block_that_raises_keeps_its_error_and_a_stop_after_it_is_not_deferred(stop_handlers):
    with pytest.raises(ValueError, match="the block's own"):
        with stops_deferred():
            signal.raise_signal(signal.SIGINT)
            raise ValueError("the block's own")
    with pytest.raises(Stopped):
        signal.raise_signal(signal.SIGINT)


def test_outside_the_main_thread_nothing_is_deferred_or_touched(stop_handlers):
    seen = []

    def body():
        with stops_deferred() as stops:
            seen.append(stops)

    thread = threading.Thread(target=body)
    thread.start()
    thread.join()
    assert seen == [[]]
    assert all(signal.getsignal(signum) is raise_stopped for signum in STOP_SIGNALS)


class SignalledQueue:
    """A queue whose put and get receive a signal half way (between a message's two halves)."""

    def __init__(self, messages=()):
        self.pipe = list(messages)

    def put(self, message):
        self.pipe.append("half")
        signal.raise_signal(signal.SIGINT)
        self.pipe[-1] = message

    def get(self):
        message = self.pipe.pop(0)
        signal.raise_signal(signal.SIGINT)
        return message


def test_a_workers_progress_message_is_written_whole_then_its_run_stops(stop_handlers):
    queue = SignalledQueue()
    saved = dict(launch._WORKER)
    launch._WORKER.update(reason=SimpleNamespace(value=0), running=True, stopping=False, stopped=False,
                          exit_after=False)
    signal.signal(signal.SIGINT, launch._worker_signal)
    try:
        with pytest.raises(Stopped):
            launch._QueueReport(queue)("step", "gspo-s0", {"step": 3})
        assert queue.pipe == [("step", "gspo-s0", {"step": 3})]
    finally:
        launch._WORKER.clear()
        launch._WORKER.update(saved)


def test_a_worker_reads_the_suites_stop_whole_then_stops(stop_handlers):
    class SignalledEvent:
        def is_set(self):
            signal.raise_signal(signal.SIGINT)
            self.read = True
            return False

    event = SignalledEvent()
    with pytest.raises(Stopped):
        launch._stop_is_set(event)
    assert event.read


class Observed(launch.Observer):
    def __init__(self):
        self.steps, self.ends = [], []

    def step(self, name, row):
        self.steps.append((name, row["step"]))

    def end_run(self, name, status):
        self.ends.append(name)


def test_the_suites_loop_relays_a_whole_message_then_raises_the_stop_between_waits(stop_handlers):
    running = Future()  # a run in progress, that ends 3 s on: the stop comes well before
    threading.Timer(3.0, running.set_result, [{"status": "done", "message": "", "step": 6}]).start()
    queue = SignalledQueue([("step", "gspo-s0", {"step": 2}), ("step", "gspo-s0", {"step": 3})])
    observer = Observed()
    with pytest.raises(Stopped) as stopped:
        launch._collect_stoppable({running: 0}, [SimpleNamespace(run_dir=None)],
                                  lambda: queue.get() if queue.pipe else None, observer, lambda: None, set())
    assert observer.steps == [("gspo-s0", 2), ("gspo-s0", 3)]  # nothing lost or half read
    assert stopped.value.signum == signal.SIGINT and not running.done()  # raised between waits, not at the end
    assert all(signal.getsignal(signum) is raise_stopped for signum in STOP_SIGNALS)


def test_a_run_that_ended_before_the_stop_is_not_reported_again(stop_handlers):
    """The stop waits for the runs still in progress alone: a run whose end the display already had
    is not ended twice ("5/4 runs finished" before), a queued one is cancelled."""
    finished, running, queued = Future(), Future(), Future()
    finished.set_result({"status": "done", "message": "", "step": 6})
    running.set_running_or_notify_cancel()  # as the executor marks a run a worker took
    threading.Timer(3.0, running.set_result, [{"status": "done", "message": "", "step": 6}]).start()
    futures = {finished: 0, running: 1, queued: 2}
    specs = [SimpleNamespace(run_dir=Path(name)) for name in ("a-s0", "b-s0", "c-s0")]
    calls = iter([None, ("step", "b-s0", {"step": 4}), None])  # the stop comes with the second wait's message

    def next_message():
        message = next(calls, None)
        if message is not None:
            signal.raise_signal(signal.SIGINT)
        return message

    observer, reported = Observed(), set()
    with pytest.raises(Stopped):
        launch._collect_stoppable(futures, specs, next_message, observer, lambda: None, reported)
    assert observer.ends == ["a-s0"] and reported == {0}
    assert launch._unreported(futures, reported) == {running: 1}
    assert queued.cancelled()


def test_the_runs_are_told_to_stop_as_the_signal_arrives_not_at_the_next_wait(stop_handlers):
    """The suite's handler sets the workers' stop (and its reason) at once: a run must not go on for the
    rest of a wait (a run one step from its end finished in that time under SIGTERM, seen in CI)."""
    told = []

    class Watched(SignalledQueue):
        def get(self):
            message = super().get()  # the signal arrives inside
            self.told_inside = list(told)
            return message

    running = Future()
    running.set_running_or_notify_cancel()
    threading.Timer(3.0, running.set_result, [{"status": "done", "message": "", "step": 6}]).start()
    queue = Watched([("step", "gspo-s0", {"step": 2})])
    stop, reason = threading.Event(), SimpleNamespace(value=0)
    with pytest.raises(Stopped):
        launch._collect_stoppable({running: 0}, [SimpleNamespace(run_dir=None)],
                                  lambda: queue.get() if queue.pipe else None, Observed(), lambda: None, set(),
                                  lambda signum: (told.append(signum), launch._stop_workers(stop, reason, signum)))
    assert queue.told_inside == [signal.SIGINT]
    assert stop.is_set() and reason.value == signal.SIGINT


def test_a_stop_deferred_under_the_default_handlers_is_delivered_to_them():
    """Outside the command line (a library user's process, a worker before its handlers) SIGINT has
    Python's own handler and SIGTERM the system's: a stop deferred inside must reach them as the block
    ends, a KeyboardInterrupt and the process's end by SIGTERM, never be dropped."""
    import subprocess
    import sys

    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        reached = []
        with pytest.raises(KeyboardInterrupt) as stopped:
            with stops_deferred() as stops:
                signal.raise_signal(signal.SIGINT)
                reached.append("after SIGINT")
            reached.append("after the block")
        assert reached == ["after SIGINT"] and stops == [signal.SIGINT]
        assert not isinstance(stopped.value, Stopped)  # Python's own, as the handler of before raises it
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    finally:
        signal.signal(signal.SIGINT, before)
    code = ("import signal\nfrom gspo_bench.runtime.stopping import stops_deferred\n"
            "signal.signal(signal.SIGTERM, signal.SIG_DFL)\n"
            "with stops_deferred():\n    signal.raise_signal(signal.SIGTERM)\n    print('deferred', flush=True)\n"
            "print('dropped', flush=True)\n")
    ended = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert ended.returncode == -signal.SIGTERM and ended.stdout == "deferred\n", (ended.returncode, ended.stdout, ended.stderr)
