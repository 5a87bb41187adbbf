"""Where a run's time goes, phase by phase, in CPU seconds: one run of a suite (small budget), its warm
start limited to a few steps, process start-up, and the report. CPU time (time.process_time, the
process's own threads) rather than wall time, so the figures stand on a machine other work shares;
run it with one thread (`train.threads: 1` in the suites measured, OMP_NUM_THREADS=1) and they are the
single-core cost of each phase.

    OMP_NUM_THREADS=1 nice -n 10 python experiments/perf/where_time_goes.py experiments/quickstart.yaml \
        --budget 1.2e11 --warm-steps 50 --out /tmp/wtg --report results/quickstart \
        --json experiments/perf/where_time_goes/quickstart.json

Phases are timed by wrapping the functions the training loop and the warm start call (the loop's own
names for them) and the run folder's writes; `other` is the process's CPU time of the run less every
phase: parsing and planning the suite (with the lazy imports it triggers), loading the starting
weights, the progress display, the rest of the loop. The warm start runs before the run (the suite
prepares its starting weights first), so no phase holds another. `experiments/perf/where_time_goes.md`
reads the figures it wrote.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

SPENT: dict[str, float] = defaultdict(float)
CALLS: dict[str, int] = defaultdict(int)

LOOP_PHASES = {  # gspo_bench.train.loop's name -> the phase it is
    "collect_rollout": "rollout (decode)", "old_policy_pass": "old-policy pass", "update_policy": "updates",
    "drift_after_update": "drift after update", "nondeterminism_floor": "nondeterminism floor (step 1)",
    "evaluate": "held-out evaluation", "save_checkpoint": "checkpoint (train.checkpoint_every steps)",
    "open_run": "run setup (model, task, engine, evaluator)"}
FOLDER_PHASES = {"write_rows": "metrics and layers rows (rewritten whole each step)",
                 "write_status": "status.json (each step)"}
WARM_PHASES = {"sft_step": "warm start: supervised steps", "sampled_accuracy": "warm start: accuracy checks"}


def timed(name: str, function: Callable) -> Callable:
    """`function`, adding its CPU seconds and calls to SPENT[name] and CALLS[name]."""
    def wrapper(*args, **kwargs):
        start = time.process_time()
        try:
            return function(*args, **kwargs)
        finally:
            SPENT[name] += time.process_time() - start
            CALLS[name] += 1
    return wrapper


def instrument() -> None:
    """Wrap the loop's and the warm start's phase functions where those modules look them up."""
    from gspo_bench.rundir.folder import RunDir
    from gspo_bench.train import loop, warmstart
    for attr, phase in LOOP_PHASES.items():
        setattr(loop, attr, timed(phase, getattr(loop, attr)))
    for attr, phase in WARM_PHASES.items():
        setattr(warmstart, attr, timed(phase, getattr(warmstart, attr)))
    for attr, phase in FOLDER_PHASES.items():
        setattr(RunDir, attr, timed(phase, getattr(RunDir, attr)))


def child_cpu(code: str) -> float:
    """CPU seconds (user + system) of a fresh interpreter running `code`."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run([sys.executable, "-c", code], check=True, capture_output=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


STARTUP = {"cli (gspo-bench --help)": "import sys; sys.argv = ['gspo-bench', '--help']\n"
                                      "from gspo_bench.cli import app\ntry: app()\nexcept SystemExit: pass",
           "training stack imports (torch, transformers, the loop)": "import gspo_bench.train.loop",
           "report stack imports (pandas, matplotlib, plotly, analysis)": "import analysis.report.writer"}


def run_one(suite: str, out: Path, label: str, budget: float, warm_steps: int) -> float:
    """Train `label`, seed 0, in this process (no --parallel); the CPU seconds it took in all."""
    from gspo_bench.cli import app
    args = ["run", suite, "--out", str(out), "--only", label, "--seeds", "0", "--set", f"budget.value={budget:g}",
            "--set", f"warm_start.steps={warm_steps}", "--set", "train.threads=1"]
    start = time.process_time()
    app(args, standalone_mode=False)
    return time.process_time() - start


def report_cpu(results: Path, out: Path) -> float:
    from analysis.data.load import load_results
    from analysis.report.writer import write_report
    start = time.process_time()
    write_report(load_results(results), out)
    return time.process_time() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("suite")
    parser.add_argument("--label", default="grpo")
    parser.add_argument("--budget", type=float, required=True, help="FLOP budget of the one run (the suite's kind)")
    parser.add_argument("--warm-steps", type=int, default=50, help="warm-start steps (a fixed count: the band's "
                        "stopping rule would make the count depend on the accuracy reached)")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--report", type=Path, help="a committed results dir to time the report of")
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    args = parser.parse_args()
    startup = {name: child_cpu(code) for name, code in STARTUP.items()}
    instrument()
    total = run_one(args.suite, args.out, args.label, args.budget, args.warm_steps)
    suite_dir = next(p for p in args.out.iterdir() if p.is_dir())
    run_dir = suite_dir / f"{args.label}-s0"
    import pandas as pd
    metrics = pd.read_parquet(run_dir / "metrics.parquet")
    found = {"suite": args.suite, "label": args.label, "budget": args.budget, "rl_steps": len(metrics),
             "mean_response_len": float(metrics["response/len_mean"].mean()),
             "startup_cpu_s": startup, "run_cpu_s": total,
             "phases_cpu_s": dict(SPENT), "calls": dict(CALLS),
             "other_cpu_s": total - sum(SPENT.values())}
    if args.report:
        found["report_cpu_s"] = report_cpu(args.report, args.out / "report")
    text = json.dumps(found, indent=1)
    print(text)
    if args.json:
        args.json.write_text(text + "\n")


if __name__ == "__main__":
    main()
