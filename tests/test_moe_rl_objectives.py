"""The 2025-2026 objectives, each on a hand-computed small case: RSPO (and the router shift it reads
from the routing capture), M2PO, DPPO-Binary-TV, LUSPO, KL-Cov and Clip-Cov."""

from __future__ import annotations

import copy
import dataclasses
import math
from functools import partial

import pytest
import torch
from torch.testing import assert_close

from gspo_bench.config import TrainConfig
from gspo_bench.moe import RoutingCapture, find_routers
from gspo_bench.objectives import get_objective
from gspo_bench.objectives.rspo import router_shift_from_scores
from gspo_bench.train.old_policy import old_policy_pass
from gspo_bench.train.optim import make_optimizer
from gspo_bench.train.policy import Policy
from gspo_bench.train.update import UpdateSettings, policy_loss, update_minibatch
from tests.helpers.rollouts import tiny_spread_rollout
from tests.helpers.scripts import script


def grad(fn, logp, *args, **kw):
    logp = logp.clone().requires_grad_(True)
    loss, metrics = fn(logp, *args, **kw)
    (g,) = torch.autograd.grad(loss, logp)
    return loss.detach(), g, metrics


# ---------------------------------------------------------------------------------------- RSPO

def scores(*layers):
    """Gate scores [L, B=1, T=1, k] from per-layer lists of the old experts' probabilities."""
    return torch.tensor(layers)[:, None, None, :]


def test_router_shift_is_the_mean_absolute_log_score_change_over_layers_and_old_experts():
    old = scores([0.5, 0.3], [0.6, 0.2])
    new = scores([0.4, 0.3], [0.6, 0.1])
    d = router_shift_from_scores(old, new)  # [1, 1]
    expected = 0.5 * (0.5 * abs(math.log(0.4 / 0.5)) + 0.5 * abs(math.log(0.1 / 0.2)))  # 0.229073
    assert d.item() == pytest.approx(expected, rel=1e-6)
    assert math.exp(-d.item()) == pytest.approx(0.79528, abs=1e-5)
    assert router_shift_from_scores(old, old).item() == 0.0
    assert router_shift_from_scores(old, scores([0.6, 0.3], [0.6, 0.4])).item() > 0  # up or down: both shift
    # one expert up by ln 1.2, the other down by ln 1.2: opposite moves add, never cancel
    mixed = router_shift_from_scores(old, scores([0.6, 0.25], [0.6, 0.2])).item()
    assert mixed == pytest.approx(0.5 * 0.5 * (math.log(1.2) + math.log(0.3 / 0.25)), rel=1e-5)


def test_rspo_weight_falls_as_the_old_experts_gate_probabilities_move_down_to_its_floor():
    """One token, A = +1, theta = theta_old: the loss is -gamma = -max(exp(-d), gamma_min)."""
    rspo = partial(get_objective("rspo"), old_logp=torch.zeros(1, 1), advantages=torch.tensor([1.0]),
                   mask=torch.ones(1, 1, dtype=torch.bool), gamma_min=0.7)
    old = scores([0.5, 0.3], [0.6, 0.2])
    gammas = []
    for p in (0.5, 0.45, 0.4, 0.3, 0.2, 0.1, 0.05):  # the old top expert's probability under the new router
        d = router_shift_from_scores(old, scores([p, 0.3], [0.6, 0.2]))
        loss, metrics = rspo(torch.zeros(1, 1), router_shift=d)
        gammas.append(-loss.item())
        assert metrics["rspo/gamma_mean"].item() == pytest.approx(max(math.exp(-d.item()), 0.7), rel=1e-6)
        assert -loss.item() == pytest.approx(max(math.exp(-0.25 * abs(math.log(p / 0.5))), 0.7), rel=1e-6)
    assert gammas[0] == pytest.approx(1.0)
    assert all(a > b for a, b in zip(gammas[:5], gammas[1:5]))  # strictly falling while above the floor
    assert gammas[-2:] == pytest.approx([0.7, 0.7])  # 0.1 and 0.05: exp(-d) < 0.7, the floor holds


