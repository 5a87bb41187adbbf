"""Rollouts in row chunks under a KV-cache budget (`rollout.kv_cache_gib`, hf engine).

The KV cache of a rollout grows with rows x (prompt width + max_new_tokens): for a real MoE at P G
= 256 responses of 2,048 tokens it is tens of GiB. With a budget, the engine generates the rows in
chunks whose cache at full length fits it, one chunk after another, and joins them into one
rollout. Each row still samples with its own key (`rollout.sampling`), at the batch's prompt width,
so its tokens are those it draws in one batch: only the cache's size changes.

The cache per token is counted as `generate` and the static decoder hold it: keys and values of
every layer, `num_key_value_heads` heads of `head_dim` (an overestimate for sliding-window,
linear-attention and latent-attention layers, which keep less).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import torch

from gspo_bench.rollout.batching import pad_rollout
from gspo_bench.rollout.engine import Rollout

if TYPE_CHECKING:
    from transformers import PretrainedConfig

GIB = 2**30


def kv_bytes_per_token(config: PretrainedConfig, element_bytes: int) -> int:
    """Bytes of keys and values one token adds to the cache, over all layers of `config`."""
    heads = config.num_attention_heads
    kv_heads = getattr(config, "num_key_value_heads", None) or heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
    return int(2 * config.num_hidden_layers * kv_heads * head_dim * element_bytes)


def rows_per_chunk(rows: int, per_row_bytes: int, budget_gib: float | None) -> int:
    """How many of `rows` rows one chunk generates: all without a budget, else as many as fit it
    (ValueError when not even one row does)."""
    if budget_gib is None:
        return rows
    fit = math.floor(budget_gib * GIB / per_row_bytes)
    if fit < 1:
        raise ValueError(f"rollout.kv_cache_gib = {budget_gib} is below one row's KV cache at full length "
                         f"({per_row_bytes / GIB:.3g} GiB): raise it, or lower max_new_tokens")
    return min(rows, fit)


def join_rollouts(parts: list[Rollout], pad_id: int) -> Rollout:
    """One rollout of `parts`' rows in order, their responses right-padded to the widest (all parts
    share the prompt width)."""
    width = max(part.response_mask.shape[1] for part in parts)
    kept = [part.sampling_kept for part in parts if part.sampling_kept is not None]
    if kept and len(kept) != len(parts):
        raise ValueError("some chunks of the rollout recorded their kept sets and some did not")
    set_width = max((k.shape[2] for k in kept), default=None)
    padded = [pad_rollout(part, part.prompt_width, width, pad_id, set_width) for part in parts]
    finite = [p.finite for p in padded if p.finite is not None]
    return Rollout(
        input_ids=torch.cat([p.input_ids for p in padded]),
        attention_mask=torch.cat([p.attention_mask for p in padded]),
        response_mask=torch.cat([p.response_mask for p in padded]),
        sampling_logp=torch.cat([p.sampling_logp for p in padded]),
        routing=None if padded[0].routing is None else torch.cat(_every_routing(padded), dim=1),
        finite=torch.stack(finite).all() if finite else None,
        sampling_kept=torch.cat([p.sampling_kept for p in padded if p.sampling_kept is not None]) if kept else None,
    )


def _every_routing(parts: list[Rollout]) -> list[torch.Tensor]:
    """The routing of every part; ValueError where some part captured none."""
    routings = [part.routing for part in parts if part.routing is not None]
    if len(routings) != len(parts):
        raise ValueError("some chunks of the rollout captured routing and some did not")
    return routings
