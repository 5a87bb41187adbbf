"""Read back what a run logged to TensorBoard and set it beside its metrics.parquet.

    python experiments/read_tensorboard.py RUN_DIR [TAG ...]     # default tags: reward/mean and eval/*

Prints each tag's (step, value) pairs, the number of scalar tags, and whether every logged step of a
metrics tag equals the row of metrics.parquet (needs the `tracking` extra).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator


def read(run: Path, tags: list[str]) -> None:
    events = EventAccumulator(str(run / "tensorboard"), size_guidance={"scalars": 0})
    events.Reload()
    logged = events.Tags()["scalars"]
    rows = pd.read_parquet(run / "metrics.parquet").set_index("step")
    print(f"{run}: {len(logged)} scalar tags")
    for tag in tags or ["reward/mean"] + [t for t in logged if t.startswith("eval/")]:
        if tag not in logged:
            raise SystemExit(f"{run}: no TensorBoard tag {tag!r}; logged: {', '.join(sorted(logged))}")
        points = [(e.step, round(e.value, 4)) for e in events.Scalars(tag)]
        same = ""
        if tag in rows:
            same = f"  equal to metrics.parquet: {all(abs(rows.loc[s, tag] - v) < 1e-4 for s, v in points)}"
        print(f"  {tag}: {points}{same}")


if __name__ == "__main__":
    if len(sys.argv) < 2:
        raise SystemExit(__doc__)
    read(Path(sys.argv[1]), sys.argv[2:])
