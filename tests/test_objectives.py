"""Objectives: hand-computed small cases, the paper's gradient identities, numerics and padding."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.testing import assert_close

from gspo_bench.objectives import get_objective, objective_spec
from tests.helpers.contracts import package_objectives, parametrized

ALL = package_objectives()  # the contract runs on every registered objective: the registry, not a list
PAPER_FOUR = ["grpo", "gspo", "gspo_token"]


def call(name, logp, old_logp, adv, mask, **kw):
    """The objective, with its declared extra inputs at their neutral values unless given: mu = pi_old
    (the engine agrees with training), no router shift; clip_cov's random draw seeded."""
    neutral = {"sampling_logp": old_logp, "router_shift": torch.zeros(logp.shape),
               "generator": torch.Generator().manual_seed(0)}
    kw = {k: v for k, v in neutral.items() if k in objective_spec(name).inputs} | kw
    return get_objective(name)(logp=logp, old_logp=old_logp, advantages=adv, mask=mask, **kw)


def grad_of(name, logp, old_logp, adv, mask, **kw):
    logp = logp.clone().requires_grad_(True)
    loss, metrics = call(name, logp, old_logp, adv, mask, **kw)
    (g,) = torch.autograd.grad(loss, logp)
    return loss.detach(), g, metrics


def hand_batch(log_ratios):
    """B=2, T=3: response 0 has 3 tokens, response 1 has 2 (last position padding)."""
    old = torch.tensor([[-1.0, -2.0, -0.5], [-1.5, -0.7, -3.0]])
    lr = torch.tensor(log_ratios)
    mask = torch.tensor([[1, 1, 1], [1, 1, 0]])
    return old + lr, old, mask


# ---------------------------------------------------------------- hand-computed small cases


def test_grpo_hand_case():
    logp, old, mask = hand_batch([[math.log(1.1), math.log(0.5), math.log(1.5)], [math.log(0.7), math.log(1.3), 0.0]])
    adv = torch.tensor([1.0, -1.0])
    loss, m = call("grpo", logp, old, adv, mask, clip_low=0.2, clip_high=0.27)
    # response 0 (A=+1): min(1.1,1.1)=1.1, min(0.5,0.8)=0.5, min(1.5,1.27)=1.27 (cut high)
    # response 1 (A=-1): min(-0.7,-0.8)=-0.8 (cut low), min(-1.3,-1.27)=-1.3
    j = ((1.1 + 0.5 + 1.27) / 3 + (-0.8 - 1.3) / 2) / 2
    assert_close(loss, torch.tensor(-j))
    assert_close(m["clip/frac"], torch.tensor(2 / 5))
    assert_close(m["clip/frac_low"], torch.tensor(1 / 5))
    assert_close(m["clip/frac_high"], torch.tensor(1 / 5))
    assert_close(m["ratio/token_mean"], torch.tensor((1.1 + 0.5 + 1.5 + 0.7 + 1.3) / 5))
    assert_close(m["ratio/token_min"], torch.tensor(0.5))
    assert_close(m["ratio/token_max"], torch.tensor(1.5))


def test_gspo_hand_case():
    logp, old, mask = hand_batch([[0.3, 0.0, 0.3], [-0.1, 0.1, 0.0]])
    adv = torch.tensor([1.0, -1.0])
    loss, m = call("gspo", logp, old, adv, mask, clip_low=0.1, clip_high=0.1)
    # s_0 = exp(0.6/3) = e^0.2 = 1.2214 > 1.1 with A>0: clipped to 1.1; s_1 = exp(0/2) = 1 -> -1
    assert_close(loss, torch.tensor(-(1.1 - 1.0) / 2))
    assert_close(m["clip/frac"], torch.tensor(3 / 5))  # all 3 tokens of the clipped response
    assert_close(m["clip/frac_high"], torch.tensor(3 / 5))
    assert_close(m["ratio/seq_mean"], torch.tensor((math.exp(0.2) + 1.0) / 2))
    assert_close(m["ratio/seq_var"], torch.tensor(((math.exp(0.2) - 1.0) / 2) ** 2))


def test_gspo_token_hand_case_per_token_advantages():
    logp, old, mask = hand_batch([[0.3, 0.0, 0.3], [-0.1, 0.1, 0.0]])
    adv = torch.tensor([[1.0, -1.0, 1.0], [-1.0, 2.0, 0.0]])
    loss, m = call("gspo_token", logp, old, adv, mask, clip_low=0.1, clip_high=0.1)
    s0 = math.exp(0.2)
    # response 0: A=+1 tokens clipped to 1.1; A=-1 token: min(-s0, -1.1) = -s0 (not clipped)
    # response 1: s=1: terms -1 and 2
    j = ((1.1 - s0 + 1.1) / 3 + (-1.0 + 2.0) / 2) / 2
    assert_close(loss, torch.tensor(-j))
    assert_close(m["clip/frac"], torch.tensor(2 / 5))


