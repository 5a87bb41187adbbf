"""Comparison report: `report.md` and a self-contained `report.html` (figures embedded), plus the
figures as PNG and PDF. Refuses runs whose spent compute differs by more than 2% unless allowed."""

from __future__ import annotations

import base64
import html
import io
from dataclasses import dataclass
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from analysis import figures as F
from analysis import gpu
from analysis.load import Results
from analysis.stats import FINAL_FRACTION, auc, bootstrap_ci, final_value, iqm, mean, per_run

MATCH_TOLERANCE = 0.02  # relative spread of spent compute allowed between runs


class UnmatchedComputeError(ValueError):
    """Runs spent different compute: comparing them would not be a matched-compute comparison."""


def spent(runs: pd.DataFrame) -> pd.Series:
    """Spent compute per run in the unit of its budget (FLOPs, tokens or steps)."""
    kind = runs["budget_kind"].fillna("flops")
    return np.where(kind == "steps", runs["steps"], np.where(kind == "tokens", runs["cum_tokens"], runs["cum_flops"]))


def compute_table(results: Results) -> pd.DataFrame:
    runs = results.runs.copy()
    runs["spent"] = spent(runs)
    runs["spent / budget"] = runs["spent"] / runs["budget_value"]
    return runs[["suite", "label", "seed", "status", "steps", "budget_kind", "budget_value", "spent",
                 "spent / budget", "cum_flops", "cum_tokens"]]


def check_matched(results: Results, allow_unmatched: bool = False) -> float:
    """The largest relative spread (max - min) / min of spent compute between the finished runs of one
    sweep point (facet; the whole suite without a sweep); raises above 2% unless allowed."""
    finished = results.runs[results.runs["status"] == "done"]
    worst = 0.0
    for facet, runs in finished.groupby("facet", sort=False):
        where = f" (sweep point {facet})" if facet else ""
        if runs["budget_kind"].nunique() > 1:
            if not allow_unmatched:
                raise UnmatchedComputeError(f"runs{where} have different budget kinds")
            return float("nan")
        values = spent(runs)
        spread = float((values.max() - values.min()) / max(values.min(), 1e-12))
        if spread > MATCH_TOLERANCE and not allow_unmatched:
            ordered = runs.assign(spent=values).sort_values("spent")
            low, high = ordered.iloc[0], ordered.iloc[-1]
            raise UnmatchedComputeError(
                f"spent compute differs by {spread:.1%} between runs{where} (> {MATCH_TOLERANCE:.0%}): "
                f"{low['label']}-s{low['seed']} spent {low['spent']:.4g}, {high['label']}-s{high['seed']} "
                f"{high['spent']:.4g}")
        worst = max(worst, spread)
    return worst


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


@dataclass(frozen=True)
class Figure:
    name: str
    title: str
    fig: plt.Figure


def make_figures(results: Results) -> list[Figure]:
    m = results.metrics
    figures = [
        Figure("fig1_reward_vs_compute", "Figure 1: training reward (and held-out scores) vs compute",
               F.fig1_reward_vs_compute(m, evals=results.evals).figure),
        *([Figure("reward_by_sweep_point", "Training reward vs compute at each sweep point",
                  F.reward_by_facet(m)[0].figure)] if m["facet"].astype(bool).any() else []),
        Figure("fig2_clip_fraction", "Figure 2: clipped token fraction", F.fig2_clip_fraction(m).figure),
        Figure("fig3_routing_replay", "Figure 3: GRPO with / without Routing Replay", F.fig3_replay(m).figure),
        Figure("ratio_variance", "Importance-ratio variance", F.ratio_variance(m).figure),
        Figure("drift", "Expert-activation drift", F.drift_over_steps(m).figure),
        Figure("clip_by_length", "Clipping by response length", F.clip_by_length(m).figure),
        Figure("kl_entropy", "KL and entropy", F.kl_entropy(m)[0].figure),
    ]
    for label in results.objectives:
        if not results.layers.empty and (results.layers["label"] == label).any():
            safe = "".join(c if c.isalnum() or c in "-_" else "_" for c in label)
            figures.append(Figure(f"drift_layers_{safe}", f"Drift by layer: {label}",
                                  F.drift_heatmap(results.layers, label).figure))
    return figures


def save_figures(figures: list[Figure], out: Path, dpi: int = 110) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for f in figures:
        for ext in ("png", "pdf"):
            path = out / f"{f.name}.{ext}"
            f.fig.savefig(path, dpi=dpi)
            paths.append(path)
    return paths


def _fmt(frame: pd.DataFrame) -> pd.DataFrame:
    def cell(v):
        if isinstance(v, float | np.floating):
            return "-" if np.isnan(v) else f"{v:.4g}"
        return str(v)

    return frame.map(cell)


def _png_base64(fig: plt.Figure, dpi: int = 90) -> str:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=dpi)
    return base64.b64encode(buffer.getvalue()).decode()


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


