"""The engine's three counter-based noises are apart (gspo_bench.rollout.logit_noise,
router_noise, sampling): the logit noise of a seed is its own stream, uncorrelated with the seed's
Gumbel (sampling) uniforms and router noise at the same (row key, step); a logit noise drawn from the
sampling stream would move the sampled token with the noise that picks it."""

from __future__ import annotations

import numpy as np
import torch
from scipy import stats

from gspo_bench.rollout.logit_noise import logit_gaussian
from gspo_bench.rollout.router_noise import router_gaussian
from gspo_bench.rollout.sampling import uniform


def test_logit_noise_is_a_stream_of_its_own():
    keys, vocab = torch.arange(64, dtype=torch.int64), 256
    logit, gumbel, router = [], [], []
    for seed in range(3):
        for t in range(4):
            logit.append(logit_gaussian(seed, keys, t, vocab).numpy().ravel())
            gumbel.append(stats.norm.ppf(uniform(seed, keys, t, vocab).double().numpy().ravel()))
            router.append(router_gaussian(seed, keys, torch.tensor([t]), 0, vocab).numpy().ravel())
    z, g, r = (np.concatenate(x) for x in (logit, gumbel, router))  # 196,608 draws each
    assert abs(z.mean()) < 0.01 and abs(z.std() - 1) < 0.01
    # independent streams: |correlation| ~ 1 / sqrt(n) = 0.0023; a shared stream gives ~1
    assert abs(np.corrcoef(z, g)[0, 1]) < 0.015 and abs(np.corrcoef(z, r)[0, 1]) < 0.015
    assert abs(np.corrcoef(z[:-vocab], z[vocab:])[0, 1]) < 0.015  # nor with itself one row over
