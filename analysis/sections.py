"""What the report shows, declared in order: its sections (each a table, a paragraph or the verdict)
and its figures (each a static matplotlib figure for report.md and interactive plotly ones for
report.html). The renderers walk these lists; a section or figure exists because it is listed here."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import matplotlib.pyplot as plt
import pandas as pd

from analysis import anchors, gpu
from analysis import divergence as D
from analysis import figures as F
from analysis import interactive as plotly_figures
from analysis import margins as M
from analysis import tables as T
from analysis.load import Results
from analysis.matching import compute_table
from analysis.paper import safe_name
from analysis.verdict import Sentence, answer


@dataclass(frozen=True)
class Section:
    anchor: str
    title: str
    body: pd.DataFrame | str | list[Sentence]


@dataclass(frozen=True)
class Context:
    """What a section is built from: the results, the compute spread found, the flag that allowed it,
    and the names of the report's figures (for the verdict's links)."""

    results: Results
    spread: float
    allow_unmatched: bool
    figures: frozenset[str]


@dataclass(frozen=True)
class SectionSpec:
    key: str
    build: Callable[[Context], list[Section]]  # none where it does not apply (`when` says where)
    when: str = "always"


def _one(anchor: str, title: str, body: Callable[[Context], pd.DataFrame | str | list]) -> Callable:
    return lambda c: [Section(anchor, title, body(c))]


def _paper(c: Context) -> list[Section]:
    title = "Paper vs this run (mean [95% bootstrap CI] over seeds)"
    return [Section(anchors.paper(facet), title + (f": {facet}" if facet else ""), table)
            for facet, table in T.paper_tables(c.results)]


def _by_point(c: Context) -> list[Section]:
    table = T.final_reward_by_facet(c.results)
    return [] if table is None else [Section(anchors.BY_POINT, "Final reward per sweep point (mean [95% CI] over seeds)",
                                             table)]


def _divergence(c: Context) -> list[Section]:
    return [Section("late-divergence", "Late-divergence signals: the first step of each spike, per run",
                    D.divergence_table(c.results.metrics)),
            Section("late-divergence-thresholds", "How a spike is defined", D.thresholds_text())]


def _unreadable(c: Context) -> list[Section]:
    lines = "\n".join(f"unreadable: {u}" for u in c.results.unreadable)
    return [Section("unreadable", "Unreadable runs (left out)", lines)] if lines else []


SECTIONS: tuple[SectionSpec, ...] = (
    SectionSpec("answer", _one(anchors.ANSWER, "The answer",
                               lambda c: answer(c.results, c.spread, c.allow_unmatched, set(c.figures)))),
    SectionSpec("suite-summary", _one("suite-summary", "Suite summary",
                                      lambda c: T.suite_summary(c.results, c.spread, c.allow_unmatched))),
    SectionSpec("compute-matching", _one("compute-matching", "Compute matching", lambda c: compute_table(c.results))),
    SectionSpec("summary", _one(anchors.SUMMARY, "Summary per objective", lambda c: T.summary_table(c.results))),
    SectionSpec("paired-vs-grpo", _one("paired-vs-grpo", "Final reward against GRPO, paired by seed "
                                       "(mean difference, 95% bootstrap CI over seeds)",
                                       lambda c: T.paired_against(c.results, "grpo"))),
    SectionSpec("paper-vs-run", _paper, when="per sweep point with GRPO and GSPO runs"),
    SectionSpec("by-sweep-point", _by_point, when="with a sweep"),
    SectionSpec("held-out-evaluation", _one("held-out-evaluation", "Held-out evaluation (lm-eval)",
                                            lambda c: T.eval_table(c.results))),
    SectionSpec("clip-by-length", _one("clip-by-length", "Clip fraction by response length",
                                       lambda c: T.clip_by_length_table(c.results))),
    SectionSpec("ratio-variance-by-routing", _one(
        "ratio-variance-by-routing",
        "Token-ratio variance by routing: rerouted vs stable tokens (means over steps and seeds)",
        lambda c: T.mechanism_table(c.results))),
    SectionSpec("router-margins", lambda c: [
        Section("router-margins", "Drift explained by router margins (means over steps and seeds)",
                M.margin_table(c.results.metrics)),
        Section("router-margins-reading", "How the margin figures are measured", M.EXPLAINED)]),
    SectionSpec("gpu-figures", _one("gpu-figures", gpu.TITLE, lambda c: gpu.gpu_table(c.results))),
    SectionSpec("late-divergence", _divergence),
    SectionSpec("provenance", _one("provenance", "Provenance", lambda c: T.provenance_table(c.results))),
    SectionSpec("unreadable", _unreadable, when="with runs that could not be read"),
)


def build_sections(context: Context) -> list[Section]:
    return [section for spec in SECTIONS for section in spec.build(context)]


@dataclass(frozen=True)
class FigureSpec:
    name: str
    title: str
    static: Callable[[Results], plt.Figure]
    interactive: Callable[[Results], list]  # plotly figures
    shown: Callable[[Results], bool] = lambda results: True


def _has_sweep(results: Results) -> bool:
    return bool(results.metrics["facet"].astype(bool).any())


FIGURES: tuple[FigureSpec, ...] = (
    FigureSpec("fig1_reward_vs_compute", "Figure 1: training reward (and held-out scores) vs compute",
               lambda r: F.fig1_reward_vs_compute(r.metrics, evals=r.evals).figure, plotly_figures.reward_vs_compute),
    FigureSpec("reward_by_sweep_point", "Training reward vs compute at each sweep point",
               lambda r: F.reward_by_facet(r.metrics)[0].figure, plotly_figures.reward_by_point, shown=_has_sweep),
    FigureSpec("fig2_clip_fraction", "Figure 2: clipped token fraction", lambda r: F.fig2_clip_fraction(r.metrics).figure,
               plotly_figures.clip_fraction),
    FigureSpec("fig3_routing_replay", "Figure 3: GRPO with / without Routing Replay",
               lambda r: F.fig3_replay(r.metrics).figure, plotly_figures.replay),
    FigureSpec("ratio_variance", "Importance-ratio variance", lambda r: F.ratio_variance(r.metrics).figure,
               plotly_figures.ratio_variance),
    FigureSpec("drift", "Expert-activation drift", lambda r: F.drift_over_steps(r.metrics).figure, plotly_figures.drift),
    FigureSpec("clip_by_length", "Clipping by response length", lambda r: F.clip_by_length(r.metrics).figure,
               plotly_figures.clip_by_length),
    FigureSpec("kl_entropy", "KL and entropy", lambda r: F.kl_entropy(r.metrics)[0].figure, plotly_figures.kl_entropy),
    FigureSpec("margins_by_layer", "Drift per layer and by updates: measured vs predicted from router margins",
               lambda r: M.predicted_vs_measured_figure(r.layers), lambda r: M.predicted_vs_measured_interactive(r.layers),
               shown=lambda r: M.has_margins(r.layers)),
)


def _drift_layers(label: str) -> FigureSpec:
    return FigureSpec(f"drift_layers_{safe_name(label)}", f"Drift by layer: {label}",
                      lambda r: F.drift_heatmap(r.layers, label).figure, lambda r: plotly_figures.drift_heatmap(r, label))


def figure_specs(results: Results) -> list[FigureSpec]:
    """The declared figures that apply to `results`, then a per-layer drift heatmap per objective."""
    layered = set(results.layers["label"]) if not results.layers.empty else set()
    return [spec for spec in FIGURES if spec.shown(results)] + [
        _drift_layers(label) for label in results.objectives if label in layered]
