"""Training-inference mismatch: how far the rollout engine's log-probs are from the training forward's.

With samples drawn by the engine, r = pi_train / pi_rollout per token and k3 = r - 1 - log r
estimates KL(pi_rollout || pi_train). At top_p < 1 the engine's log-probs are those of the
truncated (renormalised) distribution, so a gap there is real, not numerical noise.
"""

from __future__ import annotations

import math

import torch

from gspo_bench.objectives.kl import k3
from gspo_bench.objectives.metrics import masked_mean

LN2 = math.log(2.0)


@torch.no_grad()
def logprob_mismatch(train_logp: torch.Tensor, rollout_logp: torch.Tensor, mask: torch.Tensor) -> dict[str, torch.Tensor]:
    """`mismatch/k3_kl`, `mismatch/max_abs` and `mismatch/frac_gt_ln2` over valid tokens [B, T]
    (0 when no token is valid); 0-d fp64 tensors on the log-probs' device, no host copy."""
    valid = mask.bool().to(train_logp.device)
    log_r = torch.where(valid, train_logp.double() - rollout_logp.to(train_logp.device).double(), 0.0)  # [B, T]
    return {
        "mismatch/k3_kl": masked_mean(k3(log_r), valid),
        "mismatch/max_abs": torch.where(valid, log_r.abs(), 0.0).max() if log_r.numel() else log_r.new_zeros(()),
        "mismatch/frac_gt_ln2": masked_mean((log_r.abs() > LN2).double(), valid),
    }
