"""The answer a reader wants first, as sentences generated from the numbers: which objective is ahead
at equal compute (with the CI of its lead over the next best, or "no difference within the CI"), and
which of the paper's phenomena these runs show. Every sentence links to the table or figure it reads.

The lead is the paired difference of final rewards (the same seeds) between the objective with the
highest mean and the next one, with a 95% bootstrap CI; below MIN_CI_SEEDS common seeds there is no
CI and no leader."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from analysis import anchors
from analysis.load import Results
from analysis.matching import MATCH_TOLERANCE
from analysis.paper import FEW, MIN_CI_SEEDS, NO, TIE, YES, Check, paper_checks
from analysis.stats import bootstrap_ci, final_value
from analysis.tables import facet_subset, facets


@dataclass(frozen=True)
class Sentence:
    """Markdown text (bold allowed) and the (link text, anchor) pairs it points to."""

    text: str
    links: tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class Lead:
    """The comparison behind the leader sentence: `first` has the higher mean final reward."""

    first: str
    second: str
    means: tuple[float, float]
    difference: float
    ci: tuple[float, float]
    seeds: int

    @property
    def outcome(self) -> str:
        if self.seeds < MIN_CI_SEEDS:
            return FEW
        return YES if self.ci[0] > 0 else TIE


def final_rewards(results: Results) -> dict[str, pd.Series]:
    """algorithm -> final reward per seed (index: seed), in suite order."""
    finals = results.metrics.groupby(["algorithm", "seed"], sort=False).apply(
        lambda frame: final_value(frame, "reward/mean"), include_groups=False)
    return {algorithm: values.droplevel("algorithm") for algorithm, values in finals.groupby(level="algorithm", sort=False)}


def lead(results: Results, seed: int = 0) -> Lead | None:
    """The best objective against the next one (None with fewer than two objectives)."""
    finals = final_rewards(results)
    if len(finals) < 2:
        return None
    first, second = sorted(finals, key=lambda a: -finals[a].mean())[:2]
    seeds = finals[first].index.intersection(finals[second].index)
    difference = (finals[first][seeds] - finals[second][seeds]).to_numpy()
    low, high = bootstrap_ci(difference, np.random.default_rng(seed)) if len(difference) else (np.nan, np.nan)
    if high < 0:  # the other one is ahead on the seeds both have
        first, second, difference, (low, high) = second, first, -difference, (-high, -low)
    return Lead(first, second, (finals[first].mean(), finals[second].mean()), float(np.mean(difference)),
                (float(low), float(high)), len(difference))


def _compute_words(spread: float, allow_unmatched: bool) -> str:
    if allow_unmatched and spread > MATCH_TOLERANCE:
        return f"at unmatched compute (spread {spread:.1%}, allowed by flag)"
    return "at equal compute"


def leader_sentence(found: Lead | None, compute: str, where: str, links: tuple) -> Sentence:
    if found is None:
        return Sentence(f"{where}One objective only: nothing to compare.", links)
    a, b = found.first, found.second
    if found.outcome == FEW:
        return Sentence(f"{where}**Too few seeds to name a leader** {compute}: {a} {found.means[0]:.3g} and {b} "
                        f"{found.means[1]:.3g} over {found.seeds} common seed(s) ({MIN_CI_SEEDS} needed for a CI).",
                        links)
    ci = f"{found.difference:+.3g} [{found.ci[0]:+.3g}, {found.ci[1]:+.3g}]"
    if found.outcome == YES:
        return Sentence(f"{where}**{a} leads {compute}**: final reward {found.means[0]:.3g} against {b}'s "
                        f"{found.means[1]:.3g} (the next best), ahead by {ci} over {found.seeds} seeds.", links)
    return Sentence(f"{where}**No difference within the CI {compute}**: {a} {found.means[0]:.3g} and {b} "
                    f"{found.means[1]:.3g} (the best two) differ by {ci} over {found.seeds} seeds.", links)


_SHOWN = {YES: "**shown**", NO: "**not shown**: these runs show the opposite",
          TIE: "**not shown**: no difference within the CI"}


def phenomenon_sentence(check: Check, where: str, links: tuple) -> Sentence:
    if check.outcome is None:
        state = f"**not measured** in these runs ({check.this_run})"
    elif check.outcome == FEW:
        state = f"**too few seeds** ({check.seeds}; {MIN_CI_SEEDS} needed for a CI)"
    else:
        state = f"{_SHOWN[check.outcome]} ({check.evidence or check.this_run} over {check.seeds} seeds)"
    return Sentence(f"{where}{check.claim}: {state}.", links)


def answer(results: Results, spread: float, allow_unmatched: bool, figures: set[str]) -> list[Sentence]:
    """The leader, then each of the paper's phenomena, for every sweep point."""
    sentences = []
    compute = _compute_words(spread, allow_unmatched)
    for facet in facets(results):
        subset = facet_subset(results, facet)
        where = f"At {facet}: " if facet else ""
        table = ("final rewards", anchors.BY_POINT) if facet else ("final rewards", anchors.SUMMARY)
        figure = "reward_by_sweep_point" if facet else "fig1_reward_vs_compute"
        links = (table, *([("figure", anchors.figure(figure))] if figure in figures else []))
        sentences.append(leader_sentence(lead(subset), compute, where, links))
        checks = paper_checks(subset)
        if checks is None:
            sentences.append(Sentence(f"{where}The paper's phenomena are not checked: that needs GRPO and GSPO runs.",
                                      ()))
        for check in checks or []:
            if check.claim:
                shown = [("figure", anchors.figure(check.figure))] if check.figure in figures else []
                sentences.append(phenomenon_sentence(check, where, (("table", anchors.paper(facet)), *shown)))
    return sentences
