"""`gspo-bench regress`: tolerances, invariants, and deliberately broken objectives caught by name:
one whose logged metrics change, and one whose loss alone is wrong."""

from __future__ import annotations

import dataclasses
import json
import math
import re
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml
from typer.testing import CliRunner

from analysis.checks.regress import band, band_excess, compare, first_step_excess, load_tolerances
from analysis.data.load import load_results
from gspo_bench.cli import app
from gspo_bench.objectives import registry
from gspo_bench.objectives.inputs import PolicyBatch
from gspo_bench.train import update as update_module
from tests.helpers.runs import baseline_suite, run_suite
from tests.helpers.scripts import script

ROOT = Path(__file__).resolve().parent.parent
TOLERANCES = ROOT / "experiments" / "regress_tolerances.yaml"
# the planted bugs, shared with experiments/regress_margins.py (which prints how far past each lands)
planted = script("planted_bugs.py")
gspo_summing_in_the_loss, grpo_with_its_sign_flipped, grpo_over_all_tokens = (
    planted.gspo_summing_in_the_loss, planted.grpo_with_its_sign_flipped, planted.grpo_over_all_tokens)


@pytest.fixture(scope="module")
def baseline(tmp_path_factory):
    """Seeds 0 and 1 of GRPO, GRPO + Routing Replay and GSPO, 6 steps each: a baseline with a spread."""
    cache = tmp_path_factory.mktemp("ws")
    out = tmp_path_factory.mktemp("baseline")
    data = baseline_suite(cache)
    run_suite(data, out)
    return data | {"seeds": [0]}, out / "tiny"  # fresh runs: seed 0, as CI runs it


@pytest.fixture(scope="module")
def tolerances(tmp_path_factory) -> Path:
    """The CI tolerances, without the reward-rises invariant: these 6-step runs are too short to learn."""
    data = yaml.safe_load(TOLERANCES.read_text()) | {"min_reward_rise": -1.0}
    path = tmp_path_factory.mktemp("tolerances") / "tolerances.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def regress(cli, current: Path, baseline: Path, tolerances: Path):
    return cli("regress", current, "--baseline", baseline, "--tolerances", tolerances)


def regressions(result) -> str:
    assert result.exit_code == 1, result.output
    return result.output.split("regression(s):")[1]


def printed_excess(found: str, label: str, metric: str) -> float:
    """The printed excess of `label`'s first-step check of `metric` (how many tolerances past it)."""
    match = re.search(rf"{re.escape(label)} first step {re.escape(metric)} \(([0-9.e+]+|inf) x its tolerance\)", found)
    assert match, f"no first-step regression of {label} {metric} in: {found}"
    return float(match.group(1))


def test_same_code_same_seed_passes_exactly(baseline, tolerances, tmp_path, cli):
    data, base = baseline
    run_suite(data, tmp_path)
    checks = compare(load_results(tmp_path / "tiny"), load_results(base), load_tolerances(tolerances))
    assert all(c.ok for c in checks), [c for c in checks if not c.ok]
    first = [c for c in checks if c.metric.startswith("first step")]
    assert len(first) == 3 * 11 and all(c.excess == 0 for c in first)  # bit for bit: same kernels, same code
    assert {c.metric for c in checks} >= {"final reward/mean", "mean clip/frac", "median loss", "median grad/norm",
                                          "first step loss", "first step grad/norm",
                                          "invariant: gspo clips more", "invariant: compute matched",
                                          "invariant: 0 < drift < 1", "invariant: reward rises"}
    result = regress(cli, tmp_path / "tiny", base, tolerances)
    assert result.exit_code == 0 and "closest pass:" in result.output, result.output


def test_broken_gspo_length_normalisation_is_caught_by_name(baseline, tolerances, tmp_path, cli, monkeypatch):
    data, base = baseline
    # the bug: s_i = exp(sum_t log w_it) instead of exp(mean_t log w_it), in the loss and the metrics
    monkeypatch.setattr(PolicyBatch, "seq_log_ratio", lambda self: self.log_ratio.sum(-1))
    run_suite(data, tmp_path)
    found = regressions(regress(cli, tmp_path / "tiny", base, tolerances))
    assert printed_excess(found, "gspo", "ratio/seq_var") > 1e3
    assert printed_excess(found, "gspo", "loss") > 1e3
    # the token-ratio objectives train as before: only the sequence-ratio statistic they log moves
    for label in ("grpo", "grpo_rr"):
        assert printed_excess(found, label, "ratio/seq_var") > 1e3
        assert f"{label} first step loss" not in found and f"{label} first step grad/norm" not in found


