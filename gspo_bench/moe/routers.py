"""Finding the top-k routers of a supported transformers MoE model.

In transformers 5.x every supported family routes through a `*TopKRouter` module (`mlp.gate`; older
Mixtral releases `block_sparse_moe.gate`) whose forward returns
`(router_logits [N, E], routing_weights [N, k], expert_indices [N, k])` over N flattened tokens.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from gspo_bench.models.families import family_of


@dataclass(frozen=True)
class Router:
    name: str  # module path, e.g. "model.layers.3.mlp.gate"
    module: torch.nn.Module
    renormalises: bool  # whether the family renormalises the top-k weights to sum to 1


def find_routers(model: torch.nn.Module) -> list[Router]:
    """The routers of `model` in layer order (one per MoE layer); UnsupportedModelError otherwise."""
    family = family_of(model)
    routers = []
    for name, module in model.named_modules():
        if type(module).__name__.endswith("TopKRouter"):
            renorm = True if family == "mixtral" else bool(getattr(module, "norm_topk_prob", False))
            routers.append(Router(name=name, module=module, renormalises=renorm))
    if not routers:
        raise RuntimeError(f"{type(model).__name__} ({family}) has no *TopKRouter module: unsupported transformers version?")
    return routers
