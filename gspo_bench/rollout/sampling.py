"""Sampling that depends on a row's own key, not on the batch it is generated in.

A token is drawn from softmax(scores) as argmax(scores + Gumbel noise) (the Gumbel-max trick), with
the noise of row r, decode position t and token v a hash of (seed, key_r, t, v): a counter-based
random number, as JAX's and Philox's are. A row with the same key draws the same tokens whether it
is generated alone, in one batch of 64 or split across ranks, so rollouts do not depend on the world
size under torchrun. The hash is murmur3's 32-bit finaliser, computed in int64 (`_mul32` says how products stay exact).
"""

from __future__ import annotations

import math
from typing import TypeVar

import torch
from transformers import LogitsProcessor

from gspo_bench.objectives.inputs import ieee_sqrt

_MASK32 = 0xFFFFFFFF
H = TypeVar("H", int, torch.Tensor)


def _mul32(h: H, constant: int) -> H:
    """(h * constant) mod 2^32 for h and constant in [0, 2^32). On int64 tensors the product may pass
    2^63: torch's integer kernels wrap it modulo 2^64 (two's complement, on CPU and CUDA alike), which
    keeps its low 32 bits exact; one multiply and one mask where the 16-bit halves took five ops (7x
    faster `fmix32`; a router-noise run as a whole gained ~2%, results/perf/runs_per_hour.md). Python
    ints are exact anyway."""
    return (h * constant) & _MASK32


def fmix32(h: H) -> H:  # a tensor elementwise, or a Python int
    """murmur3's finaliser: a bijection of [0, 2^32) that mixes every input bit into every output bit."""
    h = h ^ (h >> 16)
    h = _mul32(h, 0x85EBCA6B)
    h = h ^ (h >> 13)
    h = _mul32(h, 0xC2B2AE35)
    return h ^ (h >> 16)


def uniform(seed: int, keys: torch.Tensor, position: int | torch.Tensor, vocab: int) -> torch.Tensor:
    """[B, V] numbers in (0, 1), a function of (seed, keys[b], position, v) only. `position` may be a
    0-d int64 tensor on the keys' device (a CUDA-graph decode step reads it there): same numbers."""
    if not isinstance(position, torch.Tensor):
        position = torch.tensor(position, dtype=torch.int64)
    base = fmix32(((seed * 0x9E3779B1) & _MASK32) + position.to(torch.int64) * 0x85EBCA77 & _MASK32)
    rows = fmix32((keys.to(torch.int64) * 0xC2B2AE3D + base) & _MASK32)  # [B]
    tokens = torch.arange(vocab, dtype=torch.int64, device=keys.device)  # [V]
    h = fmix32(rows[:, None] ^ fmix32((tokens * 0x27D4EB2F + 0x165667B1) & _MASK32)[None, :])  # [B, V]
    return ((h >> 8).double() + 0.5) / 2**24  # 24 bits, never 0 or 1


def normal_from_hash(h: torch.Tensor) -> torch.Tensor:
    """Standard normal fp32 numbers, one per 32-bit hash in `h` (int64): Box-Muller over two 24-bit
    uniforms in (0, 1), the first from `h`, the second from `h` rehashed: sqrt(-2 ln u1) cos(2 pi u2),
    the root by ieee_sqrt (torch.sqrt's MKL vector math differs between CPUs)."""
    u1 = ((h >> 8).double() + 0.5) / 2**24
    u2 = ((fmix32(h ^ 0x68E31DA4) >> 8).double() + 0.5) / 2**24
    return (ieee_sqrt(-2.0 * torch.log(u1)) * torch.cos(2.0 * math.pi * u2)).float()


class GumbelNoise(LogitsProcessor):
    """Last in the chain: adds each row's Gumbel noise, so that greedy selection samples exactly from
    softmax(scores) (after temperature and top-p, whose -inf entries stay -inf)."""

    def __init__(self, seed: int, keys: torch.Tensor, prompt_width: int):
        self.seed, self.keys, self.prompt_width = seed, keys, prompt_width

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        position = input_ids.shape[1] - self.prompt_width  # tokens generated so far
        u = uniform(self.seed, self.keys.to(scores.device), position, scores.shape[-1])
        gumbel = -torch.log(-torch.log(u))
        return (scores.double() + gumbel).to(scores.dtype)