def plant(monkeypatch, name: str, fn) -> None:
    monkeypatch.setitem(registry._REGISTRY, name, dataclasses.replace(registry.objective_spec(name), fn=fn))


@pytest.mark.parametrize(("bug", "objective", "fn", "untouched"), [
    ("loss-only GSPO (no 1/|y_i| in the loss)", "gspo", gspo_summing_in_the_loss, ("grpo", "grpo_rr")),
    ("GRPO's loss sign flipped", "grpo", grpo_with_its_sign_flipped, ("gspo",)),
    ("GRPO's wrong normaliser (all tokens)", "grpo", grpo_over_all_tokens, ("gspo",)),
])
def test_a_loss_bug_is_caught_at_the_first_step_with_margin(baseline, tolerances, tmp_path, monkeypatch, cli, bug,
                                                            objective, fn, untouched):
    """Every logged ratio and clip statistic of step 1 is computed before the update, so a loss bug
    shows at step 1 only in the loss and the gradient: far past the float-noise tolerance, whatever
    the CPU (the kernels are pinned) and whatever the test order."""
    data, base = baseline
    plant(monkeypatch, objective, fn)
    run_suite(data, tmp_path)
    found = regressions(regress(cli, tmp_path / "tiny", base, tolerances))
    assert printed_excess(found, objective, "grad/norm") > 1e3, bug
    assert printed_excess(found, objective, "loss") > 1e3, bug
    for other in untouched:
        assert f"{other} first step" not in found, bug


def test_routing_replay_switched_off_is_caught_at_the_first_step_with_margin(baseline, tolerances, tmp_path,
                                                                            monkeypatch, cli):
    """The update forwards of GRPO + RR lose their replayed experts: minibatch 2's ratios see the
    rerouted tokens, so step 1's ratio statistics move (GRPO's runs, which replay nothing, do not)."""
    data, base = baseline
    plain = update_module.capturing
    monkeypatch.setattr(update_module, "capturing", lambda *a, replay=None, **k: plain(*a, replay=None, **k))
    run_suite(data, tmp_path)
    found = regressions(regress(cli, tmp_path / "tiny", base, tolerances))
    assert printed_excess(found, "grpo_rr", "ratio/token_var") > 1e3
    assert "grpo first step" not in found and "gspo first step" not in found


def test_runs_with_other_kernels_than_the_baseline_are_refused_by_name(baseline, tolerances, tmp_path, cli):
    data, base = baseline
    run_suite(data, tmp_path)
    for provenance in (tmp_path / "tiny").glob("*/provenance.json"):
        prov = json.loads(provenance.read_text())
        prov["kernels"]["mkl_branch"] = "OFF"
        provenance.write_text(json.dumps(prov))
    result = regress(cli, tmp_path / "tiny", base, tolerances)
    found = regressions(result)
    assert "grpo first step: same CPU kernels" in found
    assert "the baseline ran with AVX2/COMPATIBLE/1 threads, this run with AVX2/OFF/1 threads" in result.output


def test_a_band_is_the_seeds_range_widened_by_its_width_or_its_floor():
    assert band(np.array([1.0, 3.0, 2.0]), {"floor": 0.5}, 1.0) == (1.0, 3.0, 2.0)
    assert band(np.array([1.0, 1.1]), {"floor": 0.5}, 2.0) == (1.0, 1.1, 1.0)  # the floor where seeds agree
    low, high, half = band(np.array([2.0, 8.0]), {"floor": 1.5, "log": True}, 1.0)  # a factor of 4 between seeds
    assert (math.exp(low - half), math.exp(high + half)) == pytest.approx((0.5, 32.0))
    assert band_excess(1.0, 3.0, 2.0, 2.5, log=False) == 0  # inside the seeds' own range
    assert band_excess(1.0, 3.0, 2.0, 5.0, log=False) == 1.0  # on the edge: passes
    assert band_excess(1.0, 3.0, 2.0, -3.0, log=False) == 2.0
    assert band_excess(0.0, 1.0, 1.0, 0.0, log=True) == math.inf  # no place for 0 on a log scale