def test_dapo_and_dr_grpo_reductions_on_grpo_case():
    logp, old, mask = hand_batch([[math.log(1.1), math.log(0.5), math.log(1.5)], [math.log(0.7), math.log(1.3), 0.0]])
    adv = torch.tensor([1.0, -1.0])
    total = 1.1 + 0.5 + 1.27 - 0.8 - 1.3  # the five clipped-surrogate terms (clip 0.2 / 0.27)
    loss, _ = call("dapo", logp, old, adv, mask, clip_low=0.2, clip_high=0.27)
    assert_close(loss, torch.tensor(-total / 5))  # sum over tokens / total tokens
    loss, _ = call("dr_grpo", logp, old, adv, mask, clip_low=0.2, clip_high=0.27)
    assert_close(loss, torch.tensor(-total / (2 * 3)))  # / (B * longest response)
    loss, _ = call("dr_grpo", logp, old, adv, mask, clip_low=0.2, clip_high=0.27, max_tokens=10)
    assert_close(loss, torch.tensor(-total / (2 * 10)))


def test_gmpo_hand_case():
    logp, old, mask = hand_batch([[0.3, 0.0, 0.6], [-0.5, 0.1, 0.0]])
    adv = torch.tensor([1.0, -1.0])
    loss, m = call("gmpo", logp, old, adv, mask)  # eps 0.4 in log space
    # A>0: upper bound only -> [0.3, 0, 0.4]; A<0: lower bound only -> [-0.4, 0.1]
    j = (math.exp(0.7 / 3) * 1.0 + math.exp(-0.3 / 2) * -1.0) / 2
    assert_close(loss, torch.tensor(-j))
    assert_close(m["clip/frac"], torch.tensor(2 / 5))


def test_sapo_hand_case_and_gate_gradient():
    logp, old, mask = hand_batch([[0.0, 0.0, 0.0], [math.log(2.0), 0.0, 0.0]])
    adv = torch.tensor([1.0, -1.0])
    loss, g, _ = grad_of("sapo", logp, old, adv, mask)
    sig = 1 / (1 + math.exp(-1.05 * (2.0 - 1.0)))
    # response 0: w=1, tau=1: f=4*0.5=2 per token; response 1: tau=1.05, f(2)=(4/1.05) sig, f(1)=2/1.05
    j = (2.0 + -((4 / 1.05) * sig + 2 / 1.05) / 2) / 2
    assert_close(loss, torch.tensor(-j))
    # d f / d log w = 4 sig (1 - sig) w: exactly 1 at w = 1
    assert_close(g[0], torch.full((3,), -1.0 / (2 * 3)))
    assert_close(g[1, 0], torch.tensor(1.0 * 4 * sig * (1 - sig) * 2.0 / (2 * 2)))


def test_cispo_gradient_is_truncated_weight():
    logp, old, mask = hand_batch([[math.log(1.5), 0.0, math.log(0.2)], [0.0, math.log(3.0), 0.0]])
    adv = torch.tensor([1.0, -2.0])
    _, g, m = grad_of("cispo", logp, old, adv, mask, clip_low=1.0, clip_high=0.28)
    weight = torch.tensor([[1.28, 1.0, 0.2], [1.0, 1.28, 0.0]])
    expected = -weight * torch.tensor([[1.0], [-2.0]]) / 5 * mask
    assert_close(g, expected)
    assert_close(m["clip/frac"], torch.tensor(2 / 5))  # w=1.5 and w=3 truncated


# ---------------------------------------------------------------- the paper's identities


def random_batch(seed, b=6, t=9, scale=1e-3, dtype=torch.float32):
    gen = torch.Generator().manual_seed(seed)
    old = -torch.rand(b, t, generator=gen, dtype=dtype) * 3 - 0.1
    logp = old + scale * torch.randn(b, t, generator=gen, dtype=dtype)
    lengths = torch.randint(1, t + 1, (b,), generator=gen)
    mask = torch.arange(t)[None, :] < lengths[:, None]
    adv = torch.randn(b, generator=gen, dtype=dtype)
    return logp, old, adv, mask


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("scale", [1e-4, 1e-3, 3e-2])  # from all-unclipped to heavily clipped
def test_gspo_token_equals_gspo_with_per_response_advantages(seed, scale):
    logp, old, adv, mask = random_batch(seed, scale=scale)
    l1, g1, m1 = grad_of("gspo", logp, old, adv, mask)
    l2, g2, m2 = grad_of("gspo_token", logp, old, adv, mask)
    l3, g3, m3 = grad_of("gspo_token", logp, old, adv[:, None].expand_as(logp).clone(), mask)
    for loss, g, m in ((l2, g2, m2), (l3, g3, m3)):
        assert_close(loss, l1)
        assert_close(g, g1)
        assert_close(m["clip/frac"], m1["clip/frac"])


