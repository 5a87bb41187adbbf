"""What the report shows, declared in order: its sections (each a table, a paragraph, the verdict or
the place of the figures) and its figures (each a static matplotlib figure for report.md and
interactive plotly ones for report.html). The renderers walk these lists; a section or figure exists
because it is listed here.

The first screen is the answer in plain sentences (analysis.report.plain_answer), the table of their
numbers (folded in report.html, so that the first figure is on the first screen), and then the
figures; every claim with its numbers (analysis.report.verdict) follows the figures; tables with one
row per run come folded to one row per arm near the top, their per-run rows near the end (folded in
report.html). Where the suite file declares a primary family (analysis.evidence.primary), the first
figure is the forest plot of its comparisons; without one, Figure 1."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property

import matplotlib.pyplot as plt
import pandas as pd

from analysis.data import gpu
from analysis.data import robust as R
from analysis.data.load import Results, finished, unfinished
from analysis.data.matching import compute_by_arm, compute_table
from analysis.data.tuning import tuning_records
from analysis.evidence import divergence as D
from analysis.evidence import margins as M
from analysis.evidence import stability as S
from analysis.evidence.gather import Evidence, gather
from analysis.evidence.primary import declarations
from analysis.figures import curves as F
from analysis.figures import curves_interactive as plotly_figures
from analysis.figures import margins as MF
from analysis.figures import margins_interactive as MFI
from analysis.figures import stability as SF
from analysis.figures import stability_interactive as SI
from analysis.figures import tuning as TF
from analysis.report import anchors
from analysis.report import stability_text as ST
from analysis.report import tables as T
from analysis.report import tuning as TU
from analysis.report.anchors import (
    COMPARISONS,
    DETAIL,
    EXPLORATORY_TABLE,
    FOREST,
    LEARNABILITY,
    NUMBERS,
    PRIMARY,
    SUITE_SUMMARY,
    UNFINISHED,
)
from analysis.report.escape import escape
from analysis.report.page import FiguresHere, Section
from analysis.report.plain_answer import PlainAnswer, plain_answer
from analysis.report.verdict import answer


@dataclass(frozen=True)
class Context:
    """What a section is built from: the results (every run), the compute spread found, the flag that
    allowed it, and the names of the figures the verdict may link to (None: the report's own,
    `report_figures`). `shown` holds the finished runs, the only ones compared; `evidence` everything
    tested on them, computed once, with the family the suite files declare (analysis.primary)."""

    results: Results
    spread: float
    allow_unmatched: bool
    figures: frozenset[str] | None = None

    @cached_property
    def shown(self) -> Results:
        return finished(self.results)

    @cached_property
    def evidence(self) -> Evidence:
        return gather(self.shown, declarations(self.results))

    @cached_property
    def figure_names(self) -> frozenset[str]:
        return self.figures if self.figures is not None else frozenset(spec.name for spec in report_figures(self))

    @cached_property
    def stability(self) -> S.StabilityMap | None:
        """The stability map of every run (it judges collapsed runs too), None where it does not apply."""
        return S.stability_map(self.results)

    @cached_property
    def plain(self) -> PlainAnswer:
        """The answer in at most five plain sentences and the table of their numbers (analysis.report.plain_answer)."""
        return plain_answer(self.evidence, unfinished(self.results), self.stability, self.spread, self.allow_unmatched,
                            self.figure_names)


@dataclass(frozen=True)
class SectionSpec:
    key: str
    build: Callable[[Context], list[Section]]  # none where it does not apply (`when` says where)
    when: str = "always"


def _one(anchor: str, title: str, body: Callable[[Context], pd.DataFrame | str | list | FiguresHere]) -> Callable:
    return lambda c: [Section(anchor, title, body(c))]


def _folded(anchor: str, title: str, body: Callable[[Context], pd.DataFrame | str]) -> Callable:
    return lambda c: [Section(anchor, title, body(c), folded=True)]


def _paper(c: Context) -> list[Section]:
    title = "Paper vs this run (mean [95% t-interval] (per seed); exact sign-flip p, Holm-adjusted over the report)"
    if c.evidence.declared:
        title = ("Paper vs this run (mean [95% t-interval] (per seed); exact sign-flip p, Holm-adjusted where in the "
                 "primary family, else exploratory)")
    only = len(c.evidence.groups) == 1
    return [Section(anchors.paper(group, only), title + (f": {c.evidence.title(group)}" if not only else ""), table)
            for group, table in T.paper_tables(c.evidence)]


def _by_point(c: Context) -> list[Section]:
    table = T.final_reward_by_facet(c.results, c.evidence)
    return [] if table is None else [Section(anchors.BY_POINT, "Final reward per sweep point (mean [95% t-interval] "
                                             "(per seed))", table)]


def _divergence(c: Context) -> list[Section]:
    return [Section("late-divergence", "Late-divergence signals: the first step of each spike, per run",
                    D.divergence_table(c.results.metrics)),
            Section("late-divergence-thresholds", "How a spike is defined", D.thresholds_text())]


def _left_out(c: Context) -> list[Section]:
    lines = left_out_figures(c.shown)
    return [Section("figures-left-out", "Figures left out (nothing to draw)", "\n".join(
        f"- {escape(line)}" for line in lines))] if lines else []


def _unreadable(c: Context) -> list[Section]:
    lines = "\n".join(f"unreadable: {escape(u)}" for u in c.results.unreadable)
    return [Section("unreadable", "Unreadable runs (left out)", lines)] if lines else []


def _infinite(c: Context) -> list[Section]:
    if not c.results.infinite:
        return []
    text = f"infinite values (left out of every mean and figure): {escape(', '.join(c.results.infinite))}"
    return [Section("infinite-values", "Infinite measurements (read as missing)", text)]


def _unfinished(c: Context) -> list[Section]:
    if unfinished(c.results).empty:
        return []
    return [Section(UNFINISHED, "Unfinished runs (shown apart, never compared)", T.unfinished_table(c.results))]


def _detail(c: Context) -> list:
    """Every claim of the answer with its numbers: the verdict, then the stability map's sentences where the
    map applies."""
    figures = set(c.figure_names)
    sentences = answer(c.evidence, unfinished(c.results), c.spread, c.allow_unmatched, figures)
    return sentences + (ST.stability_sentences(c.stability, figures) if c.stability is not None else [])


def _stability(c: Context) -> list[Section]:
    if c.stability is None:
        return []
    return [Section(anchors.STABILITY, "Stability map: each run's outcome class (fixed before any run) and what it is "
                    "plotted against", ST.class_table(c.stability.classes)),
            Section(anchors.STABILITY_RULES, "How the outcome classes and the boundary are defined",
                    ST.rules_text(c.stability.classes))]


def _margins(c: Context) -> list[Section]:
    return [Section("router-margins", "Router margins against drift: an independence check (means over steps and "
                    "seeds)", M.margin_table(c.shown.metrics)),
            Section("router-margins-reading", "How the margin figures are measured, and what they show", M.EXPLAINED),
            Section("drift-forecast", "Forecasting step t+1's drift from step t: router margins vs persistence "
                    "(mean absolute error, per layer)", M.forecast_table(c.shown.layers))]


def _primary(c: Context) -> list[Section]:
    if not c.evidence.declared:
        return []
    return [Section(PRIMARY, "Primary comparisons, declared in the suite file (final reward, first minus second "
                    "paired by seed; Holm over the primary family)", T.primary_table(c.evidence))]


def _comparisons(c: Context) -> list[Section]:
    if not c.evidence.declared:
        return [Section(COMPARISONS, "Every comparison of this report (Holm's family)", T.comparisons_table(c.evidence))]
    return [Section(COMPARISONS, "The primary family: every test Holm's adjustment runs over", T.comparisons_table(c.evidence)),
            Section(EXPLORATORY_TABLE, "Exploratory comparisons: outside the primary family, unadjusted p, no claim",
                    T.exploratory_table(c.evidence))]


SECTIONS: tuple[SectionSpec, ...] = (
    SectionSpec("answer", _one(anchors.ANSWER, "The answer", lambda c: c.plain.sentences)),
    SectionSpec("answer-numbers", _folded(NUMBERS, "The answer's numbers (mean [95% t-interval] (per seed), the "
                                          "test, its result)", lambda c: c.plain.numbers)),
    SectionSpec("figures", _one(anchors.FIGURES, "Figures", lambda c: FiguresHere())),
    SectionSpec("figures-left-out", _left_out, when="with declared figures no run logged the data of"),
    SectionSpec("answer-detail", _one(DETAIL, "Every claim, with its numbers", _detail)),
    SectionSpec("suite-summary", _one(SUITE_SUMMARY, "Suite summary",
                                      lambda c: T.suite_summary(c.results, c.spread, c.allow_unmatched, c.evidence))),
    SectionSpec("compute-matching", _one("compute-matching", "Compute matching per arm (every run: further down)",
                                         lambda c: compute_by_arm(c.results))),
    SectionSpec("unfinished", _unfinished, when="with runs that did not finish"),
    SectionSpec("learnability", _one(LEARNABILITY, "Did RL learn? Per objective, how many finished seeds rose from "
                                     "their start (one-sided 5% test), against the task's chance baseline (every run: "
                                     "further down)", lambda c: T.learnability_by_arm(c.evidence))),
    SectionSpec("summary", _one(anchors.SUMMARY, "Summary per objective (finished runs)",
                                lambda c: T.summary_table(c.results, c.evidence))),
    SectionSpec("primary-comparisons", _primary, when="with a primary family declared in the suite file"),
    SectionSpec("paired-vs-grpo", _one("paired-vs-grpo", "Final reward against GRPO, paired by seed within each "
                                       "suite and sweep point (paired t-interval, exact sign-flip p, Holm)",
                                       lambda c: T.paired_against(c.evidence))),
    SectionSpec("comparisons", _comparisons),
    SectionSpec("paper-vs-run", _paper, when="per group with GRPO and GSPO runs"),
    SectionSpec("by-sweep-point", _by_point, when="with a sweep"),
    SectionSpec("stability-map", _stability, when="with finished or collapsed runs in several groups, or a swept "
                "mismatch or volatility knob (analysis.evidence.stability.map_applies)"),
    SectionSpec("tuning", lambda c: [Section("tuning", "Tuning: ruleset per arm, chosen settings, tuning and comparison "
                                             "FLOPs", "\n".join(filter(None, [TU.tuning_text(c.results),
                                                                             TU.untuned_text(c.results)]))), Section(
        "tuning-arms", "Tuning per arm", TU.tuning_table(c.results))] if tuning_records(c.results) else [
        Section("tuning", "Tuning", TU.untuned_text(c.results))]),
    SectionSpec("held-out-evaluation", _one("held-out-evaluation", "Held-out evaluation",
                                            lambda c: T.eval_table(c.shown))),
    SectionSpec("clip-by-length", _one("clip-by-length", "Clip fraction by response length",
                                       lambda c: T.clip_by_length_table(c.shown))),
    SectionSpec("heavy-tailed", _one("heavy-tailed", "Heavy-tailed measurements: mean, median and trimmed mean over "
                                     "steps, and the largest step's share", lambda c: R.heavy_table(c.shown.metrics))),
    SectionSpec("extreme-ratios", _one("extreme-ratios", "Extreme token ratios and one-token losses",
                                       lambda c: R.extremes_table(c.shown.metrics))),
    SectionSpec("ratio-variance-by-routing", _one(
        "ratio-variance-by-routing", "Token-ratio variance by routing: rerouted vs stable tokens (means and medians "
        "over steps)", lambda c: T.mechanism_table(c.shown))),
    SectionSpec("router-margins", _margins),
    SectionSpec("gpu-figures", _one("gpu-figures", gpu.TITLE, lambda c: gpu.gpu_table(c.shown))),
    SectionSpec("late-divergence", _divergence),
    SectionSpec("compute-matching-runs", _folded("compute-matching-runs", "Compute matching, every run",
                                                 lambda c: compute_table(c.results))),
    SectionSpec("learnability-runs", _folded("learnability-runs", "Did RL learn? Each finished run's outcome at its "
                                             "start and end (one-sided 5% test), against the task's chance baseline",
                                             lambda c: T.learnability_table(c.evidence))),
    SectionSpec("provenance", _folded("provenance", "Provenance", lambda c: T.provenance_table(c.results))),
    SectionSpec("unreadable", _unreadable, when="with runs that could not be read"),
    SectionSpec("infinite-values", _infinite, when="with metrics that held infinite values"),
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
    needs: tuple[str, ...] = ()  # columns it draws: left out (`left_out_figures` says why) where no run logged any


def _figure_of(ax: plt.Axes) -> plt.Figure:
    """The figure `ax` draws on: the report's figures are whole figures, never subfigures."""
    figure = ax.figure
    if not isinstance(figure, plt.Figure):
        raise TypeError(f"a report figure drew on a {type(figure).__name__}, not a whole figure")
    return figure


