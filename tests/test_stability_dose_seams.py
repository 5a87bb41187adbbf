"""Where the stability map's dose (analysis.evidence.dose) meets the map's classes
(analysis.evidence.stability) and its report: a level's dose pools the first steps of the runs the map judges
only, and an arm's failure rate is bounded per level (cell), never over runs pooled across levels."""

from __future__ import annotations

import pandas as pd
import pytest

from analysis.data.load import load_results
from analysis.evidence.stability import LEARNED, TOO_SHORT, StabilityMap, boundaries, class_rows
from analysis.report.answer_differs import stability_rows
from analysis.report.stability_text import boundary_sentence
from tests.helpers.stability import swept_run


def test_a_run_too_short_to_judge_does_not_move_its_levels_dose(tmp_path):
    """Two 20-step runs at noise=1 whose first five k3 are 0.1 and 0.3 (dose 0.2, the median of the ten),
    and a 3-step run there at k3 10, too short for the gate and so not on the map: the level's dose stays
    0.2 (pooling its three steps too would make it the 7th of 13 values, 0.3), on every row."""
    for seed, k3 in ((0, 0.1), (1, 0.3)):
        swept_run(tmp_path, "grpo", seed, {"router_noise": 1.0}, {"mismatch/k3_kl": k3, "response/len_mean": 5.0})
    swept_run(tmp_path, "grpo", 2, {"router_noise": 1.0}, {"mismatch/k3_kl": 10.0, "response/len_mean": 5.0},
              steps=3)
    rows = class_rows(load_results(tmp_path / "synth")).sort_values("seed")
    assert rows["outcome"].tolist()[2] == TOO_SHORT
    assert rows["dose"].tolist() == pytest.approx([0.2, 0.2, 0.2])
    assert rows["dose_response"].tolist() == pytest.approx([1.0, 1.0, 1.0])
    assert rows["dose_steps"].tolist() == [10, 10, 10]


def test_an_arm_that_never_failed_is_bounded_per_cell_never_pooled():
    """No failure in 4 runs, 3 at one cell and 1 at another: each cell's exact one-sided bound is
    1 - 0.05^(1/3) = 63.2% and 1 - 0.05^(1/1) = 95%; the arm's bound is the loosest, 95%, not the 52.7%
    of the 4 runs pooled (1 - 0.05^(1/4)), which no cell's runs support."""
    classes = pd.DataFrame({"arm": "gspo", "cell": ["noise=1"] * 3 + ["noise=3"], "dose": [0.1, 0.1, 0.1, 2.0],
                            "outcome": LEARNED})
    (found,) = boundaries(classes)
    assert (found.cells, found.fewest_in_cell) == (2, 1)
    assert found.bound == pytest.approx(0.95)
    text = boundary_sentence(found, ()).text
    assert "0 of 4 runs degraded or collapsed: in each of its 2 cells the rate is at most 95% at 95%" in text
    assert "52.7%" not in text


def test_the_answers_row_of_an_arm_without_a_measured_kl_says_so_not_nan():
    """Levels whose engine measured no mismatch (dose NaN or 0: off the axis) have no dose range: the
    plain answer's numbers row says none was measured above the floor, never "nan to nan"."""
    classes = pd.DataFrame({"arm": "grpo", "cell": ["lr=1", "lr=2"], "dose": [float("nan"), 0.0],
                            "outcome": LEARNED})
    (row,) = stability_rows(StabilityMap(classes, boundaries(classes)))
    assert row["value"] == "0 of 2; no level dose above 1e-08"
    measured = pd.DataFrame({"arm": "grpo", "cell": ["lr=1", "lr=2"], "dose": [0.01, 0.2],
                             "dose_response": [0.05, 1.0], "outcome": LEARNED})
    (row,) = stability_rows(StabilityMap(measured, boundaries(measured)))
    assert row["value"] == "0 of 2; 0.01 to 0.2 per token (0.05 to 1 per response)"