def test_rspo_rescales_token_ratios_before_gmpo_and_reduces_to_gmpo_without_shift():
    old = torch.tensor([[-1.0, -2.0, -0.5], [-1.5, -0.7, -3.0]])
    log_w = torch.tensor([[0.1, -0.2, 0.05], [0.3, -0.1, 0.0]])
    mask = torch.tensor([[1, 1, 1], [1, 1, 0]]).bool()
    adv = torch.tensor([1.0, -1.0])
    shift = torch.tensor([[0.0, 0.2, 0.1], [0.05, 0.5, 9.0]])  # the padding's shift is ignored
    loss, g, _ = grad(lambda lp: get_objective("rspo")(lp, old, adv, mask, router_shift=shift), old + log_w)
    gamma = torch.exp(-shift).clamp(min=0.7)
    # response 0 (A > 0): log w + log gamma = [0.1, -0.4, -0.05], none above 0.4; response 1 (A < 0):
    # [0.25, -0.6931 (gamma floor 0.7 at d = 0.5)...]: -0.1 + log 0.7 = -0.4567 < -0.4 is clipped to -0.4
    used0 = (log_w[0] + gamma[0].log()).mean()
    used1 = (0.3 + math.log(math.exp(-0.05)) + -0.4) / 2
    expected = -(math.exp(used0.item()) * 1.0 + math.exp(used1) * -1.0) / 2
    assert loss.item() == pytest.approx(expected, rel=1e-6)
    s0, s1 = math.exp(used0.item()), math.exp(used1)
    assert_close(g, torch.tensor([[-s0 / 6, -s0 / 6, -s0 / 6], [s1 / 4, 0.0, 0.0]]))  # clipped token: no gradient
    zero = torch.zeros(2, 3)
    plain, g_plain, _ = grad(lambda lp: get_objective("rspo")(lp, old, adv, mask, router_shift=zero), old + log_w)
    gmpo, g_gmpo, _ = grad(lambda lp: get_objective("gmpo")(lp, old, adv, mask), old + log_w)
    assert plain.item() == pytest.approx(gmpo.item()) and torch.equal(g_plain, g_gmpo)


def test_rspo_gamma_is_a_stop_gradient_weight():
    shift = torch.tensor([[0.3, 0.1]], requires_grad=True)
    logp = torch.zeros(1, 2, requires_grad=True)
    loss, _ = get_objective("rspo")(logp, torch.zeros(1, 2), torch.tensor([1.0]), torch.ones(1, 2).bool(), router_shift=shift)
    loss.backward()
    assert shift.grad is None and logp.grad.abs().sum() > 0




@pytest.fixture(scope="module")
def parts():
    return tiny_spread_rollout(2)


SHIFT = UpdateSettings(inputs=frozenset({"router_shift"}))  # what the loop passes for an objective declaring it


def spy_objective():
    seen = {}

    def objective(logp, old_logp, advantages, mask, router_shift, weights=None):
        seen["router_shift"] = router_shift
        return (logp * mask).sum() * 0.0, {}

    return objective, seen


def test_the_update_hands_rspo_the_router_shift_of_its_own_forward_at_the_response_tokens(parts):
    model, batch = parts
    policy = Policy(copy.deepcopy(model).train())
    policy.optimizer = make_optimizer(policy.model, TrainConfig(), lr=0.0)
    old = old_policy_pass(policy, batch, temperature=1.0, gate_scores=True)
    assert old.gate_scores.shape == old.routing.shape and old.gate_scores.dtype == torch.float32
    rows = torch.tensor([5, 0, 3])
    objective, seen = spy_objective()
    update_minibatch(policy, objective, batch, old, rows, SHIFT)
    assert seen["router_shift"].abs().max() < 1e-5  # the router has not moved: no shift
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for router in find_routers(policy.model):
            router.weight.add_(0.5 * torch.randn(router.weight.shape, generator=gen))
    update_minibatch(policy, objective, batch, old, rows, SHIFT)
    with torch.no_grad(), RoutingCapture(policy.model, probe=old.routing[:, rows]) as cap:
        policy.model(input_ids=batch.input_ids[rows], attention_mask=batch.attention_mask[rows])
    length, n = batch.input_ids.shape[1], batch.n_response
    expected = router_shift_from_scores(old.gate_scores[:, rows], cap.probe_scores)[:, length - n - 1: length - 1]
    assert expected.abs().max() > 0.05
    assert_close(seen["router_shift"], expected, atol=1e-5, rtol=1e-4)


def test_probe_scores_are_the_live_gate_scores_of_the_probed_experts(parts):
    model, batch = parts
    ids, am = batch.input_ids[:3], batch.attention_mask[:3]
    with torch.no_grad(), RoutingCapture(model) as own:
        model(input_ids=ids, attention_mask=am)
    with torch.no_grad(), RoutingCapture(model, probe=own.routing) as probed:
        model(input_ids=ids, attention_mask=am)
    assert torch.equal(probed.probe_scores, own.gate_scores)
    with torch.no_grad(), RoutingCapture(model, probe=(own.routing + 1) % 4) as other:
        model(input_ids=ids, attention_mask=am)
    assert not torch.equal(other.probe_scores, own.gate_scores)