def _has_sweep(results: Results) -> bool:
    return bool(results.metrics["facet"].astype(bool).any())


FIGURES: tuple[FigureSpec, ...] = (
    FigureSpec("fig1_reward_vs_compute", "Figure 1: training reward (and held-out scores) vs compute",
               lambda r: _figure_of(F.reward_vs_compute(r.metrics, evals=r.evals)), plotly_figures.reward_vs_compute,
               needs=("reward/mean",)),
    FigureSpec("reward_by_sweep_point", "Training reward vs compute at each sweep point",
               lambda r: _figure_of(F.reward_by_point(r.metrics)[0]), plotly_figures.reward_by_point, shown=_has_sweep,
               needs=("reward/mean",)),
    FigureSpec("fig2_clip_fraction", "Figure 2: clipped token fraction", lambda r: _figure_of(F.clip_fraction(r.metrics)),
               plotly_figures.clip_fraction, needs=("clip/frac",)),
    FigureSpec("fig3_routing_replay", "Figure 3: GRPO with / without Routing Replay",
               lambda r: _figure_of(F.replay(r.metrics)), plotly_figures.replay, needs=("reward/mean",)),
    FigureSpec("ratio_variance", "Importance-ratio variance (medians over seeds of rolling medians, log scale)",
               lambda r: _figure_of(F.ratio_variance(r.metrics)),
               plotly_figures.ratio_variance, needs=("ratio/token_var", "ratio/seq_var")),
    FigureSpec("drift", "Expert-activation drift", lambda r: _figure_of(F.drift(r.metrics)), plotly_figures.drift,
               needs=("moe/drift",)),
    FigureSpec("clip_by_length", "Clipping by response length", lambda r: _figure_of(F.clip_by_length(r.metrics)),
               plotly_figures.clip_by_length),
    FigureSpec("kl_entropy", "KL and entropy", lambda r: _figure_of(F.kl_entropy(r.metrics)[0]), plotly_figures.kl_entropy,
               needs=("kl/old_new", "entropy/mean")),
    FigureSpec("margins_by_layer", "Drift per layer and by updates: measured vs the independence flip rate",
               lambda r: MF.predicted_vs_measured(r.layers), lambda r: MFI.predicted_vs_measured(r.layers),
               shown=lambda r: M.has_margins(r.layers)),
)


