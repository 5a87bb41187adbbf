"""The real adaptive suite read as experiments/adaptive/README.md ("Rule 2") declared: per arm, the runs the
rule made, its final standing, and beside it the grid's bracket on stage 3's seeds 0-5 at the same levels.

    python experiments/adaptive/read_suite.py results/adaptive/stage3_adaptive results/stability_cpu/stage3 \
        --out results/adaptive/stage3_adaptive_reading.csv
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import typer

from analysis.data.load import load_results
from analysis.evidence.adaptive import Conclusion, GridLevel, grid_conclusion
from analysis.evidence.adaptive_suite import AdaptivePlacer, GridRun, place, standing_line
from analysis.evidence.stability import failed, stability_map
from gspo_bench.config import load_suite
from gspo_bench.config.schema import ADAPTIVE_LOG as LOG
from gspo_bench.suite.adaptive import grid_rows
from gspo_bench.suite.runner import plan_runs

SWEPT = "sweep/logit_noise"


def grid_levels(classes: pd.DataFrame, arm: str, values: list[float]) -> list[GridLevel]:
    """`arm`'s outcomes on the grid at `values` (the suite's levels), seeds in ascending order."""
    own = classes[classes["arm"] == arm].assign(failed=failed(classes[classes["arm"] == arm]).to_numpy())
    levels = []
    for value in values:
        level = own[own[SWEPT].astype(float) == value].sort_values("seed")
        levels.append(GridLevel(value, tuple(bool(x) for x in level["failed"])))
    return levels


def ends(found: Conclusion, values: list[float]) -> tuple[float, float]:
    """The (held, failed) values of a conclusion, NaN where an end is missing."""
    def at(i: int | None) -> float:
        return float(values[i]) if i is not None else float("nan")
    return at(found.held), at(found.failed)


def main(suite_dir: Path, grid_dir: Path, out: Path | None = None) -> None:
    suite = load_suite(suite_dir / "suite.yaml")
    values = [float(v) for v in next(iter(suite.sweep.values()))]
    log = json.loads((suite_dir / LOG).read_text())
    runs = [name for names in log["rounds"] for name in names]
    grid = [GridRun(*row) for row in grid_rows(plan_runs(suite, suite_dir.parent), values)]  # as `run` plans them
    arm_of = {run.name: run.arm for run in grid}
    placer = AdaptivePlacer(suite.adaptive, values)
    found = place(suite_dir, grid, set(runs), placer.doses, placer.rule, placer.budget, placer.values).standing
    stage3 = stability_map(load_results(grid_dir))
    assert stage3 is not None
    rows = []
    for row in found.to_dict("records"):
        arm = row["arm"]
        whole = grid_conclusion(grid_levels(stage3.classes, arm, values))
        held, fail = ends(whole, values)
        same = row["kind"] == whole.kind and (row["held"], row["failed"]) == (held, fail)
        rows.append({"arm": arm, "runs": sum(arm_of[name] == arm for name in runs),
                     "standing": standing_line(row).split(": ", 1)[1], "kind": row["kind"], "held": row["held"],
                     "failed": row["failed"], "grid_kind": whole.kind, "grid_held": held, "grid_failed": fail,
                     "grid_held_runs": whole.held_runs, "same_levels": same})
    table = pd.DataFrame(rows)
    pd.set_option("display.width", 250, "display.max_colwidth", 140)
    print(table.to_string(index=False))
    print(f"\nsame levels as the grid's bracket: {int(table['same_levels'].sum())} of {len(table)} arms")
    print(f"{len(runs)} runs in {len(log['rounds'])} rounds (sizes {[len(r) for r in log['rounds']]}); the grid: "
          f"{len(grid)}")
    if out is not None:
        table.to_csv(out, index=False)
        print(f"wrote {out}")


if __name__ == "__main__":
    typer.run(main)
