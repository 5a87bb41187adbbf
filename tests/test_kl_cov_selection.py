"""KL-Cov's token selection (gspo_bench.objectives.cov) is made on values that are the same in every
update path: pi_old's log-probs (one old-policy pass per batch) and the advantages, never the update
forward's log-probs, whose float noise differs between the plain and the micro-batched forward (at the
default ratio_k, 2e-4: one token, a 1e-7 difference moved the selected token and with it the loss:
seed 1's last loss -0.0064 micro-batched against -0.0109 plain). Ties go to the earlier token."""

from __future__ import annotations

import copy
import dataclasses

import pytest
import torch

from gspo_bench.objectives.cov import kl_cov_loss
from gspo_bench.train.old_policy import old_policy_pass
from gspo_bench.train.policy import Policy
from tests.helpers.micro_batches import assert_same_update


def penalised(logp: torch.Tensor, old: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor) -> list[int]:
    """The tokens (row-major) under the KL term: where the loss's gradient differs from kl_coef 0's."""
    def grad(kl_coef: float) -> torch.Tensor:
        x = logp.clone().requires_grad_(True)
        kl_cov_loss(x, old, advantages, mask, ratio_k=2e-4, kl_coef=kl_coef)[0].backward()
        return x.grad
    return torch.nonzero((grad(1.0) - grad(0.0)).flatten().abs() > 1e-6).flatten().tolist()


def test_the_selection_is_made_on_pi_old_whatever_the_update_forward_says():
    """Row 0's tokens 0 and 2 tie on pi_old's covariance. Whichever of them the update forward puts
    higher (here by 0.4, in a run by float noise of 1e-7 between the plain and the micro-batched
    forward), the earlier one carries the KL term."""
    old = torch.tensor([[-1.0, -2.0, -1.0], [-3.0, -3.0, -3.0]])
    advantages = torch.tensor([1.0, -1.0])
    mask = torch.ones(2, 3, dtype=torch.bool)
    for moved in ([0.1, 0.0, 0.5], [0.5, 0.0, 0.1], [0.3, 0.0, 0.3 + 1e-6], [0.3 + 1e-6, 0.0, 0.3]):
        logp = old + torch.tensor([moved, [0.0, 0.0, 0.0]])
        assert penalised(logp, old, advantages, mask) == [0], moved


def test_with_every_advantage_0_the_first_valid_token_is_selected():
    """Rewards all equal (a step from random weights): every covariance is 0, a tie of all tokens; the
    first valid token is selected, whatever the log-probs."""
    old = torch.tensor([[-1.0, -2.0, -1.5], [-3.0, -0.5, -3.0]])
    mask = torch.tensor([[False, True, True], [True, True, True]])
    for shift in (0.2, -0.2):  # the update forward's log-probs ordered one way, then the other
        logp = old + shift * torch.arange(6.0).reshape(2, 3)
        assert penalised(logp, old, torch.zeros(2), mask) == [1]


def test_micro_batches_equal_the_plain_update_at_the_default_ratio_k(setting):  # noqa: F811
    """The update-level equality at the default ratio_k (one selected token), rewards and advantages not 0."""
    assert_same_update(setting, "kl_cov", kwargs={"ratio_k": 2e-4, "kl_coef": 1.0})
    assert_same_update(setting, "kl_cov", kwargs={"ratio_k": 2e-4, "kl_coef": 1.0}, checkpointed=True)


# ------------------------------------------------------------------ the kink of |log r| at r = 1

def kl_grad(log_r: torch.Tensor, **kwargs) -> torch.Tensor:
    """d loss / d logp of KL-Cov with every token penalised (ratio_k 1) and every advantage 0: the KL
    term's gradient alone."""
    old = torch.tensor([[-1.0, -2.0, -0.5]])
    x = (old + log_r).requires_grad_(True)
    kl_cov_loss(x, old, torch.zeros(1), torch.ones(1, 3, dtype=torch.bool), ratio_k=1.0, kl_coef=1.0, **kwargs)[0].backward()
    return x.grad


def test_float_noise_around_r_1_gives_the_kl_term_no_gradient():
    """Where pi_theta is pi_old (a step's first update), the update forward differs from the old pass by
    float noise (~1e-6): whatever its sign, the KL term has no gradient there, as at log r = 0 exactly;
    beyond the floor its gradient is kl_coef sign(log r) / N."""
    exact = kl_grad(torch.zeros(1, 3))
    assert torch.equal(exact, torch.zeros(1, 3))
    for noise in ([9.5e-7, -4.8e-7, 0.0], [-9.5e-7, 2.4e-7, -1e-5]):
        assert torch.equal(kl_grad(torch.tensor([noise])), exact), noise
    moved = torch.tensor([[0.3, -2e-4, 1e-3]])
    torch.testing.assert_close(kl_grad(moved), torch.tensor([[1.0, -1.0, 1.0]]) / 3)
    # the floor 0 is the released code's plain |log r|: the noise's sign decides the gradient
    torch.testing.assert_close(kl_grad(torch.tensor([[9.5e-7, -4.8e-7, 0.0]]), noise_floor=0.0),
                               torch.tensor([[1.0, -1.0, 0.0]]) / 3)
    with pytest.raises(ValueError, match="noise_floor"):
        kl_grad(torch.zeros(1, 3), noise_floor=-1.0)


@pytest.fixture(scope="module")
def unmoved(setting):  # noqa: F811
    """The test batch with pi_old computed by the policy itself: the update's pi_theta is pi_old, up to the
    float noise between the old pass (every row, every column) and the update's forward (its rows, its
    micro-batch's columns)."""
    model, batch, _ = setting
    old = old_policy_pass(Policy(copy.deepcopy(model)), batch, temperature=0.8, gate_scores=True)
    return model, batch, dataclasses.replace(old, logp=torch.where(batch.response_mask, old.logp, 0.0))


def test_micro_batches_equal_the_plain_update_where_pi_theta_is_pi_old(unmoved):
    """A step's first update, every token under the KL term: micro-batched at 16 tokens (one or two rows)
    and at 1 token (each row alone, narrower than any response), the gradient, loss and measurements
    are the plain update's. Before the floor, the micro-batched forward's log r of +-2.4e-7 on a few
    tokens (the plain one's 0.0) gave those tokens the KL term's full gradient."""
    kwargs = {"ratio_k": 1.0, "kl_coef": 1.0}
    assert_same_update(unmoved, "kl_cov", kwargs=kwargs)
    assert_same_update(unmoved, "kl_cov", kwargs=kwargs, budget=1)
