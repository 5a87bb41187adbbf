"""The report's figure order (analysis.sections.report_figures): the forest plot of a declared family
first, then the stability map's figures, then the rest; a review moved the forest plot after the map
and no test saw it."""

from __future__ import annotations

import yaml

from analysis.data.load import load_results
from analysis.report import anchors
from analysis.report.anchors import FOREST
from analysis.report.sections import Context, report_figures
from tests.helpers.stability import swept_run


def test_the_forest_plot_comes_before_the_stability_map(tmp_path):
    for noise in (0.1, 1.0):
        for label in ("grpo", "gspo"):
            for seed in range(2):
                swept_run(tmp_path, label, seed, {"router_noise": noise}, {"mismatch/k3_kl": noise})
    suite = {"name": "synth", "objectives": [{"name": "grpo"}, {"name": "gspo"}],
             "analysis": {"primary": {"pairs": [["gspo", "grpo"]]}}}
    (tmp_path / "synth" / "suite.yaml").write_text(yaml.safe_dump(suite))
    names = [spec.name for spec in report_figures(Context(load_results(tmp_path / "synth"), float("nan"), False))]
    assert names[0] == FOREST
    assert names[1:4] == [anchors.CHANGE_VS_KL, anchors.CELLS, anchors.COLLAPSE_PROBABILITY]
