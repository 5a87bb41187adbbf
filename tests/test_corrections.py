"""Training-inference mismatch corrections: hand-computed weights, their statistics, and how they
compose with every objective (weights multiply the per-token terms; denominators stay)."""

from __future__ import annotations

import math

import pytest
import torch

from gspo_bench.config import ObjectiveEntry
from gspo_bench.objectives import get_objective, list_objectives, objective_spec
from gspo_bench.objectives.corrections import get_correction, list_corrections, weight_metrics

LN = math.log
# rho = pi_old / mu: row 0 (3 tokens) 2, 1, 0.25; row 1 (2 tokens + padding) 0.4, 3
SAMPLING = torch.tensor([[-1.0, -2.0, -0.5], [-1.5, -2.5, 0.0]])
OLD = SAMPLING + torch.tensor([[LN(2), 0.0, LN(0.25)], [LN(0.4), LN(3), 123.0]])  # padding holds junk
MASK = torch.tensor([[True, True, True], [True, True, False]])


def weights_of(kind, **params):
    weights, metrics = get_correction(kind)(old_logp=OLD, sampling_logp=SAMPLING, mask=MASK, logp=OLD,
                                            advantages=torch.tensor([1.0, -1.0]), **params)
    return weights, metrics


@pytest.mark.parametrize("kind, params, expected", [
    ("tis", {"cap": 2.0}, [[2.0, 1.0, 0.25], [0.4, 2.0, 0.0]]),
    ("tis", {"cap": 2.0, "level": "sequence"}, [[0.5, 0.5, 0.5], [1.2, 1.2, 0.0]]),  # products 0.5 and 1.2
    ("tis", {"cap": 1.0, "level": "sequence"}, [[0.5, 0.5, 0.5], [1.0, 1.0, 0.0]]),
    ("mis", {"low": 0.5, "high": 2.5}, [[2.0, 1.0, 0.0], [0.0, 0.0, 0.0]]),
    ("mis", {"low": 0.6, "high": 2.0, "level": "sequence"}, [[0.0, 0.0, 0.0], [1.2, 1.2, 0.0]]),
    ("mis", {"low": 0.75, "high": 1.05, "level": "geometric"},  # 0.5^(1/3) = 0.794 kept, 1.2^(1/2) = 1.095 not
     [[0.5 ** (1 / 3)] * 3, [0.0, 0.0, 0.0]]),
    ("mis", {"low": 0.75, "high": 1.1, "level": "geometric"},  # row 1 over its 2 tokens, not the padded 3
     [[0.5 ** (1 / 3)] * 3, [1.2 ** (1 / 2)] * 2 + [0.0]]),
    ("mis", {"low": 1.0, "high": 1.0}, [[0.0, 1.0, 0.0], [0.0, 0.0, 0.0]]),  # both bounds inclusive: rho = 1 kept
    ("icepop", {"low": 0.5, "high": 5.0}, [[2.0, 1.0, 0.0], [0.0, 3.0, 0.0]]),
    ("icepop", {"low": 0.3, "high": 2.5}, [[2.0, 1.0, 0.0], [0.4, 0.0, 0.0]]),
])
def test_correction_weights_equal_the_hand_computation(kind, params, expected):
    weights, _ = weights_of(kind, **params)
    torch.testing.assert_close(weights, torch.tensor(expected), rtol=1e-5, atol=1e-6)


def test_opsm_drops_only_negative_responses_that_drifted_beyond_delta():
    # current policy: row 0 drifted by mean log(mu/pi) = 0.6, row 1 by 0.6 too, row 2 by 0.2
    sampling = torch.zeros(3, 2)
    logp = torch.tensor([[-0.6, -0.6], [-0.3, -0.9], [-0.2, -0.2]])
    mask = torch.ones(3, 2, dtype=torch.bool)
    run = get_correction("opsm")
    weights, metrics = run(old_logp=sampling, sampling_logp=sampling, logp=logp, mask=mask,
                           advantages=torch.tensor([-1.0, 1.0, -1.0]), delta=0.5)
    assert weights.tolist() == [[0.0, 0.0], [1.0, 1.0], [1.0, 1.0]]  # positive A kept, small drift kept
    assert metrics["correction/masked_frac"].item() == pytest.approx(1 / 3)
    weights, _ = run(old_logp=sampling, sampling_logp=sampling, logp=logp, mask=mask,
                     advantages=torch.tensor([-1.0, 1.0, -1.0]), delta=0.7)
    assert weights.sum().item() == 6.0


def test_weight_statistics_are_mean_std_ess_and_masked_fraction():
    _, metrics = weights_of("tis", cap=2.0)  # token weights 2, 1, 0.25, 0.4, 2 over 5 valid tokens
    w = torch.tensor([2.0, 1.0, 0.25, 0.4, 2.0], dtype=torch.float64)
    assert metrics["correction/weight_mean"].item() == pytest.approx(w.mean().item())
    assert metrics["correction/weight_std"].item() == pytest.approx(w.std(unbiased=False).item())
    assert metrics["correction/ess"].item() == pytest.approx(5.65**2 / (5 * 9.2225))
    assert metrics["correction/masked_frac"].item() == 0.0
    _, metrics = weights_of("icepop")  # 2 of 5 valid tokens rejected
    assert metrics["correction/masked_frac"].item() == pytest.approx(0.4)
    _, metrics = weights_of("tis", cap=2.0, level="sequence")  # units are responses: 0.5 and 1.2
    assert metrics["correction/weight_mean"].item() == pytest.approx(0.85)
    assert metrics["correction/ess"].item() == pytest.approx(1.7**2 / (2 * (0.25 + 1.44)))
    equal = weight_metrics(torch.ones(2, 3), MASK)
    assert equal["correction/ess"].item() == 1.0 and equal["correction/weight_std"].item() == 0.0


