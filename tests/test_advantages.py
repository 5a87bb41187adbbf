from __future__ import annotations

import pytest
import torch
from torch.testing import assert_close

from gspo_bench.objectives import group_advantages


def test_eq3_small_case():
    rewards = torch.tensor([1.0, 0.0, 0.0, 1.0, 0.5, 0.5, 0.5, 0.5])
    adv = group_advantages(rewards, group_size=4)
    std = torch.tensor([1.0, 0.0, 0.0, 1.0]).std()  # sample std = 0.57735
    assert_close(adv[:4], (torch.tensor([1.0, 0.0, 0.0, 1.0]) - 0.5) / std)
    assert_close(adv[4:], torch.zeros(4))  # zero spread -> zero, not NaN


def test_scale_none_is_centred_only():
    rewards = torch.tensor([3.0, 1.0, 2.0, 2.0])
    assert_close(group_advantages(rewards, 2, scale="none"), torch.tensor([1.0, -1.0, 0.0, 0.0]))


def test_groups_are_independent_and_sum_to_zero():
    rewards = torch.rand(6 * 5, generator=torch.Generator().manual_seed(0))
    adv = group_advantages(rewards, 5).view(6, 5)
    assert_close(adv.sum(-1), torch.zeros(6), atol=1e-5, rtol=0)
    assert_close(adv.std(-1), torch.ones(6))
    shuffled = group_advantages(rewards.view(6, 5).flip(0).reshape(-1), 5).view(6, 5)
    assert_close(shuffled, adv.flip(0))


@pytest.mark.parametrize(
    "rewards, g, match",
    [
        (torch.ones(6), 4, "do not split"),
        (torch.ones(6), 1, ">= 2"),
        (torch.ones(2, 3), 3, "1-D"),
        (torch.tensor([1.0, float("nan")]), 2, "finite"),
    ],
)
def test_bad_input(rewards, g, match):
    with pytest.raises(ValueError, match=match):
        group_advantages(rewards, g)