def test_an_rspo_update_without_gate_scores_from_the_old_pass_is_refused(parts):
    model, batch = parts
    policy = Policy(copy.deepcopy(model).train())
    policy.optimizer = make_optimizer(policy.model, TrainConfig(), lr=0.0)
    old = old_policy_pass(policy, batch, temperature=1.0)
    with pytest.raises(ValueError, match="router shift"):
        update_minibatch(policy, spy_objective()[0], batch, old, torch.tensor([0, 1]), SHIFT)


# ---------------------------------------------------------------------------------------- M2PO

def m2po_case():
    """R1 (A = +1) log r = [0.3, -0.1, 0.05]; R2 (A = -1) log r = [-0.4, 0.0] (+ padding)."""
    old = torch.tensor([[-1.0, -2.0, -0.5], [-1.5, -0.7, -3.0]])
    log_r = torch.tensor([[0.3, -0.1, 0.05], [-0.4, 0.0, 0.0]])
    return old + log_r, old, torch.tensor([1.0, -1.0]), torch.tensor([[1, 1, 1], [1, 1, 0]]).bool()


def test_m2po_masks_the_largest_second_moments_of_trust_region_tokens_until_their_mean_is_tau():
    logp, old, adv, mask = m2po_case()
    # trust region: R1 t1 (0.09), R1 t3 (0.0025), R2 t1 (0.16); mean 0.0842 > 0.04 -> drop 0.16;
    # mean 0.04625 > 0.04 -> drop 0.09; mean 0.0025 <= 0.04: stop. R1 t2 and R2 t2 are outside it.
    loss, g, metrics = grad(get_objective("m2po"), logp, old, adv, mask, tau=0.04)
    kept = math.exp(-0.1) * 1 + math.exp(0.05) * 1 + 1.0 * -1
    assert loss.item() == pytest.approx(-kept / 5, rel=1e-6)  # every valid token in the denominator
    assert_close(g, -torch.tensor([[0.0, math.exp(-0.1), math.exp(0.05)], [0.0, -1.0, 0.0]]) / 5)
    assert metrics["clip/frac_high"].item() == pytest.approx(1 / 5) and metrics["clip/frac_low"].item() == pytest.approx(1 / 5)
    assert metrics["m2po/m2_trust"].item() == pytest.approx((0.09 + 0.0025 + 0.16) / 3, rel=1e-5)


@pytest.mark.parametrize(("tau", "masked", "low", "high"), [(1.0, 0, 0, 0), (0.05, 1, 1, 0), (0.04, 2, 1, 1),
                                                           (0.001, 3, 1, 2)])
def test_m2po_masks_fewer_tokens_as_tau_grows(tau, masked, low, high):
    """Masked first: R2 t1 (A < 0, reported low), then R1 t1 and R1 t3 (A > 0, reported high)."""
    logp, old, adv, mask = m2po_case()
    _, g, metrics = grad(get_objective("m2po"), logp, old, adv, mask, tau=tau)
    assert round(metrics["clip/frac"].item() * 5) == masked
    assert round(metrics["clip/frac_low"].item() * 5) == low and round(metrics["clip/frac_high"].item() * 5) == high
    assert int((g[mask] == 0).sum()) == masked


# ---------------------------------------------------------------------------------------- DPPO

def test_dppo_binary_tv_masks_by_probability_shift_not_by_ratio():
    """a: A>0, mu .5 -> pi .7 (shift .2 > .15: masked, though r = 1.4); b: A>0, .01 -> .05 (r = 5, shift
    .04: kept); c: A<0, .9 -> .7 (shift -.2: masked); d: A<0, .3 -> .35 (kept: moving up is not past it)."""
    mu = torch.tensor([[0.5, 0.01], [0.9, 0.3]]).log()
    pi = torch.tensor([[0.7, 0.05], [0.7, 0.35]]).log()
    adv, mask = torch.tensor([1.0, -1.0]), torch.ones(2, 2).bool()
    loss, g, metrics = grad(get_objective("dppo_binary_tv"), pi, pi.detach() * 0 + mu, adv, mask, sampling_logp=mu)
    r_b, r_d = 0.05 / 0.01, 0.35 / 0.3
    assert loss.item() == pytest.approx(-(r_b * 1 + r_d * -1) / 4, rel=1e-5)
    assert_close(g, -torch.tensor([[0.0, r_b], [0.0, -r_d]]) / 4)
    assert metrics["clip/frac_high"].item() == 0.25 and metrics["clip/frac_low"].item() == 0.25
    # the anchor is mu, not pi_old: another old_logp changes the measurements only
    other, _, _ = grad(get_objective("dppo_binary_tv"), pi, pi.detach(), adv, mask, sampling_logp=mu)
    assert other.item() == pytest.approx(loss.item())


