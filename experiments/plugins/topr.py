"""TOPR, Tapered Off-Policy REINFORCE (Le Roux et al. 2025, "Tapered Off-Policy REINFORCE: Stable and
efficient reinforcement learning for LLMs", arXiv 2503.14286), as a gspo-bench plugin.

A response with a positive advantage gets the plain REINFORCE term A log pi (no importance ratio, no
clip: it is pushed up however far the policy moved); one with a negative advantage gets its
importance ratio truncated to [0, 1] and detached, sg[min(w, 1)] A log pi, so a token the policy
already made unlikely stops being pushed down. The per-token terms are reduced as GRPO's are (mean
over a response's tokens, then over responses), so that the comparison with GRPO and GSPO changes
the objective alone.

Used by experiments/plugins/topr.yaml and docs/plugins.md: `gspo-bench check topr --plugin topr.py`.
"""

from __future__ import annotations

import torch

from gspo_bench.objectives import register_objective
from gspo_bench.objectives.inputs import prepare, safe_exp
from gspo_bench.objectives.metrics import clip_metrics, ratio_metrics
from gspo_bench.objectives.reduce import aggregate


@register_objective(
    "topr",
    description="TOPR: A log pi for A > 0; sg[min(w, 1)] A log pi for A < 0 (tapered off-policy REINFORCE)",
    reference="Le Roux et al. 2025, TOPR (arXiv 2503.14286), eq. for the tapered truncated IS weights",
)
def topr_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    weights: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """-J, J = 1/B sum_i 1/|y_i| sum_t c_it A_it log pi(y_it), c = 1 where A > 0, sg[min(w_it, 1)] where A < 0."""
    batch = prepare(logp, old_logp, advantages, mask, weights=weights, objective="topr")
    w = safe_exp(batch.log_ratio).detach()  # [B, T] pi / pi_old
    negative = batch.advantages < 0  # [B, T]
    weight = torch.where(negative, w.clamp(max=1.0), 1.0)  # [B, T] the tapered weight
    terms = weight * batch.advantages * batch.logp  # [B, T]
    loss = -aggregate(terms, batch, "seq_mean_token_mean")
    truncated = negative & (w > 1.0)  # [B, T] tokens whose weight the taper cut
    return loss, {**clip_metrics(torch.zeros_like(truncated), truncated, batch), **ratio_metrics(batch)}
