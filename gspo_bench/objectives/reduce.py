"""The one place a per-token term becomes a scalar. Every objective names its reduction.

- `seq_mean_token_mean`: 1/B' sum_i 1/|y_i| sum_t x_it   (GRPO eq. 2, GSPO-token eq. 13, SAPO, GMPO
  and GSPO, whose per-response term is constant over tokens)
- `token_mean`:          sum_it x_it / sum_i |y_i|        (DAPO, CISPO: every token weighs the same)
- `seq_mean_token_sum_norm`: sum_it x_it / (B' * T_max)   (Dr. GRPO: no length normalisation)

B' counts responses with at least one valid token, so an all-padding row changes nothing.
Per-token weights of an off-policy correction (`PolicyBatch.weights`) multiply x_it; the
denominators stay those of the unweighted objective (a masked token is a zero term, as in the
IcePop, MIS and OPSM formulas).

Within `recording_terms()`, every `aggregate` call also hands over its per-token contributions
(x_it times the reduction's weight of that token: they sum to the value it returns), detached, so the
training loop can measure how much of a loss one token makes (`loss/max_token_share`) without any
objective returning them. Within `recording_token_weights()`, each call hands over the reduction's own
weight of each token (what multiplies x_it in the sum: 1/(B' |y_i|), 1/sum_i |y_i| or 1/(B' T_max); 0 at
padding), from which the loop measures each token's gradient against the plain policy gradient under
the same reduction (`objectives.metrics.gradient_weight_metrics`).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from contextvars import ContextVar
from typing import Literal

import torch

from gspo_bench.objectives.inputs import PolicyBatch

Reduction = Literal["seq_mean_token_mean", "token_mean", "seq_mean_token_sum_norm"]
REDUCTIONS: tuple[str, ...] = ("seq_mean_token_mean", "token_mean", "seq_mean_token_sum_norm")
_RECORDED: ContextVar[list[torch.Tensor] | None] = ContextVar("gspo_bench_recorded_terms", default=None)
_TOKEN_WEIGHTS: ContextVar[list[torch.Tensor] | None] = ContextVar("gspo_bench_token_weights", default=None)


@contextmanager
def _recording(into: ContextVar[list[torch.Tensor] | None]) -> Iterator[list[torch.Tensor]]:
    """Within the block, `into` holds a fresh list, which this yields; restored on exit."""
    recorded: list[torch.Tensor] = []
    token = into.set(recorded)
    try:
        yield recorded
    finally:
        into.reset(token)


def recording_terms() -> AbstractContextManager[list[torch.Tensor]]:
    """Within the block, each `aggregate` call appends its per-token contributions [B, T] (detached,
    0 at padding; their sum is the value it returns) to the list this yields."""
    return _recording(_RECORDED)


def recording_token_weights() -> AbstractContextManager[list[torch.Tensor]]:
    """Within the block, each `aggregate` call appends its reduction's weight of each token [B, T]
    (detached, 0 at padding: the factor its value gives x_it) to the list this yields."""
    return _recording(_TOKEN_WEIGHTS)


def aggregate(
    terms: torch.Tensor, batch: PolicyBatch, reduction: Reduction, *, max_tokens: int | None = None
) -> torch.Tensor:
    """Reduce `terms` [B, T] over valid tokens of `batch` to a 0-d tensor.

    `max_tokens` is T_max of `seq_mean_token_sum_norm` (Dr. GRPO's generation budget); by default
    the longest valid response in the batch, so padding columns do not change the result.
    """
    zero = terms.new_zeros(())
    if batch.weights is not None:  # an off-policy correction's per-token weights; denominators unchanged
        terms = terms * batch.weights
    masked = torch.where(batch.mask, terms, zero)  # [B, T]
    n_resp = batch.n_responses.clamp(min=1)
    recorded = _RECORDED.get()
    if reduction == "seq_mean_token_mean":
        lengths = batch.lengths.clamp(min=1.0)  # [B]
        if recorded is not None:
            recorded.append((masked / lengths[:, None] / n_resp).detach())
        record_weights(batch, 1.0 / lengths[:, None] / n_resp)
        return (masked.sum(-1) / lengths).sum() / n_resp
    if reduction == "token_mean":
        if recorded is not None:
            recorded.append((masked / batch.n_tokens.clamp(min=1)).detach())
        record_weights(batch, 1.0 / batch.n_tokens.clamp(min=1))
        return masked.sum() / batch.n_tokens.clamp(min=1)
    if reduction == "seq_mean_token_sum_norm":
        if max_tokens is None:
            t_max = batch.lengths.max().clamp(min=1.0) if batch.lengths.numel() else terms.new_ones(())
        else:
            if max_tokens < 1:
                raise ValueError(f"max_tokens must be >= 1, got {max_tokens}")
            t_max = terms.new_tensor(float(max_tokens))
        if recorded is not None:
            recorded.append((masked / (n_resp * t_max)).detach())
        record_weights(batch, 1.0 / (n_resp * t_max))
        return masked.sum() / (n_resp * t_max)
    raise ValueError(f"unknown reduction {reduction!r}; valid: {', '.join(REDUCTIONS)}")


def record_weights(batch: PolicyBatch, weight: torch.Tensor) -> None:
    """Hand the reduction's weight of each token (`weight`, broadcast to [B, T], 0 at padding) to
    `recording_token_weights`, when recording."""
    recorded = _TOKEN_WEIGHTS.get()
    if recorded is not None:
        full = torch.broadcast_to(torch.as_tensor(weight, dtype=torch.float32, device=batch.mask.device), batch.mask.shape)
        recorded.append(torch.where(batch.mask, full.detach(), 0.0))
