"""Benchmark (not a test): runs per hour of a stability-map suite on this machine, the code of a
reference commit ("before") against this tree ("after"), paired in one invocation.

    python experiments/perf/runs_per_hour.py                           # -> results/perf/runs_per_hour.{csv,md}
    python experiments/perf/runs_per_hour.py --before 92421ba --suite experiments/stability/stage2_arms.yaml \
        --seeds 0,1 --parallel 2 --repeats 1 --set train.checkpoint_every=20

Each mode runs the same suite through its own tree's command line (`python -m gspo_bench.cli run
SUITE --parallel P`, PYTHONPATH at the tree: `git archive REF` for before), into a fresh results
folder, with its warm starts computed once beforehand in a cache of its own (not timed: the map's
suites reuse two warm starts over dozens of runs). The modes take turns, in reversed order every
other repeat; runs per hour is runs / wall seconds x 3600, median over repeats. Modes:

- `before`: the reference commit, the suite as written;
- `after`: this tree, the suite as written;
- `after+set` (with `--set` or `--env`): this tree with the settings and environment variables given
  (e.g. `train.checkpoint_every=20`, which changes no result: a checkpoint is where a resume restarts;
  `GSPO_BENCH_NATIVE_KERNELS=1`, which does: the machine's own kernels).

Every mode's results are compared with `before`'s by `gspo-bench reproduce` (metrics, layers,
evaluations and status, times aside): a speed-up that changed a number is reported as such.
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

app = typer.Typer(add_completion=False, help=__doc__.split("\n\n")[0])
ROOT = Path(__file__).resolve().parents[2]


def export_tree(ref: str, into: Path) -> Path:
    """The files of commit `ref` of this repository under `into` (git archive: no worktree bookkeeping)."""
    into.mkdir(parents=True)
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", ref], capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return into


def cli(tree: Path, args: list[str], cache: Path, extra_env: dict[str, str] | None = None) -> tuple[float, str]:
    """Wall seconds of `python -m gspo_bench.cli ARGS` run from `tree` with its own package imported
    (and `extra_env` set)."""
    env = {**os.environ, "PYTHONPATH": str(tree), "GSPO_BENCH_CACHE": str(cache), "OMP_NUM_THREADS": "1",
           **(extra_env or {})}
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "gspo_bench.cli", *args], cwd=tree, env=env, capture_output=True,
                          text=True)
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        raise RuntimeError(f"{tree}: gspo-bench {' '.join(args)} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    return seconds, done.stdout


def run_args(suite: Path, out: Path, seeds: str, parallel: int, sets: list[str]) -> list[str]:
    return ["run", str(suite), "--out", str(out), "--seeds", seeds, "--parallel", str(parallel),
            *[arg for value in sets for arg in ("--set", value)]]


def count_runs(results: Path) -> int:
    return sum(1 for status in results.glob("*/*/status.json"))


@app.command()
def main(out: Path = Path("results/perf"), before: str = typer.Option("92421ba", help="reference commit"),
         suite: Path = Path("experiments/stability/stage2_arms.yaml"), seeds: str = "0,1",
         parallel: int = typer.Option(2, min=1), repeats: int = typer.Option(1, min=1),
         set_: list[str] = typer.Option([], "--set", help="settings of the after+set mode (repeatable)"),
         env_: list[str] = typer.Option([], "--env", help="NAME=VALUE: an environment variable of the after+set mode "
                                                           "(repeatable; e.g. GSPO_BENCH_NATIVE_KERNELS=1)")):
    if any("=" not in item for item in env_):
        raise typer.BadParameter(f"--env takes NAME=VALUE, got {[item for item in env_ if '=' not in item]}")
    work = Path(tempfile.mkdtemp(prefix="runs-per-hour-"))
    trees = {"before": export_tree(before, work / "before"), "after": ROOT}
    extra_env = dict(item.split("=", 1) for item in env_)
    modes = {"before": ("before", [], {}), "after": ("after", [], {})} | (
        {"after+set": ("after", set_, extra_env)} if set_ or env_ else {})
    caches = {mode: work / f"cache-{mode}" for mode in modes}  # a warm start is cached per kernels: one cache a mode
    for mode, (tree_name, sets, env) in modes.items():  # warm starts once per mode, not timed (one step per run)
        cli(trees[tree_name], run_args(suite, work / f"prime-{mode}", seeds, parallel,
                                       [*sets, "budget.kind=steps", "budget.value=1"]), caches[mode], env)
    rows = []
    for repeat in range(repeats):
        order = list(modes) if repeat % 2 == 0 else list(reversed(modes))
        for mode in order:
            tree_name, sets, env = modes[mode]
            results = work / f"{mode}-{repeat}"
            seconds, _ = cli(trees[tree_name], run_args(suite, results, seeds, parallel, sets), caches[mode], env)
            runs = count_runs(results)
            rows.append({"mode": mode, "repeat": repeat, "runs": runs, "wall_s": round(seconds, 2),
                         "runs_per_hour": round(runs * 3600 / seconds, 1)})
            print(rows[-1], flush=True)
    table = pd.DataFrame(rows)
    same = {mode: reproduces(work / "before-0", work / f"{mode}-0") for mode in modes if mode != "before"}
    write(out, table, same, before, suite, seeds, parallel, [*set_, *(f"env {item}" for item in env_)])


def reproduces(reference: Path, fresh: Path) -> str:
    """`gspo-bench reproduce`'s verdict (this tree's) on two results folders of the suite."""
    [ref_suite], [fresh_suite] = list(reference.iterdir()), list(fresh.iterdir())
    done = subprocess.run([sys.executable, "-m", "gspo_bench.cli", "reproduce", str(ref_suite), str(fresh_suite)],
                          cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True)
    lines = [line for line in done.stdout.strip().splitlines() if line.strip()]
    return ("identical: " if done.returncode == 0 else "DIFFERS: ") + (lines[-1] if lines else done.stderr[-300:])


def write(out: Path, table: pd.DataFrame, same: dict[str, str], before: str, suite: Path, seeds: str, parallel: int,
          sets: list[str]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    table.to_csv(out / "runs_per_hour.csv", index=False)
    medians = table.groupby("mode", sort=False)["runs_per_hour"].median()
    base = medians["before"]
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    lines = [f"# Runs per hour: {suite} (seeds {seeds}, --parallel {parallel})", "",
             f"`before` is commit {before}; `after` is this tree (HEAD {head.stdout.strip()} with its edits)"
             + (f"; `after+set` adds `{' '.join(sets)}`" if sets else "") + ". Median over "
             f"{table['repeat'].nunique()} repeat(s), modes in turn; warm starts cached beforehand.", "",
             "| mode | runs | wall s (each repeat) | runs per hour | x before | results against before |",
             "|---|---|---|---|---|---|"]
    for mode, rate in medians.items():
        walls = ", ".join(f"{s:.1f}" for s in table.loc[table["mode"] == mode, "wall_s"])
        runs = int(table.loc[table["mode"] == mode, "runs"].iloc[0])
        lines.append(f"| {mode} | {runs} | {walls} | {rate:.1f} | {rate / base:.2f} | {same.get(mode, '(reference)')} |")
    (out / "runs_per_hour.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    app()
