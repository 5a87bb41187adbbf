"""The one line a failed run's status.json ends with."""

from __future__ import annotations

import shutil
import traceback
from pathlib import Path

from gspo_bench.runtime.stopping import Stopped


def failure_message(err: BaseException, run_dir: Path) -> str:
    """One line on why a run failed; a full disk is named as such (torch's own message for it,
    "unexpected pos", does not say it)."""
    if isinstance(err, Stopped):
        return f"{err}; `gspo-bench run ... --resume` continues it from its last checkpoint"
    text = "".join(traceback.format_exception_only(type(err), err)).strip().splitlines()[-1]
    try:
        free = shutil.disk_usage(run_dir).free
    except OSError:
        return text
    if free < 16 * 2**20 or getattr(err, "errno", None) == 28:
        return f"no space left on the device of {run_dir} ({free / 2**20:.0f} MiB free): {text}"
    return text
