"""The report's tables, each a function of the results: a DataFrame, or a sentence saying why there is
no table. Nothing here renders or writes."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pandas as pd

from analysis.data.groups import Group
from analysis.data.load import Results, finished, is_finished, unfinished, why_unfinished
from analysis.data.matching import is_unmatched, spent
from analysis.evidence.declared import UNTESTED, WITHHELD, Judged, judged
from analysis.evidence.family import EXPLORATORY, FEW, NO, REWARD, TIE, YES
from analysis.evidence.gather import Evidence, gather
from analysis.evidence.learning import training_rise
from analysis.evidence.paper import arms
from analysis.figures import curves as F
from analysis.report.escape import escape
from analysis.report.paper_checks import paper_vs_run
from analysis.report.texts import difference_text, mean_text, p_text
from analysis.stats.library import (
    EXACT_PAIRS,
    MIN_BOOTSTRAP_SEEDS,
    MONTE_CARLO_DRAWS,
    stratified_bootstrap_ci,
)
from analysis.stats.metrics import FINAL_FRACTION, auc, final_value, iqm, mean

APART_WINDOW = 10  # steps per window when dating where one objective moves ahead of another


def final_reward_by_facet(results: Results, evidence: Evidence | None = None) -> pd.DataFrame | None:
    """The outcome of each arm (rows) at each sweep point (columns) over its finished seeds: mean,
    t-interval and every seed's value; None without a sweep. `evidence`: that of `results`, if at hand."""
    evidence = evidence or gather(finished(results))
    if not any(facet for _, facet in evidence.groups):
        return None
    cells = {}
    for (_, facet), found in evidence.learnings.items():
        for arm in dict.fromkeys(found.per_run["arm"]):
            cells[(arm, facet)] = mean_text(found.values(arm))
    table = pd.Series(cells).unstack()
    table.index.name, table.columns.name = "algorithm", None  # the header the report has always shown
    return table.reset_index()


def summary_table(results: Results, evidence: Evidence) -> pd.DataFrame:
    """One row per objective label: its finished seeds' final training reward (mean, 95% t-interval,
    per seed; IQM with a stratified bootstrap CI from MIN_BOOTSTRAP_SEEDS seeds), AUC, start, how many
    seeds learned, the distance to the task's chance baseline, measurements, and its unfinished runs."""
    rows = []
    for label in results.objectives:
        m = evidence.results.metrics[evidence.results.metrics["label"] == label]
        final = _per_seed(m, lambda f: final_value(f, "reward/mean"))
        group = next((g for g in evidence.groups if label in set(evidence.subset(g).runs["label"])), None)
        found = evidence.learnings.get(group) if group is not None else None
        per_run = found.per_run[found.per_run["label"] == label] if found else pd.DataFrame()
        iqm_low, iqm_high = stratified_bootstrap_ci([final.to_numpy()], np.random.default_rng(0))
        rows.append({
            "objective": label,
            "seeds": len(final),
            "final reward": mean_text(final),
            "IQM [95% CI]": f"{iqm(final):.3g} [{iqm_low:.3g}, {iqm_high:.3g}]" if np.isfinite(iqm_low) else "-",
            "AUC (reward x compute)": mean(_per_seed(m, lambda f: auc(f["compute/cum_flops"], f["reward/mean"]))),
            "start (first 10 steps)": mean(_per_seed(m, lambda f: training_rise(
                f["reward/mean"].to_numpy(dtype=float))[0])),
            "learned": f"{sum(v is True for v in per_run['learned'])} of {len(per_run)}" if len(per_run) else "-",
            "minus chance baseline": final.mean() - found.baseline.mean if found and found.baseline else np.nan,
            "clip/frac": m["clip/frac"].mean(),
            "moe/drift": m["moe/drift"].mean(),
            "moe/drift_expert": m["moe/drift_expert"].mean(),
            "unfinished runs": "; ".join(f"s{r.seed} {r.status} at step {r.steps}"
                                         + (f": {why}" if (why := why_unfinished(r.message, r.steps)) else "")
                                         for r in unfinished(results).query("label == @label").itertuples()) or "-",
        })
    return pd.DataFrame(rows)


