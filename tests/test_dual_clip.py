"""Dual clip (`kwargs: {dual_clip: c}`) on the token-clipped objectives: hand-computed values and
gradients, its clip fraction, off by default, and its checks."""

from __future__ import annotations

import pytest
import torch
from torch.testing import assert_close

from gspo_bench.config import parse_suite
from gspo_bench.config.load import SuiteError
from gspo_bench.objectives import get_objective, objective_spec
from gspo_bench.suite.preflight import check_runnable

TOKEN_CLIPPED = ["grpo", "dapo", "dr_grpo", "clip_cov"]


def case():
    """B=2, T=3. Response 0 (A=+1): ratios 4.0, 1.1, 0.5. Response 1 (A=-1): ratios 5.0, 0.7, padding."""
    old = torch.tensor([[-1.0, -2.0, -0.5], [-1.5, -0.7, -3.0]])
    ratios = torch.tensor([[4.0, 1.1, 0.5], [5.0, 0.7, 1.0]])
    mask = torch.tensor([[True, True, True], [True, True, False]])
    return old + ratios.log(), old, torch.tensor([1.0, -1.0]), mask


def grad(name, **kw):
    logp, old, adv, mask = case()
    logp = logp.clone().requires_grad_(True)
    extra = {"generator": torch.Generator().manual_seed(0)} if "generator" in objective_spec(name).inputs else {}
    loss, metrics = get_objective(name)(logp=logp, old_logp=old, advantages=adv, mask=mask, **extra, **kw)
    (g,) = torch.autograd.grad(loss, logp)
    return loss.detach(), g, metrics


def test_grpo_dual_clip_hand_case():
    loss, g, m = grad("grpo", clip_low=0.2, clip_high=0.27, dual_clip=3.0)
    # response 0 (A=+1): min(4, 1.27) = 1.27 (cut high), 1.1, 0.5; the dual clip ignores A > 0
    # response 1 (A=-1): min(-5, -1.27) = -5, bounded below by 3 * -1 = -3 (dual); min(-0.7, -0.8) = -0.8 (cut low)
    j = ((1.27 + 1.1 + 0.5) / 3 + (-3.0 - 0.8) / 2) / 2
    assert_close(loss, torch.tensor(-j))
    assert_close(m["clip/frac_dual"], torch.tensor(1 / 5))
    assert_close(m["clip/frac"], torch.tensor(3 / 5))  # high, low and dual: every zero-gradient token
    assert_close(m["clip/frac_low"], torch.tensor(1 / 5)) and assert_close(m["clip/frac_high"], torch.tensor(1 / 5))
    # gradient of -J in log w: -w A / (B |y_i|) where the term is live, 0 where clipped or dual-clipped
    expected = torch.tensor([[0.0, -1.1 / 6, -0.5 / 6], [0.0, 0.0, 0.0]])
    assert_close(g, expected)


def test_without_the_dual_clip_the_token_beyond_it_keeps_its_gradient():
    loss, g, m = grad("grpo", clip_low=0.2, clip_high=0.27)
    j = ((1.27 + 1.1 + 0.5) / 3 + (-5.0 - 0.8) / 2) / 2
    assert_close(loss, torch.tensor(-j))
    assert_close(g[1, 0], torch.tensor(5.0 / 4))  # -(w A) / (B |y|) = 5 / 4: unbounded in w
    assert "clip/frac_dual" not in m and torch.equal(loss, grad("grpo", dual_clip=None)[0])


def test_a_dual_clip_above_the_ratio_changes_nothing():
    base, g_base, _ = grad("grpo")
    loss, g, m = grad("grpo", dual_clip=5.5)  # every ratio is below 5.5
    assert torch.equal(loss, base) and torch.equal(g, g_base) and float(m["clip/frac_dual"]) == 0.0


@pytest.mark.parametrize("name", TOKEN_CLIPPED)
def test_every_token_clipped_objective_bounds_negative_advantage_terms(name):
    """The dual-clipped token (ratio 5 > c = 3, A < 0) gets no gradient; the loss is its term's change,
    c A - w A = -3 + 5 = 2, times the reduction's weight for that token, lower in -J."""
    loss_off, g_off, _ = grad(name)
    loss_on, g_on, m = grad(name, dual_clip=3.0)
    assert float(g_on[1, 0]) == 0.0 and float(g_off[1, 0]) > 0.0
    assert_close(m["clip/frac_dual"], torch.tensor(1 / 5))
    weight = {"grpo": 1 / (2 * 2), "dapo": 1 / 5, "dr_grpo": 1 / (2 * 3), "clip_cov": 1 / 5}[name]
    assert_close(loss_off - loss_on, torch.tensor(2.0 * weight))
    unchanged = torch.ones_like(g_on, dtype=torch.bool)
    unchanged[1, 0] = False
    assert torch.equal(g_on[unchanged], g_off[unchanged])


def test_clip_cov_never_drops_a_token_the_dual_clip_cut():
    """ratio_k 1 and Cov in (-100, 100): Clip-Cov drops every token the clips left alone. With c = 3 those
    are response 0's 1.1 and 0.5 (4.0 is cut high; 1.2 stays in the loss), not response 1's ratio 5 (dual:
    its term stays at 3 A = -3) nor 0.7 (cut low: -0.8). J = (1.2 - 3 - 0.8) / 5; 2 of 5 tokens dropped."""
    loss, g, m = grad("clip_cov", ratio_k=1.0, cov_low=-100.0, cov_high=100.0, dual_clip=3.0)
    assert_close(loss, torch.tensor(-(1.2 - 3.0 - 0.8) / 5))
    assert_close(m["cov/frac"], torch.tensor(2 / 5))
    assert torch.equal(g, torch.zeros_like(g))  # every token cut or dropped


@pytest.mark.parametrize("bad", [1.0, 0.5, -2.0, True, "3"])
def test_a_dual_clip_must_be_a_number_above_one(bad):
    logp, old, adv, mask = case()
    with pytest.raises(ValueError, match="dual_clip must be a number > 1"):
        get_objective("grpo")(logp=logp, old_logp=old, advantages=adv, mask=mask, dual_clip=bad)


def test_the_suite_sets_it_in_kwargs_and_preflight_refuses_a_bad_one():
    suite = {"name": "d", "task": {"name": "sort"}, "budget": {"kind": "steps", "value": 1},
             "objectives": [{"name": "grpo", "kwargs": {"dual_clip": 3.0}}]}
    check_runnable(parse_suite(suite))
    assert objective_spec("grpo").params()["dual_clip"] is None  # off by default: the paper's GRPO
    suite["objectives"] = [{"name": "grpo", "kwargs": {"dual_clip": 0.9}}]
    with pytest.raises(SuiteError, match=r"objectives\.0 \(grpo\): grpo: dual_clip must be a number > 1"):
        check_runnable(parse_suite(suite))
