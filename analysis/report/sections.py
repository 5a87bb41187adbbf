"""What the report shows, declared in order: its sections (each a table, a paragraph, the verdict or
the place of the figures, analysis.report.page), and where its figures go (their one table of
declarations is analysis.report.figure_table). The renderers walk these lists; a section exists because
it is listed here.

The first screen is the answer in at most five plain sentences, one per question, each worded by its
module (analysis.report.answer_ran, answer_learned, answer_differs, answer_paper, answer_decision;
analysis.report.answer_words holds what they share) and put in order here (`plain_answer`; `gspo-bench
run` prints them, `console_answer`), the table of their numbers (folded in report.html, so that the first
figure is on the first screen), and then the figures; every claim with its numbers (analysis.report.verdict) follows the figures; tables with one
row per run come folded to one row per arm near the top, their per-run rows near the end (folded in
report.html). Where the suite file declares a primary family (analysis.evidence.primary), the first
figure is the forest plot of its comparisons; without one, Figure 1."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property

import pandas as pd

from analysis.data import gpu
from analysis.data import robust as R
from analysis.data.adaptive import adaptive_records
from analysis.data.load import Results, finished, unfinished
from analysis.data.matching import check_matched, compute_by_arm, compute_table, is_unmatched
from analysis.data.tuning import tuning_records
from analysis.evidence import divergence as D
from analysis.evidence import lag as L
from analysis.evidence import margins as M
from analysis.evidence import stability as S
from analysis.evidence.early_warnings import load_rules, runs_alarms, with_derived
from analysis.evidence.gather import Evidence, gather
from analysis.evidence.primary import declarations
from analysis.report import anchors
from analysis.report import lag_text as LT
from analysis.report import stability_text as ST
from analysis.report import tables as T
from analysis.report import tuning as TU
from analysis.report import warnings_text as WT
from analysis.report.adaptive_text import adaptive_text
from analysis.report.anchors import (
    COMPARISONS,
    DETAIL,
    EXPLORATORY_TABLE,
    LEARNABILITY,
    NUMBERS,
    PRIMARY,
    SUITE_SUMMARY,
    UNFINISHED,
)
from analysis.report.answer_decision import decision_sentence
from analysis.report.answer_differs import differs_sentence
from analysis.report.answer_learned import learned_sentence
from analysis.report.answer_paper import paper_sentence
from analysis.report.answer_ran import left_words, ran_sentence, unfinished_arms
from analysis.report.answer_words import PlainAnswer, number_row, plain_text
from analysis.report.escape import escape
from analysis.report.figure_table import ReportFigure, Sources, left_out_figures, report_figures
from analysis.report.page import FiguresHere, Section, Sentence
from analysis.report.texts import count
from analysis.report.verdict import answer


@dataclass(frozen=True)
class Context:
    """What a section is built from: the results (every run), the compute spread found, the flag that
    allowed it, and the names of the figures the verdict may link to (None: the report's own,
    `figures_shown`). `shown` holds the finished runs, the only ones compared; `evidence` everything
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
    def sources(self) -> Sources:
        """What the report's figures are drawn from (analysis.report.figure_table)."""
        return Sources(self.shown, self.evidence, self.stability, bool(tuning_records(self.results)))

    @cached_property
    def figures_shown(self) -> list[ReportFigure]:
        """The report's figures, in order: those of the one table of declarations that apply here
        (analysis.report.figure_table.report_figures)."""
        return report_figures(self.sources)

    @cached_property
    def figure_names(self) -> frozenset[str]:
        return self.figures if self.figures is not None else frozenset(figure.name for figure in self.figures_shown)

    @cached_property
    def stability(self) -> S.StabilityMap | None:
        """The stability map of every run (it judges collapsed runs too), None where it does not apply."""
        return S.stability_map(self.results)

    @cached_property
    def plain(self) -> PlainAnswer:
        """The answer in at most five plain sentences and the table of their numbers (`plain_answer`)."""
        return plain_answer(self.evidence, unfinished(self.results), self.stability, self.spread, self.allow_unmatched,
                            self.figure_names)


def compute_words(spread: float, allow_unmatched: bool) -> str:
    return "at unmatched compute (allowed by flag)" if allow_unmatched and is_unmatched(spread) else "at equal compute"


def mapped_only_answer(evidence: Evidence, unfinished: pd.DataFrame, stability: S.StabilityMap,
                       figures: set[str]) -> PlainAnswer:
    """Where no run finished but the harness stopped runs as collapsed that the stability map judges: what
    ran, the map's answer per arm and where more runs would place a boundary (nothing else is compared)."""
    _, stopped = left_words(unfinished, True)
    rest = len(unfinished) - stopped
    left = f"; {count(rest, 'other unfinished run')} {'is' if rest == 1 else 'are'} left out" if rest else ""
    ran = Sentence(f"No run finished: the stability map judges the {count(stopped, 'run')} the harness stopped as "
                   f"collapsed, and nothing is compared on a reward{left}.", (("summary", SUITE_SUMMARY), ("numbers", NUMBERS)))
    rows = [number_row(1, "runs finished / not finished", f"0 / {len(unfinished)}"),
            number_row(1, "runs stopped as collapsed, judged by the stability map only", str(stopped))]
    (differs, map_rows), (decision, _) = differs_sentence(evidence, stability, figures), decision_sentence(evidence, stability)
    return PlainAnswer([ran, differs, decision], pd.DataFrame(rows + map_rows))


