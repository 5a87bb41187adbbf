"""The report's figures: one table of declarations, FIGURES, in the order the report shows them. report.md,
report.html and `gspo-bench figures` all read it, through `report_figures`; a figure exists because it is
declared here.

Each declaration names a figure (its files and anchor), titles it, draws it as a static matplotlib figure
(report.md's PNG, and its PDF) and as interactive plotly figures (report.html), and says where it applies.
What it draws from (`Sources`): the finished runs, the evidence gathered on them (the forest plot draws the
declared comparisons), the stability map of every run (it judges the collapsed runs too: its figures
draw that map, never the finished runs alone) and whether a suite was tuned. A declaration `each` of some
objectives is drawn once per objective, its name and title filled with it. A figure that `needs` columns
no run logged is left out, and the report says so (`left_out_figures`).

Where the suite file declares a primary family (analysis.evidence.primary) the first figure is the forest
plot of its comparisons; then the stability map's, where the map applies; then Figure 1 and the others."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

import matplotlib.pyplot as plt
import pandas as pd

from analysis.data.load import Results
from analysis.evidence import lag as L
from analysis.evidence import margins as M
from analysis.evidence import stability as S
from analysis.evidence.gather import Evidence
from analysis.figures import curves as F
from analysis.figures import curves_interactive as plotly_figures
from analysis.figures import lag as LF
from analysis.figures import margins as MF
from analysis.figures import margins_interactive as MFI
from analysis.figures import stability as SF
from analysis.figures import stability_interactive as SI
from analysis.figures import tuning as TF
from analysis.report import anchors
from analysis.report.texts import p_text


@dataclass(frozen=True)
class Sources:
    """What the figures are drawn from: `shown`, the finished runs; `evidence`, judgements on them;
    `stability`, the map of every run (None where it does not apply); `tuned`, whether a suite was tuned;
    `label`, the objective a figure declared `each` objective is drawn for ("" for any other)."""

    shown: Results
    evidence: Evidence
    stability: S.StabilityMap | None
    tuned: bool
    label: str = ""


def always(sources: Sources) -> bool:
    return True


@dataclass(frozen=True)
class FigureSpec:
    """One declared figure: `name` (its files and anchor, at most ~140 characters) and `title`, with "{}"
    filled by the objective where it is drawn `each` objective; `static` and `interactive` draw it; it
    applies where `applies` holds, and is left out where no run logged any of the columns it `needs`."""

    name: str
    title: str
    static: Callable[[Sources], plt.Figure]
    interactive: Callable[[Sources], list]  # plotly figures
    applies: Callable[[Sources], bool] = always
    needs: tuple[str, ...] = ()
    each: Callable[[Sources], list[str]] | None = None  # the objectives it is drawn for, one figure each


@dataclass(frozen=True)
class ReportFigure:
    """A declared figure as the report shows it: its name and title, drawn from its sources on demand."""

    name: str
    title: str
    spec: FigureSpec
    sources: Sources

    def static(self) -> plt.Figure:
        return self.spec.static(self.sources)

    def interactive(self) -> list:
        return self.spec.interactive(self.sources)


def whole(ax: plt.Axes) -> plt.Figure:
    """The figure `ax` draws on: the report's figures are whole figures, never subfigures."""
    figure = ax.figure
    if not isinstance(figure, plt.Figure):
        raise TypeError(f"a report figure drew on a {type(figure).__name__}, not a whole figure")
    return figure


def forest_rows(evidence: Evidence) -> pd.DataFrame:
    """The declared comparisons as the forest figure draws them (analysis.figures.curves.FOREST_COLUMNS): the
    comparison named (with its group in a report of several), the paired mean difference and t-interval,
    the seeds and their differences, and the Holm-adjusted p as text ("not tested" without one)."""
    rows = []
    for test in evidence.primary:
        result, adjusted = evidence.family.tested(test.group, test.quantity, test.first, test.second)
        title = evidence.title(test.group)
        rows.append({"comparison": (f"{title}: " if title else "") + f"{test.first} - {test.second}",
                     "mean": result.mean, "low": result.low, "high": result.high, "seeds": result.seeds,
                     "differences": tuple(result.differences), "holm": p_text(adjusted) if result.n else "not tested"})
    return pd.DataFrame(rows, columns=list(F.FOREST_COLUMNS))


