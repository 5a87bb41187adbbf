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

from dataclasses import dataclass

import numpy as np
import pandas as pd

from analysis.load import Results
from analysis.stats import bootstrap_ci, final_value

MIN_CI_SEEDS = 3  # a bootstrap over two values is only their range: no CI and no verdict below this

# outcomes of a check: where the CI of the run's difference lies relative to 0, on the paper's side
YES, NO, TIE, FEW = "yes", "no", "not distinguishable", "too few seeds"


@dataclass(frozen=True)
class Check:
    """One row of the table. `outcome` is YES / NO / TIE / FEW for a row that tests one of the paper's
    phenomena (`claim`, shown in `figure`), None for a row that only reports a value or lacks data."""

    quantity: str
    paper: str
    this_run: str
    outcome: str | None = None
    seeds: int = 0
    note: str = ""
    claim: str = ""
    figure: str | None = None
    evidence: str = ""  # what the verdict quotes, when not `this_run`

    @property
    def agrees(self) -> str:
        if self.outcome is None:
            return ""
        text = f"{self.seeds} seed(s): too few to tell" if self.outcome == FEW else self.outcome
        return f"{text} ({self.note})" if self.note else text


def _per_seed(metrics: pd.DataFrame, fn) -> pd.Series:
    return metrics.groupby("seed").apply(fn, include_groups=False) if len(metrics) else pd.Series(dtype=float)


def _fmt(values: np.ndarray, rng: np.random.Generator, spec: str = ".3g") -> str:
    values = np.asarray(values, dtype=float)
    values = values[np.isfinite(values)]
    if not len(values):
        return "-"
    if len(values) < MIN_CI_SEEDS:
        return f"{values.mean():{spec}} ({len(values)} seed{'s' if len(values) > 1 else ''}, no CI)"
    low, high = bootstrap_ci(values, rng)
    return f"{values.mean():{spec}} [{low:{spec}}, {high:{spec}}]"


def outcome(difference: np.ndarray, rng: np.random.Generator, paper_sign: int) -> tuple[str, int]:
    """Where the CI of a per-seed difference lies: on the paper's side of 0 (YES), on the other (NO),
    across it (TIE), or FEW below MIN_CI_SEEDS seeds; with the number of seeds."""
    difference = np.asarray(difference, dtype=float)
    difference = difference[np.isfinite(difference)]
    if len(difference) < MIN_CI_SEEDS:
        return FEW, len(difference)
    low, high = bootstrap_ci(difference, rng)
    if low * paper_sign > 0 and high * paper_sign > 0:
        return YES, len(difference)
    if low * paper_sign < 0 and high * paper_sign < 0:
        return NO, len(difference)
    return TIE, len(difference)


def _paired(a: pd.Series, b: pd.Series) -> np.ndarray:
    """a - b over the seeds both have."""
    seeds = a.index.intersection(b.index)
    return (a[seeds] - b[seeds]).to_numpy()


def _arms(results: Results) -> dict[str, pd.DataFrame]:
    """Metrics of GRPO and GSPO without replay, and of GRPO with Routing Replay of the old pass (not R3)."""
    runs, m = results.runs, results.metrics

    def metrics_of(objective: str, replay: bool) -> pd.DataFrame:
        keep = (runs["objective"] == objective) & (runs["replay"] == replay)
        if replay:
            keep &= runs["replay_from"] == "old_pass"
        return m[m["label"].isin(set(runs.loc[keep, "label"]))]

    return {"grpo": metrics_of("grpo", False), "gspo": metrics_of("gspo", False), "grpo_rr": metrics_of("grpo", True)}


