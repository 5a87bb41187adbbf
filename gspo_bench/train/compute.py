"""Matched-compute accounting: active parameters and a FLOP estimate per step.

FLOPs follow the usual dense-transformer estimate on *active* parameters (N_active: every parameter
a token passes through, routed experts counted k/E, input embeddings excluded):
2 N_active per token forwarded without gradient (generation, old-policy and other no-grad passes)
and 6 N_active per token trained (forward + backward). Attention's sequence-length term is left
out: at the lengths of this suite it is small, and it is the same for every objective.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from gspo_bench.models.families import hf_model
from gspo_bench.moe import find_routers


def active_parameters(model: torch.nn.Module) -> int:
    """Parameters used per token: routed-expert weights scaled by top_k / num_experts, embeddings excluded.

    Shared experts, routers and dense (non-MoE) layers count fully: every token passes through them.
    """
    embeddings = {id(p) for p in hf_model(model, "counting active parameters").get_input_embeddings().parameters()}
    routed_fraction: dict[int, float] = {}  # routed-expert parameter -> share of tokens using it
    for router in find_routers(model):
        for p in router.experts.parameters():
            routed_fraction[id(p)] = router.top_k / router.num_experts
    total = 0.0
    for p in model.parameters():
        if id(p) in embeddings:
            continue
        total += p.numel() * routed_fraction.get(id(p), 1.0)
    return int(round(total))


@dataclass(frozen=True)
class StepCompute:
    tokens_forward: int  # tokens through no-grad forwards (generation prefill + decode, old-policy pass, ...)
    tokens_trained: int  # tokens through forward + backward (all minibatches)

    @property
    def tokens(self) -> int:
        return self.tokens_forward + self.tokens_trained

    def flops(self, n_active: int) -> float:
        return 2.0 * n_active * self.tokens_forward + 6.0 * n_active * self.tokens_trained