def _drift_layers(label: str) -> FigureSpec:
    return FigureSpec(f"drift_layers_{anchors.part(label)}", f"Drift by layer: {label}",
                      lambda r: _figure_of(F.drift_heatmap(r.layers, label)), lambda r: plotly_figures.drift_heatmap(r, label))


def forest_spec(context: Context) -> FigureSpec:
    """The forest plot of the declared comparisons (analysis.report.tables.forest_rows)."""
    return FigureSpec(FOREST, "Primary comparisons: final reward, first minus second, paired by seed (mean, 95% "
                      "t-interval, per-seed differences, Holm p over the primary family)",
                      lambda r: _figure_of(F.forest(T.forest_rows(context.evidence))),
                      lambda r: plotly_figures.forest(T.forest_rows(context.evidence)))


def report_figures(context: Context) -> list[FigureSpec]:
    """The report's figures in order: the forest plot of the declared comparisons first where the suite
    file declares a family, then the stability map's where it applies (`map_figures` of the context's map: of
    every run, it judges the collapsed ones too), then `figure_specs` of the finished runs."""
    declared = [forest_spec(context)] if context.evidence.declared else []
    tuned = [FigureSpec(TF.TUNING_FIGURE, "Tuning sensitivity: validation score against each tuned setting (trials as "
                        "points, the chosen one a star)", TF.sensitivity_figure, TF.sensitivity_interactive)]
    return declared + map_figures(context.stability) + figure_specs(context.shown) + (
        tuned if tuning_records(context.results) else [])