def clip_by_length_section(results: Results) -> pd.DataFrame | str:
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


def paper_tables(results: Results) -> list[tuple[str, pd.DataFrame]]:
    """The "Paper vs this run" table, one per sweep point, where the results have GRPO and GSPO runs."""
    from analysis.paper import paper_vs_run

    sections = []
    for facet in dict.fromkeys(results.runs["facet"]):
        labels = set(results.runs.loc[results.runs["facet"] == facet, "label"])
        subset = Results(metrics=results.metrics[results.metrics["label"].isin(labels)],
                         layers=results.layers[results.layers["label"].isin(labels)],
                         runs=results.runs[results.runs["label"].isin(labels)], evals=results.evals)
        table = paper_vs_run(subset)
        if table is not None:
            title = "Paper vs this run (mean [95% bootstrap CI] over seeds)" + (f": {facet}" if facet else "")
            sections.append((title, table))
    return sections


def report_sections(results: Results, spread: float, allow_unmatched: bool) -> list[tuple[str, pd.DataFrame | str]]:
    """(title, table or paragraph) of every report section, in order."""
    provenance = results.runs[["label", "seed", "commit", "dirty", "torch", "device", "start", "end"]]
    by_facet = final_reward_by_facet(results)
    paper = paper_tables(results)
    return [
        ("Suite summary", suite_summary(results, spread, allow_unmatched)),
        ("Compute matching", compute_table(results)),
        ("Summary per objective", summary_table(results)),
        *paper,
        *([("Final reward per sweep point (mean [95% CI] over seeds)", by_facet)] if by_facet is not None else []),
        ("Held-out evaluation (lm-eval)", eval_table(results)),
        ("Clip fraction by response length", clip_by_length_section(results)),
        ("Token-ratio variance by routing: rerouted vs stable tokens (means over steps and seeds)",
         mechanism_table(results)),
        (gpu.TITLE, gpu.gpu_table(results)),
        ("Provenance", provenance),
        *([("Unreadable runs (left out)", "\n".join(f"unreadable: {u}" for u in results.unreadable))]
          if results.unreadable else []),
    ]


def render_markdown(sections: list, figures: list[Figure]) -> str:
    md = ["# gspo-bench report", ""]
    for title, body in sections:
        md += [f"## {title}", "", body if isinstance(body, str) else _fmt(body).to_markdown(index=False), ""]
    md += ["## Figures", ""]
    for f in figures:
        md += [f"### {f.title}", "", f"![{f.title}](figures/{f.name}.png)", ""]
    return "\n".join(md)


_CSS = ("body{font-family:system-ui,sans-serif;max-width:1100px;margin:2em auto;padding:0 1em;color:#222}"
        "table{border-collapse:collapse;font-size:13px;margin:1em 0}td,th{border:1px solid #ccc;padding:3px 8px;"
        "text-align:right}th{background:#f3f3f3}td:first-child,th:first-child{text-align:left}"
        "img{max-width:100%;border:1px solid #eee}figure{margin:1.5em 0}figcaption{font-weight:600}")


def render_html(sections: list, figures: list[Figure], title: str) -> str:
    """A self-contained page: tables and the figures embedded as PNG data."""
    parts = [f"<!doctype html><html><head><meta charset='utf-8'><title>gspo-bench report: {html.escape(title)}"
             f"</title><style>{_CSS}</style></head><body><h1>gspo-bench report</h1>"]
    for heading, body in sections:
        parts.append(f"<h2>{html.escape(heading)}</h2>")
        if isinstance(body, str):
            parts.append(f"<p>{html.escape(body).replace('**', '')}</p>")
        else:
            parts.append(_fmt(body).to_html(index=False, border=0, escape=True))
    parts.append("<h2>Figures</h2>")
    for f in figures:
        parts.append(f"<figure><figcaption>{html.escape(f.title)}</figcaption>"
                     f"<img alt='{html.escape(f.title)}' src='data:image/png;base64,{_png_base64(f.fig)}'></figure>")
    parts.append("</body></html>")
    return "\n".join(parts)


def write_report(results: Results, out: Path, allow_unmatched: bool = False) -> dict[str, Path]:
    """Write report.md, report.html and figures/ under `out`; returns the paths written."""
    spread = check_matched(results, allow_unmatched)
    out = Path(out)
    figures = make_figures(results)
    try:
        save_figures(figures, out / "figures")
        sections = report_sections(results, spread, allow_unmatched)
        (out / "report.md").write_text(render_markdown(sections, figures))
        (out / "report.html").write_text(render_html(sections, figures, ", ".join(sorted(results.runs["suite"].unique()))))
    finally:
        for f in figures:
            plt.close(f.fig)
    return {"md": out / "report.md", "html": out / "report.html", "figures": out / "figures"}


def write_figures(results: Results, out: Path) -> list[Path]:
    figures = make_figures(results)
    paths = save_figures(figures, Path(out))
    for f in figures:
        plt.close(f.fig)
    return paths
