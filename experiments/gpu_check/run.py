"""`make gpu-check`: every GPU measurement the project lacks, in one command that fits a short GPU loan.

    python3 experiments/gpu_check/run.py                # on the GPU machine: OUT/ (default runs/gpu-check)
    python3 experiments/gpu_check/run.py --dry --out /tmp/gpu-check   # the rehearsal on the CPU (tiny model)

Installs the wheels carried in `.whl/` (the GPU image has no network: `../shared/docs/gpu.md`) into
--site, then runs each part of `check_parts.py` in its own process under its own time limit (the
whole within --budget seconds), and after every part rewrites the table (OUT/gpu-check.md, .csv) and
the parts' status lines (OUT/status.csv: done / timed out at what stage / error), so a call cut short
still brings back what it measured. Raw files go to OUT/raw/; weights and run folders to a temporary
folder outside OUT, removed at the end. docs/gpu-check.md says what each part measures.
Standard library only until the wheels are installed.
"""

from __future__ import annotations

import argparse
import os
import shlex
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE))

from check_table import PARSERS, Row, Status, read_progress, write_table  # noqa: E402

# seconds each part may take on the GPU (measured or estimated in docs/gpu-check.md), in the order run
LIMITS = {"env": 30, "tests": 60, "mid": 120, "granite": 100, "olmoe": 100, "fsdp": 60, "stability": 70}
BUDGET_S = 450  # all parts together: with the install and the start, under 8 minutes
DRY_LIMIT_S = 240  # each part of the CPU rehearsal (seconds of work; minutes on a loaded machine)
LOG_TAIL_BYTES = 200_000  # of each part's output kept in OUT/raw/<part>.log


def install_wheels(wheels: Path, site: Path, raw: Path) -> Status:
    """pip install --no-index --no-deps --target SITE every wheel in WHEELS; a status line either way."""
    import json

    found = sorted(wheels.glob("*.whl"))
    (raw / "install.json").write_text(json.dumps({"part": "install", "wheels": [w.name for w in found]}) + "\n")
    if not found:
        return Status("install", "skipped", 0.0, "", f"no wheels in {wheels}")
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--no-compile",
                           "--no-cache-dir", "--disable-pip-version-check", "--target", str(site), *map(str, found)],
                          capture_output=True, text=True, check=False)
    (raw / "install.log").write_text(done.stdout + done.stderr)
    status = "done" if done.returncode == 0 else "error"
    return Status("install", status, time.perf_counter() - start, f"{len(found)} wheels",
                  "" if status == "done" else last_line(done.stderr))


def last_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1][:300] if lines else ""


def run_part(part: str, limit: float, raw: Path, work: Path, dry: bool, env: dict) -> Status:
    """One part in its own process group (killed whole at `limit`: torchrun's workers too)."""
    command = [sys.executable, str(HERE / "check_parts.py"), part, "--raw", str(raw), "--work", str(work)]
    log = raw / f"{part}.log"
    start = time.perf_counter()
    with log.open("w") as handle:
        process = subprocess.Popen([*command, *(["--dry"] if dry else [])], cwd=ROOT, env=env, stdout=handle,
                                   stderr=subprocess.STDOUT, start_new_session=True)
        try:
            code: int | None = process.wait(timeout=limit)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
            code = None
    seconds = time.perf_counter() - start
    keep_tail(log)
    progress = read_progress(raw, part)
    stage = progress.get("stage", "not started")
    if code is None:
        return Status(part, "timed out", seconds, stage, f"limit {limit:.0f} s")
    if code != 0 or not progress.get("done"):
        return Status(part, "error", seconds, stage, last_line(log.read_text(errors="replace")))
    return Status(part, "done", seconds, stage)


def keep_tail(log: Path) -> None:
    data = log.read_bytes()
    if len(data) > LOG_TAIL_BYTES:
        log.write_bytes(b"[... cut ...]\n" + data[-LOG_TAIL_BYTES:])


def parsed(part: str, raw: Path, status: Status) -> tuple[list[Row], Status]:
    """The part's rows; a parser that fails marks the part `error` (what it measured cannot be read)."""
    try:
        return PARSERS[part](raw, part), status
    except Exception as err:  # noqa: BLE001  # any failure to read a part's outputs is reported, not raised
        return [], Status(part, "error", status.seconds, status.stage, f"reading its outputs: {type(err).__name__}: {err}")


def part_env(site: Path, work: Path) -> dict:
    """The parts' environment: the carried wheels and this checkout importable, offline, a private cache."""
    path = os.pathsep.join([str(site), str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])
    return {**os.environ, "PYTHONPATH": path, "PYTHONUNBUFFERED": "1", "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "GSPO_BENCH_CACHE": str(work / "cache"),
            "TOKENIZERS_PARALLELISM": "false"}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("OUT") or "runs/gpu-check"))
    parser.add_argument("--dry", action="store_true", help="the CPU rehearsal on a tiny model (no CUDA)")
    parser.add_argument("--parts", default=",".join(LIMITS), help=f"comma-separated, of {', '.join(LIMITS)}")
    parser.add_argument("--budget", type=float, default=None, help=f"seconds for all parts (default {BUDGET_S}; "
                        f"--dry: {DRY_LIMIT_S} per part)")
    parser.add_argument("--wheels", type=Path, default=ROOT / ".whl", help="carried wheels (none with --dry)")
    parser.add_argument("--site", type=Path, default=Path(tempfile.gettempdir()) / "gpu-check-site")
    args = parser.parse_args(argv)
    parts = [p.strip() for p in args.parts.split(",") if p.strip()]
    unknown = set(parts) - set(LIMITS)
    if unknown:
        parser.error(f"unknown parts {sorted(unknown)}; choose from {', '.join(LIMITS)}")
    raw = args.out / "raw"
    raw.mkdir(parents=True, exist_ok=True)
    command = shlex.join(["python3", "experiments/gpu_check/run.py", *(argv if argv is not None else sys.argv[1:])])
    budget = args.budget if args.budget is not None else (DRY_LIMIT_S * len(parts) if args.dry else BUDGET_S)
    deadline = time.monotonic() + budget
    statuses: list[Status] = []
    rows: list[Row] = []
    if not args.dry:
        statuses.append(install_wheels(args.wheels, args.site, raw))
        rows += parsed("install", raw, statuses[-1])[0]
        write_table(args.out, statuses, rows, command)
    with tempfile.TemporaryDirectory(prefix="gpu-check-work-") as work:
        for part in parts:
            limit = min(DRY_LIMIT_S if args.dry else LIMITS[part], deadline - time.monotonic())
            if limit < 5:
                status = Status(part, "skipped", 0.0, "not started", "no time left in the budget")
            else:
                status = run_part(part, limit, raw, Path(work), args.dry, part_env(args.site, Path(work)))
            new_rows, status = parsed(part, raw, status)
            statuses.append(status)
            rows += new_rows
            write_table(args.out, statuses, rows, command)
            print(f"gpu-check: {part}: {status.status} in {status.seconds:.0f} s ({status.stage}) {status.note}",
                  flush=True)
    print((args.out / "gpu-check.md").read_text())
    return 0 if all(s.status == "done" for s in statuses if s.part != "install") else 1


if __name__ == "__main__":
    sys.exit(main())
