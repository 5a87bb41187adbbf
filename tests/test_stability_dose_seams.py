"""Where the stability map's dose (analysis.evidence.dose) meets the map's classes
(analysis.evidence.stability): a level's dose pools the first steps of the runs the map judges only."""

from __future__ import annotations

import pytest

from analysis.data.load import load_results
from analysis.evidence.stability import TOO_SHORT, class_rows
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