def _per_seed(metrics: pd.DataFrame, fn: Callable[[pd.DataFrame], float]) -> pd.Series:
    """`fn(run's metrics)` per seed (index: seed)."""
    if metrics.empty:
        return pd.Series(dtype=float)
    per_seed = metrics.sort_values("step").groupby("seed")
    return per_seed.apply(fn, include_groups=False).astype(float)  # type: ignore[call-overload]  # pandas-stubs lack apply's include_groups=


def paired_against(evidence: Evidence) -> pd.DataFrame | str:
    """Within each group where RL learned, each objective's outcome minus GRPO's on the same seeds: the
    mean difference with its paired t-interval and per-seed differences, the exact sign-flip p and its
    Holm-adjusted p, P(objective > GRPO), and (descriptive, read off the curves, no test) the step from
    which its training reward stays ahead of or behind GRPO's on every seed."""
    rows = []
    for group, found in evidence.learnings.items():
        grpo = arms(evidence.subset(group).runs).grpo
        if grpo is None or not found.learned:
            continue
        for arm in dict.fromkeys(found.per_run["arm"]):
            if arm == grpo:
                continue
            tested = evidence.family.read(group, REWARD, arm, grpo)
            if tested is None:
                raise KeyError(f"no test of {arm} against {grpo} in group {group}")
            result, adjusted = tested
            labels = [_label(evidence, group, a) for a in (arm, grpo)]
            ahead, behind = apart_from(evidence.results.metrics, labels[0], labels[1])
            rows.append({**_where(evidence, group), "objective": arm, "GRPO": grpo, "seeds": result.n,
                         "minus GRPO (per seed)": difference_text(result, ".4f"), "p (sign-flip)": p_text(result.p, result.n),
                         "Holm p": p_text(adjusted) if np.isfinite(adjusted) else EXPLORATORY,
                         "P(objective > GRPO)": result.poi,
                         "descriptive: ahead on every seed from step": ahead,
                         "descriptive: behind on every seed from step": behind})
    if rows:
        return pd.DataFrame(rows)
    if not any(arms(evidence.subset(g).runs).grpo for g in evidence.groups):
        return "No GRPO runs to pair the others with."
    return "Not compared: no objective learned where GRPO ran (see the learnability table)."


def _label(evidence: Evidence, group: Group, arm: str) -> str:
    runs = evidence.subset(group).runs
    return str(runs.loc[runs["arm"] == arm, "label"].iloc[0])


def _where(evidence: Evidence, group: Group) -> dict:
    """The group column of a table whose rows span several groups ({} for a report of one)."""
    return {"group": evidence.title(group)} if len(evidence.groups) > 1 else {}


def comparisons_table(evidence: Evidence) -> pd.DataFrame | str:
    """Every comparison of the report (the Holm family): per-seed differences with their mean and
    paired t-interval, the exact sign-flip p, the Holm-adjusted p and P(first > second)."""
    if not evidence.family.size:
        return "This report makes no comparison."
    return pd.DataFrame([{**_where(evidence, t.group), "quantity": t.quantity, "first": t.first, "second": t.second,
                          "seeds": t.result.n, "first minus second (per seed)": difference_text(t.result),
                          "p (sign-flip)": p_text(t.result.p, t.result.n), "Holm p": p_text(adjusted),
                          "P(first > second)": t.result.poi}
                         for t, adjusted in zip(evidence.family.tests, evidence.family.adjusted)])


def primary_table(evidence: Evidence) -> pd.DataFrame:
    """The declared comparisons (analysis.primary), one row each: per-seed differences with their mean
    and paired t-interval, the exact sign-flip p, the Holm-adjusted p over the declared family, and
    the outcome (`primary_outcome`). The forest figure draws these rows (analysis.report.figure_table.forest_rows)."""
    return pd.DataFrame([{**_where(evidence, t.group), "first": t.first, "second": t.second, "seeds": t.result.n,
                          "first minus second (per seed)": difference_text(t.result), "p (sign-flip)": p_text(t.result.p, t.result.n),
                          "Holm p": p_text(adjusted), "P(first > second)": t.result.poi,
                          "outcome": primary_outcome(found, evidence.family.needed)}
                         for found, t, adjusted in ((j, j.test, j.adjusted) for j in judged(evidence))],
                        columns=[*(["group"] if len(evidence.groups) > 1 else []), "first", "second", "seeds",
                                 "first minus second (per seed)", "p (sign-flip)", "Holm p", "P(first > second)",
                                 "outcome"])


