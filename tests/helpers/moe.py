"""Tiny MoE models of each family, a token batch, a router perturbation and one forward under a routing
capture: routing capture and replay."""

from __future__ import annotations

from contextlib import nullcontext

import torch

from gspo_bench.models import build_tiny_moe
from gspo_bench.moe import RoutingCapture, find_routers

VOCAB = 40


def tiny(family, **kw):
    sizes = dict(num_layers=3, hidden_size=32, num_experts=8, top_k=2, vocab_size=VOCAB, expert_hidden=32)
    return build_tiny_moe(family, seed=1, **(sizes | kw))


def batch(b=3, t=7, seed=0, left_pad=True):
    gen = torch.Generator().manual_seed(seed)
    ids = torch.randint(4, VOCAB, (b, t), generator=gen)
    am = torch.ones_like(ids)
    if left_pad:
        am[0, :3] = 0
        ids[0, :3] = 0
    return ids, am


def perturb_routers(model, scale=1.0, seed=0):
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for router in find_routers(model):
            w = router.weight
            w.add_(scale * torch.randn(w.shape, generator=gen))



def captured(model, ids, am=None, no_grad=False, **options):
    """One forward of `model` on `ids` (`am`: their attention mask) under `RoutingCapture(model, **options)`
    (a replay, a probe, margins...), with autograd off where `no_grad`: the capture (its routing, weights,
    scores) and the logits."""
    with torch.no_grad() if no_grad else nullcontext(), RoutingCapture(model, **options) as capture:
        logits = model(input_ids=ids, attention_mask=am).logits
    return capture, logits
