"""Padding token lists and the position ids of padded rows: below both the models' forwards and the
rollout engines (and warm start), which share them."""

from __future__ import annotations

import torch


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
