"""The 2026 objectives on hand-computed small cases: VESPO, DRO, prime-rl's IPO (each also held equal to
its reference in tests/test_references_2026.py)."""

from __future__ import annotations

import math

import pytest
import torch
from torch.testing import assert_close

from gspo_bench.objectives import get_objective


def grad(name, logp, *args, **kw):
    logp = logp.clone().requires_grad_(True)
    loss, metrics = get_objective(name)(logp, *args, **kw)
    (g,) = torch.autograd.grad(loss, logp)
    return loss.detach(), g, metrics


# ---------------------------------------------------------------------------------------- VESPO

def test_vespo_weighs_each_response_by_the_gamma_kernel_of_its_unnormalised_sequence_ratio():
    """Row 0: A = +1, log r = (ln 2, 0): W = 2 (not GSPO's sqrt 2), phi = 2^2 e^(3 (1 - 2)) = 4 e^-3.
    Row 1: A = -1, log r = (-ln 2): W = 1/2, phi = (1/2)^3 e^(2 (1 - 1/2)) = e / 8. Three tokens."""
    old = torch.tensor([[-1.0, -0.5], [-2.0, -7.0]])
    logp = old + torch.tensor([[math.log(2.0), 0.0], [-math.log(2.0), 0.0]])
    mask = torch.tensor([[True, True], [True, False]])
    adv = torch.tensor([1.0, -1.0])
    loss, g, metrics = grad("vespo", logp, old, adv, mask)
    phi = (4 * math.exp(-3.0), math.e / 8)
    j = (phi[0] * (float(logp[0, 0]) + float(logp[0, 1])) - phi[1] * float(logp[1, 0])) / 3
    assert loss.item() == pytest.approx(-j, rel=1e-6)
    assert_close(g, torch.tensor([[-phi[0] / 3, -phi[0] / 3], [phi[1] / 3, 0.0]]))
    assert metrics["vespo/phi_mean"].item() == pytest.approx(sum(phi) / 2, rel=1e-6)
    # phi = 0.199 < 1/2: row 0 counts as softly clipped above; phi = 0.340 < 1/2: row 1 below
    assert metrics["clip/frac_high"].item() == pytest.approx(2 / 3) and metrics["clip/frac_low"].item() == pytest.approx(1 / 3)
    _, g_on, _ = grad("vespo", old, old, adv, mask)  # W = 1: phi(1) = 1, the plain policy gradient
    assert_close(g_on, torch.tensor([[-1 / 3, -1 / 3], [1 / 3, 0.0]]))


def test_vespo_refuses_a_kernel_without_decay():
    old = torch.zeros(1, 1)
    with pytest.raises(ValueError, match="lambda_pos"):
        get_objective("vespo")(old, old, torch.ones(1), torch.ones(1, 1).bool(), lambda_pos=0.0)


# ---------------------------------------------------------------------------------------- DRO

def test_dro_adds_a_quadratic_pull_toward_pi_old_to_the_plain_policy_gradient():
    """Three tokens, beta 0.5: log r = (0.4, -0.2) with A = +1, log r = (0.6) with A = -2. Per token
    J_t = A log pi - beta/2 (log r)^2, so dJ/dlogpi = A - beta log r: (0.8, 1.1) and (-2.3), over 3 tokens."""
    old = torch.tensor([[-1.0, -0.5], [-2.0, -3.0]])
    log_r = torch.tensor([[0.4, -0.2], [0.6, 0.0]])
    mask = torch.tensor([[True, True], [True, False]])
    adv = torch.tensor([1.0, -2.0])
    loss, g, metrics = grad("dro", old + log_r, old, adv, mask, beta=0.5)
    logp = old + log_r
    j = (float(logp[0, 0] + logp[0, 1]) - 2 * float(logp[1, 0]) - 0.25 * (0.16 + 0.04 + 0.36)) / 3
    assert loss.item() == pytest.approx(-j, rel=1e-6)
    assert_close(g, -torch.tensor([[0.8, 1.1], [-2.3, 0.0]]) / 3)
    assert metrics["dro/ppo_kl"].item() == pytest.approx(-(0.4 - 0.2 + 0.6) / 3, rel=1e-6)
    assert metrics["clip/frac"].item() == 0.0
    # zero advantages: only the pull toward pi_old, -beta log r per token
    _, g_zero, _ = grad("dro", old + log_r, old, torch.zeros(2), mask, beta=0.5)
    assert_close(g_zero, 0.5 * log_r * mask / 3)


