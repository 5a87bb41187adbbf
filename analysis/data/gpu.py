"""The report's GPU figures per objective: peak GPU memory, rollout and training throughput, MFU
(the columns of `gspo_bench.runtime.hardware`), over all steps and seeds of each run label."""

from __future__ import annotations

import pandas as pd

from analysis.data.load import Results

GPU_FIGURES = ("gpu/peak_mem_gib", "perf/rollout_tokens_per_s", "perf/train_tokens_per_s", "perf/mfu")
TITLE = "GPU figures per objective (peak: max over steps; the rest: means over steps and seeds)"


def gpu_table(results: Results) -> pd.DataFrame | str:
    """Per objective: the device, peak GPU memory (GiB, the largest step's), mean rollout and training
    tokens/s, mean MFU and mean step seconds. Blank cells: figures a run could not measure (GPU
    memory and MFU off CUDA, MFU on a GPU without a known bf16 peak)."""
    m = results.metrics
    if m[list(GPU_FIGURES)].isna().all().all():
        return "These results carry no GPU figures (written before gspo-bench measured them)."
    by_label = m.groupby("label", sort=False)
    devices = results.runs.groupby("label", sort=False)["device"].agg(lambda d: ", ".join(sorted(set(map(str, d)))))
    labels = list(by_label.groups)
    return pd.DataFrame({
        "objective": labels,
        "device": devices.reindex(labels).to_numpy(),
        "peak GPU memory (GiB)": by_label["gpu/peak_mem_gib"].max().to_numpy(),
        "rollout tokens/s": by_label["perf/rollout_tokens_per_s"].mean().to_numpy(),
        "training tokens/s": by_label["perf/train_tokens_per_s"].mean().to_numpy(),
        "MFU": by_label["perf/mfu"].mean().to_numpy(),
        "step (s)": by_label["time/step_s"].mean().to_numpy(),
    })
