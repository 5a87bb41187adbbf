"""The GSPO paper's MoE observations side by side with a group's runs (one suite at one sweep point).

| quantity | paper | this run |
|---|---|---|
| clipped-token fraction, GSPO / GRPO (Figure 2) | ~0.15 / ~0.0013 | per-seed mean over steps |
| experts changed after one update (section 5.3) | ~10% of activated experts | `moe/drift_expert_1` (see `drift_after_one`) |
| drift trend over depth | deeper layers drift more | last minus first layer's `moe/drift` |
| GRPO without / with Routing Replay (Figure 3) | without: does not converge | final reward, difference |
| reward at equal compute (Figure 1) | GSPO above GRPO | final reward, difference |

Each row shows the per-seed values, their mean with a t-interval (differences: paired by seed), the
exact sign-flip p and its Holm-adjusted p over every comparison of the report (analysis.family).
"agrees" is "yes" when the adjusted p is below 5% on the paper's side, "no" on the other side, "too
few seeds" when the seeds could not get there whatever the data, else "not distinguishable". The
reward rows are withheld where no objective learned (analysis.outcome).
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from analysis.anchors import part
from analysis.family import EXPLORATORY, FEW, REWARD, Family, Test
from analysis.groups import Group
from analysis.load import Results
from analysis.outcome import Learning
from analysis.stats import paired
from analysis.texts import difference_text, mean_text, p_text

CLIP = "clipped-token fraction"
DRIFT_ONE = "activated experts changed after one update"
DEPTH = "drift, last MoE layer minus the first"
DRIFT_FLOOR = 0.05  # the check: at least 5% of experts change per update (the paper: ~10%)
WITHHELD = "withheld: no objective learned"


@dataclass(frozen=True)
class Check:
    """One row of the table. `outcome` is YES / NO / TIE / FEW for a row that tests one of the paper's
    phenomena (`claim`, shown in `figure`), None for a row that only reports a value or lacks data."""

    quantity: str
    paper: str
    this_run: str
    outcome: str | None = None
    seeds: int = 0
    p: float = float("nan")
    holm: float = float("nan")
    note: str = ""
    claim: str = ""
    figure: str | None = None
    evidence: str = ""  # what the verdict quotes, when not `this_run`

    @property
    def agrees(self) -> str:
        if self.outcome is None:
            return ""
        return f"{self.outcome} ({self.note})" if self.note else self.outcome


@dataclass(frozen=True)
class Arms:
    """The group's GRPO and GSPO without replay and GRPO with Routing Replay of the old pass (not R3),
    by algorithm name: the one named like the objective where there are several."""

    grpo: str | None
    gspo: str | None
    grpo_rr: str | None


def arms(runs: pd.DataFrame) -> Arms:
    def pick(name: str, objective: str, replay: bool) -> str | None:
        keep = (runs["objective"] == objective) & (runs["replay"].astype(bool) == replay)
        if replay:
            keep &= runs["replay_from"] == "old_pass"
        found = list(dict.fromkeys(runs.loc[keep, "algorithm"]))
        exact = [a for a in found if a.rsplit("/", 1)[-1] == name]
        return (exact or found or [None])[0]

    return Arms(pick("grpo", "grpo", False), pick("gspo", "gspo", False), pick("grpo_rr", "grpo", True))


def per_seed(frame: pd.DataFrame, algorithm: str, column: str) -> pd.Series:
    """Per seed: the mean over steps (and rows) of `column` for one objective's rows of `frame`."""
    rows = frame[(frame["algorithm"] == algorithm)] if "algorithm" in frame else frame.iloc[0:0]
    if column not in rows or rows[column].isna().all():
        return pd.Series(dtype=float)
    return rows.groupby("seed")[column].mean().dropna()


def _one_update_rows(layers: pd.DataFrame) -> pd.DataFrame:
    return layers[layers["updates"] == 1] if "updates" in layers else layers.iloc[0:0]


def drift_after_one(results: Results, algorithm: str) -> tuple[pd.Series, str]:
    """Per seed, the drift after exactly one update (the paper's "per gradient update") and which
    measurement it is: the expert-level figure where measured, else the token-layer one (older runs:
    only `layers.parquet` rows with `updates == 1`); empty where neither was measured."""
    layers = _one_update_rows(results.layers)
    if not layers.empty and "algorithm" not in layers:
        layers = layers.merge(results.runs[["label", "algorithm"]].drop_duplicates(), on="label")
    sources = [
        (results.metrics, "moe/drift_expert_1", "activated experts changed after one update (moe/drift_expert_1)"),
        (layers, "moe/drift_expert", "activated experts changed after one update (layers.parquet, updates == 1)"),
        (results.metrics, "moe/drift_1", "token-layer pairs rerouted after one update (moe/drift_1; the "
                                         "expert-level figure was not measured)"),
        (layers, "moe/drift", "token-layer pairs rerouted after one update (layers.parquet, updates == 1, "
                              "moe/drift; the expert-level figure was not measured)"),
    ]
    for frame, column, text in sources:
        values = per_seed(frame, algorithm, column)
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


def label_of(results: Results, algorithm: str | None) -> str:
    rows = results.runs[results.runs["algorithm"] == algorithm]
    return str(rows["label"].iloc[0]) if len(rows) else ""


def paper_tests(results: Results, group: Group) -> list[Test]:
    """The paper checks' tests of one group's finished runs ([] without GRPO and GSPO runs); the
    reward checks are the family's reward tests (analysis.family.reward_tests)."""
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