def test_first_step_excess_counts_tolerances_past_the_baseline():
    assert first_step_excess(2.0, 2.0, rtol=1e-5, atol=0.0) == 0
    assert first_step_excess(2.0, 2.00002, rtol=1e-5, atol=0.0) == pytest.approx(1.0)
    assert first_step_excess(0.0, 1e-9, rtol=1e-5, atol=1e-9) == pytest.approx(1.0)
    assert first_step_excess(float("nan"), float("nan"), rtol=1e-5, atol=0.0) == 0
    assert first_step_excess(1.0, float("nan"), rtol=1e-5, atol=0.0) == math.inf


def test_update_rewrites_the_baseline_and_says_so(baseline, tmp_path):
    _, base = baseline
    target = tmp_path / "new-baseline"
    result = CliRunner().invoke(app, ["regress", str(base), "--baseline", str(target), "--update"])
    assert result.exit_code == 0 and "baseline updated" in result.output
    assert sorted(p.name for p in target.iterdir()) == [f"{label}-s{seed}" for label in ("grpo", "grpo_rr", "gspo")
                                                        for seed in (0, 1)]
    assert not any(p.name == "checkpoint" for p in target.rglob("*"))
    assert len(load_results(target).runs) == 6


def test_bad_tolerance_files_name_the_file_and_the_field(tmp_path):
    good = yaml.safe_load(TOLERANCES.read_text())
    bad = tmp_path / "t.yaml"
    for change, field in [
        ({"trajectory": {"metrics": {"clip/frac": {"statistic": "mode", "floor": 2}}}}, "trajectory.metrics.clip/frac.statistic"),
        ({"trajectory": {"metrics": {"loss": {"statistic": "mean", "floor": float("nan")}}}}, "trajectory.metrics.loss.floor"),
        ({"trajectory": {"metrics": {"loss": {"statistic": "mean", "floor": 0.5, "log": True}}}}, "trajectory.metrics.loss.floor"),
        ({"trajectory": {"metrics": {"loss": {"statistic": "mean", "absolute": 0.1, "floor": 1}}}}, "trajectory.metrics.loss"),
        ({"first_step": {**good["first_step"], "rtol": -1}}, "first_step.rtol"),
        ({"first_step": {**good["first_step"], "metrics": "loss"}}, "first_step.metrics"),
    ]:
        bad.write_text(yaml.safe_dump(good | change))
        with pytest.raises(ValueError, match=re.escape(f"{bad}: {field}")):
            load_tolerances(bad)
    bad.write_text("first_step: [\n")
    with pytest.raises(ValueError, match=re.escape(f"{bad}: not valid YAML")):
        load_tolerances(bad)


def test_the_old_min_reward_gain_key_is_refused_naming_its_new_name(tmp_path):
    """`min_reward_gain` (an absolute gain) became `min_reward_rise` (a share of the room to reward 1): a
    file still giving the old key would be checked with no reward rule at all, silently. It is refused,
    naming the new key, even beside a valid `min_reward_rise`; so is any other key that is no rule."""
    good = yaml.safe_load(TOLERANCES.read_text())
    bad = tmp_path / "t.yaml"
    for old in ({"min_reward_gain": 0.05}, {"min_reward_gain": 0.05, "min_reward_rise": 0.1}):
        bad.write_text(yaml.safe_dump(good | old))
        with pytest.raises(ValueError, match=re.escape(f"{bad}: min_reward_gain is now min_reward_rise, a share of the "
                                                       "room to reward 1")):
            load_tolerances(bad)
    bad.write_text(yaml.safe_dump(good | {"min_reward_rise": 0.1}))
    assert load_tolerances(bad)["min_reward_rise"] == 0.1
    bad.write_text(yaml.safe_dump(good | {"min_reward_rse": 0.1}))  # any other unknown key: no rule, silently
    with pytest.raises(ValueError, match=re.escape(f"{bad}: unknown keys ['min_reward_rse'] (the rules are first_step, "
                                                   "trajectory, min_reward_rise)")):
        load_tolerances(bad)