def test_dppo_binary_tv_keeps_a_token_that_moved_past_delta_against_its_advantage():
    """a: A>0, mu .6 -> pi .3 (shift -.3); b: A<0, .2 -> .6 (shift +.4): both moved far, but against
    their advantage, so the update pulls them back: neither is masked, every token keeps its gradient."""
    mu = torch.tensor([[0.6], [0.2]]).log()
    pi = torch.tensor([[0.3], [0.6]]).log()
    adv, mask = torch.tensor([1.0, -1.0]), torch.ones(2, 1).bool()
    loss, g, metrics = grad(get_objective("dppo_binary_tv"), pi, mu, adv, mask, sampling_logp=mu)
    r_a, r_b = 0.3 / 0.6, 0.6 / 0.2
    assert loss.item() == pytest.approx(-(r_a - r_b) / 2, rel=1e-5)
    assert_close(g, -torch.tensor([[r_a], [-r_b]]) / 2)
    assert metrics["clip/frac"].item() == 0.0


# ---------------------------------------------------------------------------------------- LUSPO

def test_luspo_scales_each_response_term_by_its_length():
    old = torch.tensor([[-1.0, -2.0, -0.5], [-1.5, -0.7, -3.0]])
    mask = torch.tensor([[1, 1, 0], [1, 1, 1]]).bool()
    adv = torch.tensor([1.0, -1.0])
    loss, g, _ = grad(get_objective("luspo"), old, old, adv, mask)
    assert loss.item() == pytest.approx(-(2 * 1.0 + 3 * -1.0) / 2)  # 0.5
    assert_close(g, torch.tensor([[-0.5, -0.5, 0.0], [0.5, 0.5, 0.5]]))  # every token: -A_i s_i / B
    _, g_gspo, _ = grad(get_objective("gspo"), old, old, adv, mask)
    assert_close(g_gspo, torch.tensor([[-1 / 4, -1 / 4, 0.0], [1 / 6, 1 / 6, 1 / 6]]))  # GSPO: -A_i / (B |y_i|)
    log_w = torch.tensor([[0.01, 0.01, 0.0], [0.0, 0.0, 0.0]])  # s_0 = e^0.01 > 1 + 2.5e-3: clipped
    clipped, g_clip, metrics = grad(get_objective("luspo"), old + log_w, old, adv, mask)
    assert clipped.item() == pytest.approx(-(2 * 1.0025 - 3) / 2, rel=1e-6)
    assert torch.all(g_clip[0] == 0) and metrics["clip/frac"].item() == pytest.approx(2 / 5)


# ---------------------------------------------------------------------------------------- KL-Cov, Clip-Cov

COV_LOGP = torch.tensor([[-0.5, -2.0], [-1.0, -3.0]])  # mean -1.625


def test_kl_cov_penalises_the_top_covariance_tokens():
    """A = (+1, -1); Cov = (A - 0)(logp + 1.625) = [[1.125, -0.375], [-0.625, 1.375]]: with k = 1 the
    last token (1.375) gets +kl_coef |log r|; with k = 2 the first too. No clip."""
    log_r = torch.tensor([[0.1, 0.0], [-0.2, 0.3]])
    old, adv, mask = COV_LOGP - log_r, torch.tensor([1.0, -1.0]), torch.ones(2, 2).bool()
    r = log_r.exp()
    a = torch.tensor([[1.0, 1.0], [-1.0, -1.0]])
    for ratio_k, penalised in ((0.25, [[0, 0], [0, 1]]), (0.5, [[1, 0], [0, 1]]), (1e-4, [[0, 0], [0, 1]])):
        loss, g, metrics = grad(get_objective("kl_cov"), COV_LOGP, old, adv, mask, ratio_k=ratio_k, kl_coef=2.0)
        pen = torch.tensor(penalised, dtype=torch.float32)
        assert loss.item() == pytest.approx(-((r * a).sum() - 2.0 * (log_r.abs() * pen).sum()).item() / 4, rel=1e-6)
        assert_close(g, -(r * a - 2.0 * log_r.sign() * pen) / 4)
        assert metrics["cov/frac"].item() == pytest.approx(pen.mean().item())
        assert metrics["clip/frac"].item() == 0.0
    # A = (2, 0): centred (A - 1) gives the same Cov, so the same token; uncentred A would pick the first
    _, g, _ = grad(get_objective("kl_cov"), COV_LOGP, old, torch.tensor([2.0, 0.0]), mask, ratio_k=0.25, kl_coef=2.0)
    assert_close(g, -(r * torch.tensor([[2.0, 2.0], [0.0, 0.0]]) - 2.0 * log_r.sign() * torch.tensor([[0, 0], [0, 1.0]])) / 4)


