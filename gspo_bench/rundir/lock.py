"""One owner per run folder: an OS lock (`flock`) on the run folder itself, held for the run's life.

The folder is what is locked, not a file in it: a lock file can be deleted or replaced while its run
holds it, and a second process would then lock the new file and train the same run. `RUN_DIR/.lock`
is only the holder's record (pid, host, since), read to name it when a second process is refused.
The lock of a process that died is released by the OS, so the next run takes it over without any
clean-up.
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
from pathlib import Path

from gspo_bench.rundir.folder import atomic_write_text, now

RECORD = ".lock"


class RunBusyError(RuntimeError):
    """Another live process holds the run folder."""


def _describe(record: Path) -> str:
    """The holder as its record names it ("?" for what the record lacks: removed, damaged)."""
    try:
        info = json.loads(record.read_text())
    except (OSError, ValueError):
        info = {}
    info = info if isinstance(info, dict) else {}
    return f"pid {info.get('pid', '?')} on host {info.get('host', '?')} (since {info.get('since', '?')})"


def _take(folder: Path) -> int:
    """An open descriptor of `folder` holding its exclusive lock; RunBusyError naming the holder."""
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise RunBusyError(f"{folder} is in use by {_describe(folder / RECORD)}: wait for that run to end or stop "
                           "it; two processes never train into one run folder") from None
    return fd


class RunLock:
    def __init__(self, run_dir: Path):
        self.folder = Path(run_dir)
        self.path = self.folder / RECORD  # the holder's record
        self.handle: int | None = None

    def acquire(self) -> RunLock:
        """Take the lock (creating the folder) and write the record, or raise RunBusyError naming its holder."""
        self.folder.mkdir(parents=True, exist_ok=True)
        fd = _take(self.folder)
        try:
            atomic_write_text(self.path, json.dumps({"pid": os.getpid(), "host": socket.gethostname(), "since": now()}))
        except BaseException:
            os.close(fd)
            raise
        self.handle = fd
        return self

    def release(self) -> None:
        if self.handle is not None:
            fcntl.flock(self.handle, fcntl.LOCK_UN)
            os.close(self.handle)
            self.handle = None

    def __enter__(self) -> RunLock:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


def check_free(run_dir: Path) -> None:
    """RunBusyError if a live process holds `run_dir` (a check: the lock is not kept, no record written)."""
    folder = Path(run_dir)
    if folder.is_dir():
        fd = _take(folder)
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)
