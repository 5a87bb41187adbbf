"""The GSPO paper's MoE observations side by side with a group's runs (one suite at one sweep point).

| quantity | paper | this run |
|---|---|---|
| clipped-token fraction, GSPO / GRPO (Figure 2) | ~0.15 / ~0.0013 | per-seed mean over steps |
| experts changed after one update (section 5.3) | ~10% of activated experts | `moe/drift_expert_1` (see `drift_after_one`) |
| drift trend over depth | deeper layers drift more | last minus first layer's `moe/drift` |
| GRPO without / with Routing Replay (Figure 3) | without: does not converge | final reward, difference |
| reward at equal compute (Figure 1) | GSPO above GRPO | final reward, difference |

Each row shows the per-seed values, their mean with a t-interval (differences: paired by seed), the
exact sign-flip p and its Holm-adjusted p over every comparison of the report (analysis.evidence.family).
"agrees" is "yes" when the adjusted p is below 5% on the paper's side, "no" on the other side, "too
few seeds" when the seeds could not get there whatever the data, else "not distinguishable". The
reward rows are withheld where no objective learned (analysis.evidence.learning).
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from analysis.data.groups import Group
from analysis.data.load import Results
from analysis.evidence.family import Test
from analysis.stats.library import paired

CLIP = "clipped-token fraction"
DRIFT_ONE = "activated experts changed after one update"
DEPTH = "drift, last MoE layer minus the first"
DRIFT_FLOOR = 0.05  # the check: at least 5% of experts change per update (the paper: ~10%)


@dataclass(frozen=True)
class Arms:
    """The group's GRPO and GSPO without replay and GRPO with Routing Replay of the old pass (not R3),
    by arm name: the one named like the objective where there are several."""

    grpo: str | None
    gspo: str | None
    grpo_rr: str | None


def arms(runs: pd.DataFrame) -> Arms:
    def pick(name: str, objective: str, replay: bool) -> str | None:
        keep = (runs["objective"] == objective) & (runs["replay"].astype(bool) == replay)
        if replay:
            keep &= runs["replay_from"] == "old_pass"
        found = list(dict.fromkeys(runs.loc[keep, "arm"]))
        exact = [a for a in found if a.rsplit("/", 1)[-1] == name]
        return (exact or found or [None])[0]

    return Arms(pick("grpo", "grpo", False), pick("gspo", "gspo", False), pick("grpo_rr", "grpo", True))


def per_seed(frame: pd.DataFrame, arm: str, column: str) -> pd.Series:
    """Per seed: the mean over steps (and rows) of `column` for one objective's rows of `frame`."""
    rows = frame[(frame["arm"] == arm)] if "arm" in frame else frame.iloc[0:0]
    if column not in rows or rows[column].isna().all():
        return pd.Series(dtype=float)
    return rows.groupby("seed")[column].mean().dropna()


def _one_update_rows(layers: pd.DataFrame) -> pd.DataFrame:
    return layers[layers["updates"] == 1] if "updates" in layers else layers.iloc[0:0]


def drift_after_one(results: Results, arm: str) -> tuple[pd.Series, str]:
    """Per seed, the drift after exactly one update (the paper's "per gradient update") and which
    measurement it is: the expert-level figure where measured, else the token-layer one (older runs:
    only `layers.parquet` rows with `updates == 1`); empty where neither was measured."""
    layers = _one_update_rows(results.layers)
    if not layers.empty and "arm" not in layers:
        layers = layers.merge(results.runs[["label", "arm"]].drop_duplicates(), on="label")
    sources = [
        (results.metrics, "moe/drift_expert_1", "activated experts changed after one update (moe/drift_expert_1)"),
        (layers, "moe/drift_expert", "activated experts changed after one update (layers.parquet, updates == 1)"),
        (results.metrics, "moe/drift_1", "token-layer pairs rerouted after one update (moe/drift_1; the "
                                         "expert-level figure was not measured)"),
        (layers, "moe/drift", "token-layer pairs rerouted after one update (layers.parquet, updates == 1, "
                              "moe/drift; the expert-level figure was not measured)"),
    ]
    for frame, column, text in sources:
        values = per_seed(frame, arm, column)
        if len(values):
            return values, text
    return pd.Series(dtype=float), ("these runs record drift over a step's minibatch forwards (after 1 to K-1 "
                                    "updates), not after exactly one update")


def depth_gap(results: Results, label: str) -> pd.Series:
    """Per seed, the last MoE layer's mean drift minus the first's (after one update where recorded)."""
    layers = results.layers
    layers = layers[layers["label"] == label] if "label" in layers else layers
    one = _one_update_rows(layers)
    layers = one if len(one) else layers
    if layers.empty or "moe/drift" not in layers:
        return pd.Series(dtype=float)
    table = layers.groupby(["seed", "layer"])["moe/drift"].mean().unstack("layer")
    return (table[table.columns.max()] - table[table.columns.min()]).dropna()


def label_of(results: Results, arm: str | None) -> str:
    rows = results.runs[results.runs["arm"] == arm]
    return str(rows["label"].iloc[0]) if len(rows) else ""


def paper_tests(results: Results, group: Group) -> list[Test]:
    """The paper checks' tests of one group's finished runs ([] without GRPO and GSPO runs); the
    reward checks are the family's reward tests (analysis.evidence.family.reward_tests)."""
    a = arms(results.runs)
    if a.grpo is None or a.gspo is None:
        return []
    tests = [Test(group, CLIP, a.gspo, a.grpo, paired(per_seed(results.metrics, a.gspo, "clip/frac"),
                                                      per_seed(results.metrics, a.grpo, "clip/frac")))]
    drift, _ = drift_after_one(results, a.grpo)
    if len(drift):
        tests.append(Test(group, DRIFT_ONE, a.grpo, f"{DRIFT_FLOOR:.0%}", paired(drift, DRIFT_FLOOR)))
    gap = depth_gap(results, label_of(results, a.grpo))
    if len(gap):
        tests.append(Test(group, DEPTH, a.grpo, "0", paired(gap, 0.0)))
    return tests


