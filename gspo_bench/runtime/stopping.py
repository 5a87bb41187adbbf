"""Stopping by signal, in one place: SIGTERM and SIGINT (Ctrl-C) raise `Stopped` where the process
is, so a run in progress records how it ended (failed, resumable from its last checkpoint) and no
further run starts. The command line installs it for its process, and so does every worker of
`--parallel` (where only a worker that is training a run raises it: an idle one leaves the stop to
the suite's process).

A raise lands between any two bytecodes: inside a multiprocessing queue's read it leaves half a
message in the pipe, so the next read fails or waits for ever (experiments/reliability/
interrupted_queue.py counts how often), and inside a lock's Python-level `__enter__` it can leave the
lock held for ever. So code that reads or writes such queues, or takes such locks, while a stop may
be raised (a queue's put and get, an Event's is_set, the suite's wait on its runs) runs inside
`stops_deferred`.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Callable, Iterator
from types import FrameType
from typing import Any

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Stopped(KeyboardInterrupt):
    """A stop signal arrived; `exit_code` is the shell's for it (130 for SIGINT, 143 for SIGTERM)."""

    def __init__(self, signum: int):
        super().__init__(signum)  # args hold the signal number alone: the exception pickles across processes
        self.signum = signum

    @property
    def exit_code(self) -> int:
        return 128 + self.signum

    def __str__(self) -> str:
        return "stopped by Ctrl-C (SIGINT)" if self.signum == signal.SIGINT else f"stopped by {signal.Signals(self.signum).name}"


def raise_stopped(signum: int, frame: FrameType | None) -> None:
    raise Stopped(signum)


def stop_on_signals(handler: Callable[[int, FrameType | None], object] = raise_stopped) -> None:
    """SIGINT and SIGTERM call `handler` (by default: raise Stopped) in this process's main thread."""
    for signum in STOP_SIGNALS:
        signal.signal(signum, handler)


@contextlib.contextmanager
def signals_ignored() -> Iterator[None]:
    """Stop signals are ignored inside (a stop already under way is not cut short by a second one)."""
    previous = {signum: signal.signal(signum, signal.SIG_IGN) for signum in STOP_SIGNALS}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


@contextlib.contextmanager
def stops_deferred(on_arrival: Callable[[int], object] | None = None) -> Iterator[list[int]]:
    """Stop signals that arrive inside are recorded, not raised: the block gets the list of them (a
    loop may poll it and stop at a point where nothing is half done), `on_arrival(signum)` runs at
    once in the handler (it must take no lock the interrupted code may hold), and where the block ends
    normally they are delivered again to the handlers of before, as if they arrived just then. Where
    the block raises, they are dropped (it is ending anyway: a stop it raised from the list, or an
    error that a late stop would hide). Outside the main thread it defers nothing: Python runs signal
    handlers in the main thread alone, so nothing can be raised here."""
    if threading.current_thread() is not threading.main_thread():
        yield []
        return
    arrived: list[int] = []
    deferring = True
    previous: dict[int, Any] = {}

    def record(signum: int, frame: FrameType | None) -> None:
        if deferring:
            arrived.append(signum)
            if on_arrival is not None:
                on_arrival(signum)
        else:  # arrived as the block ended, before its handler was back: it goes where it would have
            _deliver(previous[signum], signum, frame)

    for signum in STOP_SIGNALS:
        previous[signum] = signal.signal(signum, record)
    try:
        yield arrived
    except BaseException:
        deferring = False
        _restore(previous)
        raise
    deferring = False
    _restore(previous)
    for arrival in dict.fromkeys(arrived):
        _deliver(previous[arrival], arrival, None)


def _restore(handlers: dict[int, Any]) -> None:
    for signum, handler in handlers.items():
        signal.signal(signum, handler)


def _deliver(handler: Any, signum: int, frame: FrameType | None) -> None:
    """What the arrival of `signum` does under `handler` (a callable, SIG_IGN or SIG_DFL)."""
    if callable(handler):
        handler(signum, frame)
    elif handler == signal.SIG_DFL:
        signal.signal(signum, signal.SIG_DFL)
        signal.raise_signal(signum)