def primary_outcome(found: Judged, needed: int) -> str:
    """A declared comparison's outcome (analysis.evidence.declared) in words: "first above" / "first below"
    (by the family's outcome), "not distinguishable", "too few seeds (N needed)", "withheld: no objective
    learned", "not tested"."""
    if found.state == WITHHELD:
        return "withheld: no objective learned"
    if found.state == UNTESTED:
        return "not tested: an arm has no finished run"
    words = {YES: "first above", NO: "first below", TIE: "not distinguishable", FEW: f"too few seeds ({needed} needed)"}
    return words[str(found.outcome)]


def exploratory_table(evidence: Evidence) -> pd.DataFrame | str:
    """The tests outside a declared family: per-seed differences, the paired t-interval and the
    unadjusted sign-flip p. No Holm p, no outcome: nothing is claimed from them."""
    if not evidence.family.exploratory:
        return "Every comparison of this report is in the primary family."
    return pd.DataFrame([{**_where(evidence, t.group), "quantity": t.quantity, "first": t.first, "second": t.second,
                          "seeds": t.result.n, "first minus second (per seed)": difference_text(t.result),
                          "p (sign-flip, unadjusted)": p_text(t.result.p, t.result.n), "P(first > second)": t.result.poi,
                          "status": "exploratory: no claim"} for t in evidence.family.exploratory])


def learnability_by_arm(evidence: Evidence) -> pd.DataFrame | str:
    """`learnability_table` folded to one row per objective of each group: seeds, how many learned, the
    mean start and final outcome, the chance baseline and the final's distance to it."""
    rows = []
    for group, found in evidence.learnings.items():
        chance = found.baseline.mean if found.baseline else np.nan
        rows += [{**_where(evidence, group), "objective": name, "compared on": found.source.kind,
                  "seeds": int(arm.seeds), "learned": f"{arm.learned_seeds} of {arm.seeds}", "start (mean)": arm.start,
                  "final (mean)": arm.final, "chance baseline": chance, "final minus baseline": arm.final - chance}
                 for name, arm in found.arms.iterrows()]
    return pd.DataFrame(rows) if rows else "No run finished."


def learnability_table(evidence: Evidence) -> pd.DataFrame | str:
    """Per finished run: the outcome at its start and at its end, the one-sided p of the rise, whether
    it learned, and the task's chance baseline (analysis.evidence.learning)."""
    rows = []
    for group, found in evidence.learnings.items():
        chance = found.baseline.mean if found.baseline else np.nan
        rows += [{**_where(evidence, group), "objective": r["label"], "seed": r["seed"], "compared on": found.source.kind,
                  "start": r["start"], "final": r["final"], "rise": r["rise"], "p (one-sided)": p_text(r["p_rise"]),
                  "learned": {True: "yes", False: "no", None: "too short to tell"}[r["learned"]],
                  "chance baseline": chance, "final minus baseline": r["final"] - chance}
                 for r in found.per_run.to_dict("records")]
    return pd.DataFrame(rows) if rows else "No run finished."


def unfinished_table(results: Results) -> pd.DataFrame | str:
    """The runs that did not finish, by name: never compared with the finished ones."""
    runs = unfinished(results)
    if runs.empty:
        return "Every run finished."
    return pd.DataFrame({"objective": runs["label"], "seed": runs["seed"], "status": runs["status"],
                         "steps": runs["steps"], "spent / budget": spent(runs) / runs["budget_value"],
                         "message": [why_unfinished(m, n) for m, n in zip(runs["message"], runs["steps"], strict=True)]})


