"""The training-side forward: response log-probs (and entropy) of a rollout batch under a model."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch

from gspo_bench.models.logprobs import entropies, fused_head, gather_logprobs
from gspo_bench.models.padding import position_ids


def response_forward(
    model: torch.nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor, n_response: int,
    temperature: float = 1.0, with_entropy: bool = False, head_chunk: int | None = None,
    kept: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Log-probs [B, T] of the last `n_response` tokens, with the position ids `generate` used.

    Logits are divided by the sampling temperature, so at top_p = 1 the on-policy log-probs equal
    the rollout engine's. With `with_entropy`, also the entropy [B, T] of each predictive distribution.
    Only the T positions that predict a response token get logits (no [B, L, V] tensor), and the
    log-softmax runs in fp32 chunks (see `gather_logprobs`). With `head_chunk` (train.logprob_chunk_tokens)
    there are no [B, T, V] logits at all: the head computes log-probs from the hidden states in blocks
    of `head_chunk` positions, forward and backward (`logprobs.fused_head`). With `kept` [B, T, K] (the
    engine's sampling mask: `gather_logprobs`), the log-probs are renormalised over each position's kept
    tokens; the entropy stays the full distribution's.
    """
    length = input_ids.shape[1]
    predicting = torch.arange(length - n_response - 1, length - 1, device=input_ids.device)  # position j predicts j + 1
    targets = input_ids[:, -n_response:] if n_response else input_ids[:, :0]  # [B, T]
    call = dict(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids(attention_mask),
                logits_to_keep=predicting)
    if head_chunk is not None:
        if kept is not None:
            raise ValueError("train.sampling_mask renormalises over the kept tokens of [B, T, V] logits; the fused "
                             "head (train.logprob_chunk_tokens) never makes them: unset one of the two")
        with fused_head(model, targets, temperature, head_chunk, with_entropy) as head:
            model(**call)
        if head.logp is None:
            raise RuntimeError(f"{type(model).__name__}'s forward never called its output head: no log-probs")
        return head.logp, head.entropy
    logits = model(**call).logits  # [B, T, V]
    logp = gather_logprobs(logits, targets, temperature, kept=kept)  # [B, T]
    entropy = entropies(logits, temperature) if with_entropy else None
    return logp, entropy


@contextmanager
def router_aux_loss(model: torch.nn.Module) -> Iterator[list[torch.Tensor]]:
    """Within the block, every call of `model` runs with `output_router_logits=True` and appends the
    family's load-balancing loss (transformers' `aux_loss`: its `load_balancing_loss_func` over the call's
    router logits, padding masked by the attention mask) to the list this yields, with its gradient; a
    model whose output carries none is refused (`models.families.NO_AUX_LOSS_FAMILIES`). The call's other
    outputs are unchanged: the router logits are only collected."""
    found: list[torch.Tensor] = []

    def ask(module: torch.nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[tuple[Any, ...], dict[str, Any]]:
        return args, {**kwargs, "output_router_logits": True}

    def take(module: torch.nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any], output: Any) -> None:
        aux = getattr(output, "aux_loss", None)
        if aux is None:
            raise RuntimeError(f"{type(module).__name__} returned no aux_loss under output_router_logits=True: "
                               "its family computes no load-balancing loss (set model.router_aux_loss_coef: 0)")
        found.append(aux)

    handles = [model.register_forward_pre_hook(ask, with_kwargs=True),
               model.register_forward_hook(take, with_kwargs=True)]
    try:
        yield found
    finally:
        for handle in handles:
            handle.remove()