def tested(family: Family, group: Group, quantity: str, first: str, second: str, sign: int = 1) -> dict:
    """The Check fields of one test of the family: outcome, seeds, p, Holm p; of an exploratory test
    (outside a declared family): EXPLORATORY, seeds and its unadjusted p."""
    found = family.find(group, quantity, first, second)
    if found is None:
        explored = family.read(group, quantity, first, second)
        if explored is None:
            return {}
        return {"outcome": EXPLORATORY, "seeds": explored[0].n, "p": explored[0].p,
                "note": "outside the primary family: unadjusted p, no claim"}
    result, adjusted = found
    return {"outcome": family.outcome(result, adjusted, sign), "seeds": result.n, "p": result.p, "holm": adjusted,
            "note": f"{family.needed} paired seeds needed" if family.outcome(result, adjusted, sign) == FEW else ""}


def paper_checks(results: Results, learning: Learning, family: Family) -> list[Check] | None:
    """The rows of the table above for one group's finished runs, or None without GRPO and GSPO runs."""
    a, group = arms(results.runs), learning.group
    if a.grpo is None or a.gspo is None:
        return None
    m = results.metrics
    clip = {name: per_seed(m, name, "clip/frac") for name in (a.gspo, a.grpo)}
    clip_text = {name: mean_text(values) for name, values in clip.items()}
    return [
        Check("clipped-token fraction, GSPO (Figure 2)", "~0.15", clip_text[a.gspo]),
        Check("clipped-token fraction, GRPO (Figure 2)", "~0.0013", clip_text[a.grpo],
              claim="GSPO clips more tokens than GRPO (Figure 2)", figure="fig2_clip_fraction",
              evidence=f"GSPO {clip_text[a.gspo]} against GRPO {clip_text[a.grpo]}",
              **_noted(tested(family, group, CLIP, a.gspo, a.grpo), "GSPO clips more")),
        _drift_check(results, a.grpo, family, group),
        _depth_check(results, a.grpo, family, group),
        _reward_check("final reward, GRPO with Routing Replay minus without (Figure 3)",
                      "> 0 (without replay GRPO does not converge)", "Routing Replay raises GRPO's final reward (Figure 3)",
                      "fig3_routing_replay", (a.grpo_rr, a.grpo), learning, family),
        _reward_check("final reward at equal compute, GSPO minus GRPO (Figure 1)", "> 0",
                      "GSPO ends above GRPO at equal compute (Figure 1)", "fig1_reward_vs_compute", (a.gspo, a.grpo),
                      learning, family),
    ]


def _noted(fields: dict, note: str) -> dict:
    """`fields` with `note` said of a decided outcome (the "too few seeds" note kept)."""
    return {**fields, "note": fields.get("note") or (note if fields else "")}


def _drift_check(results: Results, grpo: str, family: Family, group: Group) -> Check:
    drift, text = drift_after_one(results, grpo)
    claim = ("At least 5% of GRPO's activated experts change after one update (paper ~10%)" if "token-layer" not in text else
             "At least 5% of GRPO's token-layer routings change after one update (the paper's ~10% counts experts)")
    if not len(drift):
        overall = per_seed(results.metrics, grpo, "moe/drift_expert")
        context = f"; over all of a step's updates (moe/drift_expert, in %): {mean_text(100 * overall)}" if len(overall) else ""
        return Check(f"{DRIFT_ONE}, GRPO, %", "~10%", text + context, claim=claim, figure="drift")
    return Check(f"{text}, GRPO, %", "~10%", mean_text(100 * drift), claim=claim, figure="drift",
                 evidence=f"in %: {mean_text(100 * drift)}",
                 **_noted(tested(family, group, DRIFT_ONE, grpo, f"{DRIFT_FLOOR:.0%}"), "at least 5%"))


def _depth_check(results: Results, grpo: str, family: Family, group: Group) -> Check:
    gap = depth_gap(results, label_of(results, grpo))
    quantity, paper = "drift of the last MoE layer minus the first, GRPO (moe/drift)", "> 0 (deeper layers drift more)"
    claim, figure = "Deeper MoE layers drift more (GRPO)", "drift_layers_" + part(label_of(results, grpo))
    if not len(gap):
        return Check(quantity, paper, "-", claim=claim, figure=figure)
    return Check(quantity, paper, mean_text(gap), claim=claim, figure=figure, **tested(family, group, DEPTH, grpo, "0"))


def _reward_check(quantity: str, paper: str, claim: str, figure: str, pair: tuple[str | None, str], learning: Learning,
                  family: Family) -> Check:
    first, second = pair
    if first is None:
        return Check(quantity, paper, "no GRPO + RR runs", claim=claim, figure=figure)
    if not learning.learned:
        return Check(quantity, paper, WITHHELD, claim=claim, figure=figure, evidence=WITHHELD)
    found = family.read(learning.group, REWARD, first, second)
    if found is None:
        raise KeyError(f"no test of {first} against {second} on {REWARD} in group {learning.group}")
    return Check(quantity, paper, difference_text(found[0]), claim=claim, figure=figure,
                 **tested(family, learning.group, REWARD, first, second))


def paper_vs_run(results: Results, learning: Learning, family: Family) -> pd.DataFrame | None:
    """The table above for one group, or None without GRPO and GSPO runs."""
    checks = paper_checks(results, learning, family)
    if checks is None:
        return None
    return pd.DataFrame([{"quantity": c.quantity, "paper": c.paper, "this run": c.this_run,
                          "p (sign-flip)": p_text(c.p, c.seeds), "Holm p": p_text(c.holm), "agrees": c.agrees} for c in checks])

