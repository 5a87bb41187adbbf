"""Padding and position ids shared by rollouts, warm start and training forwards."""

from __future__ import annotations

import torch

from gspo_bench.rollout.engine import Rollout


def left_pad(sequences: list[list[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Left-pad token lists to `(ids [B, L], attention_mask [B, L])`."""
    if not sequences or any(len(s) == 0 for s in sequences):
        raise ValueError("left_pad needs non-empty sequences")
    width = max(len(s) for s in sequences)
    ids = torch.full((len(sequences), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(sequences), width), dtype=torch.long)
    for row, seq in enumerate(sequences):
        ids[row, width - len(seq) :] = torch.tensor(seq, dtype=torch.long)
        mask[row, width - len(seq) :] = 1
    return ids, mask


def position_ids(attention_mask: torch.Tensor) -> torch.Tensor:
    """Positions counted over attended tokens only, as `generate` does for left-padded prompts."""
    return (attention_mask.long().cumsum(-1) - 1).clamp(min=0)


def mask_after_eos(tokens: torch.Tensor, eos_id: int) -> torch.Tensor:
    """[B, T] bool: True for every token up to and including the first `eos_id`."""
    is_eos = (tokens == eos_id).long()
    return (torch.cumsum(is_eos, dim=1) - is_eos) == 0


def _pad_columns(x: torch.Tensor, left: int, right: int, value, dim: int = 1) -> torch.Tensor:
    """`x` with `left` and `right` columns of `value` added along `dim` (any dtype, bool included)."""
    shape = list(x.shape)
    parts = []
    for width in (left, right):
        shape[dim] = width
        parts.append(torch.full(shape, value, dtype=x.dtype, device=x.device))
    return torch.cat([parts[0], x, parts[1]], dim=dim)


def pad_rollout(rollout: Rollout, prompt_width: int, response_width: int, pad_id: int) -> Rollout:
    """The same rows with prompts left-padded to `prompt_width` and responses right-padded to
    `response_width` (positions count attended tokens only, so no log-prob changes)."""
    left, right = prompt_width - rollout.prompt_width, response_width - rollout.response_mask.shape[1]
    if left < 0 or right < 0:
        raise ValueError("pad_rollout only widens a rollout")
    routing = rollout.routing
    if routing is not None:  # [L, B, L_seq - 1, k]: positions on dim 2
        routing = _pad_columns(routing, left, right, 0, dim=2)
    return Rollout(
        input_ids=_pad_columns(rollout.input_ids, left, right, pad_id),
        attention_mask=_pad_columns(rollout.attention_mask, left, right, 0),
        response_mask=_pad_columns(rollout.response_mask, 0, right, False),
        sampling_logp=_pad_columns(rollout.sampling_logp, 0, right, 0.0),
        routing=routing, finite=rollout.finite,
    )
