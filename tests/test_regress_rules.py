"""`gspo-bench regress`'s pass rules on the committed CI baseline (no training: the baseline's own
files, copied and changed by hand, are the fresh runs)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pandas as pd
import pytest

from analysis.checks.regress import DEFAULT_TOLERANCES, compare, load_tolerances, reward_rise_check
from analysis.data.load import load_results

ROOT = Path(__file__).resolve().parent.parent
BASELINE = ROOT / "results" / "ci-baseline"


def failed(checks) -> list[str]:
    return [f"{c.label} {c.metric}" for c in checks if not c.ok]


def test_the_committed_baseline_passes_against_itself():
    """Every seed of the baseline is a run CI could make: its own rules must pass it (seed 2 starts at
    0.72 and rises 0.039, which an absolute 0.05 refused)."""
    results = load_results(BASELINE)
    assert failed(compare(results, results, load_tolerances(DEFAULT_TOLERANCES))) == []


@pytest.mark.parametrize(("first", "final", "ok"), [
    (0.5, 0.56, True), (0.5, 0.54, False),      # half the room left: 0.1 of it is 0.05
    (0.72, 0.76, True), (0.72, 0.74, False),    # 0.28 left: 0.028 needed
    (0.2, 0.27, False), (0.2, 0.29, True),      # 0.8 left: 0.08 needed
    (1.0, 1.0, True), (1.0, 0.9, False),        # at the top: holding it is all there is
])
def test_reward_rises_by_a_share_of_the_room_left(first, final, ok):
    check = reward_rise_check("grpo", first, final, 0.1)
    assert check.ok is ok
    assert "0.1 x (1 - first)" in check.tolerance


@pytest.fixture
def fresh(tmp_path) -> Path:
    """A copy of the baseline to change by hand: the "fresh runs" of each test."""
    copy = tmp_path / "fresh"
    shutil.copytree(BASELINE, copy)
    return copy


def edit_metrics(run_dir: Path, edit) -> None:
    path = run_dir / "metrics.parquet"
    frame = pd.read_parquet(path)
    edit(frame).to_parquet(path)


def checks_against_baseline(fresh: Path):
    return compare(load_results(fresh), load_results(BASELINE), load_tolerances(DEFAULT_TOLERANCES))


def test_a_change_after_step_1_is_caught_by_its_band(fresh):
    """Grad norm 10x from step 2 on: step 1 still matches, the band of median grad/norm does not."""
    def tenfold(frame):
        frame.loc[frame["step"] > 1, "grad/norm"] *= 10
        return frame
    edit_metrics(fresh / "grpo-s0", tenfold)
    assert failed(checks_against_baseline(fresh)) == ["grpo median grad/norm"]


def test_each_label_has_its_own_band(fresh):
    """GRPO clipping as much as GSPO lies inside the span of every label's seeds but far outside
    GRPO's own: a band per label catches it."""
    gspo = pd.read_parquet(BASELINE / "gspo-s0" / "metrics.parquet")
    def clip_like_gspo(frame):
        steps = frame["step"] > 1
        frame.loc[steps, "clip/frac"] = float(gspo.loc[gspo["step"] > 1, "clip/frac"].mean())
        return frame
    edit_metrics(fresh / "grpo-s0", clip_like_gspo)
    assert "grpo mean clip/frac" in failed(checks_against_baseline(fresh))


def test_the_first_step_fails_a_few_tolerances_past_its_edge(fresh):
    """Step 1's loss three tolerances away (rtol 1e-5): a regression, with its excess printed as ~3."""
    def nudge(frame):
        frame.loc[frame["step"] == 1, "loss"] *= 1 + 3e-5
        return frame
    edit_metrics(fresh / "gspo-s1", nudge)
    found = [c for c in checks_against_baseline(fresh) if not c.ok]
    assert [f"{c.label} {c.metric}" for c in found] == ["gspo first step loss"]
    assert 2.5 < found[0].excess < 3.5


def test_a_run_without_step_1_fails(fresh):
    edit_metrics(fresh / "grpo_rr-s2", lambda frame: frame[frame["step"] != 1])
    assert "grpo_rr first step: run has step 1" in failed(checks_against_baseline(fresh))


def test_update_refuses_a_baseline_whose_run_folder_holds_other_files(fresh, tmp_path):
    """A run folder with a file that is no run file (someone's notes, a checkpoint) is not a baseline
    --update may replace: refused before anything is deleted."""
    from analysis.checks.regress import update_baseline

    (fresh / "gspo-s0" / "notes.txt").write_text("keep me\n")
    with pytest.raises(ValueError, match="gspo-s0 is not a run folder of run files only"):
        update_baseline(BASELINE, fresh)
    assert (fresh / "gspo-s0" / "notes.txt").read_text() == "keep me\n"


def test_a_same_named_suite_with_no_common_label_is_another_suite():
    """Same suite name, other arms: refused as another suite (it ran and failed on "run present")."""
    from analysis.data.suites import suite_differences

    current = pd.DataFrame({"suite": ["ci"] * 2, "label": ["grpo_tis", "r3"], "settings": [{}, {}]})
    base = load_results(BASELINE).runs
    found = suite_differences(current, base)
    assert found == ["no arm label in common: grpo_tis, r3 vs baseline grpo, grpo_rr, gspo, gspo_token"]
    assert suite_differences(base, base) == []
