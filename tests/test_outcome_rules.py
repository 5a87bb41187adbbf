"""The stability map's versioned outcome rules (analysis.evidence.outcome_rules) and what a suite's
evaluations resolve (analysis.evidence.resolution), on hand curves: a halving is flat at 100 draws and
degraded at the 140 a halving from 0.34 needs; two evaluations one step apart are a collapse under v1
and not under v2; a suite declares its rules and the report says which it used. Numbers worked by hand."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
import pytest
import yaml

from analysis.data.load import load_results
from analysis.evidence.outcome_rules import COLLAPSE_SHARE, collapse_share, rules_sentence, suite_rules
from analysis.evidence.resolution import draws_for_halving, resolution_sentence, smallest_drop
from analysis.evidence.stability import COLLAPSED, DEGRADED, FLAT, classify, run_classes
from gspo_bench.config.schema import AnalysisConfig
from tests.helpers.results import make_run

NAN = float("nan")


def binomial_points(scores: list[float], draws: int, steps: list[float]) -> pd.DataFrame:
    """Held-out points whose standard errors are those of `draws` 0/1 answers: sqrt(p (1 - p) / draws)."""
    return pd.DataFrame({"step": steps, "score": scores,
                         "stderr": [math.sqrt(p * (1 - p) / draws) for p in scores]})


def test_the_smallest_drop_and_the_draws_a_halving_needs():
    """From 0.34: 3 sqrt(2 x 0.34 x 0.66 / 100) = 0.201 at 100 draws; a halving (0.17) needs
    draws > 72 x 0.66 / 0.34 = 139.8, so 140 (0.1699 < 0.17; at 139, 0.1705 is not)."""
    assert smallest_drop(0.34, 100) == pytest.approx(0.20098, abs=1e-5)
    assert draws_for_halving(0.34) == 140
    assert smallest_drop(0.34, 140) < 0.17 < smallest_drop(0.34, 139)
    assert smallest_drop(0.5, 10**6) == 0.05  # the floor
    with pytest.raises(ValueError, match="within the drop floor"):
        draws_for_halving(0.08)
    assert "(not met" in resolution_sentence(0.34, 100, 1) and "(met)" in resolution_sentence(0.34, 70, 2)


def test_a_halving_is_not_flat_at_the_stated_draws():
    """0.34 -> 0.17: at 100 draws 3 hypot(0.0474, 0.0376) = 0.181 > 0.17, flat; at 140,
    3 hypot(0.0400, 0.0317) = 0.153 < 0.17, below: degraded (one point below, not a sustained drop)."""
    at_100 = classify(binomial_points([0.34, 0.17], 100, [0, 100]), NAN, "", NAN, NAN)
    at_140 = classify(binomial_points([0.34, 0.17], draws_for_halving(0.34), [0, 100]), NAN, "", NAN, NAN)
    assert at_100.outcome == FLAT
    assert (at_140.outcome, at_140.step) == (DEGRADED, 100.0)


STEPS = [0.0, 10, 20, 30, 40, 50, 60, 70, 80, 81]
ONE_STEP_APART = [0.5] * 8 + [0.1, 0.1]  # the last two evaluations, at steps 80 and 81, far below


def test_two_evaluations_one_step_apart_are_a_collapse_under_v1_only():
    """The drop spans 81 - 80 = 1 of 81 evaluated steps (1.2%): v1 calls it a collapse at step 80, v2
    (at least 25%) a degraded run."""
    points = pd.DataFrame({"step": STEPS, "score": ONE_STEP_APART, "stderr": 0.02})
    v1 = classify(points, NAN, "", NAN, NAN, collapse_share("v1"))
    v2 = classify(points, NAN, "", NAN, NAN, collapse_share("v2"))
    assert (v1.outcome, v1.step) == (COLLAPSED, 80.0)
    assert (v2.outcome, v2.step) == (DEGRADED, 80.0)


def test_a_drop_over_a_quarter_of_the_run_is_still_a_collapse_under_v2():
    """Below from step 60 to 100: 40 of 100 evaluated steps (40% >= 25%)."""
    assert COLLAPSE_SHARE == 0.25
    points = pd.DataFrame({"step": [0.0, 20, 40, 60, 80, 100], "score": [0.5, 0.5, 0.5, 0.1, 0.1, 0.1],
                           "stderr": 0.02})
    found = classify(points, NAN, "", NAN, NAN, collapse_share("v2"))
    assert (found.outcome, found.step) == (COLLAPSED, 60.0)


def test_a_suite_declares_its_rules_and_old_folders_keep_v1():
    assert suite_rules({}) == "v1"
    assert suite_rules({"analysis.rules": "v2"}) == "v2"
    with pytest.raises(ValueError, match="'v3' is not a rule set"):
        suite_rules({"analysis.rules": "v3"})
    assert AnalysisConfig.model_validate({"rules": "v2"}).primary is None  # rules without a primary family
    with pytest.raises(ValueError):
        AnalysisConfig.model_validate({"rules": "v9"})


def evaluated_run(root: Path, suite: str, analysis: dict | None):
    """A run evaluated at STEPS with ONE_STEP_APART (se 0.02), its suite recording `analysis`."""
    run = make_run(root, "grpo", 0, suite=suite, steps=81)
    run.write_rows("eval.parquet", [{"step": step, "label": "grpo", "seed": 0, "task": "gspo_sort", "score": score,
                                     "stderr": 0.02, "compute/cum_flops": 1e9 * step}
                                    for step, score in zip(STEPS, ONE_STEP_APART)])
    config = yaml.safe_load((run.path / "config.yaml").read_text())
    config["suite"]["task"] = {"name": "sort", "params": {}}
    if analysis is not None:
        config["suite"]["analysis"] = analysis
    (run.path / "config.yaml").write_text(yaml.safe_dump(config))


def test_each_suite_is_judged_and_reported_by_the_rules_it_declared(tmp_path):
    """The same evaluations in a suite that declared `analysis: {rules: v2}` (degraded) and in one that
    declared nothing (v1: collapsed); the report's sentence names both."""
    evaluated_run(tmp_path, "new", {"primary": None, "rules": "v2"})
    evaluated_run(tmp_path, "old", None)
    rows = pd.concat([run_classes(load_results(tmp_path / suite)) for suite in ("new", "old")])
    assert rows["source"].tolist() == ["held-out reward"] * 2
    assert rows["rules"].tolist() == ["v2", "v1"]
    assert rows["outcome"].tolist() == [DEGRADED, COLLAPSED]
    said = rules_sentence(dict(zip(rows["suite"], rows["rules"])))
    assert said.startswith("Outcome rules: new v2 (a sustained drop is a collapse only over at least 25%")
    assert "; old v1 (" in said


def test_a_suite_file_declaring_rules_only_declares_no_primary_family(tmp_path):
    """`analysis: {rules: v2}` beside runs that recorded it: the report finds no primary family (every
    comparison exploratory) and does not refuse the folder as declaring one it did not record."""
    from analysis.evidence.primary import declarations

    evaluated_run(tmp_path, "new", {"primary": None, "rules": "v2"})
    (tmp_path / "new" / "suite.yaml").write_text(yaml.safe_dump(
        {"name": "new", "objectives": [{"name": "grpo"}], "analysis": {"rules": "v2"}}))
    assert declarations(load_results(tmp_path / "new")) == {}
