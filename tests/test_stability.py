"""The stability map's numbers (analysis.evidence.stability): each outcome class on hand-made curves, every run of
a results folder classed, the logistic fit and its intervals against the closed form of a two-point
case, the zero-failure bound, an arm's boundary read off its cells, and the degenerate cells (inert, or every
arm the same bit for bit) named and left out of the fits and the paired tests. The report's side:
tests/test_stability_report.py."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from scipy import special, stats

from analysis.data.load import load_results
from analysis.evidence.placement import pair_tests, placements
from analysis.evidence.stability import (
    COLLAPSED,
    DEGRADED,
    FLAT,
    IDENTICAL,
    INERT,
    LEARNED,
    boundaries,
    classify,
    degenerate_cells,
    grad_spike_step,
    map_applies,
    run_classes,
    stability_map,
    training_points,
)
from analysis.report.answer_words import plain_text
from analysis.report.map_answer import degenerate_rows, map_items
from analysis.stats.logistic import fit_logistic, no_fit_reason, zero_event_bound
from tests.helpers.results import make_run
from tests.helpers.stability import FALLING, set_router_lr_scale, swept_run

NAN = float("nan")


def points(scores: list[float], stderr: float = 0.02) -> pd.DataFrame:
    """Held-out evaluations every 10 steps from step 0, all with one standard error."""
    return pd.DataFrame({"step": [10.0 * i for i in range(len(scores))], "score": scores, "stderr": stderr})


def judge(scores: list[float], stderr: float = 0.02, p: float = NAN, stopped: float = NAN, spike: float = NAN):
    return classify(points(scores, stderr), stopped, "reward collapsed to 0.01", spike, p)


# ------------------------------------------------------------------------------ the classes on hand-made curves


def test_degraded_needs_a_drop_of_more_than_three_standard_errors_of_the_difference():
    """se 0.02 at both ends: SE = hypot(0.02, 0.02) = 0.02828, 3 SE = 0.0849 > 0.05, so the threshold is
    0.5 - 0.0849 = 0.4151: 0.40 is below, 0.42 is not (though 0.08 under the start, past 0.05)."""
    found = judge([0.5, 0.55, 0.5, 0.40])
    assert (found.outcome, found.step) == (DEGRADED, 30.0)
    assert judge([0.5, 0.55, 0.5, 0.42]).outcome == FLAT


def test_degraded_needs_a_drop_of_at_least_0_05_however_small_the_standard_errors():
    """se 0.001: 3 SE = 0.0042, so the floor 0.05 decides: threshold 0.45."""
    assert judge([0.5, 0.5, 0.44], stderr=0.001).outcome == DEGRADED
    assert judge([0.5, 0.5, 0.46], stderr=0.001).outcome == FLAT


def test_a_sustained_drop_to_the_end_is_a_collapse_and_one_final_dip_is_not():
    """Below from step 10 to the end (3 points): collapsed at step 10. Below at 10, back at 20, below at 30:
    only the last point is below: degraded at 30. Below at 10 and 20, back at 30: it recovered."""
    found = judge([0.5, 0.3, 0.35, 0.3])
    assert (found.outcome, found.step) == (COLLAPSED, 10.0) and "from step 10 to the end (3 points)" in found.why
    assert (judge([0.5, 0.3, 0.5, 0.3]).outcome, judge([0.5, 0.3, 0.5, 0.3]).step) == (DEGRADED, 30.0)
    two = judge([0.5, 0.6, 0.3, 0.3])
    assert (two.outcome, two.step) == (COLLAPSED, 20.0)  # two points below to the end: enough
    assert judge([0.5, 0.3, 0.3, 0.5], p=0.4).outcome == FLAT


def test_learned_and_flat_follow_the_gate():
    assert judge([0.5, 0.6, 0.7], p=0.01).outcome == LEARNED
    assert judge([0.5, 0.6, 0.7], p=0.2).outcome == FLAT
    assert judge([0.5, 0.6, 0.7], p=NAN).outcome == FLAT  # not judged by the gate: not learned


def test_precedence_collapsed_then_degraded_then_learned_and_the_earliest_step():
    assert judge([0.5, 0.5, 0.40], p=0.01).outcome == DEGRADED  # degraded beats the gate
    stopped = judge([0.5, 0.6, 0.7], p=0.01, stopped=17.0)
    assert (stopped.outcome, stopped.step) == (COLLAPSED, 17.0) and "reward collapsed to 0.01" in stopped.why
    both = judge([0.5, 0.3, 0.3], stopped=25.0, spike=5.0)  # spike at 5, sustained drop from 10, stop at 25
    assert (both.outcome, both.step) == (COLLAPSED, 5.0)
    assert both.why.index("grad/norm") < both.why.index("below start") < both.why.index("harness")


def test_a_grad_norm_spike_is_three_steps_in_a_row_above_100_times_the_median():
    steps = np.arange(1, 19, dtype=float)
    norms = np.array([1.0] * 10 + [150.0] * 3 + [1.0] * 5)
    assert grad_spike_step(steps, norms) == 11.0
    assert math.isnan(grad_spike_step(steps, np.array([1.0] * 10 + [150.0, 150.0, 1.0, 150.0] + [1.0] * 4)))
    assert math.isnan(grad_spike_step(steps, np.array([1.0] * 10 + [100.0] * 3 + [1.0] * 5)))  # 100x: not above
    assert grad_spike_step(steps, np.array([1.0] * 10 + [np.inf] * 3 + [1.0] * 5)) == 11.0  # +inf is above
    # steps without a gradient (all advantages zero) do not set the scale: the median is over non-zero norms
    zeros = np.array([0.0] * 10 + [1.0] * 3 + [0.0] * 5)
    assert math.isnan(grad_spike_step(steps, zeros))


def test_the_training_reward_points_are_the_gates_windows_and_blocks():
    """20 steps: start = steps 1-10, then blocks of 5 (the end window's length) counted back from step 20:
    16-20 and 11-15. 8 steps: end window 2, start 6 (10 would overlap): one block, 7-8."""
    rewards = np.arange(1, 21, dtype=float)
    found = training_points(np.arange(1, 21, dtype=float), rewards)
    assert found["step"].tolist() == [1.0, 11.0, 16.0] and found["score"].tolist() == [5.5, 13.0, 18.0]
    assert found["stderr"].iloc[1] == pytest.approx(np.std([11, 12, 13, 14, 15], ddof=1) / np.sqrt(5))
    short = training_points(np.arange(1, 9, dtype=float), np.arange(1, 9, dtype=float))
    assert short["step"].tolist() == [1.0, 7.0] and short["score"].tolist() == [3.5, 7.5]


# ------------------------------------------------------------------------------ every run of a results folder








def test_run_outcomes_judge_finished_and_collapsed_runs_on_the_training_reward(tmp_path):
    """grpo s0 learned (the rising default), s1 falls all run long (collapsed from step 11: both blocks
    below), s2 stopped by the harness at step 7; s3 failed (a crash): not judged. KL: each run's median."""
    make_run(tmp_path, "grpo", 0, columns={"mismatch/k3_kl": [0.01, 0.02, 0.5] + [0.02] * 17})
    make_run(tmp_path, "grpo", 1, columns={"reward/mean": FALLING})
    make_run(tmp_path, "grpo", 2, steps=7, status="collapsed", message="non-finite parameters")
    make_run(tmp_path, "grpo", 3, steps=5, status="failed", message="boom")
    set_router_lr_scale(make_run(tmp_path, "gspo", 0, columns={"grad/norm": [1.0] * 8 + [500.0] * 3 + [1.0] * 9}), 0.5)
    found = run_classes(load_results(tmp_path / "synth")).set_index(["arm", "seed"])
    assert list(found.index) == [("grpo", 0), ("grpo", 1), ("grpo", 2), ("gspo", 0)]
    assert found.loc[("grpo", 0), "outcome"] == LEARNED and found.loc[("grpo", 0), "kl"] == pytest.approx(0.02)
    assert (found.loc[("grpo", 1), "outcome"], found.loc[("grpo", 1), "step"]) == (COLLAPSED, 11.0)
    assert (found.loc[("grpo", 2), "outcome"], found.loc[("grpo", 2), "step"]) == (COLLAPSED, 7.0)
    assert "non-finite parameters" in found.loc[("grpo", 2), "why"]
    assert (found.loc[("gspo", 0), "outcome"], found.loc[("gspo", 0), "step"]) == (COLLAPSED, 9.0)  # spike at 9-11
    assert found.loc[("gspo", 0), "router_lr_scale"] == 0.5 and found.loc[("grpo", 0), "router_lr_scale"] == 1.0
    # the training reward's change: mean of steps 16-20 minus mean of steps 1-10 (0.2 + 0.01 s + 0.03 seed)
    assert found.loc[("grpo", 0), "change"] == pytest.approx(0.01 * (18 - 5.5))


def test_run_outcomes_judge_held_out_evaluations_where_the_group_has_them(tmp_path):
    """Both runs evaluated at steps 0, 10, 20 (se 0.02): s0 0.5 -> 0.6 -> 0.7 (learned, z = 7.07), s1 0.5 ->
    0.3 -> 0.3 (collapsed at step 10: two evaluations below 0.4151 to the end), though both training
    rewards rise."""
    for seed, scores in enumerate(([0.5, 0.6, 0.7], [0.5, 0.3, 0.3])):
        run = make_run(tmp_path, "grpo", seed)
        run.write_rows("eval.parquet", [{"step": 10 * i, "label": "grpo", "seed": seed, "task": "gspo_sort",
                                         "score": s, "stderr": 0.02, "compute/cum_flops": 1e10 * i}
                                        for i, s in enumerate(scores)])
        config = run.path / "config.yaml"
        config.write_text(config.read_text().replace("budget:", "task: {name: sort, params: {}}\n  budget:"))
    found = run_classes(load_results(tmp_path / "synth"))
    assert found["source"].tolist() == ["held-out reward"] * 2
    assert found["outcome"].tolist() == [LEARNED, COLLAPSED] and found["step"].iloc[1] == 10.0
    assert found["change"].tolist() == pytest.approx([0.2, -0.2])


def test_the_map_applies_to_several_groups_or_a_swept_knob_only(tmp_path):
    make_run(tmp_path, "grpo", 0)
    assert not map_applies(load_results(tmp_path / "synth"))
    swept_run(tmp_path, "grpo", 0, {"router_noise": 0.3}, suite="knob")  # one point of a knob
    assert map_applies(load_results(tmp_path / "knob"))
    swept_run(tmp_path, "grpo", 0, {"num_experts": 8}, suite="other")  # one point of another field
    assert not map_applies(load_results(tmp_path / "other"))
    swept_run(tmp_path, "grpo", 0, {"num_experts": 16}, suite="other")
    assert map_applies(load_results(tmp_path / "other"))  # two groups


# ------------------------------------------------------------------------------ the logistic fit and the bound


def two_point_case(failures: tuple[int, int], n: int) -> tuple[np.ndarray, np.ndarray]:
    """n runs at KL 0.01 (log10 -2) and n at KL 0.1 (log10 -1), `failures` of each failed."""
    x = np.repeat([-2.0, -1.0], n)
    y = np.concatenate([np.arange(n) < failures[0], np.arange(n) < failures[1]])
    return x, y


def test_the_logistic_fit_of_a_two_point_case_is_its_closed_form():
    """With two x values the maximum-likelihood curve passes through both observed shares (the model is
    saturated): 10 of 50 at x = -2, 40 of 50 at x = -1 give eta(-2) = logit 0.2 = -ln 4, eta(-1) = ln 4, so
    slope 2 ln 4 and intercept 3 ln 4. The two etas are independent with variance 1 / (n p (1 - p)) = 1/8:
    var(b1) = 1/4, b0 = 2 eta(-1) - eta(-2) has variance 5/8 and cov(b0, b1) = 3/8. The curve's 95% band at
    x = -2: expit(-ln 4 -+ z sqrt(1/8)). It crosses 0.5 at x = -1.5 (KL 10^-1.5); Fieller's interval: the
    t = x + 2 where (ln 4 (2t - 1))^2 <= z^2 / 8 ((1 - t)^2 + t^2)."""
    fit = fit_logistic(*two_point_case((10, 40), 50))
    ln4, z = math.log(4.0), stats.norm.ppf(0.975)
    assert (fit.intercept, fit.slope) == (pytest.approx(3 * ln4, rel=1e-7), pytest.approx(2 * ln4, rel=1e-7))
    assert fit.cov == pytest.approx(np.array([[5 / 8, 3 / 8], [3 / 8, 1 / 4]]), rel=1e-6)
    p, low, high = fit.curve(np.array([-2.0]))
    assert (p[0], low[0], high[0]) == (pytest.approx(0.2), pytest.approx(special.expit(-ln4 - z * math.sqrt(1 / 8))),
                                       pytest.approx(special.expit(-ln4 + z * math.sqrt(1 / 8))))
    # (4 ln4^2 - z^2/4) t^2 - (4 ln4^2 - z^2/4) t + (ln4^2 - z^2/8) = 0
    a = 4 * ln4 ** 2 - z ** 2 / 4
    roots = sorted(np.roots([a, -a, ln4 ** 2 - z ** 2 / 8]).real - 2)
    center, first, last = fit.crossing()
    assert center == pytest.approx(-1.5) and (first, last) == (pytest.approx(roots[0]), pytest.approx(roots[1]))
    assert first == pytest.approx(-2 + 0.31107, abs=1e-4)  # worked by hand: t = 0.31107, 0.68893


def test_a_fit_whose_slope_is_not_significant_has_an_unbounded_crossing():
    """1 of 4 and 3 of 4: var(b1) = 2 (4/3) = 8/3 and b1^2 = (2 ln 3)^2 = 4.83 < z^2 8/3 = 10.2."""
    fit = fit_logistic(*two_point_case((1, 3), 4))
    assert fit.slope == pytest.approx(2 * math.log(3.0), rel=1e-7)
    assert fit.crossing() == (pytest.approx(-1.5), -math.inf, math.inf)


def test_no_fit_where_the_outcomes_are_one_separated_or_at_one_kl():
    x = np.array([-3.0, -2.0, -1.0, -1.0])
    assert "only one outcome" in no_fit_reason(x, np.zeros(4, dtype=bool))
    assert "separated" in no_fit_reason(x, np.array([False, False, True, True]))
    assert "separated" in no_fit_reason(np.array([-2.0, -1.0, -1.0]), np.array([False, False, True]))  # a tie at -1
    assert "same KL" in no_fit_reason(np.full(4, -1.0), np.array([False, True, False, True]))
    assert no_fit_reason(x, np.array([False, True, False, True])) is None
    with pytest.raises(ValueError, match="separated"):
        fit_logistic(x, np.array([False, False, True, True]))


def test_zero_failures_in_60_runs_bound_the_rate_at_4_87_percent():
    """1 - 0.05^(1/60) = 1 - exp(ln 0.05 / 60) = 1 - exp(-0.0499289) = 0.048703: the exact one-sided 95%
    Clopper-Pearson bound, which is the upper end of scipy's two-sided 90% exact interval."""
    assert zero_event_bound(60) == pytest.approx(0.048703, rel=1e-5)
    assert zero_event_bound(60) == pytest.approx(stats.binomtest(0, 60).proportion_ci(0.90, method="exact").high)


def test_an_arms_boundary_without_a_fit_is_read_off_its_cells():
    """Cells at KL 0.001 (0 of 2 failed), 0.01 (1 of 2: not a majority), 0.1 (2 of 2). Held runs at KL up to
    0.01, failed ones from 0.01: separated but for a tie, so no fit (the slope's maximum likelihood is
    infinite); the boundary is read off the cells. One more failure at 0.001 unseparates them: a fit."""
    o = pd.DataFrame({"arm": "grpo", "cell": ["a", "a", "b", "b", "c", "c"],
                      "dose": [0.001, 0.001, 0.01, 0.01, 0.1, 0.1],
                      "outcome": [FLAT, LEARNED, DEGRADED, FLAT, COLLAPSED, DEGRADED]})
    (found,) = boundaries(o)
    assert (found.runs, found.failures, found.collapses) == (6, 3, 1)
    assert found.fit is None and "separated" in found.why_no_fit
    assert (found.largest_held, found.smallest_majority) == (0.001, 0.1)
    o.loc[0, "outcome"] = DEGRADED
    (found,) = boundaries(o)
    assert found.fit is not None and found.why_no_fit == "" and found.fit.events == 4
    assert math.isnan(found.largest_held) and found.smallest_majority == 0.1  # every cell has a failure now


def steps(label: str, seed: int, **columns) -> pd.DataFrame:
    """Two steps of one run (suite s): `columns` per step; time/step_s differs from run to run."""
    return pd.DataFrame({"suite": "s", "label": label, "seed": seed, "step": [1, 2],
                         "time/step_s": [float(ord(label[0]) + seed), 2.0], **columns})


def test_a_cell_is_degenerate_when_every_run_is_inert_or_every_arm_the_same_bit_for_bit():
    """Level L1: seed 0 both arms inert (reward and gradient 0 at every step): INERT. Seed 1 both arms the
    same in every column both logged (b also logs a correction weight a does not, and their step times
    differ): IDENTICAL. Seed 2: b's loss one float step above a's: not the same bit for bit. Level L2: seed
    0 a inert and b not; seed 1 a alone, inert: INERT; seed 2 a alone, not inert (one arm: nothing to be
    the same as). Level L3, seed 0: no reward but a gradient (a penalty's) that differs by arm: not inert."""
    zero = {"reward/mean": [0.0, 0.0], "grad/norm": [0.0, 0.0], "loss": [0.0, 0.0]}
    moving = {"reward/mean": [0.5, 0.25], "grad/norm": [1.0, 3.0], "loss": [0.1, 0.2]}
    ulp = {**moving, "loss": [0.1, float(np.nextafter(0.2, 1.0))]}
    runs = [("a", "L1", 0, zero), ("b", "L1", 0, zero), ("a", "L1", 1, moving),
            ("b", "L1", 1, {**moving, "correction/weight_mean": [1.0, 1.1]}), ("a", "L1", 2, moving), ("b", "L1", 2, ulp),
            ("a", "L2", 0, zero), ("b", "L2", 0, moving), ("a", "L2", 1, zero), ("a", "L2", 2, moving),
            ("a", "L3", 0, {**zero, "grad/norm": [0.5, 0.4]}), ("b", "L3", 0, {**zero, "grad/norm": [0.3, 0.2]})]
    classes = pd.DataFrame([{"suite": "s", "cell": cell, "arm": arm, "label": f"{arm}@{cell}", "seed": seed}
                            for arm, cell, seed, _ in runs])
    metrics = pd.concat([steps(f"{arm}@{cell}", seed, **cols) for arm, cell, seed, cols in runs], ignore_index=True)
    found = degenerate_cells(classes, metrics)
    assert list(zip(found["cell"], found["seed"], found["why"], found["runs"])) == [
        ("L1", 0, INERT, 2), ("L1", 1, IDENTICAL, 2), ("L2", 1, INERT, 1)]


NOISES = {1.0: 0.1, 2.0: 1.0, 3.0: 10.0}  # logit noise -> every run's k3 there (its level's dose)


@pytest.fixture(scope="module")
def degenerate_map(tmp_path_factory):
    """grpo and gspo, 3 seeds, at 3 logit-noise levels: grpo's reward falls at noise 2 and 3 on every seed,
    gspo's at noise 3 on seed 2 only; at noise 3 seeds 0 and 1 of both arms are inert (reward and grad norm
    0 at every step)."""
    root = tmp_path_factory.mktemp("degenerate")
    for noise, k3 in NOISES.items():
        for seed in range(3):
            for label in ("grpo", "gspo"):
                inert = noise == 3.0 and seed < 2
                falls = label == "grpo" and noise > 1.0 or noise == 3.0 and seed == 2
                columns = {"mismatch/k3_kl": k3, **({"reward/mean": 0.0, "grad/norm": 0.0} if inert else
                                                    {"reward/mean": FALLING} if falls else {})}
                swept_run(root, label, seed, {"logit_noise": noise}, columns)
    found = stability_map(load_results(root / "synth"))
    assert found is not None
    return found


def test_a_degenerate_level_is_named_and_left_out_of_the_fits_and_the_paired_tests(degenerate_map):
    """The inert cells (noise 3, seeds 0 and 1: 4 runs) are found, named in the answer and its numbers,
    and left out: each arm is fitted on its 7 other runs, and grpo against gspo shares 7 cells: grpo alone
    failed in the 3 at noise 2, none the other way (p = 2/8 = 0.25)."""
    found = degenerate_map
    assert list(zip(found.degenerate["cell"], found.degenerate["seed"], found.degenerate["why"])) == [
        ("logit_noise=3", 0, INERT), ("logit_noise=3", 1, INERT)]
    assert len(found.left_out) == 4 and len(found.classes) == 14
    assert {b.arm: b.runs for b in found.bounds} == {"grpo": 7, "gspo": 7}
    assert not ((found.classes["cell"] == "logit_noise=3") & (found.classes["seed"] < 2)).any()
    (test,) = pair_tests(found.classes)
    assert (test.cells, test.first_only, test.second_only, test.p) == (7, 3, 0, 0.25)
    texts = [plain_text(s.text) for s in map_items(placements(found), (), [test], found)]
    assert ("Degenerate cells, left out of the fits and the paired tests (they carry no information about any arm): "
            "logit_noise=3, seeds 0 and 1 (reward and gradient zero at every step, 4 runs).") in texts
    (row,) = degenerate_rows(found)
    assert row["what"] == "degenerate cells at logit_noise=3, seeds 0 and 1" and row["result"] == INERT
    every = found.every_run
    assert len(every) == 18 and sorted(every.loc[every["degenerate"] != "", "seed"]) == [0, 0, 1, 1]


def test_a_map_whose_every_cell_is_degenerate_is_not_drawn(tmp_path):
    """grpo and gspo, 2 seeds at 2 logit-noise levels, every run inert: nothing is left to place or compare,
    so there is no map (the report then compares final rewards per sweep point, as without one); one run
    that moves leaves its cell, and so the map, in."""
    for noise in (1.0, 2.0):
        for seed in range(2):
            for label in ("grpo", "gspo"):
                swept_run(tmp_path, label, seed, {"logit_noise": noise},
                          {"mismatch/k3_kl": noise, "reward/mean": 0.0, "grad/norm": 0.0})
    assert stability_map(load_results(tmp_path / "synth")) is None
    swept_run(tmp_path, "gspo", 1, {"logit_noise": 2.0}, {"mismatch/k3_kl": 2.0})  # rewritten: it moves
    found = stability_map(load_results(tmp_path / "synth"))
    assert found is not None and len(found.classes) == 2 and len(found.left_out) == 6
