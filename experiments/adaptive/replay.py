"""The adaptive placement rule replayed on a grid already run (experiments/adaptive/README.md): per arm, the
runs it asks for in order, its conclusion after 25/50/75/100% of them, its runs against the grid's, and whether
its bracket equals the grid's; then the same over random orders of the seeds.

    python experiments/adaptive/replay.py results/stability_cpu/stage3 --out results/adaptive
    python experiments/adaptive/replay.py results/stability_cpu/stage3 --confirm-seeds 4 --out results/adaptive --tag rule2
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import typer

from analysis.data.load import load_results
from analysis.evidence.adaptive import Conclusion, GridLevel, Rule, after, grid_conclusion, replay
from analysis.evidence.dose import DOSE
from analysis.evidence.stability import failed, stability_map
from analysis.stats.logistic import zero_event_bound

ORDERS = 20  # random orders of the seeds, numpy seed 0


def arm_levels(classes: pd.DataFrame, arm: str, order: list[int]) -> list[GridLevel]:
    """`arm`'s levels by dose, each seed's outcome in `order` (seeds a level lacks are skipped)."""
    own = classes[classes["arm"] == arm].assign(failed=failed(classes[classes["arm"] == arm]).to_numpy())
    levels = []
    for _, level in own.groupby("cell"):
        by_seed = dict(zip(level["seed"], level["failed"], strict=True))
        levels.append(GridLevel(float(level[DOSE].iloc[0]), tuple(bool(by_seed[s]) for s in order if s in by_seed)))
    return sorted(levels, key=lambda level: level.dose)


def words(found: Conclusion, levels: list[GridLevel]) -> str:
    """The conclusion with its doses and the runs behind each end (the held end's exact 95% bound)."""
    if found.kind == "below":
        return f"fails at the lowest level ({levels[0].dose:.3g}, {found.failed_runs} runs)"
    if found.kind == "above":
        return (f"held at the highest level ({levels[-1].dose:.3g}, {found.held_runs} runs, rate <= "
                f"{zero_event_bound(found.held_runs):.0%})")
    if found.kind == "bracket" and found.held is not None and found.failed is not None:
        return (f"bracket {levels[found.held].dose:.3g} ({found.held_runs} runs held, rate <= "
                f"{zero_event_bound(found.held_runs):.0%}) to {levels[found.failed].dose:.3g} "
                f"({found.failed_runs} runs, most failed)")
    return "no bracket yet"


def factor(found: Conclusion, levels: list[GridLevel]) -> float:
    """The bracket's dose ratio, dose(failed) / dose(held); NaN without a bracket."""
    if found.kind != "bracket" or found.held is None or found.failed is None:
        return float("nan")
    return levels[found.failed].dose / levels[found.held].dose


def same(a: Conclusion, b: Conclusion) -> bool:
    return (a.kind, a.held, a.failed) == (b.kind, b.held, b.failed)


def main(results: Path, out: Path | None = None,
         confirm_seeds: int | None = typer.Option(None, help="rule 2: the held end confirmed to this many runs"),
         tag: str = typer.Option("", help="written as stage3_<tag>_replay.csv (rule 1: no tag)")) -> None:
    rule = Rule(confirm_seeds=confirm_seeds)
    found = stability_map(load_results(results))
    if found is None:
        raise typer.BadParameter(f"{results}: no stability map (a swept suite with judged runs)")
    classes = found.classes  # degenerate cells left out
    seeds = sorted(classes["seed"].unique().tolist())
    rows, runs_rows = [], []
    orders = [seeds]
    rng = np.random.default_rng(0)
    orders += [[int(s) for s in rng.permutation(seeds)] for _ in range(ORDERS)]
    for arm in dict.fromkeys(classes["arm"]):
        for number, order in enumerate(orders):
            levels = arm_levels(classes, str(arm), order)
            asked, whole = replay(levels, rule), grid_conclusion(levels)
            grid_runs = sum(len(level.outcomes) for level in levels)
            final = after(asked, len(asked), len(levels))
            row = {"arm": arm, "order": number, "seeds": " ".join(map(str, order)), "runs": len(asked),
                   "grid_runs": grid_runs, "same_as_grid": same(final, whole), "factor": factor(final, levels),
                   "grid_factor": factor(whole, levels), "final": words(final, levels),
                   "grid": words(whole, levels)}
            for share in (25, 50, 75):
                row[f"at_{share}pct"] = words(after(asked, int(np.ceil(len(asked) * share / 100)), len(levels)), levels)
            rows.append(row)
            if number == 0:
                runs_rows += [{"arm": arm, "run": i + 1, "dose": levels[level].dose, "seed": order[position],
                               "failed": bad} for i, (level, position, bad) in enumerate(asked)]
    table = pd.DataFrame(rows)
    pd.set_option("display.width", 200, "display.max_colwidth", 120)
    first = table[table["order"] == 0]
    print("seeds in ascending order, per arm:")
    print(first[["arm", "runs", "grid_runs", "same_as_grid", "factor", "grid_factor", "final", "grid"]].to_string(
        index=False, float_format=lambda v: f"{v:.3g}"))
    print("\nconclusions part way (ascending order):")
    print(first[["arm", "at_25pct", "at_50pct", "at_75pct"]].to_string(index=False))
    summary = table[table["order"] > 0].groupby("arm", sort=False).agg(
        runs_median=("runs", "median"), runs_min=("runs", "min"), runs_max=("runs", "max"),
        same_as_grid=("same_as_grid", "sum"), orders=("order", "count"), grid_runs=("grid_runs", "first"))
    print(f"\nover {ORDERS} random orders of the seeds (numpy seed 0):")
    print(summary.to_string())
    print(f"\nall arms, ascending order: {first['runs'].sum()} runs of {first['grid_runs'].sum()}; "
          f"{int(first['same_as_grid'].sum())} of {len(first)} brackets equal the grid's")
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        stem = f"stage3_{tag}_" if tag else "stage3_"
        table.to_csv(out / f"{stem}replay.csv", index=False)
        pd.DataFrame(runs_rows).to_csv(out / f"{stem}runs.csv", index=False, float_format="%.6g")
        print(f"wrote {out / f'{stem}replay.csv'}, {out / f'{stem}runs.csv'}")


if __name__ == "__main__":
    typer.run(main)