@settings(max_examples=30, deadline=None)
@given(st.integers(1, 5), st.integers(1, 8), st.integers(0, 10_000))
def test_gspo_token_equals_gspo_property(b, t, seed):
    logp, old, adv, mask = random_batch(seed, b=b, t=t, scale=2e-3)
    l1, g1, m1 = grad_of("gspo", logp, old, adv, mask)
    l2, g2, m2 = grad_of("gspo_token", logp, old, adv, mask)
    assert_close(l2, l1)
    assert_close(g2, g1)
    assert_close(m2["clip/frac"], m1["clip/frac"])


@pytest.mark.parametrize("seed", range(3))
def test_on_policy_gradients_agree(seed):
    logp, _, adv, mask = random_batch(seed)
    grads = {}
    for name in PAPER_FOUR:
        _, grads[name], m = grad_of(name, logp, logp.clone(), adv, mask)
        assert float(m["clip/frac"]) == 0.0
        assert_close(m["ratio/token_mean"], torch.tensor(1.0))
        assert_close(m["kl/old_new"], torch.tensor(0.0))
    lengths = mask.sum(-1, keepdim=True).float()
    expected = -(adv[:, None] / (len(adv) * lengths)) * mask  # A_i / (B |y_i|) for every valid token
    for name in PAPER_FOUR:
        assert_close(grads[name], expected)


@pytest.mark.parametrize("seed", range(3))
def test_gspo_gradient_eq_10(seed):
    logp, old, adv, mask = random_batch(seed, scale=0.05)
    _, g, m = grad_of("gspo", logp, old, adv, mask, clip_low=1.0, clip_high=10.0)  # nothing clipped
    assert float(m["clip/frac"]) == 0.0
    lengths = mask.sum(-1).float()
    s = torch.exp(((logp - old) * mask).sum(-1) / lengths)
    expected = -(s * adv / (len(adv) * lengths))[:, None] * mask
    assert_close(g, expected)
    # the same weight for every token of a response: no per-token noise (the point of eq. 10)
    for i in range(len(adv)):
        row = g[i][mask[i]]
        assert_close(row, row[0].expand_as(row))


@pytest.mark.parametrize("seed", range(3))
def test_grpo_gradient_eq_12(seed):
    logp, old, adv, mask = random_batch(seed, scale=0.05)
    _, g, m = grad_of("grpo", logp, old, adv, mask, clip_low=1.0, clip_high=10.0)
    assert float(m["clip/frac"]) == 0.0
    lengths = mask.sum(-1, keepdim=True).float()
    w = torch.exp(logp - old)
    expected = -(w * adv[:, None] / (len(adv) * lengths)) * mask
    assert_close(g, expected)


def test_gspo_without_length_normalisation_would_differ():
    """The hand case pins s_i to the length-normalised ratio: an unnormalised one gives another loss."""
    logp, old, mask = hand_batch([[0.01, 0.01, 0.01], [0.01, 0.01, 0.0]])
    adv = torch.tensor([1.0, -1.0])
    loss, m = call("gspo", logp, old, adv, mask, clip_low=1.0, clip_high=1.0)
    normalised = -(math.exp(0.01) - math.exp(0.01)) / 2
    unnormalised = -(math.exp(0.03) - math.exp(0.02)) / 2
    assert_close(loss, torch.tensor(normalised))
    assert abs(float(loss) - unnormalised) > 1e-3
    assert_close(m["ratio/seq_mean"], torch.tensor(math.exp(0.01)))


# ---------------------------------------------------------------- numerics and padding


# padding invariance and the required measurements of every objective: tests/test_conformance.py (the kit)


@pytest.mark.parametrize("name", ALL)
@pytest.mark.parametrize("magnitude", [100.0, -100.0])
def test_extreme_log_ratios_stay_finite(name, magnitude):
    logp, old, adv, mask = random_batch(3)
    logp = old + magnitude * torch.sign(torch.randn_like(old))
    loss, g, metrics = grad_of(name, logp, old, adv, mask)
    assert torch.isfinite(loss)
    assert bool(torch.isfinite(g).all())
    for key, value in metrics.items():
        assert math.isfinite(float(value)), key


