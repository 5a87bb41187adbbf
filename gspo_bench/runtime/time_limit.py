"""A time limit on a call into the user's code that should return at once: a plugin's import, an
objective on the conformance kit's small batches. A loop or a wait there would hang the command with
no word; past the limit it becomes `TimeLimitExceeded`, an error the caller names.

POSIX only: the limit is SIGALRM's interval timer, on the main thread. On Windows, on another thread
(a worker), or inside a limit already running (the outer one holds), the call runs without a limit
of its own. The signal interrupts Python code between bytecodes and a sleep; a single torch kernel
finishes first. Until the call returns it is interrupted again every second, so a bare `except:` in
the user's code does not keep it running.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType


class TimeLimitExceeded(TimeoutError):
    """The call ran past its limit; the message says what ran and for how long it was allowed."""


class _Expired(BaseException):
    """Raised by the alarm inside the user's code: not an Exception, so `except Exception` there does not
    swallow it."""


def _expire(signum: int, frame: FrameType | None) -> None:
    raise _Expired


def can_limit() -> bool:
    """Whether `time_limit` limits here: SIGALRM's timer exists, this is the main thread, and no limit is
    already running."""
    return (hasattr(signal, "setitimer") and threading.current_thread() is threading.main_thread()
            and signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0))


@contextmanager
def time_limit(seconds: float | None, what: str) -> Iterator[None]:
    """Run the body; past `seconds` raise TimeLimitExceeded("{what} ran over {seconds} s"). None: no limit."""
    if seconds is None or not can_limit():
        yield
        return
    previous = signal.signal(signal.SIGALRM, _expire)
    try:
        try:
            signal.setitimer(signal.ITIMER_REAL, seconds, 1.0)
            yield
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0.0)
    except _Expired:
        raise TimeLimitExceeded(f"{what} ran over {seconds:g} s") from None
    finally:
        signal.signal(signal.SIGALRM, previous)
