"""Stopping by signal, in one place: SIGTERM and SIGINT (Ctrl-C) raise `Stopped` where the process
is, so a run in progress records how it ended (failed, resumable from its last checkpoint) and no
further run starts. The command line installs it for its process, and so does every worker of
`--parallel` (where only a worker that is training a run raises it: an idle one leaves the stop to
the suite's process).
"""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Callable, Iterator
from types import FrameType

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
