"""KL-Cov's token selection (gspo_bench.objectives.cov) is made on values that are the same in every
update path: pi_old's log-probs (one old-policy pass per batch) and the advantages, never the update
forward's log-probs, whose float noise differs between the plain and the micro-batched forward (at the
default ratio_k, 2e-4: one token, a 1e-7 difference moved the selected token and with it the loss:
seed 1's last loss -0.0064 micro-batched against -0.0109 plain). Ties go to the earlier token."""

from __future__ import annotations

import sys
from pathlib import Path

import torch

from gspo_bench.objectives.cov import kl_cov_loss

sys.path.insert(0, str(Path(__file__).parent))
from test_micro_batches import assert_same_update, setting  # noqa: E402, F401


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
