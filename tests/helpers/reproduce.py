"""A run folder as `gspo-bench reproduce` reads it, from a loss and wall-time series."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd


def write_run(root: Path, name: str, loss: list[float], seconds: list[float], status: str = "done") -> Path:
    run = root / name
    run.mkdir(parents=True)
    steps = list(range(1, len(loss) + 1))
    pd.DataFrame({"step": steps, "label": "grpo", "loss": loss, "time/step_s": seconds,
                  "perf/mfu": np.nan}).to_parquet(run / "metrics.parquet")
    pd.DataFrame({"step": steps, "layer": 0, "moe/drift": [0.1] * len(steps)}).to_parquet(run / "layers.parquet")
    (run / "status.json").write_text(json.dumps({"status": status, "step": len(steps)}))
    (run / "provenance.json").write_text(json.dumps({"kernels": {"aten_cpu_capability": "AVX2",
                                                                 "mkl_branch": "COMPATIBLE", "threads": 1}}))
    return run
