"""The training-side forward: response log-probs (and entropy) of a rollout batch under a model."""

from __future__ import annotations

import torch

from gspo_bench.models.logprobs import gather_logprobs
from gspo_bench.rollout.batching import position_ids


def response_forward(
    model, input_ids: torch.Tensor, attention_mask: torch.Tensor, n_response: int,
    temperature: float = 1.0, with_entropy: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Log-probs [B, T] of the last `n_response` tokens, with the position ids `generate` used.

    Logits are divided by the sampling temperature, so at top_p = 1 the on-policy log-probs equal
    the rollout engine's. With `with_entropy`, also the entropy [B, T] of each predictive distribution.
    """
    logits = model(
        input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids(attention_mask),
        logits_to_keep=n_response + 1,
    ).logits  # [B, T + 1, V]
    predicting = logits[:, :-1]  # [B, T, V]: position j predicts token j + 1
    if temperature != 1.0:
        predicting = predicting / temperature
    logp = gather_logprobs(predicting, input_ids[:, -n_response:])  # [B, T]
    entropy = None
    if with_entropy:
        with torch.no_grad():
            logp_all = torch.log_softmax(predicting.float(), dim=-1)  # [B, T, V]
            entropy = -(logp_all.exp() * logp_all).sum(-1)  # [B, T]
    return logp, entropy
