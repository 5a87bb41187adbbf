"""Logit noise: a controlled training-inference mismatch in the output distribution (`hf` engine,
`logit_noise: std`).

    rollout: {engine_options: {logit_noise: 0.05}}

While the engine generates, and only then, the final logits of every decode step become

    logits + std * z        # [B, V] fp32; z standard normal, a function of (seed, row key, t, v)

before the sampling rule (</s> blocked while t < min_new_tokens, temperature, top-p): the engine
samples from the noisy distribution and reports its log-probs, the trainer recomputes clean ones,
and `mismatch/k3_kl` measures the gap. It stands for the precision mismatch of a bf16 or quantised
inference engine (the logits it samples from are the trainer's plus an error), at a rate you set,
with the routing untouched (router noise is the other kind, `rollout.router_noise`).

z is counter-based, as the sampling and router noises are: a hash of (seed, row key, t, vocab id),
t the index of the response token being sampled (0 for the first), Gaussian by Box-Muller
(`sampling.normal_from_hash`), on a stream apart from the Gumbel and router noises. A row's tokens
stay a function of (seed, row key). Both hf decode paths add it at the same point of the same rule
(`LogitNoise` for `generate`, `static_decode.processed_scores`), so they sample the same tokens.

Memory: z is drawn for the rows and the step being decoded only, [B, V] per step, never [B, T, V].
Its int64 hashes and fp64 uniforms are transient [B, V] tensors of the kind the Gumbel noise of the
same step already makes, freed before the next forward.
"""

from __future__ import annotations

import torch
from transformers import LogitsProcessor

from gspo_bench.rollout.sampling import fmix32, normal_from_hash

_MASK32 = 0xFFFFFFFF
_STREAM = 0x10C17A5E  # mixed into the seed: apart from the Gumbel (sampling) and router noises' streams


def logit_gaussian(seed: int, keys: torch.Tensor, position: int | torch.Tensor, vocab: int) -> torch.Tensor:
    """[B, V] fp32 standard normal numbers, a function of (seed, keys[b], position, v) only.
    `position` may be a 0-d int64 tensor on the keys' device (a CUDA-graph decode step reads it there):
    same numbers. Tensor ops only."""
    if not isinstance(position, torch.Tensor):
        position = torch.tensor(position, dtype=torch.int64, device=keys.device)
    base = fmix32((seed ^ _STREAM) & _MASK32)  # a Python int
    at = fmix32((position.to(torch.int64) & _MASK32) ^ base)  # 0-d
    rows = fmix32((keys.to(torch.int64) & _MASK32) ^ 0x3C6EF372 ^ at)  # [B]
    tokens = fmix32(torch.arange(vocab, dtype=torch.int64, device=keys.device) ^ 0x165667B1)  # [V]
    return normal_from_hash(fmix32(rows[:, None] ^ tokens[None, :]))  # [B, V]


def noisy_logits(scores: torch.Tensor, std: float, seed: int, keys: torch.Tensor,
                 position: int | torch.Tensor) -> torch.Tensor:
    """[B, V] fp32: `scores` + std * z, z = logit_gaussian(seed, keys, position, V); -inf stays -inf."""
    return scores.float() + std * logit_gaussian(seed, keys, position, scores.shape[-1])


class LogitNoise(LogitsProcessor):
    """First of our processors in `generate` (after transformers' own </s> block, before temperature):
    the noisy logits of each row at the token being sampled (input length minus prompt width)."""

    def __init__(self, std: float, seed: int, keys: torch.Tensor, prompt_width: int):
        self.std, self.seed, self.keys, self.prompt_width = std, seed, keys, prompt_width

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        position = input_ids.shape[1] - self.prompt_width  # tokens generated so far
        return noisy_logits(scores, self.std, self.seed, self.keys.to(scores.device), position)