STABILITY_FIGURES: tuple[tuple[str, str, Callable[[pd.DataFrame], plt.Axes], Callable[[pd.DataFrame], list]], ...] = (
    (anchors.CHANGE_VS_KL, "Stability map (a): reward change against the level dose", SF.change_vs_kl,
     SI.change_vs_kl),
    (anchors.CELLS, "Stability map (b): share of seeds degraded or collapsed per sweep cell", lambda o: SF.cells(o)[0],
     SI.cells),
    (anchors.COLLAPSE_PROBABILITY, "Stability map (c): P(degraded or collapsed) against the level dose, logistic fit",
     SF.collapse_probability, SI.collapse_probability),
    (anchors.DRIFT_VS_ROUTER_LR, "Stability map (d): drift after one update against train.router_lr_scale",
     SF.drift_vs_router_lr, SI.drift_vs_router_lr),
    (anchors.SURVIVAL, "Stability map (e): collapse over steps (Kaplan-Meier)", SF.survival_curves, SI.survival_curves),
)


def _stability_shown(name: str, classes: pd.DataFrame) -> bool:
    """(d) needs two router learning-rate scales or more, (e) a collapsed run; the others always apply."""
    if name == anchors.DRIFT_VS_ROUTER_LR:
        return classes["router_lr_scale"].nunique() > 1
    if name == anchors.SURVIVAL:
        return bool((classes["outcome"] == S.COLLAPSED).any())
    return True