# ---------------------------------------------------------------------------------------- IPO (prime-rl)

def test_ipo_masks_a_far_moved_token_whatever_its_advantage_and_keeps_the_penalty_on_it():
    """Row 0, A = +1: mu .5 -> pi .55 (kept, r = 1.1), mu .3 -> pi .45 (|pi - mu| = .15: masked).
    Row 1, A = -1: mu .2 -> pi .35 (masked here, though DPPO-Binary-TV keeps a token pushed against its
    advantage), mu .4 -> pi .38 (kept, r = .95). kl_tau .1: every token keeps -kl_tau (log r)^2."""
    mu = torch.tensor([[0.5, 0.3], [0.2, 0.4]]).log()
    pi = torch.tensor([[0.55, 0.45], [0.35, 0.38]]).log()
    adv, mask = torch.tensor([1.0, -1.0]), torch.ones(2, 2).bool()
    loss, g, metrics = grad("ipo", pi, pi.detach(), adv, mask, sampling_logp=mu, kl_tau=0.1)
    r = torch.tensor([[1.1, 1.5], [1.75, 0.95]])
    kept = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    a = torch.tensor([[1.0, 1.0], [-1.0, -1.0]])
    j = (kept * a * r).sum() - 0.1 * (r.log() ** 2).sum()
    assert loss.item() == pytest.approx(-j.item() / 4, rel=1e-5)
    assert_close(g, -(kept * a * r - 0.2 * r.log()) / 4)
    assert metrics["ipo/masked_frac"].item() == 0.5
    assert metrics["clip/frac_high"].item() == 0.5 and metrics["clip/frac_low"].item() == 0.0
    # the anchor is mu: another old_logp changes the ratio measurements only
    other, _, _ = grad("ipo", pi, mu, adv, mask, sampling_logp=mu, kl_tau=0.1)
    assert other.item() == pytest.approx(loss.item())


# ---------------------------------------------------------------------------------------- MinPRO

def test_minpro_weighs_each_token_by_its_ratio_times_the_smallest_ratio_before_it():
    """Row 0 (A = +1): r = (0.5, 2, 1.1, pad): m = (1, 0.5, 0.5): weights m r = (0.5, 1, 0.55), none above
    1.28. Row 1 (A = -1): r = (1.2, 1.5, 1.0, 0.4): m = (1, 1.2, 1.2, 1): m r = (1.2, 1.8 -> cut to 1.28, 1.2,
    0.4). The prefix ratio would give 0.5, 1, 1.1 and 1.2, 1.8, 1.8, 0.72. Seven tokens, token mean; the weight
    is detached, so d loss / d log pi = -w A / 7."""
    old = torch.tensor([[-1.0, -0.5, -2.0, -3.0], [-0.2, -1.5, -0.7, -0.9]])
    r = torch.tensor([[0.5, 2.0, 1.1, 1.0], [1.2, 1.5, 1.0, 0.4]])
    mask = torch.tensor([[True, True, True, False], [True, True, True, True]])
    adv = torch.tensor([1.0, -1.0])
    loss, g, metrics = grad("minpro", old + r.log(), old, adv, mask)
    w = torch.tensor([[0.5, 1.0, 0.55, 0.0], [1.2, 1.28, 1.2, 0.4]])
    logp = (old + r.log()) * mask
    assert loss.item() == pytest.approx(-float((w * adv[:, None] * logp).sum()) / 7, rel=1e-6)
    assert_close(g, -w * adv[:, None] / 7)
    assert metrics["clip/frac"].item() == pytest.approx(1 / 7) and metrics["clip/frac_high"].item() == pytest.approx(1 / 7)
    m = (1 + 0.5 + 0.5 + 1 + 1.2 + 1.2 + 1.0) / 7
    assert metrics["minpro/prefix_min_mean"].item() == pytest.approx(m, rel=1e-6)
    assert metrics["minpro/prefix_min_lt_half"].item() == 0.0
    _, g_on, _ = grad("minpro", old, old, adv, mask)  # on policy: every m = r = 1, the plain policy gradient
    assert_close(g_on, -mask.float() * adv[:, None] / 7)