def classes(sources: Sources) -> pd.DataFrame:
    """The stability map's run classes (a map figure applies only where there is a map: `mapped`)."""
    assert sources.stability is not None
    return sources.stability.classes


def declared(sources: Sources) -> bool:
    return bool(sources.evidence.declared)


def mapped(sources: Sources) -> bool:
    return sources.stability is not None


def router_lrs(sources: Sources) -> bool:
    """The map's (d) needs two router learning-rate scales or more."""
    return mapped(sources) and classes(sources)["router_lr_scale"].nunique() > 1


def collapsed(sources: Sources) -> bool:
    """The map's (e) needs a collapsed run."""
    return mapped(sources) and bool((classes(sources)["outcome"] == S.COLLAPSED).any())


def measured(sources: Sources) -> bool:
    """The finished runs' figures need a metric row."""
    return not sources.shown.metrics.empty


def swept(sources: Sources) -> bool:
    return measured(sources) and bool(sources.shown.metrics["facet"].astype(bool).any())


def with_margins(sources: Sources) -> bool:
    return measured(sources) and M.has_margins(sources.shown.layers)


def layered(sources: Sources) -> list[str]:
    """The objectives with per-layer rows, in the order of the results."""
    layers = sources.shown.layers
    found = set(layers["label"]) if not layers.empty else set()
    return [label for label in sources.shown.objectives if label in found]


def lagged(sources: Sources) -> bool:
    """The lag figure needs a run that trained on lagged batches (`rollout.lag`)."""
    return measured(sources) and L.lagged(sources.shown.metrics)


def tuned(sources: Sources) -> bool:
    return sources.tuned


