"""The k3 estimator of a KL divergence (Schulman 2020), the one definition every KL here uses.

For samples y ~ q and r = p(y) / q(y):  k3 = r - 1 - log r  >= 0,  E_q[k3] = KL(q || p).
- `kl/old_new` (samples from pi_old, r = pi_theta / pi_old): KL(pi_old || pi_theta);
- `kl/ref` (samples from pi_old ~ pi_theta, r = pi_ref / pi_theta): the KL-to-reference penalty;
- `mismatch/k3_kl` (samples from the engine, r = pi_train / pi_rollout): KL(pi_rollout || pi_train).
"""

from __future__ import annotations

import torch

from gspo_bench.objectives.inputs import LOG_RATIO_CLAMP


def k3(log_ratio: torch.Tensor) -> torch.Tensor:
    """Elementwise r - 1 - log r for log r = `log_ratio`, clamped to +-LOG_RATIO_CLAMP; `expm1`
    keeps it exact near r = 1, where r - 1 - log r is the difference of two nearly equal numbers."""
    clamped = log_ratio.clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
    return torch.expm1(clamped) - clamped
