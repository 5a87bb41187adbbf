"""Stage 5's declared reading (experiments/lag/README.md, "Stage 5") off its runs: outcomes per arm and lag, the
six declared pairs (McNemar's exact test of failure stratified by lag, Holm over the six: the report's map
test on the same classes, degenerate cells left out), the seeds per level that would separate each declared
pair at its observed discordance (80% power at Holm's strictest level 0.05 / 6), and the routing reading at
lag 4 (exploratory). The boundaries on the lag axis and the measured dose are the report's
(`gspo-bench report DIR`).

    python experiments/lag/stage5_rules.py results/lag_cpu/stage5 [--csv results/lag_cpu/stage5/pairs.csv]
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import typer

from analysis.data.load import load_results
from analysis.evidence.placement import pair_tests
from analysis.evidence.stability import FAILED, stability_map
from analysis.stats.library import ALPHA, mcnemar_seeds_needed

DECLARED = [("grpo_decoupled", "grpo_naive"), ("grpo_naive", "grpo"), ("grpo_r3", "grpo"), ("gspo", "grpo"),
            ("m2po", "grpo"), ("vespo", "grpo")]  # stage5_arms.yaml's analysis.primary.pairs, in order
ROUTING_ARMS = ("grpo", "grpo_rr", "grpo_r3", "grpo_r2_lag2")
ROUTING_LAG = 4  # the level nearest the 10% crossing (the pilot's rule 2: lag 4.4)


def main(results: Path, csv: Path | None = None) -> None:
    loaded = load_results(results)
    stability = stability_map(loaded)
    if stability is None:
        raise typer.BadParameter(f"{results}: no stability map (nothing judged)")
    classes = stability.classes.assign(lag=lambda f: f["sweep/lag"].astype(int),
                                       failed=lambda f: f["outcome"].isin(FAILED))
    pd.set_option("display.width", 200)
    levels = sorted(int(lag) for lag in classes["lag"].unique())
    print(f"{len(classes)} runs judged on the map ({len(stability.left_out)} in degenerate cells left out); "
          f"lags {levels}")
    table = classes.groupby(["arm", "lag"])["failed"].agg(lambda f: f"{int(f.sum())}/{len(f)}").unstack("lag")
    print("\nfailed (degraded or collapsed) / judged, per arm and lag:")
    print(table.to_string())
    tests = pair_tests(classes, DECLARED)
    rows = []
    holm_strictest = ALPHA / len(DECLARED)
    for test in tests:
        if not test.declared:
            continue
        cells = max(test.cells, 1)
        needed = mcnemar_seeds_needed(test.first_only / cells, test.second_only / cells, len(levels), holm_strictest)
        rows.append({"first": test.first, "second": test.second, "cells": test.cells, "only first failed": test.first_only,
                     "only second failed": test.second_only, "p": test.p, "Holm p": test.adjusted,
                     "separates": test.separates, "seeds per level for 80% power": needed})
    pairs = pd.DataFrame(rows)
    print("\ndeclared pairs (McNemar's exact test stratified by lag; Holm over the six; power at alpha 0.05/6, "
          "the pooled discordance rates as observed):")
    print(pairs.to_string(index=False, float_format=lambda v: f"{v:.3g}"))
    routing = classes[classes["arm"].isin(ROUTING_ARMS)]
    print(f"\nrouting reading (exploratory), failed / judged at lag {ROUTING_LAG} and over every lag:")
    for arm in ROUTING_ARMS:
        mine = routing[routing["arm"] == arm]
        at = mine[mine["lag"] == ROUTING_LAG]
        print(f"  {arm}: lag {ROUTING_LAG} {int(at['failed'].sum())}/{len(at)}; all lags "
              f"{int(mine['failed'].sum())}/{len(mine)}")
    exploratory = [t for t in tests if not t.declared and t.p < ALPHA]
    print(f"\nexploratory pairs with an unadjusted p < {ALPHA} ({len(exploratory)} of {sum(not t.declared for t in tests)}; "
          "no claim):")
    for test in sorted(exploratory, key=lambda t: t.p):
        print(f"  {test.first} vs {test.second}: only first {test.first_only}, only second {test.second_only} of "
              f"{test.cells} cells, p = {test.p:.3g}")
    if csv is not None:
        csv.parent.mkdir(parents=True, exist_ok=True)
        pairs.to_csv(csv, index=False)
        print(f"\nwrote {csv}")


if __name__ == "__main__":
    typer.run(main)