def plain_answer(evidence: Evidence, unfinished: pd.DataFrame, stability: S.StabilityMap | None, spread: float = 0.0,
                 allow_unmatched: bool = False, figures: frozenset[str] | set[str] = frozenset()) -> PlainAnswer:
    """At most five sentences, one per question in order (see the module), and the table of their numbers;
    `figures`: the names of the report's figures the sentences may link to."""
    if not evidence.groups and stability is not None:  # every judged run stopped as collapsed: the map answers
        return mapped_only_answer(evidence, unfinished, stability, set(figures))
    if not evidence.groups:
        why = f"{count(len(unfinished), 'run')} did not finish" if len(unfinished) else "no run was found"
        _, missing_rows = unfinished_arms(pd.Series([], dtype=object), unfinished)
        return PlainAnswer([Sentence(f"No run finished ({why}): nothing is compared.", ())],
                           pd.DataFrame([number_row(1, "runs finished / not finished", f"0 / {len(unfinished)}"), *missing_rows]))
    shown = set(figures)
    built = [ran_sentence(evidence, unfinished, compute_words(spread, allow_unmatched), stability is not None),
             learned_sentence(evidence, shown), differs_sentence(evidence, stability, shown),
             paper_sentence(evidence, shown), decision_sentence(evidence, stability)]
    return PlainAnswer([sentence for sentence, _ in built], pd.DataFrame([r for _, rows in built for r in rows]))


def console_answer(results: Results) -> list[str]:
    """The sentences as `gspo-bench run` prints them at its end, from every run of a suite (the report's
    rules: compute must match, UnmatchedComputeError otherwise; a declared family must read,
    DeclarationError otherwise)."""
    found = Context(results, check_matched(results), False, frozenset()).plain
    return [plain_text(sentence.text) + "".join(f"\n    - {plain_text(item.text)}" for item in sentence.items)
            for sentence in found.sentences]


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
    lines = left_out_figures(c.sources)
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
                    "plotted against", ST.class_table(c.stability.every_run)),
            Section(anchors.STABILITY_RULES, "How the outcome classes and the boundary are defined",
                    ST.rules_text(c.stability.every_run))]


def _lag(c: Context) -> list[Section]:
    if not L.lagged(c.shown.metrics):
        return []
    runs = L.lag_runs(c.shown.metrics)
    return [Section("sampler-vs-learner", LT.TITLE, LT.lag_table(runs)),
            Section("sampler-vs-learner-reading", "Where the lag reaches the paper's routing change", LT.crossing_text(runs))]


def _adaptive(c: Context) -> list[Section]:
    records = adaptive_records(c.results)
    return [Section("adaptive", "Adaptive placement: the rule's rounds and where each arm stands",
                    adaptive_text(records))] if records else []


def _warnings(c: Context) -> list[Section]:
    runs = WT.warning_runs(c.results, c.stability)
    if not WT.applies(runs):
        return []
    tasks = sorted({str(task) for task in c.results.runs["task"].dropna()})  # a run of unknown task: every rule
    every = load_rules()
    rules = [r for r in every if all(r.applies_to(task) for task in tasks)]  # a task-scaled rule on its tasks only
    metrics = with_derived(c.results.metrics)  # clip/frac_burst
    alarms = runs_alarms(metrics, runs, rules)
    return [Section("early-warnings", "Early warnings: the package's alarm rules on these runs (exploratory)",
                    "\n\n".join(filter(None, [WT.provenance_text(rules, set(runs["suite"].astype(str))),
                                              WT.left_out_text([r for r in every if r not in rules], tasks),
                                              WT.first_alarms_text(alarms)]))),
            Section("early-warning-rules", "The alarm rules ranked by held-out AUC: held out, and on these runs",
                    WT.rules_table(rules, metrics, runs)),
            Section("early-warning-runs", "Each failed (or imported) run: its first alarm ahead of the onset, and "
                    "every alarm", WT.run_table(alarms), folded=True)]


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
    SectionSpec("sampler-vs-learner", _lag, when="with runs that trained on lagged batches (rollout.lag)"),
    SectionSpec("early-warnings", _warnings, when="with judged runs that failed, or imported runs "
                "(analysis.report.warnings_text.applies)"),
    SectionSpec("adaptive", _adaptive, when="with an adaptive suite's log (OUT/<suite>/adaptive.json)"),
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
