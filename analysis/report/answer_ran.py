"""The answer's first sentence: what ran. How many runs finished, which objectives on how many seeds
at how many groups (sweep points, suites), at what compute and compared on which reward; the runs that did
not finish (those the harness stopped as collapsed judged by the stability map where there is one), and the
arms with no finished run, each with how its runs ended."""

from __future__ import annotations

import pandas as pd

from analysis.data.load import why_unfinished
from analysis.evidence.gather import Evidence
from analysis.evidence.learning import HELD_OUT
from analysis.evidence.stability import COLLAPSED
from analysis.report.anchors import NUMBERS, SUITE_SUMMARY
from analysis.report.answer_words import group_count, group_in, names, number_row
from analysis.report.escape import escape
from analysis.report.page import Sentence
from analysis.report.texts import count


def seeds_per_arm(runs: pd.DataFrame) -> tuple[str, list[dict]]:
    """"2 seeds" where every arm finished on as many seeds at every sweep point (and suite), else "1 to 2
    seeds", the arms short of the most named in the table row."""
    per_arm = runs.groupby(["suite", "label"], sort=False)["seed"].nunique()
    fewest, most = int(per_arm.min()), int(per_arm.max())
    if fewest == most:
        return count(most, "seed"), []
    short = ", ".join(f"{key[1]}: {n}" for key, n in zip(per_arm.index, per_arm, strict=True) if n < most)
    return f"{fewest} to {most} seeds", [number_row(1, f"arms finished on fewer than {count(most, 'seed')}", short)]



def left_words(unfinished: pd.DataFrame, mapped: bool) -> tuple[str, int]:
    """The runs that did not finish, in words: those the harness stopped as collapsed (with a step) are
    judged by the stability map where there is one (analysis.evidence.stability.judged), the others are
    left out; and how many the map judges."""
    stopped = int(((unfinished["status"] == COLLAPSED) & (unfinished["steps"] > 0)).sum()) if mapped and len(unfinished) else 0
    rest = len(unfinished) - stopped
    parts = [f"the map also judges {count(stopped, 'run')} stopped as collapsed"] if stopped else []
    be = "is" if rest == 1 else "are"
    parts += ([f"{count(rest, 'unfinished run')} {be} left out"] if stopped else
              [f"{count(rest, 'more run')} did not finish and {be} left out"]) if rest else []
    return "".join(f"; {part}" for part in parts), stopped



def unfinished_arms(finished_arms: pd.Series, unfinished: pd.DataFrame) -> tuple[str, list[dict]]:
    """The arms with no finished run, each with how its runs ended ("; grpo_rr has no finished run (3
    failed)"), and a row each naming its runs, status and message ("s0 failed: RuntimeError: ...")."""
    runs = unfinished[~unfinished["arm"].isin(set(finished_arms))] if len(unfinished) else unfinished
    parts, rows = [], []
    for arm, own in runs.groupby("arm", sort=False):
        ended = ", ".join(f"{n} {escape(str(status))}" for status, n in own["status"].value_counts(sort=False).items())
        parts.append(f"{escape(str(arm))} ({ended})")
        rows.append(number_row(1, f"{arm}: no finished run", "; ".join(
            f"s{r.seed} {r.status}" + (f": {why}" if (why := why_unfinished(r.message, r.steps)) else "")
            for r in own.itertuples())))
    if not parts:
        return "", []
    have = "has" if len(parts) == 1 else "have"
    listed = parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " and " + parts[-1]
    return f"; {listed} {have} no finished run", rows



def ran_sentence(evidence: Evidence, unfinished: pd.DataFrame, compute: str,
                 mapped: bool = False) -> tuple[Sentence, list[dict]]:
    """What ran; `mapped`: whether a stability map judges the runs the harness stopped as collapsed."""
    runs = evidence.results.runs
    objectives, seeds = list(dict.fromkeys(runs["arm"])), sorted(set(runs["seed"]))
    listed = names(objectives) if len(objectives) <= 8 else f"{len(objectives)} objectives"
    points = (f" {group_in(evidence.groups)} each of {group_count(evidence.groups)}" if len(evidence.groups) > 1 else "")
    kinds = {found.source.kind for found in evidence.learnings.values()}
    basis = ("the **held-out reward**" if kinds == {HELD_OUT} else "the **training reward**" if len(kinds) == 1
             else "the held-out reward where evaluated, else the training reward")
    left, stopped = left_words(unfinished, mapped)
    missing, missing_rows = unfinished_arms(runs["arm"], unfinished)
    on_seeds, short = seeds_per_arm(runs)
    finite = pd.concat([found.per_run for found in evidence.learnings.values()]).groupby("arm", sort=False)[
        "finite_rewards"].sum() if evidence.learnings else pd.Series(dtype=int)
    never = [str(a) for a, n in finite.items() if not n]
    unmeasured = f" (never finite for {names(never)})" if never else ""
    text = (f"{count(len(runs), 'run')} finished: {listed} on {on_seeds}{points}, {compute}, compared on {basis}"
            f"{unmeasured}{left}{missing}.")
    rows = [number_row(1, "runs finished / not finished", f"{len(runs)} / {len(unfinished)}"),
            *([number_row(1, "runs stopped as collapsed, judged by the stability map only", str(stopped))] if stopped else []),
            number_row(1, "seeds", ", ".join(map(str, seeds))), *short, *missing_rows]
    return Sentence(text, (("summary", SUITE_SUMMARY), ("numbers", NUMBERS))), rows