def test_a_tolerance_file_with_a_repeated_metric_is_refused(tmp_path):
    """YAML lets the last of two equal keys win silently: a metric's band given twice is refused, naming
    the file, the key and both lines (issue #40 item 5, cause 12)."""
    bad = tmp_path / "t.yaml"
    bad.write_text("trajectory:\n  metrics:\n    clip/frac: {statistic: mean, floor: 0.1}\n"
                   "    clip/frac: {statistic: mean, floor: 0.2}\n")
    with pytest.raises(ValueError, match=re.escape(f"{bad}: not valid YAML: key 'clip/frac' repeated (first at line 3) "
                                                   "(line 4, column 5)")):
        load_tolerances(bad)


def test_the_planted_bug_really_is_loss_only():
    gen = torch.Generator().manual_seed(0)
    logp, old = torch.randn(4, 6, generator=gen), torch.randn(4, 6, generator=gen)
    adv, mask = torch.randn(4, generator=gen), torch.ones(4, 6, dtype=torch.bool)
    right, right_metrics = registry.get_objective("gspo")(logp=logp, old_logp=old, advantages=adv, mask=mask)
    wrong, wrong_metrics = gspo_summing_in_the_loss(logp, old, adv, mask)
    assert not torch.allclose(right, wrong)
    for key in ("ratio/token_var", "ratio/seq_var", "kl/old_new"):
        assert torch.equal(right_metrics[key], wrong_metrics[key]), key


# ------------------------------------------------------------------ --update writes only into a baseline (issue #40 item 5, cause 2)

def synthetic_suite(root: Path, suite: str = "synth", labels=("grpo", "gspo")) -> Path:
    """Finished synthetic runs (test_analysis.make_run) of `labels`, seed 0, in ROOT/SUITE."""
    from tests.helpers.results import make_run

    for label in labels:
        make_run(root, label, 0, steps=4, suite=suite)
    return root / suite


def test_update_refuses_a_folder_that_is_not_a_baseline_and_deletes_nothing(tmp_path, cli):
    """`--baseline results` (a results tree: a README and suite folders) is refused in one line naming
    what is not a run folder; every file stays."""
    from tests.helpers.cli import one_line_error

    current = synthetic_suite(tmp_path / "fresh")
    results = tmp_path / "results"
    synthetic_suite(results, "paper_cpu")
    (results / "README.md").write_text("committed results\n")
    before = sorted(p.relative_to(results) for p in results.rglob("*"))
    error = one_line_error(cli("regress", current, "--baseline", results, "--update"))
    assert f"{results} is not a regress baseline" in error and "README.md" in error
    assert sorted(p.relative_to(results) for p in results.rglob("*")) == before
    a_run = results / "paper_cpu"
    error = one_line_error(cli("regress", current, "--baseline", a_run / "grpo-s0", "--update"))  # one run's folder
    assert "is not a regress baseline" in error and (a_run / "grpo-s0" / "metrics.parquet").is_file()


def test_update_replaces_a_baseline_it_wrote_or_the_committed_one(tmp_path, cli):
    current = synthetic_suite(tmp_path / "fresh")
    target = tmp_path / "base"
    for _ in range(2):  # absent, then a baseline --update wrote
        assert cli("regress", current, "--baseline", target, "--update").exit_code == 0
    assert sorted(p.name for p in target.iterdir()) == ["grpo-s0", "gspo-s0"]
    committed = ROOT / "results" / "ci-baseline"
    from analysis.checks.regress import check_baseline_folder

    check_baseline_folder(committed)  # the committed one is a baseline: no error


def test_update_refuses_the_runs_of_two_suites(tmp_path, cli):
    """Two suites whose runs share names (grpo-s0) would be flattened into one folder: refused."""
    from tests.helpers.cli import one_line_error

    root = tmp_path / "out"
    synthetic_suite(root, "a")
    synthetic_suite(root, "b")
    error = one_line_error(cli("regress", root, "--baseline", tmp_path / "base", "--update"))
    assert "runs of 2 suites" in error and f"{root / 'a'}" in error and f"{root / 'b'}" in error
    assert not (tmp_path / "base").exists()