def paper_checks(results: Results, seed: int = 0) -> list[Check] | None:
    """The rows of the table above for the runs of `results` (one facet), or None without both GRPO and
    GSPO runs."""
    rng = np.random.default_rng(seed)
    arms = _arms(results)
    if arms["grpo"].empty or arms["gspo"].empty:
        return None
    clip = {name: _per_seed(arms[name], lambda f: f["clip/frac"].mean()) for name in ("gspo", "grpo")}
    drift = _per_seed(arms["grpo"], lambda f: f["moe/drift_expert"].mean())
    final = {name: _per_seed(frame, lambda f: final_value(f, "reward/mean")) for name, frame in arms.items()}
    clip_text = {name: _fmt(values.to_numpy(), rng) for name, values in clip.items()}
    return [
        Check("clipped-token fraction, GSPO (Figure 2)", "~0.15", clip_text["gspo"]),
        Check("clipped-token fraction, GRPO (Figure 2)", "~0.0013", clip_text["grpo"],
              *outcome(_paired(clip["gspo"], clip["grpo"]), rng, +1), note="GSPO clips more",
              claim="GSPO clips more tokens than GRPO (Figure 2)", figure="fig2_clip_fraction",
              evidence=f"GSPO {clip_text['gspo']} against GRPO {clip_text['grpo']}"),
        Check("activated experts changed per update, GRPO (moe/drift_expert)", "~10%",
              _fmt(100 * drift.to_numpy(), rng) + " %", *outcome(drift.to_numpy() - 0.05, rng, +1),
              note="at least 5%", claim="At least 5% of GRPO's activated experts change per update (paper ~10%)",
              figure="drift"),
        _depth_check(results, rng),
        _replay_check(final, rng),
        Check("final reward at equal compute, GSPO minus GRPO (Figure 1)", "> 0",
              _fmt(_paired(final["gspo"], final["grpo"]), rng), *outcome(_paired(final["gspo"], final["grpo"]), rng, +1),
              claim="GSPO ends above GRPO at equal compute (Figure 1)", figure="fig1_reward_vs_compute"),
    ]


def paper_vs_run(results: Results, seed: int = 0) -> pd.DataFrame | None:
    """The table above for the runs of `results` (one facet), or None without both GRPO and GSPO runs."""
    checks = paper_checks(results, seed)
    if checks is None:
        return None
    return pd.DataFrame([{"quantity": c.quantity, "paper": c.paper, "this run": c.this_run, "agrees": c.agrees}
                         for c in checks])


def _replay_check(final: dict[str, pd.Series], rng: np.random.Generator) -> Check:
    quantity, paper = ("final reward, GRPO with Routing Replay minus without (Figure 3)",
                       "> 0 (without replay GRPO does not converge)")
    claim = "Routing Replay raises GRPO's final reward (Figure 3)"
    if not len(final["grpo_rr"]):
        return Check(quantity, paper, "no GRPO + RR runs", claim=claim, figure="fig3_routing_replay")
    difference = _paired(final["grpo_rr"], final["grpo"])
    return Check(quantity, paper, _fmt(difference, rng), *outcome(difference, rng, +1), claim=claim,
                 figure="fig3_routing_replay")


def _depth_check(results: Results, rng: np.random.Generator) -> Check:
    layers = results.layers
    grpo = results.runs[(results.runs["objective"] == "grpo") & ~results.runs["replay"].astype(bool)]
    layers = layers[layers["label"].isin(set(grpo["label"]))]
    quantity, paper = "drift of the last MoE layer minus the first, GRPO (moe/drift)", "> 0 (deeper layers drift more)"
    claim, figure = "Deeper MoE layers drift more (GRPO)", "drift_layers_" + safe_name(next(iter(grpo["label"]), ""))
    if layers.empty:
        return Check(quantity, paper, "-", claim=claim, figure=figure)
    first, last = layers["layer"].min(), layers["layer"].max()
    per_seed = layers.groupby(["seed", "layer"])["moe/drift"].mean().unstack("layer")
    gap = (per_seed[last] - per_seed[first]).to_numpy()
    return Check(quantity, paper, _fmt(gap, rng), *outcome(gap, rng, +1), claim=claim, figure=figure)


def safe_name(label: str) -> str:
    """A label as it appears in a file or anchor name."""
    return "".join(c if c.isalnum() or c in "-_" else "_" for c in label)
