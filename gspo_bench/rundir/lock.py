"""One owner per run folder: an OS file lock (`flock`) on `RUN_DIR/.lock`, held for the run's life.

A second process is refused with the holder's pid and host; the lock of a process that died is
released by the OS, so the next run takes it over without any clean-up.
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
from pathlib import Path
from typing import IO

from gspo_bench.rundir.folder import now


class RunBusyError(RuntimeError):
    """Another live process holds the run folder."""


def _describe(handle: IO[str]) -> str:
    handle.seek(0)
    try:
        info = json.loads(handle.read() or "{}")
    except json.JSONDecodeError:
        info = {}
    return f"pid {info.get('pid', '?')} on host {info.get('host', '?')} (since {info.get('since', '?')})"


class RunLock:
    def __init__(self, run_dir: Path):
        self.path = Path(run_dir) / ".lock"
        self.handle: IO[str] | None = None

    def acquire(self) -> RunLock:
        """Take the lock or raise RunBusyError naming its holder."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        handle = open(self.path, "a+")  # noqa: SIM115  (held open for the run's life)
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _describe(handle)
            handle.close()
            raise RunBusyError(f"{self.path.parent} is in use by {holder}: wait for that run to end or stop "
                               "it; two processes never train into one run folder") from None
        handle.seek(0)
        handle.truncate()
        handle.write(json.dumps({"pid": os.getpid(), "host": socket.gethostname(), "since": now()}))
        handle.flush()
        self.handle = handle
        return self

    def release(self) -> None:
        if self.handle is not None:
            fcntl.flock(self.handle, fcntl.LOCK_UN)
            self.handle.close()
            self.handle = None

    def __enter__(self) -> RunLock:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


def check_free(run_dir: Path) -> None:
    """RunBusyError if a live process holds `run_dir` (a check: the lock is not kept)."""
    if (Path(run_dir) / ".lock").is_file():
        RunLock(run_dir).acquire().release()
