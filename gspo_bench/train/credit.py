"""Step-level credit: per-token advantages from a task's verdict on each step of a response.

A_it = A_i for the tokens of right steps (and of text outside any step, such as </s>), and
A_i - penalty for the tokens of a wrong step: a response's credit is the same for every token until
a step goes wrong. With every step right (or a task that checks no steps) A_it = A_i, where
GSPO-token equals GSPO (eq. 13 reduces to eq. 5).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import torch

from gspo_bench.tasks import Example

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase


def token_offsets(tokenizer: PreTrainedTokenizerBase, ids: list[int]) -> list[tuple[int, int]]:
    """(start, end) character span of each token in the decoded text of `ids` (special tokens are
    empty spans). Exact for tokenizers whose tokens decode independently, as the char tokenizer's do."""
    spans: list[tuple[int, int]] = []
    position = 0
    for token in ids:
        width = len(tokenizer.decode([token], skip_special_tokens=True))
        spans.append((position, position + width))
        position += width
    return spans


def step_advantages(advantages: torch.Tensor, response_ids: torch.Tensor, response_mask: torch.Tensor,
                    texts: list[str], examples: list[Example],
                    steps: Callable[[str, Example], list[tuple[int, int, bool]]], tokenizer: PreTrainedTokenizerBase,
                    penalty: float) -> torch.Tensor:
    """[B, T] per-token advantages: `advantages` [B] lowered by `penalty` on the tokens of wrong steps.
    `examples[i]` is row i's problem, `steps(text, example)` the task's step verdicts."""
    out = advantages.detach().float().cpu()[:, None].repeat(1, response_ids.shape[1])  # [B, T]
    for row, (text, example) in enumerate(zip(texts, examples, strict=True)):
        n = int(response_mask[row].sum())
        offsets = token_offsets(tokenizer, response_ids[row, :n].tolist())
        for start, end, right in steps(text, example):
            if right:
                continue
            for t, (a, b) in enumerate(offsets):
                if a < end and b > start:  # the token overlaps the wrong step
                    out[row, t] -= penalty
    return out.to(advantages.device)
