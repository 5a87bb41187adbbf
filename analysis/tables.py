"""The report's tables, each a function of the results: a DataFrame, or a sentence saying why there is
no table. Nothing here renders or writes."""

from __future__ import annotations

import numpy as np
import pandas as pd

from analysis import figures as F
from analysis.load import Results
from analysis.matching import MATCH_TOLERANCE
from analysis.paper import paper_vs_run
from analysis.stats import FINAL_FRACTION, auc, bootstrap_ci, final_value, iqm, mean, per_run

APART_WINDOW = 10  # steps per window when dating where one objective moves ahead of another


def final_reward_by_facet(results: Results, seed: int = 0) -> pd.DataFrame | None:
    """Final reward of each algorithm (rows) at each sweep point (columns), "mean [CI low, CI high]"
    over seeds; None without a sweep."""
    if not results.runs["facet"].astype(bool).any():
        return None
    rng = np.random.default_rng(seed)
    final = results.metrics.groupby(["algorithm", "facet", "seed"], sort=False).apply(
        lambda frame: final_value(frame, "reward/mean"), include_groups=False)
    cells = {}
    for (algorithm, facet), values in final.groupby(level=["algorithm", "facet"], sort=False):
        low, high = bootstrap_ci(values.to_numpy(), rng)
        cells[(algorithm, facet)] = f"{values.mean():.3f} [{low:.3f}, {high:.3f}]" if len(values) > 1 else \
            f"{values.mean():.3f}"
    table = pd.Series(cells).unstack()
    table.index.name, table.columns.name = "algorithm", None
    return table.reset_index()


def summary_table(results: Results, seed: int = 0) -> pd.DataFrame:
    """One row per objective label: final reward (mean, 95% CI over seeds, IQM), AUC, measurements."""
    rng = np.random.default_rng(seed)
    metrics = results.metrics
    final = per_run(metrics, lambda f: final_value(f, "reward/mean"))
    areas = per_run(metrics, lambda f: auc(f["compute/cum_flops"], f["reward/mean"]))
    rows = []
    for label in results.objectives:
        runs = results.runs[results.runs["label"] == label]
        m = metrics[metrics["label"] == label]
        low, high = bootstrap_ci(final[label], rng) if len(final[label]) > 1 else (np.nan, np.nan)
        collapsed = runs[runs["status"].isin(["collapsed", "failed"])]
        rows.append({
            "objective": label,
            "seeds": len(runs),
            "final reward": mean(final[label]),
            "CI low": low,
            "CI high": high,
            "IQM": iqm(final[label]),
            "AUC (reward x compute)": mean(areas[label]),
            "clip/frac": m["clip/frac"].mean(),
            "ratio/token_var": m["ratio/token_var"].mean(),
            "ratio/seq_var": m["ratio/seq_var"].mean(),
            "moe/drift": m["moe/drift"].mean(),
            "moe/drift_expert": m["moe/drift_expert"].mean(),
            "collapsed / failed": "; ".join(f"s{r.seed} {r.status} at step {r.steps}: {r.message}"
                                            for r in collapsed.itertuples()) or "-",
        })
    return pd.DataFrame(rows)