def test_clip_cov_leaves_a_high_covariance_unclipped_token_out_of_the_update():
    """A = (+2, -2): Cov = [[2.25, -0.75], [-1.25, 2.75]]. The last token is clipped by PPO (A < 0,
    r = e^-0.3 < 0.8), so of Cov in (1, 5) only the first is eligible: it is dropped whatever the draw."""
    log_r = torch.tensor([[0.1, 0.0], [-0.2, -0.3]])
    old, adv, mask = COV_LOGP - log_r, torch.tensor([2.0, -2.0]), torch.ones(2, 2).bool()
    for seed in range(3):
        loss, g, metrics = grad(get_objective("clip_cov"), COV_LOGP, old, adv, mask, ratio_k=1.0,
                                generator=torch.Generator().manual_seed(seed))
        kept = 1.0 * 2 + math.exp(-0.2) * -2 + 0.8 * -2  # token 1 dropped; token 4 clipped at 1 - 0.2
        assert loss.item() == pytest.approx(-kept / 4, rel=1e-6)
        assert_close(g, -torch.tensor([[0.0, 2.0], [-2 * math.exp(-0.2), 0.0]]) / 4)
        assert metrics["cov/frac"].item() == 0.25 and metrics["clip/frac"].item() == 0.5


def test_clip_cov_draws_k_of_the_eligible_tokens_from_its_generator_alone():
    gen = torch.Generator().manual_seed(1)
    logp = torch.randn(8, 16, generator=gen) - 2
    adv = torch.linspace(-3, 3, 8)
    drops = []
    for seed in (0, 0, 1):
        torch.rand(3)  # whatever the process drew before does not matter
        global_state = torch.random.get_rng_state()
        _, g, metrics = grad(get_objective("clip_cov"), logp, logp, adv, torch.ones(8, 16).bool(), ratio_k=0.05,
                             generator=torch.Generator().manual_seed(seed))
        assert torch.equal(torch.random.get_rng_state(), global_state)  # torch's global generator untouched
        assert metrics["cov/frac"].item() == pytest.approx(6 / 128)  # floor(0.05 * 128) = 6
        drops.append(g == 0)
    assert torch.equal(drops[0], drops[1]) and not torch.equal(drops[0], drops[2])


def test_objectives_anchored_at_the_engine_get_its_log_probs_of_their_rows(parts):
    model, batch = parts
    policy = Policy(copy.deepcopy(model).train())
    old = old_policy_pass(policy, batch, temperature=1.0)
    batch = dataclasses.replace(batch, sampling_logp=batch.sampling_logp - torch.rand(batch.sampling_logp.shape))
    seen = {}

    def objective(logp, old_logp, advantages, mask, sampling_logp, weights=None):
        seen["mu"] = sampling_logp
        return (logp * mask).sum() * 0.0, {}

    rows = torch.tensor([6, 1, 2])
    policy_loss(objective, old.logp[rows], old, batch, rows, UpdateSettings(inputs=frozenset({"sampling_logp"})))
    assert torch.equal(seen["mu"], batch.sampling_logp[rows])


def test_the_methods_table_shows_run_means_and_the_last_five_steps_reward(tmp_path):

    import pandas as pd

    table = script("moe_rl_methods_table.py").table

    for run, extra in (("rspo-s0", {"rspo/gamma_mean": [1.0, 0.9], "rspo/shift_mean": [0.0, 0.1]}), ("gspo-s0", {})):
        (tmp_path / run).mkdir()
        frame = {"reward/mean": [0.0, 1.0, 1.0, 1.0, 1.0, 0.5], "mismatch/k3_kl": [0.002, 0.004, 0, 0, 0, 0]}
        pd.DataFrame(frame | {k: v * 3 for k, v in extra.items()}).to_parquet(tmp_path / run / "metrics.parquet")
    lines = table(tmp_path).splitlines()
    assert lines[0].startswith("| run | IcePop masked / ESS | RSPO gamma / shift d |")
    gspo, rspo = lines[2].split(" | "), lines[3].split(" | ")
    assert rspo[0] == "| rspo-s0" and rspo[2] == "0.95 / 0.05" and gspo[2] == ""
    assert rspo[6] == "0.001" and rspo[-1] == "0.900 |"  # mean over the run; reward over the last 5 steps
