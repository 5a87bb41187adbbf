"""The lag x learning-rate law read off the grid (experiments/lag/README.md, "The grid's reading, in detail"):
each treatment's cells (failed of runs, off the law where its lag-0 runs failed), its logistic boundary's slope
in (log lag, log lr) with Fieller's 95% interval against the law's -1, and the figure.

    python experiments/lag/law.py results/lag_cpu/lr_grid [--out results/lag_cpu/lr_grid]
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import typer

from analysis.data.load import load_results
from analysis.evidence.lag_law import LAW_SLOPE, cells, grid_runs, law_fits
from analysis.evidence.stability import class_rows
from analysis.figures.lag import lag_lr_law


def main(results: Path, out: Path | None = None) -> None:
    runs = grid_runs(class_rows(load_results(results)))
    table, fits = cells(runs), law_fits(runs)
    pd.set_option("display.width", 160)
    print("failed of runs per cell (x: the treatment's lr is off the law, its lag-0 runs failed):")
    marked = table.assign(cell=[f"{f}/{n}" + (" x" if off else "") for f, n, off in
                                zip(table["failed"], table["runs"], table["off_law"], strict=True)])
    print(marked.pivot_table(index=["arm", "lr"], columns="lag", values="cell", aggfunc="first").to_string())
    rows = []
    for fit in fits:
        rows.append({"arm": fit.arm, "runs": fit.runs, "failed": fit.failed,
                     "lr_on_law": " ".join(f"{lr:g}" for lr in fit.learning_rates), "a": fit.coef[0],
                     "b_log_lag": fit.coef[1], "c_log_lr": fit.coef[2], "slope": fit.slope, "low": fit.low,
                     "high": fit.high, "holds_law_slope": fit.consistent, "why_no_fit": fit.why})
    summary = pd.DataFrame(rows)
    print(f"\nper treatment, the boundary's slope in (log lag, log lr) and its 95% interval (the law: {LAW_SLOPE:g}):")
    print(summary.to_string(index=False, float_format=lambda v: f"{v:.4g}"))
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        table.to_csv(out / "law_cells.csv", index=False, float_format="%.6g")
        summary.to_csv(out / "law_fits.csv", index=False, float_format="%.6g")
        lag_lr_law(table, fits).savefig(out / "lag_lr_law.png", dpi=130)
        print(f"\nwrote {out / 'law_cells.csv'}, {out / 'law_fits.csv'}, {out / 'lag_lr_law.png'}")


if __name__ == "__main__":
    typer.run(main)
