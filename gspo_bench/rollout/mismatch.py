"""Training-inference mismatch: how far the rollout engine's log-probs are from the training forward's.

With samples drawn by the engine, r = pi_train / pi_rollout per token and k3 = r - 1 - log r
estimates KL(pi_rollout || pi_train). At top_p < 1 the engine's log-probs are those of the
truncated (renormalised) distribution, so a gap there is real, not numerical noise.
"""

from __future__ import annotations

import math

import torch

LN2 = math.log(2.0)


@torch.no_grad()
def logprob_mismatch(train_logp: torch.Tensor, rollout_logp: torch.Tensor, mask: torch.Tensor) -> dict[str, float]:
    """`mismatch/k3_kl`, `mismatch/max_abs` and `mismatch/frac_gt_ln2` over valid tokens [B, T]."""
    valid = mask.bool()
    if not bool(valid.any()):
        return {"mismatch/k3_kl": 0.0, "mismatch/max_abs": 0.0, "mismatch/frac_gt_ln2": 0.0}
    log_r = (train_logp.double() - rollout_logp.double())[valid].clamp(-20, 20)  # [N]
    return {
        "mismatch/k3_kl": float((torch.expm1(log_r) - log_r).mean()),  # expm1: no cancellation near 0
        "mismatch/max_abs": float(log_r.abs().max()),
        "mismatch/frac_gt_ln2": float((log_r.abs() > LN2).float().mean()),
    }