def paired_against(results: Results, baseline: str = "grpo", seed: int = 0) -> pd.DataFrame | str:
    """Each other objective's final reward minus `baseline`'s on the same seeds: the mean difference,
    its 95% bootstrap CI over seeds and the per-seed differences (> 0: ahead of the baseline)."""
    final = results.metrics.groupby(["label", "seed"], sort=False).apply(
        lambda frame: final_value(frame.sort_values("step"), "reward/mean"), include_groups=False)
    labels = list(dict.fromkeys(final.index.get_level_values("label")))
    if baseline not in labels:
        return f"No {baseline} runs to pair the others with."
    rng, base = np.random.default_rng(seed), final[baseline]
    rows = []
    for label in labels:
        if label == baseline:
            continue
        seeds = final[label].index.intersection(base.index)
        difference = (final[label][seeds] - base[seeds]).to_numpy()
        low, high = bootstrap_ci(difference, rng) if len(difference) > 1 else (np.nan, np.nan)
        ahead, behind = apart_from(results.metrics, label, baseline)
        rows.append({"objective": label, "seeds": len(seeds), f"minus {baseline}": mean(difference),
                     "CI low": low, "CI high": high,
                     "per seed": ", ".join(f"s{s}: {d:+.4f}" for s, d in zip(seeds, difference)),
                     "ahead on every seed from step": ahead, "behind on every seed from step": behind})
    return pd.DataFrame(rows)


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
        found.append(int(difference.index[tail]) * window + 1 if len(holds) and tail < len(holds) else "-")
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
    """Where the token-ratio variance comes from, per objective (means over steps and seeds): the
    fraction of tokens whose routed experts changed in some layer since the old policy, the ratio
    variance of those tokens and of the others, and the rerouted tokens' share of the within-group
    variance, f v_r / (f v_r + (1 - f) v_s)."""
    m = results.metrics
    if not set(MECHANISM_COLUMNS) <= set(m.columns) or m[list(MECHANISM_COLUMNS)].isna().all().all():
        return "These results carry no per-routing ratio statistics."
    means = m.groupby("label", sort=False)[list(MECHANISM_COLUMNS)].mean()
    f, v_r, v_s = (means[c] for c in MECHANISM_COLUMNS)
    return pd.DataFrame({
        "objective": means.index, "rerouted tokens": f.to_numpy(), "ratio var, rerouted": v_r.to_numpy(),
        "ratio var, stable": v_s.to_numpy(), "rerouted / stable": (v_r / v_s).to_numpy(),
        "rerouted share of variance": (f * v_r / (f * v_r + (1 - f) * v_s)).to_numpy(),
    })


def suite_summary(results: Results, spread: float, allow_unmatched: bool) -> str:
    runs = results.runs
    unmatched = " (**unmatched, allowed by flag**)" if allow_unmatched and spread > MATCH_TOLERANCE else ""
    return (
        f"Suite(s) **{', '.join(sorted(runs['suite'].unique()))}**: {runs['label'].nunique()} objectives x "
        f"{runs['seed'].nunique()} seed(s), {len(runs)} runs ({(runs['status'] == 'done').sum()} done, "
        f"{(runs['status'] == 'collapsed').sum()} collapsed, {(runs['status'] == 'failed').sum()} failed). "
        f"Budget: {runs['budget_kind'].iloc[0]} = {runs['budget_value'].iloc[0]:.4g}; spent compute spread between "
        f"finished runs: {'n/a' if spread != spread else f'{spread:.2%}'}{unmatched}. Final reward: mean of the "
        f"last {FINAL_FRACTION:.0%} of steps, 95% bootstrap CI over seeds (none with one seed); AUC: mean reward "
        "over compute; other columns: means over all steps."
    )


def facet_subset(results: Results, facet: str) -> Results:
    """The runs of one sweep point ("" without a sweep), evaluations included."""
    labels = set(results.runs.loc[results.runs["facet"] == facet, "label"])
    return Results(metrics=results.metrics[results.metrics["label"].isin(labels)],
                   layers=results.layers[results.layers["label"].isin(labels)],
                   runs=results.runs[results.runs["label"].isin(labels)],
                   evals=results.evals[results.evals["label"].isin(labels)] if len(results.evals) else results.evals)


def facets(results: Results) -> list[str]:
    """The sweep points in suite order ([""] without a sweep)."""
    return list(dict.fromkeys(results.runs["facet"]))


def paper_tables(results: Results) -> list[tuple[str, pd.DataFrame]]:
    """(facet, "Paper vs this run" table), one per sweep point whose runs include GRPO and GSPO."""
    tables = [(facet, paper_vs_run(facet_subset(results, facet))) for facet in facets(results)]
    return [(facet, table) for facet, table in tables if table is not None]


def provenance_table(results: Results) -> pd.DataFrame:
    return results.runs[["label", "seed", "commit", "dirty", "torch", "device", "start", "end"]]