def apart_from(metrics: pd.DataFrame, label: str, baseline: str, window: int = APART_WINDOW) -> tuple:
    """(ahead, behind): the first step from which `label`'s reward, averaged over windows of `window`
    steps (1..window, window+1..2 window, ...), stays above (below) `baseline`'s in every window to the
    end, on every seed both have; "-" where it never does. Windows a seed has not reached are left out."""
    frame = metrics[metrics["label"].isin([label, baseline])].assign(window=lambda f: (f["step"] - 1) // window)
    table = frame.pivot_table(index=["seed", "window"], columns="label", values="reward/mean", aggfunc="mean")
    if label not in table or baseline not in table:
        return "-", "-"
    difference = (table[label] - table[baseline]).unstack("seed").dropna()  # [windows, seeds]
    found = []
    for sign in (1, -1):
        holds = ((difference * sign) > 0).all(axis=1).to_numpy()  # every seed, per window
        tail = len(holds) - np.argmin(holds[::-1]) if not holds.all() else 0  # first window of the last run of True
        found.append(int(difference.index[int(tail)]) * window + 1 if len(holds) and tail < len(holds) else "-")
    return tuple(found)


def eval_table(results: Results) -> pd.DataFrame | str:
    """Held-out score per objective and task: first and last evaluation, mean over seeds."""
    evals = results.evals
    if evals.empty:
        return "These runs were not evaluated (add an `eval:` section to the suite)."
    rows = []
    for (label, task), frame in evals.groupby(["label", "task"], sort=False):
        first = frame[frame["step"] == frame["step"].min()]["score"].mean()
        last_steps = frame.groupby("seed")["step"].transform("max")
        last = frame[frame["step"] == last_steps]["score"].mean()
        rows.append({"objective": label, "task": task, "evaluations": frame["step"].nunique(),
                     "score at start": first, "score at end": last, "change": last - first})
    return pd.DataFrame(rows)


def clip_by_length_table(results: Results) -> pd.DataFrame | str:
    clip_len = F.clip_by_length_table(results.metrics)
    if clip_len.empty:
        return "These results carry no length-bucket counts."
    wide = clip_len.pivot_table(index="bucket", columns="label", values="clip_frac", sort=False)
    wide.columns.name = None
    return wide.reset_index().rename(columns={"bucket": "response length (tokens)"})


MECHANISM_COLUMNS = ("moe/rerouted_token_frac", "ratio/token_var_rerouted", "ratio/token_var_stable")


def mechanism_table(results: Results) -> pd.DataFrame | str:
    """Where the token-ratio variance comes from, per objective: the fraction of tokens whose routed
    experts changed in some layer since the old policy, the ratio variance of those tokens and of the
    others, and the rerouted tokens' share of the within-group variance, f v_r / (f v_r + (1 - f) v_s):
    from means over steps and seeds, and (heavy tails: one step can hold a run's sum) as medians over
    steps, the share computed per step."""
    m = results.metrics
    if not set(MECHANISM_COLUMNS) <= set(m.columns) or m[list(MECHANISM_COLUMNS)].isna().all().all():
        return "These results carry no per-routing ratio statistics."
    steps = m[["label", *MECHANISM_COLUMNS]].dropna()
    f, v_r, v_s = (steps[c] for c in MECHANISM_COLUMNS)
    steps = steps.assign(share=f * v_r / (f * v_r + (1 - f) * v_s))
    means = steps.groupby("label", sort=False).mean()
    medians = steps.groupby("label", sort=False).median()
    f, v_r, v_s = (means[c] for c in MECHANISM_COLUMNS)
    return pd.DataFrame({
        "objective": means.index, "rerouted tokens": f.to_numpy(), "ratio var, rerouted (mean)": v_r.to_numpy(),
        "ratio var, rerouted (median)": medians[MECHANISM_COLUMNS[1]].to_numpy(),
        "ratio var, stable (mean)": v_s.to_numpy(), "ratio var, stable (median)": medians[MECHANISM_COLUMNS[2]].to_numpy(),
        "rerouted / stable (means)": (v_r / v_s).to_numpy(),
        "rerouted / stable (medians)": (medians[MECHANISM_COLUMNS[1]] / medians[MECHANISM_COLUMNS[2]]).to_numpy(),
        "rerouted share of variance (means)": (f * v_r / (f * v_r + (1 - f) * v_s)).to_numpy(),
        "rerouted share of variance (median over steps)": medians["share"].to_numpy(),
    })


def suite_summary(results: Results, spread: float, allow_unmatched: bool, evidence: Evidence) -> str:
    runs = results.runs
    unmatched = " (**unmatched, allowed by flag**)" if allow_unmatched and is_unmatched(spread) else ""
    done = int(is_finished(runs).sum())
    return (
        f"Suite(s) **{escape(', '.join(sorted(runs['suite'].unique())))}**: {runs['label'].nunique()} objectives x "
        f"{runs['seed'].nunique()} seed(s), {len(runs)} runs ({done} finished and compared, {len(runs) - done} not "
        f"finished: {', '.join(f'{n} {s}' for s, n in unfinished(results)['status'].value_counts().items()) or 'none'}). "
        f"Budget: {escape(runs['budget_kind'].iloc[0])} = {runs['budget_value'].iloc[0]:.4g}; spent compute spread "
        f"between finished runs: {'n/a' if spread != spread else f'{spread:.2%}'}{unmatched}. "
        f"{aux_loss_text(runs)}\n"
        f"Final reward: mean of the last {FINAL_FRACTION:.0%} of steps. Intervals are 95% Student-t intervals over "
        "seeds (differences: paired by seed), which assume the per-seed values (differences) roughly normal; "
        f"{_p_method_text(evidence)}, {_holm_words(evidence)}; P(X > Y) is rliable's "
        "probability of improvement. IQM "
        f"and bootstrap intervals only from {MIN_BOOTSTRAP_SEEDS} seeds on. AUC: mean reward over compute; other "
        "columns: means over all steps (heavy-tailed ones with their medians in their own table)."
    )


def aux_loss_text(runs: pd.DataFrame) -> str:
    """The MoE load-balancing loss the runs' updates added (model.router_aux_loss_coef), a setting libraries
    default differently (drift compares across runs only at the same one)."""
    coefs = sorted(runs["router_aux_loss_coef"].unique()) if "router_aux_loss_coef" in runs else [0.0]
    if coefs == [0.0]:
        return "Load-balancing loss in the update: none (model.router_aux_loss_coef = 0)."
    if len(coefs) == 1:
        return f"Load-balancing loss in the update: the family's, x {coefs[0]:g} (model.router_aux_loss_coef)."
    return ("Load-balancing loss in the update **differs between runs** (model.router_aux_loss_coef "
            f"{', '.join(f'{c:g}' for c in coefs)}): their drift and routing figures are not comparable.")


def _p_method_text(evidence: Evidence) -> str:
    """How the report's p-values were computed: all exact, or exact up to EXACT_PAIRS paired seeds and a
    Monte Carlo estimate above (those marked in the tables)."""
    if all(t.result.n <= EXACT_PAIRS for t in evidence.family.tests):
        return "every p is an exact two-sided sign-flip p (no normality assumed)"
    return (f"every p is a two-sided sign-flip p (no normality assumed): exact up to {EXACT_PAIRS} paired seeds, "
            f"above {EXACT_PAIRS} paired seeds a Monte Carlo estimate from {MONTE_CARLO_DRAWS} random sign patterns "
            "of a fixed seed, (b + 1) / (m + 1) per side, marked (Monte Carlo)")


def _holm_words(evidence: Evidence) -> str:
    if not evidence.declared:
        return f"Holm-adjusted over all {evidence.family.size} comparisons of this report"
    return (f"Holm-adjusted over the {evidence.family.size} tests of the primary family declared in the suite file; "
            f"the other {len(evidence.family.exploratory)} comparisons are exploratory (unadjusted p, no claim)")


def paper_tables(evidence: Evidence) -> list[tuple[Group, pd.DataFrame]]:
    """(group, "Paper vs this run" table), one per group whose runs include GRPO and GSPO."""
    tables = [(g, paper_vs_run(evidence.subset(g), evidence.learnings[g], evidence.family)) for g in evidence.groups]
    return [(group, table) for group, table in tables if table is not None]


def provenance_table(results: Results) -> pd.DataFrame:
    """Where each run ran, and the plugin file its objective came from (a column only where one did)."""
    plugin = ["plugin"] if "plugin" in results.runs and results.runs["plugin"].astype(bool).any() else []
    return results.runs[["label", "seed", *plugin, "commit", "dirty", "torch", "device", "start", "end"]]
