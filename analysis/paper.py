"""The GSPO paper's MoE observations side by side with a run's, each with a 95% bootstrap CI over
seeds (rliable style: per-seed values, then a CI of their mean).

| quantity | paper | this run |
|---|---|---|
| clipped-token fraction, GSPO / GRPO (Figure 2) | ~0.15 / ~0.0013 | per-seed mean over steps |
| experts changed per update (section 5.3) | ~10% of activated experts | `moe/drift_expert` |
| drift trend over depth | deeper layers drift more | last minus first layer's `moe/drift` |
| GRPO without / with Routing Replay (Figure 3) | without: does not converge | final reward, difference |
| reward at equal compute (Figure 1) | GSPO above GRPO | final reward, difference |

"agrees" says whether the CI of the run's difference lies on the paper's side of 0 ("yes"),
straddles it ("not distinguishable") or lies on the other side ("no"); with fewer than 3 seeds
there is no CI and no verdict.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from analysis.load import Results
from analysis.stats import bootstrap_ci, final_value


def _per_seed(metrics: pd.DataFrame, fn) -> pd.Series:
    return metrics.groupby("seed").apply(fn, include_groups=False) if len(metrics) else pd.Series(dtype=float)


MIN_CI_SEEDS = 3  # a bootstrap over two values is only their range: no CI and no verdict below this


def _fmt(values: np.ndarray, rng: np.random.Generator, spec: str = ".3g") -> str:
    values = np.asarray(values, dtype=float)
    values = values[np.isfinite(values)]
    if not len(values):
        return "-"
    if len(values) < MIN_CI_SEEDS:
        return f"{values.mean():{spec}} ({len(values)} seed{'s' if len(values) > 1 else ''}, no CI)"
    low, high = bootstrap_ci(values, rng)
    return f"{values.mean():{spec}} [{low:{spec}}, {high:{spec}}]"


def _agrees(difference: np.ndarray, rng: np.random.Generator, paper_sign: int) -> str:
    """Whether the CI of a per-seed difference lies on the paper's side of 0."""
    difference = np.asarray(difference, dtype=float)
    difference = difference[np.isfinite(difference)]
    if len(difference) < MIN_CI_SEEDS:
        return f"{len(difference)} seed(s): too few to tell"
    low, high = bootstrap_ci(difference, rng)
    if low * paper_sign > 0 and high * paper_sign > 0:
        return "yes"
    if low * paper_sign < 0 and high * paper_sign < 0:
        return "no"
    return "not distinguishable"


def _paired(a: pd.Series, b: pd.Series) -> np.ndarray:
    """a - b over the seeds both have."""
    seeds = a.index.intersection(b.index)
    return (a[seeds] - b[seeds]).to_numpy()


def paper_vs_run(results: Results, seed: int = 0) -> pd.DataFrame | None:
    """The table above for the runs of `results` (one facet), or None without both GRPO and GSPO runs."""
    rng = np.random.default_rng(seed)
    m = results.metrics

    def metrics_of(objective: str, replay: bool) -> pd.DataFrame:
        """Runs of `objective` without replay, or with Routing Replay of the old pass (not R3)."""
        runs = results.runs
        keep = (runs["objective"] == objective) & (runs["replay"] == replay)
        if replay:
            keep &= runs["replay_from"] == "old_pass"
        return m[m["label"].isin(set(runs.loc[keep, "label"]))]

    grpo, gspo, grpo_rr = metrics_of("grpo", False), metrics_of("gspo", False), metrics_of("grpo", True)
    if grpo.empty or gspo.empty:
        return None
    clip_gspo = _per_seed(gspo, lambda f: f["clip/frac"].mean())
    clip_grpo = _per_seed(grpo, lambda f: f["clip/frac"].mean())
    drift = _per_seed(grpo, lambda f: f["moe/drift_expert"].mean())
    final = {name: _per_seed(frame, lambda f: final_value(f, "reward/mean"))
             for name, frame in (("grpo", grpo), ("gspo", gspo), ("grpo_rr", grpo_rr))}
    rows = [
        {"quantity": "clipped-token fraction, GSPO (Figure 2)", "paper": "~0.15",
         "this run": _fmt(clip_gspo.to_numpy(), rng), "agrees": ""},
        {"quantity": "clipped-token fraction, GRPO (Figure 2)", "paper": "~0.0013",
         "this run": _fmt(clip_grpo.to_numpy(), rng),
         "agrees": _agrees(_paired(clip_gspo, clip_grpo), rng, +1) + " (GSPO clips more)"},
        {"quantity": "activated experts changed per update, GRPO (moe/drift_expert)", "paper": "~10%",
         "this run": _fmt(100 * drift.to_numpy(), rng) + " %",
         "agrees": _agrees(drift.to_numpy() - 0.05, rng, +1) + " (at least 5%)"},
        _depth_row(results, rng),
        {"quantity": "final reward, GRPO with Routing Replay minus without (Figure 3)",
         "paper": "> 0 (without replay GRPO does not converge)",
         "this run": _fmt(_paired(final["grpo_rr"], final["grpo"]), rng) if len(final["grpo_rr"]) else "no GRPO + RR runs",
         "agrees": _agrees(_paired(final["grpo_rr"], final["grpo"]), rng, +1) if len(final["grpo_rr"]) else ""},
        {"quantity": "final reward at equal compute, GSPO minus GRPO (Figure 1)", "paper": "> 0",
         "this run": _fmt(_paired(final["gspo"], final["grpo"]), rng),
         "agrees": _agrees(_paired(final["gspo"], final["grpo"]), rng, +1)},
    ]
    return pd.DataFrame(rows)


def _depth_row(results: Results, rng: np.random.Generator) -> dict:
    layers = results.layers
    grpo = results.runs[(results.runs["objective"] == "grpo") & ~results.runs["replay"].astype(bool)]
    layers = layers[layers["label"].isin(set(grpo["label"]))]
    row = {"quantity": "drift of the last MoE layer minus the first, GRPO (moe/drift)",
           "paper": "> 0 (deeper layers drift more)", "this run": "-", "agrees": ""}
    if layers.empty:
        return row
    first, last = layers["layer"].min(), layers["layer"].max()
    per_seed = layers.groupby(["seed", "layer"])["moe/drift"].mean().unstack("layer")
    gap = (per_seed[last] - per_seed[first]).to_numpy()
    return row | {"this run": _fmt(gap, rng), "agrees": _agrees(gap, rng, +1)}
