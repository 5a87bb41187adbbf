"""Benchmark (not a test): wall time of `gspo-bench import` on a long verl-style JSON-lines log, the code
of a reference commit ("before") against this tree ("after").

    python experiments/perf/import_speed.py                      # this tree only
    python experiments/perf/import_speed.py --before HEAD~3      # and that commit's code, paired

The log is written once into a temporary folder: STEPS lines of verl's file logger,
`{"step": N, "data": {...}}`, with five keys (the reward, loss, clip fraction, gradient norm and
tokens of the step), imported with the built-in `verl` mapping. Each mode runs the import through its
own tree's command line (`python -m gspo_bench.cli import PLAN --out OUT`, PYTHONPATH at the tree:
`git archive REF` for before) into a fresh folder; the modes take turns, the median over repeats is
printed with the command that was timed.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import typer

app = typer.Typer(add_completion=False, help=__doc__.split("\n\n")[0])
ROOT = Path(__file__).resolve().parents[2]
KEYS = ("critic/score/mean", "actor/pg_loss", "actor/pg_clipfrac", "actor/grad_norm", "perf/total_num_tokens")


def export_tree(ref: str, into: Path) -> Path:
    """The files of commit `ref` of this repository under `into` (git archive: no worktree bookkeeping)."""
    into.mkdir(parents=True)
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", ref], capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return into


def write_log(folder: Path, steps: int) -> Path:
    """A verl file logger's log of `steps` steps and the plan that imports it; returns the plan."""
    with (folder / "metrics.jsonl").open("w") as out:
        for step in range(1, steps + 1):
            data = {"critic/score/mean": 0.2 + 0.5 * step / steps, "actor/pg_loss": -0.01 * (step % 7),
                    "actor/pg_clipfrac": 0.001 * (step % 11), "actor/grad_norm": 1.0 + 0.1 * (step % 5),
                    "perf/total_num_tokens": 4096 + step % 13}
            out.write(json.dumps({"step": step, "data": data}) + "\n")
    plan = {"name": "speed", "mapping": "verl", "compute": {"flops_per_token": 1.0e9},
            "runs": [{"arm": "grpo", "seed": 0, "files": ["metrics.jsonl"]}]}
    (folder / "plan.yaml").write_text(json.dumps(plan))  # JSON is YAML
    return folder / "plan.yaml"


def timed_import(tree: Path, plan: Path, out: Path) -> float:
    """Wall seconds of `python -m gspo_bench.cli import PLAN --out OUT` with `tree`'s package imported."""
    env = {**os.environ, "PYTHONPATH": str(tree), "OMP_NUM_THREADS": "1"}
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "gspo_bench.cli", "import", str(plan), "--out", str(out)],
                          cwd=tree, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        raise RuntimeError(f"{tree}: import failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    return seconds


@app.command()
def main(
    steps: int = typer.Option(20_000, help="steps in the log (one JSON line each)"),
    before: str = typer.Option("", help="a commit whose code is timed too (git archive), e.g. HEAD~3"),
    repeats: int = typer.Option(3, min=1, help="imports per mode; the median is printed"),
) -> None:
    with tempfile.TemporaryDirectory(prefix="import-speed-") as tmp:
        work = Path(tmp)
        plan = write_log(work, steps)
        modes = {"after": ROOT}
        if before:
            modes = {"before": export_tree(before, work / "before"), **modes}
        times: dict[str, list[float]] = {mode: [] for mode in modes}
        for repeat in range(repeats):
            for mode in (list(modes) if repeat % 2 == 0 else list(reversed(modes))):
                times[mode].append(timed_import(modes[mode], plan, work / f"out-{mode}-{repeat}"))
        for mode, seconds in times.items():
            print(f"{mode}: {statistics.median(seconds):.2f} s (median of {repeats}: "
                  f"{', '.join(f'{s:.2f}' for s in seconds)}) importing {steps} steps x {len(KEYS)} keys")


if __name__ == "__main__":
    app()