def test_minpro_prefix_minimum_skips_padding_and_starts_at_one():
    """Padding inside a row (a masked prompt token, say) is skipped by the minimum; an all-padding row stays 1."""
    from gspo_bench.objectives.minpro import log_prefix_min

    log_r = torch.log(torch.tensor([[0.1, 0.5, 2.0, 0.8], [3.0, 3.0, 3.0, 3.0]]))
    mask = torch.tensor([[False, True, True, True], [False, False, False, False]])
    assert_close(log_prefix_min(log_r, mask).exp(), torch.tensor([[1.0, 1.0, 0.5, 0.5], [1.0, 1.0, 1.0, 1.0]]))


# ---------------------------------------------------------------------------------------- VCPO

def test_vcpo_truncates_each_sequence_weight_and_scales_the_step_by_the_ess():
    """Against mu: row 0 (A = +1) log w = ln 2 + ln 5 = ln 10 -> truncated at 8; row 1 (A = -1) log w = ln 0.5.
    Per-response token means (2 and 1 tokens) over B' = 2. rho = (10 + 0.5)^2 / (2 (100 + 0.25)) = 0.55;
    the lr factor sqrt(0.55)."""
    mu = torch.tensor([[-1.0, -0.5], [-2.0, -7.0]])
    logp = mu + torch.tensor([[math.log(2.0), math.log(5.0)], [-math.log(2.0), 0.0]])
    mask = torch.tensor([[True, True], [True, False]])
    adv = torch.tensor([1.0, -1.0])
    loss, g, metrics = grad("vcpo", logp, logp.detach(), adv, mask, sampling_logp=mu)
    j = (8.0 * float(logp[0].sum()) / 2 - 0.5 * float(logp[1, 0])) / 2
    assert loss.item() == pytest.approx(-j, rel=1e-6)
    assert_close(g, -torch.tensor([[8.0 / 4, 8.0 / 4], [-0.5 / 2, 0.0]]))
    rho = 10.5**2 / (2 * 100.25)
    assert metrics["vcpo/ess"].item() == pytest.approx(rho, rel=1e-6)
    assert metrics["optim/lr_scale"].item() == pytest.approx(math.sqrt(rho), rel=1e-6)
    assert metrics["clip/frac"].item() == pytest.approx(2 / 3)  # row 0's tokens: its weight was truncated
    _, _, on = grad("vcpo", mu, mu, adv, mask, sampling_logp=mu)  # on the sampler: every weight 1, full step
    assert on["optim/lr_scale"].item() == 1.0 and on["vcpo/ess"].item() == pytest.approx(1.0)


def test_vcpo_returns_its_step_factor_with_measurements_off():
    from gspo_bench.objectives.metrics import measurements_off

    mu = torch.zeros(2, 2)
    with measurements_off():
        _, metrics = get_objective("vcpo")(logp=mu + torch.tensor([[1.0, 0.0], [0.0, 0.0]]), old_logp=mu,
                                           advantages=torch.ones(2), mask=torch.ones(2, 2).bool(), sampling_logp=mu)
    assert set(metrics) == {"optim/lr_scale"} and metrics["optim/lr_scale"].item() < 1
