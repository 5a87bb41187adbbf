"""`gspo-bench regress`: tolerances, invariants, and deliberately broken objectives caught by name:
one whose logged metrics change, and one whose loss alone is wrong."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import pytest
import torch
import yaml
from typer.testing import CliRunner

from analysis.load import load_results
from analysis.regress import compare, load_tolerances, within
from gspo_bench.cli import app
from gspo_bench.objectives import registry
from gspo_bench.objectives.inputs import PolicyBatch, prepare, safe_exp
from gspo_bench.objectives.metrics import clip_metrics, ratio_metrics
from gspo_bench.objectives.reduce import aggregate
from gspo_bench.objectives.surrogate import clipped_surrogate

sys.path.insert(0, str(Path(__file__).parent))
from test_harness import run_suite, signal_suite  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
TOLERANCES = ROOT / "experiments" / "regress_tolerances.yaml"


@pytest.fixture(scope="module")
def baseline(tmp_path_factory):
    cache = tmp_path_factory.mktemp("ws")
    out = tmp_path_factory.mktemp("baseline")
    data = signal_suite(cache, steps=6, objectives=[{"name": "grpo"}, {"name": "gspo"}])
    run_suite(data, out)
    return data, out / "tiny"


@pytest.fixture(scope="module")
def tolerances(tmp_path_factory) -> Path:
    """The CI tolerances, without the reward-rises invariant: these 6-step runs are too short to learn."""
    data = yaml.safe_load(TOLERANCES.read_text()) | {"min_reward_gain": -1.0}
    path = tmp_path_factory.mktemp("tolerances") / "tolerances.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def regress(current: Path, baseline: Path, tolerances: Path):
    return CliRunner().invoke(app, ["regress", str(current), "--baseline", str(baseline), "--tolerances", str(tolerances)])


def regressions(result) -> str:
    assert result.exit_code == 1, result.output
    return result.output.split("regression(s):")[1]


def test_same_code_same_seed_passes(baseline, tolerances, tmp_path):
    data, base = baseline
    run_suite(data, tmp_path)
    checks = compare(load_results(tmp_path / "tiny"), load_results(base), load_tolerances(tolerances))
    assert all(c.ok for c in checks), [c for c in checks if not c.ok]
    assert {c.metric for c in checks} >= {"final reward/mean", "mean clip/frac", "median loss", "median grad/norm",
                                          "invariant: gspo clips more", "invariant: compute matched",
                                          "invariant: 0 < drift < 1", "invariant: reward rises"}


def test_broken_gspo_length_normalisation_is_caught_by_name(baseline, tolerances, tmp_path, monkeypatch):
    data, base = baseline
    # the bug: s_i = exp(sum_t log w_it) instead of exp(mean_t log w_it), in the loss and the metrics
    monkeypatch.setattr(PolicyBatch, "seq_log_ratio", lambda self: self.log_ratio.sum(-1))
    run_suite(data, tmp_path)
    assert "gspo median ratio/seq_var" in regressions(regress(tmp_path / "tiny", base, tolerances))


def gspo_summing_in_the_loss(logp, old_logp, advantages, mask, clip_low=3e-4, clip_high=4e-4, weights=None):
    """GSPO with the sequence log-ratio summed instead of averaged in the loss only: the logged ratio
    statistics (computed from the batch) stay right."""
    batch = prepare(logp, old_logp, advantages, mask, per_response_advantages=True, objective="gspo")
    s = safe_exp(batch.log_ratio.sum(-1))  # the bug: no 1/|y_i|
    seq_terms, cut_low, cut_high = clipped_surrogate(s, batch.response_advantages(), clip_low, clip_high)
    loss = -aggregate(seq_terms[:, None].expand_as(batch.log_ratio), batch, "seq_mean_token_mean")
    cuts = (cut_low[:, None].expand_as(batch.mask), cut_high[:, None].expand_as(batch.mask))
    return loss, {**clip_metrics(*cuts, batch), **ratio_metrics(batch)}


def test_a_loss_only_gspo_bug_is_caught_by_the_gradient_statistics(baseline, tolerances, tmp_path, monkeypatch):
    data, base = baseline
    spec = registry.objective_spec("gspo")
    monkeypatch.setitem(registry._REGISTRY, "gspo", dataclasses.replace(spec, fn=gspo_summing_in_the_loss))
    run_suite(data, tmp_path)
    found = regressions(regress(tmp_path / "tiny", base, tolerances))
    assert "gspo median grad/norm" in found
    assert "grpo" not in found  # GRPO's runs are untouched


def test_update_rewrites_the_baseline_and_says_so(baseline, tmp_path):
    _, base = baseline
    target = tmp_path / "new-baseline"
    result = CliRunner().invoke(app, ["regress", str(base), "--baseline", str(target), "--update"])
    assert result.exit_code == 0 and "baseline updated" in result.output
    assert sorted(p.name for p in target.iterdir()) == ["grpo-s0", "gspo-s0"]
    assert not any(p.name == "checkpoint" for p in target.rglob("*"))
    assert len(load_results(target).runs) == 2


def test_tolerance_rules():
    assert within(0.5, 0.64, {"absolute": 0.15}, 0.0) and not within(0.5, 0.7, {"absolute": 0.15}, 0.0)
    assert within(0.01, 0.029, {"factor": 3}, 0.0) and not within(0.01, 0.031, {"factor": 3}, 0.0)
    assert within(0.0, 1e-9, {"factor": 3}, 1e-6) and not within(0.0, 0.01, {"factor": 3}, 1e-6)
    assert not within(float("nan"), 1.0, {"factor": 3}, 0.0)


def test_bad_tolerance_file(tmp_path):
    bad = tmp_path / "t.yaml"
    bad.write_text("metrics:\n  clip/frac: {statistic: mean, factor: 3, absolute: 0.1}\n")
    with pytest.raises(ValueError, match="exactly one"):
        load_tolerances(bad)
    bad.write_text("metrics:\n  clip/frac: {statistic: mode, factor: 3}\n")
    with pytest.raises(ValueError, match="statistic"):
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
