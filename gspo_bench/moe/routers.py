"""The routers of a supported transformers MoE model, one per MoE layer, with each family's gate rule.

A replay rebuilds the family's own gate weights from the live router logits at the replayed experts
(`gates.py`); the gate score is what `RoutingCapture.gate_scores` records (RSPO reads it). Selection
details (correction bias, expert groups) only decide which experts the router picks; they never
enter the weights or the score. Shared experts and dense layers are outside the routing and pass
through untouched; only MoE layers are listed, in layer order.

| family           | gate weights of the experts a token uses                        | gate score  | rule (gates.py)           | read at (sites.py)                      |
|------------------|-----------------------------------------------------------------|-------------|---------------------------|-----------------------------------------|
| qwen3_moe        | softmax over all experts, top-k, renormalised iff norm_topk_prob | softmax     | Softmax(norm_topk_prob)   | mlp.gate output                         |
| qwen2_moe        | the same; a sigmoid-gated shared expert beside                  | softmax     | Softmax(norm_topk_prob)   | mlp.gate output                         |
| qwen3_next       | the same; a sigmoid-gated shared expert beside                  | softmax     | Softmax(norm_topk_prob)   | mlp.gate output                         |
| olmoe, flex_olmo | the same                                                        | softmax     | Softmax(norm_topk_prob)   | mlp.gate output                         |
| mixtral, minimax | softmax, top-k, renormalised (= top-k logits, softmax over k)   | softmax     | Softmax(renormalise)      | mlp.gate output                         |
| hunyuan_v1_moe   | softmax, top-k, renormalised; a shared MLP beside               | softmax     | Softmax(renormalise)      | mlp.gate output (weight: gate.wg)       |
| ernie4_5_moe     | softmax; top-k of softmax + e_score_correction_bias (selection  | softmax     | Softmax(renormalise,      | mlp.gate output                         |
|                  | only); unbiased probabilities / max(sum, moe_norm_min); shared  |             |   norm_min)               |                                         |
| deepseek_v2      | softmax; greedy or group-limited greedy top-k (group score: its | softmax     | Softmax(scale)            | mlp.gate output                         |
|                  | best expert); probabilities x routed_scaling_factor; shared     |             |                           |                                         |
| dbrx             | softmax, top-k, / their moe_normalize_expert_weights-norm       | softmax     | Softmax(renormalise, p)   | ffn.route_tokens_to_experts (wrapped)   |
| jamba            | softmax, top-k, not renormalised                                | softmax     | Softmax()                 | feed_forward.route_tokens_to_experts    |
| gpt_oss          | top-k over the logits (router bias in), softmax over the k      | softmax     | TopKSoftmax()             | mlp.router output                       |
| granitemoe       | top-k over the logits, softmax over the k                       | softmax     | TopKSoftmax()             | block_sparse_moe.router output (ids 1st)|
| granitemoeshared | the same; a shared MLP beside                                   | softmax     | TopKSoftmax()             | block_sparse_moe.router output (ids 1st)|
| deepseek_v3,     | sigmoid; top-k of sigmoid + e_score_correction_bias within the  | sigmoid     | Sigmoid(norm_topk_prob,   | mlp.gate output                         |
| glm4_moe, dots1  | topk_group best of n_group groups (selection only); unbiased    |             |   routed_scaling_factor)  |                                         |
|                  | sigmoids, renormalised iff norm_topk_prob (+1e-20), x routed_   |             |                           |                                         |
|                  | scaling_factor; shared experts beside                           |             |                           |                                         |
| llama4_text      | top-k over the logits, sigmoid of each, not renormalised;       | sigmoid     | Sigmoid()                 | feed_forward.router output (dense [N,E])|
|                  | a shared expert beside                                          |             |                           |                                         |

"softmax" as a gate score is the probability over all experts, also for the families that
normalise over the top-k logits only (gpt_oss, granitemoe*, mixtral's equivalent form).

Refused (besides every model that is not MoE): phimoe, whose sparsemixer takes each expert's weight
from a softmax masked relative to the top expert's logit and, in training, samples the experts with
Gumbel noise under a custom backward: no per-expert rule to rebuild under a replay; and every other
MoE family transformers ships, not wired here (the refusal names the supported ones).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from gspo_bench.models.families import family_of
from gspo_bench.moe import sites
from gspo_bench.moe.gates import GateRule, Sigmoid, Softmax, TopKSoftmax
from gspo_bench.moe.sites import Site


@dataclass(frozen=True)
class FamilyRouting:
    block: str  # class name of the family's MoE block (one per MoE layer)
    router: str  # attribute of the block holding the router module
    weight: str  # path of the router weight [E, H] inside the router module
    site: Site  # where the routing decision is read and replaced
    rule: Callable[[torch.nn.Module, torch.nn.Module], GateRule]  # (block, router module) -> the layer's rule
    gate: str  # the gate rule in words


# A rule reads its family's own plain attributes of the block and the router (norm_topk_prob,
# routed_scaling_factor, ...), which nn.Module's typing does not know: both are Any here.


def _norm_topk(block: Any, router: Any) -> GateRule:
    return Softmax(renormalise=bool(router.norm_topk_prob))


def _renormalised(block: Any, router: Any) -> GateRule:
    return Softmax(renormalise=True)


def _ernie(block: Any, router: Any) -> GateRule:
    return Softmax(renormalise=True, norm_min=float(router.norm_min))


def _deepseek_v2(block: Any, router: Any) -> GateRule:
    return Softmax(scale=float(router.routed_scaling_factor))


def _dbrx(block: Any, router: Any) -> GateRule:
    p = block.moe_normalize_expert_weights
    return Softmax() if p is None else Softmax(renormalise=True, norm_p=float(p))


def _plain_softmax(block: Any, router: Any) -> GateRule:
    return Softmax()


def _top_k_softmax(block: Any, router: Any) -> GateRule:
    return TopKSoftmax()


def _sigmoid(block: Any, router: Any) -> GateRule:
    return Sigmoid(renormalise=bool(router.norm_topk_prob), scale=float(router.routed_scaling_factor))


def _plain_sigmoid(block: Any, router: Any) -> GateRule:
    return Sigmoid()


_SOFTMAX = "softmax over all experts, top-k"
_NORM_TOPK = f"{_SOFTMAX}, renormalised iff norm_topk_prob"
_TOP_K_SOFTMAX = "top-k over the logits, softmax over the k"
_SIGMOID = ("sigmoid; top-k of sigmoid + e_score_correction_bias within the topk_group best of n_group groups "
            "(selection only); unbiased sigmoids, renormalised iff norm_topk_prob, x routed_scaling_factor; "
            "shared experts; gate score: sigmoid")
_SCORE = "; gate score: softmax"
_ALL_E = "; gate score: softmax over all experts"


def _family(block: str, router: str, rule: Callable[[Any, Any], GateRule], gate: str, *,
            site: Site = sites.ROUTER_OUTPUT, weight: str = "weight") -> FamilyRouting:
    return FamilyRouting(block=block, router=router, weight=weight, site=site, rule=rule, gate=gate)


FAMILY_ROUTING: dict[str, FamilyRouting] = {
    "qwen3_moe": _family("Qwen3MoeSparseMoeBlock", "gate", _norm_topk, _NORM_TOPK + _SCORE),
    "qwen2_moe": _family("Qwen2MoeSparseMoeBlock", "gate", _norm_topk, f"{_NORM_TOPK}; gated shared expert{_SCORE}"),
    "olmoe": _family("OlmoeSparseMoeBlock", "gate", _norm_topk, _NORM_TOPK + _SCORE),
    "mixtral": _family("MixtralSparseMoeBlock", "gate", _renormalised,
                       f"{_SOFTMAX}, renormalised (= {_TOP_K_SOFTMAX}){_SCORE}"),
    "deepseek_v3": _family("DeepseekV3MoE", "gate", _sigmoid, _SIGMOID),
    "glm4_moe": _family("Glm4MoeMoE", "gate", _sigmoid, _SIGMOID),
    "dots1": _family("Dots1MoE", "gate", _sigmoid, _SIGMOID),
    "deepseek_v2": _family("DeepseekV2Moe", "gate", _deepseek_v2,
                           "softmax; greedy or group-limited greedy top-k; probabilities x routed_scaling_factor, "
                           f"not renormalised; shared experts{_SCORE}"),
    "gpt_oss": _family("GptOssMLP", "router", _top_k_softmax, f"{_TOP_K_SOFTMAX} (router bias in the logits){_ALL_E}"),
    "granitemoe": _family("GraniteMoeMoE", "router", _top_k_softmax, _TOP_K_SOFTMAX + _ALL_E,
                          site=sites.ROUTER_OUTPUT_IDS_FIRST),
    "granitemoeshared": _family("GraniteMoeSharedMoE", "router", _top_k_softmax, f"{_TOP_K_SOFTMAX}; shared MLP{_ALL_E}",
                                site=sites.ROUTER_OUTPUT_IDS_FIRST),
    "minimax": _family("MiniMaxSparseMoeBlock", "gate", _renormalised, f"{_SOFTMAX}, renormalised{_SCORE}"),
    "hunyuan_v1_moe": _family("HunYuanMoEV1Moe", "gate", _renormalised, f"{_SOFTMAX}, renormalised; shared MLP{_SCORE}",
                              weight="wg.weight"),
    "ernie4_5_moe": _family("Ernie4_5_MoeSparseMoeBlock", "gate", _ernie,
                            "softmax; top-k of softmax + e_score_correction_bias (selection only); unbiased "
                            f"probabilities / max(their sum, moe_norm_min); shared experts{_SCORE}"),
    "qwen3_next": _family("Qwen3NextSparseMoeBlock", "gate", _norm_topk, f"{_NORM_TOPK}; gated shared expert{_SCORE}"),
    "flex_olmo": _family("FlexOlmoSparseMoeBlock", "gate", _norm_topk, _NORM_TOPK + _SCORE),
    "dbrx": _family("DbrxFFN", "router", _dbrx,
                    f"{_SOFTMAX}, divided by their moe_normalize_expert_weights-norm (None: kept){_SCORE}",
                    site=sites.BLOCK_METHOD_WEIGHTS_IDS, weight="layer.weight"),
    "jamba": _family("JambaSparseMoeBlock", "router", _plain_softmax, f"{_SOFTMAX}, not renormalised{_SCORE}",
                     site=sites.BLOCK_METHOD_IDS_WEIGHTS),
    "llama4_text": _family("Llama4TextMoe", "router", _plain_sigmoid,
                           "top-k over the logits, sigmoid of each, not renormalised; shared expert; gate score: sigmoid",
                           site=sites.ROUTER_DENSE_SCORES),
}


@dataclass(frozen=True)
class Router:
    name: str  # router module path, e.g. "model.layers.3.mlp.gate"
    layer: int  # decoder layer index of this MoE layer (dense layers have no Router)
    block: torch.nn.Module  # the MoE block (routed experts, router, shared experts)
    module: torch.nn.Module  # the router module
    experts: torch.nn.Module  # the routed experts
    weight: torch.nn.Parameter  # router weight [num_experts, hidden]
    top_k: int
    num_experts: int
    rule: GateRule  # the family's gate weights and score (gates.py), read from the live modules
    site: Site  # where the routing decision is read and replaced (sites.py)


def gate_rule(family: str) -> str:
    """The gate rule of a supported family, in words."""
    return FAMILY_ROUTING[family].gate


def find_routers(model: torch.nn.Module) -> list[Router]:
    """The routers of `model` in layer order (one per MoE layer); UnsupportedModelError otherwise."""
    family = family_of(model)
    spec = FAMILY_ROUTING[family]
    routers = [_router(name, block, spec) for name, block in model.named_modules() if type(block).__name__ == spec.block]
    if not routers:
        raise RuntimeError(f"{type(model).__name__} ({family}) has no {spec.block} module: unsupported transformers version?")
    return routers


def router_parameters(model: torch.nn.Module) -> list[torch.nn.Parameter]:
    """The routers' parameters (what `train.router_lr_scale` trains at its own rate): every parameter of
    each router module (`Router.module`), in layer order. That is the weight [E, H] in every family,
    plus gpt_oss's router bias [E] (it enters the logits top-k selects by) and ernie4_5_moe's
    `moe_statics.e_score_correction_bias` (a parameter that requires no gradient: no optimizer moves
    it). Not router parameters: the `e_score_correction_bias` of deepseek_v3, glm4_moe and dots1 (a
    buffer, never trained by the optimizer) and the shared-expert gates of qwen2_moe and qwen3_next
    (they weight the shared expert's output and select no expert)."""
    return [param for router in find_routers(model) for param in router.module.parameters()]


def _router(name: str, block: torch.nn.Module, spec: FamilyRouting) -> Router:
    module = getattr(block, spec.router)
    weight = module.get_parameter(spec.weight)
    layer = re.search(r"\.(\d+)\.", f".{name}.")
    top_k = getattr(module, "top_k", None) or getattr(block, "top_k", None)
    if top_k is None:
        raise RuntimeError(f"{name}: neither the block nor its {spec.router} has top_k: unsupported transformers version?")
    return Router(
        name=f"{name}.{spec.router}",
        layer=int(layer.group(1)) if layer else 0,
        block=block,
        module=module,
        experts=block.get_submodule("experts"),
        weight=weight,
        top_k=int(top_k),
        num_experts=weight.shape[0],
        rule=spec.rule(block, module),
        site=spec.site,
    )
