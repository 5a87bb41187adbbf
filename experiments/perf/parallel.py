"""Benchmark (not a test): the quickstart's four runs one after another, side by side as local
processes (`--parallel 2`) and as Ray tasks on a local 2-CPU cluster (`--ray`), on this machine.

    python experiments/perf/parallel.py [--out results/perf] [--repeats 2] [--suite experiments/quickstart.yaml]
                                        [--steps 20] [--seeds 0] [--local-only]

Every mode runs the same suite with `train.threads: 1` (so results are identical across modes:
the thread count changes the order of float sums) through the `gspo-bench` command line, into a
fresh results folder, after the warm start has been computed once (it is shared and not timed).
The quickstart as shipped (2 threads, one run after another) is timed too, for reference
(`--local-only`: sequential and `--parallel 2` alone; `--steps`/`--seeds` shrink the suite). With
`--repeats`, the modes run in turn, in reversed order every other repeat, and medians are
reported (a mode's wall time moves by up to 30% between repeats on a shared 2-core machine).
Writes `parallel.csv` (wall seconds per mode and repeat) and `parallel.md` (median ratios to
sequential), and checks that every mode's metrics equal the sequential run's.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd
import typer
import yaml

from gspo_bench.rundir.folder import TIMING_COLUMNS
from gspo_bench.runtime.kernels import pin_kernels

app = typer.Typer(add_completion=False, help=__doc__.split("\n\n")[0])
ROOT = Path(__file__).resolve().parents[2]
TIME_COLUMNS = list(TIMING_COLUMNS)


def timed(cmd: list[str], env: dict) -> float:
    start = time.perf_counter()
    done = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
    return time.perf_counter() - start


def same_metrics(a: Path, b: Path) -> bool:
    for run in sorted(p.name for p in a.iterdir() if p.is_dir()):
        left = pd.read_parquet(a / run / "metrics.parquet").drop(columns=TIME_COLUMNS)
        right = pd.read_parquet(b / run / "metrics.parquet").drop(columns=TIME_COLUMNS)
        if not left.equals(right):
            return False
    return True


@app.command()
def main(out: Path = Path("results/perf"), suite: Path = ROOT / "experiments" / "quickstart.yaml",
         repeats: int = typer.Option(1, min=1),
         steps: int | None = typer.Option(None, min=1, help="a budget of this many steps per run (default: the suite's)"),
         seeds: str | None = typer.Option(None, help="comma-separated seeds (default: the suite's)"),
         local_only: bool = typer.Option(False, "--local-only", help="time sequential and --parallel 2 alone")) -> None:
    work = Path(tempfile.mkdtemp(prefix="gspo-parallel-"))
    data = yaml.safe_load(suite.read_text())
    name = data["name"]
    if steps is not None:
        data["budget"] = {"kind": "steps", "value": steps}
    if seeds is not None:
        data["seeds"] = [int(s) for s in seeds.split(",")]
    one_thread = {**data, "train": {**data["train"], "threads": 1}}
    (work / "shipped.yaml").write_text(yaml.safe_dump(data))
    (work / "one-thread.yaml").write_text(yaml.safe_dump(one_thread))
    env = {**os.environ, "GSPO_BENCH_CACHE": str(work / "cache"), "OMP_NUM_THREADS": "1"}
    cli = [sys.executable, "-m", "gspo_bench.cli", "run"]
    # the warm start, once (not timed): a run of no objective is not possible, so --only one run
    timed(cli + [str(work / "one-thread.yaml"), "--out", str(work / "warm"), "--only", data["objectives"][0]["name"]],
          env)
    modes = {
        "sequential (1 thread per run)": [str(work / "one-thread.yaml"), "--out", str(work / "seq")],
        "--parallel 2 (1 thread per run)": [str(work / "one-thread.yaml"), "--out", str(work / "par"), "--parallel", "2"],
        "--ray, local 2-CPU cluster (1 CPU per run)": [str(work / "one-thread.yaml"), "--out", str(work / "ray"), "--ray"],
        "quickstart as shipped: sequential, 2 threads": [str(work / "shipped.yaml"), "--out", str(work / "shipped")],
    }
    if local_only:
        modes = dict(list(modes.items())[:2])
    rows = []
    for repeat in range(repeats):
        for mode, args in (list(modes.items()) if repeat % 2 == 0 else list(modes.items())[::-1]):
            target = Path(args[args.index("--out") + 1])
            subprocess.run(["rm", "-rf", str(target)], check=True)
            seconds = timed(cli + args, {**env, "OMP_NUM_THREADS": "2"} if "shipped" in mode else env)
            rows.append({"mode": mode, "repeat": repeat, "wall_s": round(seconds, 1)})
            print(f"{mode} (repeat {repeat}): {seconds:.1f} s", flush=True)
    raw = pd.DataFrame(rows)
    frame = raw.groupby("mode", sort=False)["wall_s"].agg(["median", "min", "max"]).reset_index()
    frame.columns = ["mode", "median wall_s", "min", "max"]
    base = frame["median wall_s"].iloc[0]
    frame["ratio to sequential (medians)"] = (frame["median wall_s"] / base).round(3)
    identical = {m: same_metrics(work / "seq" / name, work / m / name) for m in ("par", "ray") if (work / m).is_dir()}
    out.mkdir(parents=True, exist_ok=True)
    raw.to_csv(out / "parallel.csv", index=False)
    (out / "parallel.md").write_text(
        f"# Runs side by side: {name}, {len(data['objectives'])} runs, {os.cpu_count()} CPU cores\n\n"
        f"`python experiments/perf/parallel.py {' '.join(sys.argv[1:])}` (warm start shared and not timed)\n\n"
        + frame.to_markdown(index=False)
        + "\n\nMetrics (every non-time column) equal to the sequential run's: "
        + ", ".join(f"--{m} {same}" for m, same in identical.items()).replace("--par ", "--parallel ") + ".\n")
    print((out / "parallel.md").read_text())


if __name__ == "__main__":
    pin_kernels()  # as `gspo-bench` does, before anything computes: the same kernels as its runs
    app()
