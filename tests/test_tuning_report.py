"""The report's tuning section and sensitivity figure, from a hand-made chosen.json and trial folders:
each arm's ruleset, its tuning FLOPs as its trials spent them beside its compared runs', and the
chosen trial marked in both figures (not the first trial, not the highest value)."""

from __future__ import annotations

import json
from pathlib import Path

import matplotlib.pyplot as plt
import pandas as pd
import pytest

from analysis.data.load import Results
from analysis.figures.tuning import sensitivity_figure, sensitivity_interactive
from analysis.report.tuning import tuning_table

TRIALS = [  # gspo: trial 1 is chosen (highest score); grpo ran untuned (defaults, allow_unequal)
    {"arm": "gspo", "trial": 0, "label": "gspo.t00", "settings": {"clip_low": 3e-4, "lr": 1e-4}, "score": 0.2, "runs": 2},
    {"arm": "gspo", "trial": 1, "label": "gspo.t01", "settings": {"clip_low": 3e-3, "lr": 5e-4}, "score": 0.6, "runs": 2},
    {"arm": "gspo", "trial": 2, "label": "gspo.t02", "settings": {"clip_low": 3e-2, "lr": 2e-4}, "score": 0.4, "runs": 2},
]


def tuned_results(root: Path) -> Results:
    """Results of two compared runs of suite `s`, with its trials' chosen.json and status files (FLOPs)."""
    trials = root / "s" / "tuning"
    for i, trial in enumerate(TRIALS):
        for seed in (10, 11):
            (trials / f"{trial['label']}-s{seed}").mkdir(parents=True)
            (trials / f"{trial['label']}-s{seed}" / "status.json").write_text(json.dumps({"cum_flops": 100.0 + i}))
    record = {"metric": "countdown", "rule": "final", "seeds": [10, 11], "trial_budget": {"kind": "flops", "value": 100},
              "ruleset": {"grpo": "defaults", "gspo": "tuned"}, "trials": TRIALS,
              "chosen": {"gspo": {k: TRIALS[1][k] for k in ("trial", "label", "settings", "score")}}}
    (trials / "chosen.json").write_text(json.dumps(record))
    runs = pd.DataFrame({"suite": ["s", "s"], "label": ["grpo", "gspo"], "cum_flops": [250.0, 260.0],
                         "path": [str(root / "s" / "grpo-s0"), str(root / "s" / "gspo-s0")]})
    return Results(metrics=pd.DataFrame(), layers=pd.DataFrame(), runs=runs, evals=pd.DataFrame())


def test_the_tuning_table_states_each_arms_ruleset_and_its_flops_beside_the_comparisons(tmp_path):
    table = tuning_table(tuned_results(tmp_path)).set_index("arm")
    assert table.loc["grpo", "ruleset"] == "defaults" and table.loc["grpo", "trials"] == 0
    assert table.loc["grpo", "tuning FLOPs"] == 0 and table.loc["grpo", "settings"] == "as declared"
    assert table.loc["gspo", "ruleset"] == "tuned" and table.loc["gspo", "chosen"] == "gspo.t01"
    assert table.loc["gspo", "tuning FLOPs"] == 2 * (100 + 101 + 102)  # each trial on both seeds, as spent
    assert table.loc["gspo", "comparison FLOPs"] == 260.0
    assert table.loc["gspo", "validation countdown (final)"] == pytest.approx(0.6)


def test_the_sensitivity_figures_mark_the_chosen_trial(tmp_path):
    results = tuned_results(tmp_path)
    figure = sensitivity_figure(results)
    try:
        panels = {ax.get_xlabel(): ax for ax in figure.axes if ax.axison}
        assert sorted(panels) == ["clip_low", "lr"] and panels["clip_low"].get_xscale() == "log"
        for setting, ax in panels.items():
            trials, star = (c.get_offsets().tolist() for c in ax.collections)
            assert star == [[TRIALS[1]["settings"][setting], 0.6]] and len(trials) == 3
    finally:
        plt.close(figure)
    (interactive,) = sensitivity_interactive(results)
    stars = [t for t in interactive.data if t.name == "chosen"]
    assert [(t.text[0], t.x[0], t.y[0]) for t in stars] == [("gspo.t01", 3e-3, 0.6), ("gspo.t01", 5e-4, 0.6)]


def test_trial_flops_read_each_trial_from_its_own_folder_name(tmp_path):
    """A label that a folder name escapes (a space): the trial's status.json is under the escaped name;
    read from `label-s<seed>` it was not found and the arm's tuning compute read as 0."""
    import json

    from analysis.data.tuning import trial_flops
    from gspo_bench.rundir.names import run_folder_name

    record = {"seeds": [100, 101], "trials": [{"label": "grpo tuned.t00", "arm": "grpo tuned"}]}
    for seed, flops in ((100, 2e9), (101, 3e9)):
        run = tmp_path / run_folder_name("grpo tuned.t00", seed)
        run.mkdir()
        (run / "status.json").write_text(json.dumps({"status": "done", "step": 4, "cum_flops": flops}))
    assert trial_flops(tmp_path, record) == {"grpo tuned": 5e9}
