"""What a run writes, and how: atomic files (temp file, then rename) in `OUT/<suite>/<label>-s<seed>/`
(the label made one safe folder name by gspo_bench.rundir.names: whatever it holds, the run stays in OUT/<suite>/).

    config.yaml       the fully resolved suite config of this run
    provenance.json   git commit + dirty flag, package versions, python, device, host, start/end
    metrics.parquet   one row per step (REQUIRED_COLUMNS and more)
    layers.parquet    drift, router margins and routing confidence per MoE layer and measured minibatch, per step
    status.json       {"status": running|done|collapsed|failed, "message", "step", ...}
    checkpoint/       latest model + optimizer + step, for --resume (never committed)
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

import pandas as pd

SCHEMA_VERSION = 1

# Every metrics.parquet has these columns, however far its run got (NaN where a step measured
# nothing, e.g. the drift of a run that collapsed in its first update); runs add sweep/*, count/*,
# kl/ref and the rollout routing gap where they apply.
REQUIRED_COLUMNS = [
    "step", "objective", "label", "seed", "replay", "reward/mean", "reward/std", "reward/accuracy",
    "response/len_mean", "response/len_max", "loss", "grad/norm", "ratio/token_mean", "ratio/token_var",
    "ratio/token_min", "ratio/token_max", "ratio/seq_mean", "ratio/seq_var", "logratio/token_var", "clip/frac",
    "clip/frac_low", "clip/frac_high", "clip/seq_frac", "kl/old_new", "entropy/mean", "moe/drift",
    "moe/drift_expert", "moe/rerouted_token_frac", "ratio/token_var_rerouted", "ratio/token_var_stable",
    "mismatch/k3_kl", "mismatch/max_abs", "mismatch/frac_gt_ln2", "nonfinite/minibatches", "time/rollout_s",
    "time/update_s", "time/step_s", "compute/tokens_forward", "compute/tokens_trained", "compute/tokens",
    "compute/cum_tokens", "compute/flops", "compute/cum_flops", "lr", "gpu/peak_mem_gib", "perf/rollout_tokens_per_s",
    "perf/train_tokens_per_s", "perf/mfu", "ratio/token_median", "ratio/token_trimmed_mean", "ratio/token_gt_10",
    "ratio/token_gt_100", "ratio/token_gt_1000", "loss/max_token_share", "moe/drift_1", "moe/drift_expert_1",
    "moe/route_conf",
]
# GPU figures (gspo_bench.runtime.hardware) that are blank (NaN) in every row off CUDA; MFU also on a GPU
# whose bf16 peak is not in hardware.BF16_DENSE_PEAK
GPU_COLUMNS = ("gpu/peak_mem_gib", "perf/mfu")
# columns that depend on wall-clock time: they differ between otherwise identical runs (a resumed run,
# runs side by side, one rank or two)
TIMING_COLUMNS = ("time/rollout_s", "time/update_s", "time/step_s", "perf/rollout_tokens_per_s",
                  "perf/train_tokens_per_s", "perf/mfu")
STATUSES = ("running", "done", "collapsed", "failed")


def now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def umask() -> int:
    """This process's umask (read by setting it and setting it back)."""
    mask = os.umask(0)
    os.umask(mask)
    return mask


def share(folder: Path) -> None:
    """Give `folder` and everything under it the usual permissions, 0777 for folders and 0666 for
    files less the umask, as if made with mkdir and open (tempfile.mkdtemp makes a private 0700
    folder, mkstemp 0600 files): run folders and the warm-start cache may be shared."""
    mask = umask()
    for path in [Path(folder), *Path(folder).rglob("*")]:
        os.chmod(path, (0o777 if path.is_dir() else 0o666) & ~mask)


# the files of a run folder that are written atomically (`_atomic`); a kill -9 between the write and the
# rename leaves `.NAME.XXXXXXXX` beside NAME
ATOMIC_RUN_FILES = ("metrics.parquet", "layers.parquet", "eval.parquet", "config.yaml", "provenance.json",
                    "status.json", "error.log", ".lock")


def atomic_leftovers(folder: Path) -> list[Path]:
    """The temporary files of atomic writes of ATOMIC_RUN_FILES that a killed process left in `folder`
    (`.NAME.SUFFIX`, NAME one of them): nothing else, a user's own dot-files neither."""
    return sorted(p for p in Path(folder).iterdir() if p.is_file() and p.name.startswith(".") and
                  p.name[1:].rpartition(".")[0] in ATOMIC_RUN_FILES)


