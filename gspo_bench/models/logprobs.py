"""Per-token log-probabilities of given tokens under a causal LM's logits."""

from __future__ import annotations

import torch


def gather_logprobs(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """log softmax(logits)[targets] in fp32: logits [B, T, V], targets [B, T] -> [B, T].

    Computed as logit - logsumexp, so no [B, T, V] fp32 log-softmax tensor is kept for backward.
    """
    logits32 = logits.float()  # [B, T, V]
    picked = logits32.gather(-1, targets.unsqueeze(-1)).squeeze(-1)  # [B, T]
    return picked - torch.logsumexp(logits32, dim=-1)  # [B, T]