FIGURES: tuple[FigureSpec, ...] = (
    FigureSpec(anchors.FOREST, "Primary comparisons: final reward, first minus second, paired by seed (mean, 95% "
               "t-interval, per-seed differences, Holm p over the primary family)",
               lambda s: whole(F.forest(forest_rows(s.evidence))), lambda s: plotly_figures.forest(forest_rows(s.evidence)),
               applies=declared),
    FigureSpec(anchors.CHANGE_VS_KL, "Stability map (a): reward change against the level dose",
               lambda s: whole(SF.change_vs_kl(classes(s))), lambda s: SI.change_vs_kl(classes(s)), applies=mapped),
    FigureSpec(anchors.CELLS, "Stability map (b): share of seeds degraded or collapsed per sweep cell",
               lambda s: whole(SF.cells(classes(s))[0]), lambda s: SI.cells(classes(s)), applies=mapped),
    FigureSpec(anchors.COLLAPSE_PROBABILITY, "Stability map (c): P(degraded or collapsed) against the level dose, "
               "logistic fit", lambda s: whole(SF.collapse_probability(classes(s))),
               lambda s: SI.collapse_probability(classes(s)), applies=mapped),
    FigureSpec(anchors.DRIFT_VS_ROUTER_LR, "Stability map (d): drift after one update against train.router_lr_scale",
               lambda s: whole(SF.drift_vs_router_lr(classes(s))), lambda s: SI.drift_vs_router_lr(classes(s)),
               applies=router_lrs),
    FigureSpec(anchors.SURVIVAL, "Stability map (e): collapse over steps (Kaplan-Meier)",
               lambda s: whole(SF.survival_curves(classes(s))), lambda s: SI.survival_curves(classes(s)),
               applies=collapsed),
    FigureSpec("fig1_reward_vs_compute", "Figure 1: training reward (and held-out scores) vs compute",
               lambda s: whole(F.reward_vs_compute(s.shown.metrics, evals=s.shown.evals)),
               lambda s: plotly_figures.reward_vs_compute(s.shown), applies=measured, needs=("reward/mean",)),
    FigureSpec("reward_by_sweep_point", "Training reward vs compute at each sweep point",
               lambda s: whole(F.reward_by_point(s.shown.metrics)[0]), lambda s: plotly_figures.reward_by_point(s.shown),
               applies=swept, needs=("reward/mean",)),
    FigureSpec("fig2_clip_fraction", "Figure 2: clipped token fraction", lambda s: whole(F.clip_fraction(s.shown.metrics)),
               lambda s: plotly_figures.clip_fraction(s.shown), applies=measured, needs=("clip/frac",)),
    FigureSpec("fig3_routing_replay", "Figure 3: GRPO with / without Routing Replay",
               lambda s: whole(F.replay(s.shown.metrics)), lambda s: plotly_figures.replay(s.shown), applies=measured,
               needs=("reward/mean",)),
    FigureSpec("lag_routes", "Sampler against learner under rollout lag: experts apart and k3 per response by lag "
               "(finished runs, steps at each run's full lag; the GSPO paper's ~10% per update dashed)",
               lambda s: LF.lag_routes(L.lag_runs(s.shown.metrics)),
               lambda s: LF.lag_routes_interactive(L.lag_runs(s.shown.metrics)), applies=lagged,
               needs=("lag/route_diff",)),
    FigureSpec("ratio_variance", "Importance-ratio variance (medians over seeds of rolling medians, log scale)",
               lambda s: whole(F.ratio_variance(s.shown.metrics)), lambda s: plotly_figures.ratio_variance(s.shown),
               applies=measured, needs=("ratio/token_var", "ratio/seq_var")),
    FigureSpec("drift", "Expert-activation drift", lambda s: whole(F.drift(s.shown.metrics)),
               lambda s: plotly_figures.drift(s.shown), applies=measured, needs=("moe/drift",)),
    FigureSpec("clip_by_length", "Clipping by response length", lambda s: whole(F.clip_by_length(s.shown.metrics)),
               lambda s: plotly_figures.clip_by_length(s.shown), applies=measured),
    FigureSpec("kl_entropy", "KL and entropy", lambda s: whole(F.kl_entropy(s.shown.metrics)[0]),
               lambda s: plotly_figures.kl_entropy(s.shown), applies=measured, needs=("kl/old_new", "entropy/mean")),
    FigureSpec("margins_by_layer", "Drift per layer and by updates: measured vs the independence flip rate",
               lambda s: MF.predicted_vs_measured(s.shown.layers), lambda s: MFI.predicted_vs_measured(s.shown.layers),
               applies=with_margins),
    FigureSpec("drift_layers_{}", "Drift by layer: {}", lambda s: whole(F.drift_heatmap(s.shown.layers, s.label)),
               lambda s: plotly_figures.drift_heatmap(s.shown, s.label), applies=measured, each=layered),
    FigureSpec(TF.TUNING_FIGURE, "Tuning sensitivity: validation score against each tuned setting (trials as points, "
               "the chosen one a star)", lambda s: TF.sensitivity_figure(s.shown),
               lambda s: TF.sensitivity_interactive(s.shown), applies=tuned),
)


def drawable(spec: FigureSpec, sources: Sources) -> bool:
    """Whether some run logged a column the figure `needs` (or it needs none)."""
    return not spec.needs or F.logged(sources.shown.metrics, spec.needs)


def bound(spec: FigureSpec, sources: Sources) -> list[ReportFigure]:
    """The figures one declaration gives: one, or one per objective it is drawn `each` of."""
    if spec.each is None:
        return [ReportFigure(spec.name, spec.title, spec, sources)]
    return [ReportFigure(spec.name.format(anchors.part(label)), spec.title.format(label), spec,
                         replace(sources, label=label)) for label in spec.each(sources)]


def report_figures(sources: Sources) -> list[ReportFigure]:
    """The report's figures in order: every declaration of FIGURES that applies to `sources` and has data
    to draw."""
    return [figure for spec in FIGURES if spec.applies(sources) and drawable(spec, sources)
            for figure in bound(spec, sources)]


def left_out_figures(sources: Sources) -> list[str]:
    """The declared figures that apply but are left out because no run logged what they draw, each as
    "TITLE: no run logged COLUMN (or COLUMN)" (an imported run measures what its library logged)."""
    return [f"{spec.title}: no run logged {' or '.join(spec.needs)}" for spec in FIGURES
            if spec.applies(sources) and not drawable(spec, sources)]