def map_figures(found: S.StabilityMap | None) -> list[FigureSpec]:
    """The stability map's figures that apply to `found` (analysis.evidence.stability.stability_map: none where the
    map does not apply). They are bound to its run classes: their functions ignore the results they are
    called with."""
    if found is None:
        return []
    classes = found.classes

    def spec(name: str, title: str, static: Callable[[pd.DataFrame], plt.Axes],
             interactive: Callable[[pd.DataFrame], list]) -> FigureSpec:
        return FigureSpec(name, title, lambda _: _figure_of(static(classes)), lambda _: interactive(classes))

    return [spec(*entry) for entry in STABILITY_FIGURES if _stability_shown(entry[0], classes)]


def stability_specs(results: Results) -> list[FigureSpec]:
    """`map_figures` of `results`, which should hold every run (the map judges collapsed runs too)."""
    return map_figures(S.stability_map(results))


def figure_specs(results: Results) -> list[FigureSpec]:
    """The declared figures that apply to `results` (the finished runs) and have data to draw (a column of
    `needs` that some run logged: `left_out_figures` names the others), then a per-layer drift heatmap per
    objective; none without a metric row."""
    if results.metrics.empty:
        return []
    layered = set(results.layers["label"]) if not results.layers.empty else set()
    return [spec for spec in FIGURES if spec.shown(results) and _drawable(spec, results)] + [
        _drift_layers(label) for label in results.objectives if label in layered]


def _drawable(spec: FigureSpec, results: Results) -> bool:
    return not spec.needs or F.logged(results.metrics, spec.needs)


def left_out_figures(results: Results) -> list[str]:
    """The declared figures that apply to `results` but are left out because no run logged what they draw,
    each as "TITLE: no run logged COLUMN (or COLUMN)" (an imported run measures what its library logged)."""
    if results.metrics.empty:
        return []
    return [f"{spec.title}: no run logged {' or '.join(spec.needs)}" for spec in FIGURES
            if spec.shown(results) and not _drawable(spec, results)]