def test_a_corrected_grpo_loss_and_gradient_are_the_weighted_formula():
    logp = OLD.clone().requires_grad_(True)  # on-policy: every ratio 1, no clipping
    adv = torch.tensor([1.0, -2.0])
    weights, _ = weights_of("icepop")
    loss, _ = get_objective("grpo")(logp=logp, old_logp=OLD, advantages=adv, mask=MASK, weights=weights)
    # J = 1/B sum_i 1/|y_i| sum_t w_t A_i: (1/3)(2 + 1 + 0) * 1 + (1/2)(0 + 3) * -2 = 1 - 3
    assert loss.item() == pytest.approx(-(1.0 - 3.0) / 2)
    loss.backward()
    expected = -torch.tensor([[2.0 / 3, 1.0 / 3, 0.0], [0.0, 3.0 * -2 / 2, 0.0]]) / 2
    torch.testing.assert_close(logp.grad, expected)


@pytest.mark.parametrize("name", list_objectives())
def test_every_objective_takes_correction_weights(name):
    """Unit weights change nothing; doubled weights double the loss; a zero-weighted token gets no gradient."""
    torch.manual_seed(0)
    logp = (OLD + 0.05 * torch.randn(2, 3)).requires_grad_(True)
    adv = torch.tensor([1.0, -1.0]) if objective_spec(name).advantages == "response" else torch.tensor([[1.0, 0.5, -1.0], [-1.0, 2.0, 0.0]])
    clip = ObjectiveEntry(name=name).clip_range()
    fn = get_objective(name)
    neutral = {"sampling_logp": OLD, "router_shift": torch.zeros(2, 3),  # mu = pi_old, no router shift
               "generator": torch.Generator().manual_seed(0)}
    clip |= {k: v for k, v in neutral.items() if k in objective_spec(name).inputs}
    plain, _ = fn(logp=logp, old_logp=OLD, advantages=adv, mask=MASK, **clip)
    ones, _ = fn(logp=logp, old_logp=OLD, advantages=adv, mask=MASK, weights=torch.ones(2, 3), **clip)
    twice, _ = fn(logp=logp, old_logp=OLD, advantages=adv, mask=MASK, weights=torch.full((2, 3), 2.0), **clip)
    assert ones.item() == pytest.approx(plain.item()) and twice.item() == pytest.approx(2 * plain.item())
    zero_row = torch.tensor([[1.0, 1.0, 1.0], [0.0, 0.0, 0.0]])
    loss, _ = fn(logp=logp, old_logp=OLD, advantages=adv, mask=MASK, weights=zero_row, **clip)
    (grad,) = torch.autograd.grad(loss, logp)
    assert torch.all(grad[1] == 0) and grad[0].abs().sum() > 0


@pytest.mark.parametrize("kind, low, high", [("mis", 2.0, 0.5), ("mis", -0.5, 2.0), ("icepop", 5.0, 0.5),
                                             ("icepop", -1.0, 5.0), ("mis", float("nan"), 2.0)])
def test_a_band_that_is_inverted_or_reaches_below_zero_is_refused(kind, low, high):
    with pytest.raises(ValueError, match=rf"{kind}: the ratio band \[low, high\] = .* needs 0 <= lower end <= upper"):
        weights_of(kind, low=low, high=high)


def test_corrections_are_listed_and_a_suite_entry_names_bad_kinds_and_params():
    assert {"tis", "mis", "icepop", "opsm"} <= set(list_corrections())
    entry = ObjectiveEntry(name="grpo", correction={"kind": "icepop", "low": 0.5, "high": 5.0})
    assert entry.correction_fn().keywords == {"low": 0.5, "high": 5.0}
    with pytest.raises(ValueError, match="correction.kind must be one of"):
        ObjectiveEntry(name="grpo", correction={"kind": "nope"})
    with pytest.raises(ValueError, match=r"correction icepop has no params \['cap'\]"):
        ObjectiveEntry(name="grpo", correction={"kind": "icepop", "cap": 2})


def test_a_runs_correction_is_recorded_and_a_changed_one_refuses_a_plain_resume(tmp_path):
    from pathlib import Path

    from gspo_bench.config import parse_suite
    from gspo_bench.config.run import RunSpec, config_changes, resolved_config

    def spec(high):
        suite = parse_suite({"name": "t", "task": {"name": "sort"}, "budget": {"kind": "steps", "value": 1},
                             "objectives": [{"name": "grpo", "correction": {"kind": "icepop", "high": high}}]})
        return RunSpec(suite=suite, entry=suite.objectives[0], seed=0, run_dir=Path("unused"))

    (tmp_path / "config.yaml").write_text(resolved_config(spec(5.0)))
    assert config_changes(tmp_path, spec(5.0)) == []
    assert "run.correction.params.high: 5.0 -> 3.0" in config_changes(tmp_path, spec(3.0))  # the run's own section