@pytest.mark.parametrize("name", ALL)
def test_bf16_inputs_give_fp32_results_with_grad(name):
    logp, old, adv, mask = random_batch(4, scale=0.01)
    loss, g, _ = grad_of(name, logp.bfloat16(), old.bfloat16(), adv, mask)
    assert loss.dtype == torch.float32 and g.dtype == torch.bfloat16
    assert torch.isfinite(loss) and bool(torch.isfinite(g.float()).all())


@pytest.mark.parametrize("name", ALL)
def test_empty_responses_contribute_nothing(name):
    logp, old, adv, mask = random_batch(5, scale=0.1)
    l1, g1, m1 = grad_of(name, logp, old, adv, mask)
    empty_mask = torch.cat([mask, torch.zeros(1, mask.shape[1], dtype=torch.bool)])
    l2, g2, m2 = grad_of(
        name, torch.cat([logp, logp[:1]]), torch.cat([old, old[:1] - 5]), torch.cat([adv, adv[:1] + 1]), empty_mask
    )
    assert_close(l2, l1)
    assert_close(g2[:-1], g1)
    assert bool((g2[-1] == 0).all())
    assert_close(m2["clip/frac"], m1["clip/frac"])


@pytest.mark.parametrize("name", ALL)
def test_all_empty_batch_is_zero_not_nan(name):
    logp, old, adv, mask = random_batch(6)
    loss, g, metrics = grad_of(name, logp, old, adv, torch.zeros_like(mask))
    assert float(loss) == 0.0 and bool((g == 0).all())
    assert all(math.isfinite(float(v)) for v in metrics.values())


@pytest.mark.parametrize("name", ALL)
def test_mask_as_bool_int_or_float(name):
    logp, old, adv, mask = random_batch(8, scale=0.1)
    results = [call(name, logp, old, adv, m)[0] for m in (mask, mask.long(), mask.float())]
    assert_close(results[1], results[0])
    assert_close(results[2], results[0])


# ---------------------------------------------------------------- input errors


def test_sequence_objectives_refuse_token_advantages():
    logp, old, adv, mask = random_batch(1)
    for name in ("gspo", "gmpo"):
        with pytest.raises(ValueError, match="gspo_token"):
            call(name, logp, old, adv[:, None].expand_as(logp), mask)
        assert objective_spec(name).advantages == "response"


@pytest.mark.parametrize(
    "bad, match",
    [
        (dict(mask=torch.ones(6, 8)), "share one"),
        (dict(advantages=torch.ones(5)), "advantages must be"),
        (dict(mask=torch.full((6, 9), 2.0)), "only 0 and 1"),
        (dict(logp=torch.ones(6)), "must be \\[B, T\\]"),
        (dict(clip_low=-0.1), "must be >= 0"),
        (dict(clip_low=1.5), "below 0"),
    ],
)
def test_bad_inputs_raise_clear_errors(bad, match):
    logp, old, adv, mask = random_batch(1)
    kw = dict(logp=logp, old_logp=old, advantages=adv, mask=mask) | bad
    with pytest.raises(ValueError, match=match):
        get_objective("grpo")(**kw)


def test_sapo_refuses_a_hard_clip_range():
    logp, old, adv, mask = random_batch(1)
    with pytest.raises(ValueError, match="no hard clip"):
        call("sapo", logp, old, adv, mask, clip_low=0.2, clip_high=0.2)


def test_clip_counts_by_length_bucket():
    # lengths 2 (bucket 2-3) and 8 (bucket 8-15); GSPO clips the whole long response only
    old = torch.zeros(2, 8)
    logp = old.clone()
    logp[1] = 0.3  # response 1: s = e^0.3, far outside the GSPO range with A > 0
    mask = torch.zeros(2, 8, dtype=torch.bool)
    mask[0, :2] = True
    mask[1, :] = True
    _, m = call("gspo", logp, old, torch.tensor([1.0, 1.0]), mask)
    assert float(m["count/tokens_len2-3"]) == 2 and float(m["count/clipped_len2-3"]) == 0
    assert float(m["count/tokens_len8-15"]) == 8 and float(m["count/clipped_len8-15"]) == 8
    assert float(m["count/tokens_len1-1"]) == 0 and float(m["count/tokens_len4-7"]) == 0
    assert "count/tokens_len16-31" not in m


def test_the_objective_contract_runs_on_every_registered_objective():
    """An objective registered later is in the contract tests without an edit here; a list of names put
    back in place of the registry fails here."""
    contract = parametrized(globals())
    assert set(contract) == {"test_extreme_log_ratios_stay_finite", "test_bf16_inputs_give_fp32_results_with_grad",
                             "test_empty_responses_contribute_nothing", "test_all_empty_batch_is_zero_not_nan",
                             "test_mask_as_bool_int_or_float"}
    assert all(names == package_objectives() for names in contract.values()), contract
