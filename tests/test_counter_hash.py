"""The counter-based hash behind sampling, router noise and logit noise (gspo_bench.rollout.sampling):
murmur3's 32-bit finaliser on int64 tensors must equal the same finaliser on Python's exact integers,
and the noise it makes must stay the noise committed results were sampled with (a faster multiply
that changed one bit would change every rollout)."""

from __future__ import annotations

import hashlib
import random

import torch

from gspo_bench.rollout.router_noise import router_gaussian
from gspo_bench.rollout.sampling import fmix32, uniform

M32 = 2**32


def fmix32_exact(h: int) -> int:
    """murmur3's fmix32 written from its definition, every product reduced mod 2^32 by Python."""
    h ^= h >> 16
    h = (h * 0x85EBCA6B) % M32
    h ^= h >> 13
    h = (h * 0xC2B2AE35) % M32
    return h ^ (h >> 16)


def test_fmix32_matches_murmur3_on_exact_integers_at_the_edges_and_at_random():
    rng = random.Random(0)
    values = [0, 1, 2, 0xFFFF, 0x10000, 2**31 - 1, 2**31, M32 - 2, M32 - 1, 0xDEADBEEF]
    values += [rng.randrange(M32) for _ in range(2000)]
    got = fmix32(torch.tensor(values, dtype=torch.int64)).tolist()
    assert got == [fmix32_exact(v) for v in values]
    assert fmix32_exact(1) == 0x514E28B7  # murmur3's published fmix32(1)
    assert all(0 <= g < M32 for g in got)


def test_the_sampling_and_router_noise_are_the_committed_numbers():
    u = uniform(7, torch.tensor([0, 1, 5, 2**31 - 1]), 3, 50)
    assert hashlib.sha256(u.numpy().tobytes()).hexdigest()[:16] == "9fa9c51152c7be47"
    z = router_gaussian(11, torch.tensor([3, 4]), torch.tensor([0, 1, 2]), 2, 8)
    assert hashlib.sha256(z.numpy().tobytes()).hexdigest()[:16] == "9da9b98ea2154bf7"
