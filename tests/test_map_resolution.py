"""The stability map's text states per suite what its evaluations resolve (analysis.evidence.resolution):
the smallest drop its degraded and collapsed classes can see, from the median of its runs' first held-out
scores at its eval.limit x eval.samples draws, and the draws a halving needs. Numbers worked by hand."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from analysis.data.load import load_results
from analysis.evidence.outcome_rules import evaluation_draws
from analysis.evidence.resolution import suite_resolutions
from analysis.evidence.stability import stability_map
from analysis.report.stability_text import stability_sentences
from tests.helpers.evaluated import evaluated_run
from tests.helpers.results import make_run

STEPS = [0.0, 10.0, 20.0]


@pytest.fixture(scope="module")
def sentences(tmp_path_factory) -> list[str]:
    """Suite `coarse`: three runs starting at 0.30, 0.34 and 0.50 (median 0.34), 100 problems x 1 sample;
    suite `fine`: the same starts at 70 problems x 2 samples (140 draws); suite `low`: starts 0.06, 0.08,
    0.10 (median 0.08) at 100 x 1; suite `trained`: judged on the training reward (no evaluations)."""
    root = tmp_path_factory.mktemp("resolution")
    for suite, starts, limit, samples in (("coarse", (0.30, 0.34, 0.50), 100, 1), ("fine", (0.30, 0.34, 0.50), 70, 2),
                                          ("low", (0.06, 0.08, 0.10), 100, 1)):
        for seed, start in enumerate(starts):
            evaluated_run(root, suite, seed, [start, start, start], STEPS,
                          {"eval": {"limit": limit, "samples": samples}})
    make_run(root, "grpo", 0, suite="trained")
    found = stability_map(load_results(root))
    assert found is not None
    return [s.text for s in stability_sentences(found, set())]


def said_of(sentences: list[str], suite: str) -> list[str]:
    return [s for s in sentences if s.startswith(f"Resolution of {suite} ")]


def test_a_halving_reads_as_flat_at_100_draws_from_0_34(sentences):
    """3 sqrt(2 x 0.34 x 0.66 / 100) = 0.201; a halving needs draws > 72 x 0.66 / 0.34 = 139.8: 140."""
    assert said_of(sentences, "coarse") == [
        "Resolution of coarse (its runs' median first held-out score, 0.34): at 100 problems x 1 sample an evaluation, "
        "a drop from 0.34 is seen only beyond 0.20; a halving needs 140 draws (not met: a halving reads as flat)."]


def test_the_draws_are_problems_times_samples(sentences):
    """70 x 2 = 140 draws: 3 sqrt(2 x 0.34 x 0.66 / 140) = 0.1699 < 0.17, a halving is seen."""
    assert said_of(sentences, "fine") == [
        "Resolution of fine (its runs' median first held-out score, 0.34): at 70 problems x 2 samples an evaluation, "
        "a drop from 0.34 is seen only beyond 0.17; a halving needs 140 draws (met)."]


def test_a_start_whose_halving_is_within_the_floor_says_so(sentences):
    """From 0.08 a halving is 0.04, under the 0.05 floor: no number of draws shows it (3 sqrt(2 x 0.08 x
    0.92 / 100) = 0.115)."""
    assert said_of(sentences, "low") == [
        "Resolution of low (its runs' median first held-out score, 0.08): at 100 problems x 1 sample an evaluation, "
        "a drop from 0.08 is seen only beyond 0.12; a halving from 0.08 is within the drop floor 0.05: no number of "
        "draws shows it."]


def test_a_suite_judged_on_the_training_reward_states_no_draws(sentences):
    assert said_of(sentences, "trained") == []


def test_a_record_without_eval_settings_reads_the_fields_defaults():
    """A suite written before its eval fields: eval.limit's default 64, eval.samples' 1."""
    assert evaluation_draws({}) == {"eval_problems": 64, "eval_samples": 1}
    assert evaluation_draws({"eval.limit": 100, "eval.samples": 4}) == {"eval_problems": 100, "eval_samples": 4}
    assert suite_resolutions(pd.DataFrame(columns=["suite", "source", "start", "eval_problems", "eval_samples"])).empty


def test_the_committed_stage1_folder_reads_its_settings():
    """results/stability_cpu/stage1: eval.limit 100 x eval.samples 1, its 30 runs' first held-out scores
    0.28 (10 runs) and 0.34 (20): median 0.34."""
    root = Path(__file__).resolve().parent.parent / "results" / "stability_cpu" / "stage1"
    found = stability_map(load_results(root))
    assert found is not None
    (row,) = suite_resolutions(found.classes).itertuples()
    assert (row.suite, row.eval_problems, row.eval_samples) == ("stability_stage1_grpo", 100, 1)
    assert row.start == pytest.approx(0.34)
