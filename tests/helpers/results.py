"""Synthetic run folders with known answers (make_run) for the analysis: no training."""

from __future__ import annotations

import numpy as np
import yaml

from gspo_bench.rundir.folder import REQUIRED_COLUMNS, RunDir
from gspo_bench.rundir.names import run_folder_name

LABELS = {"grpo": ("grpo", False), "grpo_rr": ("grpo", True), "gspo": ("gspo", False)}


AFTER_ONE_UPDATE = ["moe/drift_1", "moe/drift_expert_1"]


SEED_OFFSET = 0.03  # every objective's reward on seed s is 0.03 s higher: seeds differ, as real ones do


def make_run(root, label, seed, steps=20, flops_per_step=1e9, status="done", message="", bonus=None, sweep=None,
             slope=0.01, suite="synth", columns=None, kind=None, budget=2e10, metrics=True):
    """A synthetic run: reward 0.2 + `slope` step + 0.03 seed + `bonus` (default 0.1 for GSPO, 0
    otherwise). The seed offset is shared by every objective, so a comparison paired by seed sees the
    bonuses only while an unpaired one sees the seeds' spread too. `sweep` ({field: value}) makes it
    a run of that sweep point; `columns` ({column: value or [per step]}) adds or overrides columns; `kind`
    (objective, replay) for a label not in LABELS; `budget`: the suite's, the same for all its runs;
    `metrics=False`: config.yaml and status.json alone, as a run that failed before its first step (a task
    that fails to build) leaves its folder."""
    objective, replay = kind or LABELS[label]
    rng = np.random.default_rng(seed + 10 * len(label))
    bonus = (0.1 if objective == "gspo" else 0.0) if bonus is None else bonus
    algorithm, label = label, label + ("@" + ",".join(f"{k}={v}" for k, v in sweep.items()) if sweep else "")
    run = RunDir(root / suite / run_folder_name(label, seed))
    rows, layers = [], []
    for step in range(1, steps + 1):
        row = {c: float(rng.uniform(0.01, 0.2)) for c in REQUIRED_COLUMNS}
        row.update({c: float("nan") for c in AFTER_ONE_UPDATE})  # measured only where a test gives it
        row.update({
            "step": step, "objective": objective, "label": label, "seed": seed,
            "reward/mean": 0.2 + slope * step + SEED_OFFSET * seed + bonus,
            "clip/frac": 0.15 if objective == "gspo" else 0.0013,
            "compute/flops": flops_per_step, "compute/cum_flops": flops_per_step * step,
            "compute/cum_tokens": 100.0 * step,
            "count/tokens_len4-7": 40.0, "count/clipped_len4-7": 6.0 if objective == "gspo" else 0.0,
            "count/tokens_len8-15": 60.0, "count/clipped_len8-15": 9.0 if objective == "gspo" else 0.1,
        })
        row.update({k: (v[step - 1] if isinstance(v, list) else v) for k, v in (columns or {}).items()})
        rows.append(row)
        layers += [{"step": step, "label": label, "seed": seed, "layer": i, "moe/drift": 0.01 * (i + 1)}
                   for i in range(4)]
    if metrics:
        run.write_rows("metrics.parquet", rows)
        run.write_rows("layers.parquet", layers)
    config = {"run": {"label": label, "algorithm": algorithm, "objective": objective, "replay": replay, "seed": seed,
                      "sweep": sweep or {}},
              "suite": {"name": suite, "budget": {"kind": "flops", "value": budget}}}
    run.write_text("config.yaml", yaml.safe_dump(config))
    if metrics:
        run.write_json("provenance.json", {"git": {"commit": "abc", "dirty": False}, "packages": {"torch": "x"},
                                           "device": "cpu", "start": "s", "end": "e"})
    run.write_status(status, message, step=steps if metrics else 0)
    return run

