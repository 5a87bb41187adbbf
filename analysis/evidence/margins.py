"""Router margins against drift: what they show, and what they do not.

**An independence check, not a prediction.** Per objective and MoE layer, the measured drift beside
`moe/flip_pred` = P(margin + d margin < 0) with the margin and its move drawn independently from the
step's own distributions (`gspo_bench.moe.margins`), and `moe/margin_crossed`, the tokens whose own
margin closed. The same updates' moves go into both: `flip_pred` near `margin_crossed` says that a
token's margin and its move are about independent (small margins are not moved more or less than
large ones); it does not say that drift can be foreseen.

**A prediction** (`forecast_table`): step t+1's drift from what is known at the end of step t. The
margin forecast is step t's `moe/flip_pred` of that layer; the naive one is persistence, step t's
measured drift. Neither fits anything, so every scored step is out of sample; both are scored by their
mean absolute error against step t+1's measured drift, per layer (after one update where the runs
record `updates`, else over all of a step's updates).

Also: the share of tokens near a tie, how far updates move the router, and the nondeterminism floor."""

from __future__ import annotations

import pandas as pd

# column -> its name in the report's table, in order
SUMMARY = {
    "moe/drift": "drift (measured)",
    "moe/margin_crossed": "margins crossed",
    "moe/flip_pred": "independence flip rate",
    "moe/margin_lt_0.01": "margin < 0.01",
    "moe/margin_lt_0.1": "margin < 0.1",
    "moe/margin_lt_1": "margin < 1",
    "moe/margin_median": "median margin",
    "moe/dmargin_abs": "mean |d margin|",
    "moe/dscore": "mean |d s|",
    "moe/rollout_gap": "engine routing gap",
    "floor/drift_repeat": "floor: repeat",
    "floor/drift_precision": "floor: rollout precision",
}

EXPLAINED = ("Margins are router-logit gaps between each token's k-th chosen and best unchosen expert under "
             "the old policy; d margin is how far the updates before a minibatch moved that gap, |d s| how far "
             "they moved the two scores. 'Margins crossed' counts tokens whose own gap closed (a k-th / (k+1)-th "
             "swap, part of the measured drift). The independence flip rate is P(margin + d margin < 0) with the "
             "two drawn independently from the same step's distributions: it reuses the same updates' moves, so "
             "it is no prediction of drift. Where it matches the crossed margins, a token's margin and its move "
             "are about independent. The forecast below is a prediction: step t+1's drift from step t. Means over "
             "steps, minibatches, layers and seeds; the floors are the drift of two identical forwards and of a "
             "forward in the rollout precision (step 1).")


def margin_table(metrics: pd.DataFrame) -> pd.DataFrame | str:
    """Per objective: the mean over steps and seeds of each margin figure present (floors: step 1)."""
    present = [c for c in SUMMARY if c in metrics.columns]
    if "moe/flip_pred" not in present:
        return "These results carry no router-margin columns (runs older than the margin measurement, or measure: false)."
    table = metrics.groupby("label", sort=False)[present].mean()
    if "moe/margin_crossed" in table:
        table["crossed / independence"] = table["moe/margin_crossed"] / table["moe/flip_pred"]
    return table.rename(columns=SUMMARY).reset_index().rename(columns={"label": "objective"})


def drift_by(layers: pd.DataFrame, across: str = "layer") -> pd.DataFrame:
    """Per objective and MoE layer (or `across="updates"`: per number of updates the measured forward
    ran after): mean measured drift, independence flip rate and crossed margins."""
    columns = [c for c in ("moe/drift", "moe/flip_pred", "moe/margin_crossed") if c in layers.columns]
    return layers.groupby(["label", across], sort=False)[columns].mean().reset_index().sort_values(["label", across],
                                                                                                     kind="stable")


def has_margins(layers: pd.DataFrame) -> bool:
    """Some row has margin figures (rows of older steps or layers without them do not hide the figure)."""
    return "moe/flip_pred" in layers.columns and bool(layers["moe/flip_pred"].notna().any())


def step_series(layers: pd.DataFrame) -> pd.DataFrame:
    """Per run, layer and step: measured drift and independence flip rate, after one update where the
    rows record `updates`, else their mean over the step's updates."""
    rows = layers[layers["updates"] == 1] if "updates" in layers.columns else layers
    return rows.groupby(["label", "seed", "layer", "step"], sort=False)[["moe/drift", "moe/flip_pred"]].mean()


def forecast_table(layers: pd.DataFrame) -> pd.DataFrame | str:
    """Per objective: step t+1's measured drift forecast from step t, per layer, by the margin forecast
    (step t's independence flip rate) and by persistence (step t's drift): mean absolute errors over
    every (run, layer, t) with a step t+1, and the mean drift they are errors of."""
    if not has_margins(layers):
        return "These results carry no router-margin columns: nothing to forecast drift from."
    series = step_series(layers).sort_index()
    following = series.groupby(level=["label", "seed", "layer"], sort=False).shift(-1)  # step t+1 on row t
    steps = series.index.get_level_values("step").to_numpy()
    next_steps = pd.Series(steps, index=series.index).groupby(level=["label", "seed", "layer"]).shift(-1)
    keep = (next_steps == steps + 1).to_numpy() & following["moe/drift"].notna().to_numpy() & \
        series["moe/flip_pred"].notna().to_numpy()
    truth, now = following["moe/drift"][keep], series[keep]
    errors = pd.DataFrame({"margin": (now["moe/flip_pred"] - truth).abs(), "persistence": (now["moe/drift"] - truth).abs(),
                           "drift": truth})
    table = errors.groupby(level="label", sort=False).agg(
        points=("drift", "size"), drift=("drift", "mean"), margin=("margin", "mean"), persistence=("persistence", "mean"))
    if table.empty:
        return "No two consecutive steps with margin figures: nothing to score a forecast on."
    return pd.DataFrame({"objective": table.index, "scored steps (run x layer x t)": table["points"].to_numpy(),
                         "mean drift at t+1": table["drift"].to_numpy(),
                         "error: margin forecast (flip rate at t)": table["margin"].to_numpy(),
                         "error: persistence (drift at t)": table["persistence"].to_numpy(),
                         "closer": (table["margin"] < table["persistence"]).map({True: "margins", False: "persistence"}
                                                                                ).to_numpy()})
