"""The paper checks as the report's rows: each of the paper's MoE observations (analysis.evidence.paper)
beside this run's value, the test of it in the report's family and whether it agrees.
"agrees" is "yes" when the adjusted p is below 5% on the paper's side, "no" on the other side, "too
few seeds" when the seeds could not get there whatever the data, else "not distinguishable". The
reward rows are withheld where no objective learned (analysis.evidence.learning)."""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from analysis.data.groups import Group
from analysis.data.load import Results
from analysis.evidence.family import EXPLORATORY, FEW, REWARD, Family
from analysis.evidence.learning import Learning
from analysis.evidence.paper import (
    CLIP,
    DEPTH,
    DRIFT_FLOOR,
    DRIFT_ONE,
    arms,
    depth_gap,
    drift_after_one,
    label_of,
    per_seed,
)
from analysis.report.anchors import part
from analysis.report.texts import difference_text, mean_text, p_text

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
