"""Engine noise std bounds (gspo_bench.rollout.router_noise.check_sigma, for router and logit noise):
`logit_noise: 1e300` was accepted and the run's NaN log-probs blamed on the policy."""

from __future__ import annotations

import pytest

from gspo_bench.rollout.router_noise import MAX_SIGMA, check_sigma


@pytest.mark.parametrize("option", ["router_noise", "logit_noise"])
@pytest.mark.parametrize("sigma", [1e300, 1e38, MAX_SIGMA * 1.001])
def test_a_noise_std_past_the_bound_is_refused_by_name(option, sigma):
    with pytest.raises(ValueError, match=rf"{option} must be at most 10000 \(the noise's std"):
        check_sigma(sigma, option)


def test_a_noise_std_up_to_the_bound_is_kept():
    assert [check_sigma(s, "logit_noise") for s in (0, 0.05, 3, MAX_SIGMA)] == [0.0, 0.05, 3.0, MAX_SIGMA]
