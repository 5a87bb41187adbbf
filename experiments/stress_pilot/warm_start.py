"""Warm-start a suite's starting model (the same code and cache as `gspo-bench run`) and record each
of its evaluations with the wall-clock time it came at: one CSV row per evaluation (sampled test
accuracy on `warm_start.eval_examples` examples), so the cost of reaching a band can be read.

    python experiments/stress_pilot/warm_start.py experiments/stress_pilot/control.yaml \
        --set warm_start.seed=1 --csv results/stress_pilot/warm_start_curves.csv --name w1

A cached warm start is reused (its curve is not recorded again: the CSV gets nothing). Rows are
appended, so one file holds the curves of every setting tried.
"""

from __future__ import annotations

import argparse
import csv
import time
from pathlib import Path

import torch

from gspo_bench.config import load_suite, parse_overrides
from gspo_bench.runtime.kernels import pin_kernels
from gspo_bench.suite.runner import starting_weights

FIELDS = ["name", "warm_start_seed", "step", "accuracy", "elapsed_s", "cpu_s", "overrides"]


def curve_rows(name: str, seed: int, evals: list[tuple[int, float, float, float]], overrides: str) -> list[dict]:
    """One row per evaluation (step, accuracy, wall-clock and CPU seconds since the warm start began:
    with one thread, CPU seconds are about the time it takes on a CPU no other process shares)."""
    return [{"name": name, "warm_start_seed": seed, "step": step, "accuracy": round(accuracy, 4),
             "elapsed_s": round(elapsed, 1), "cpu_s": round(cpu, 1), "overrides": overrides}
            for step, accuracy, elapsed, cpu in evals]


def append_rows(path: Path, rows: list[dict]) -> None:
    new = not path.exists()
    with path.open("a", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=FIELDS)
        if new:
            writer.writeheader()
        writer.writerows(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("suite")
    parser.add_argument("--set", dest="overrides", action="append", default=[], help="PATH=VALUE, as gspo-bench run")
    parser.add_argument("--csv", type=Path, required=True)
    parser.add_argument("--name", required=True, help="the setting's name in the CSV")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's choice)")
    args = parser.parse_args()
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    suite = load_suite(args.suite, parse_overrides(args.overrides))
    seed = suite.seeds[0]  # the suite's first RL seed; its warm start is warm_start.seed_for(seed)
    start, cpu_start, evals = time.perf_counter(), time.process_time(), []

    def on_eval(step: int, accuracy: float) -> None:
        evals.append((step, accuracy, time.perf_counter() - start, time.process_time() - cpu_start))
        print(f"step {step}: accuracy {accuracy:.3f} at {evals[-1][2]:.0f} s ({evals[-1][3]:.0f} s CPU)", flush=True)

    try:  # the curve is written also when the band is not reached (WarmStartError)
        path = starting_weights(suite, seed, on_eval=on_eval)
        print(f"weights: {path} ({time.perf_counter() - start:.0f} s)")
    finally:
        append_rows(args.csv, curve_rows(args.name, suite.warm_start.seed_for(seed), evals, " ".join(args.overrides)))


if __name__ == "__main__":
    pin_kernels()  # as `gspo-bench` does, before anything computes: the same kernels as its runs
    main()