def _atomic(path: Path, write: Callable[[str], object]) -> None:
    """`write(tmp)` to a temporary file beside `path`, then rename it over `path`: readers see the
    old file or the new one, never half of one. The file gets the usual permissions (0666 less the
    umask), not mkstemp's 0600."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    os.close(fd)
    try:
        write(tmp)
        os.chmod(tmp, 0o666 & ~umask())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def remove_entry(path: Path) -> None:
    """Remove whatever is at `path`, never following a link: a link (to a file or a folder, say a
    checkpoint moved to another disk) is unlinked and what it points to stays, a file is unlinked, a
    folder removed with everything in it; nothing there, nothing done."""
    path = Path(path)
    if path.is_symlink() or path.is_file():
        path.unlink(missing_ok=True)
    elif path.exists():
        shutil.rmtree(path)


def atomic_write_bytes(path: Path, data: bytes) -> None:
    _atomic(path, lambda tmp: Path(tmp).write_bytes(data))


def atomic_write_text(path: Path, text: str) -> None:
    atomic_write_bytes(path, text.encode())


def atomic_write_parquet(path: Path, frame: pd.DataFrame) -> None:
    _atomic(path, lambda tmp: frame.to_parquet(tmp, index=False))


def git_state(repo: Path) -> dict[str, Any]:
    def git(*args: str) -> str | None:
        try:
            out = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            return None
        return out.stdout.strip() if out.returncode == 0 else None

    commit = git("rev-parse", "HEAD")
    status = git("status", "--porcelain", "--untracked-files=no")
    return {"commit": commit, "dirty": None if status is None else bool(status)}


def package_versions(
    names: Sequence[str] = ("gspo-bench", "torch", "transformers", "pandas", "pyarrow", "lm-eval", "vllm"),
) -> dict[str, str | None]:
    versions: dict[str, str | None] = {}
    for name in names:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def provenance(device: str) -> dict[str, Any]:
    return {
        "schema_version": SCHEMA_VERSION,
        "git": git_state(Path(__file__).resolve().parent.parent),
        "packages": package_versions(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "device": device,
        "hostname": socket.gethostname(),
        "start": now(),
        "end": None,
    }


def read_json_file(path: Path) -> dict[str, Any] | None:
    """The JSON object in `path` (None if there is no such file); ValueError naming the file when it
    is not a JSON object (cut short, altered, not text)."""
    if not path.is_file():
        return None
    try:
        body = json.loads(path.read_bytes().decode("utf-8"))
    except UnicodeDecodeError:
        problem = "not UTF-8 text"
    except json.JSONDecodeError as err:
        problem = f"not valid JSON: {err.msg} at line {err.lineno}, column {err.colno}"
    else:
        if isinstance(body, dict):
            return body
        problem = f"a JSON {type(body).__name__}, not an object"
    raise ValueError(f"{path} is damaged ({problem}): move the run folder away and run it again")


def status_problem(body: dict[str, Any]) -> str | None:
    """What is wrong with status.json's record `body` (None where nothing is): no `status`, or one
    that is not in STATUSES."""
    if "status" not in body:
        return f"no status (one of {', '.join(STATUSES)})"
    if body["status"] not in STATUSES:
        return f"unknown status {body['status']!r} (one of {', '.join(STATUSES)})"
    return None


def config_problem(config: Any) -> str | None:
    """What is wrong with a run's config.yaml data (None where nothing is): not a mapping (of `run:`
    and `suite:`), or a `run.seed` that is not an integer."""
    if config is None:
        return None
    if not isinstance(config, dict):
        return f"expected a mapping at the top, found {type(config).__name__}"
    run = config.get("run") or {}
    if not isinstance(run, dict):
        return f"run: expected a mapping, found {type(run).__name__}"
    seed = run.get("seed", 0)
    if not isinstance(seed, int) or isinstance(seed, bool):
        return f"run.seed: expected an integer, got {seed!r}"
    return None


class RunDir:
    """The files of one run. Rows are kept in memory and the whole table is rewritten atomically.

    With `writable=False` (ranks other than 0 of a distributed run) it reads but never writes.
    """

    def __init__(self, path: Path, writable: bool = True):
        self.path = Path(path)
        self.writable = writable

    # ------------------------------------------------------------------ files
    def read_status(self) -> dict[str, Any] | None:
        """status.json's record (None where there is none); ValueError naming the file where it is
        damaged, holds no status or one not in STATUSES."""
        path = self.path / "status.json"
        body = read_json_file(path)
        if body is not None:
            problem = status_problem(body)
            if problem:
                raise ValueError(f"{path} is damaged ({problem}): move the run folder away and run it again")
        return body

    def status_if_readable(self) -> dict[str, Any]:
        """status.json's record, or {} where there is none or it is damaged: for reporting a run that
        has already failed (its own error names the damage), where a second error would stop the suite."""
        try:
            return self.read_status() or {}
        except ValueError:
            return {}

    def write_status(self, status: str, message: str = "", **extra: Any) -> None:
        if not self.writable:
            return
        if status not in STATUSES:
            raise ValueError(f"status must be one of {STATUSES}")
        body = {"schema_version": SCHEMA_VERSION, "status": status, "message": message, "updated": now(), **extra}
        atomic_write_text(self.path / "status.json", json.dumps(body, indent=1))

    def write_json(self, name: str, body: dict[str, Any]) -> None:
        if not self.writable:
            return
        atomic_write_text(self.path / name, json.dumps(body, indent=1, default=str))

    def read_json(self, name: str) -> dict[str, Any] | None:
        return read_json_file(self.path / name)

    def write_text(self, name: str, text: str) -> None:
        if not self.writable:
            return
        atomic_write_text(self.path / name, text)

    def read_rows(self, name: str) -> list[dict[str, Any]]:
        f = self.path / name
        if not f.is_file():
            return []
        return [{str(k): v for k, v in row.items()} for row in pd.read_parquet(f).to_dict("records")]

    def write_rows(self, name: str, rows: list[dict[str, Any]], columns: list[str] | None = None) -> None:
        """The table of `rows`; `columns` come first and are present (NaN) even where no row has them."""
        if not self.writable:
            return
        frame = pd.DataFrame(rows)
        if columns:
            frame = frame.reindex(columns=list(dict.fromkeys([*columns, *frame.columns])))
        atomic_write_parquet(self.path / name, frame)
