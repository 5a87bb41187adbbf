"""Tiny MoE language models built from transformers configs (random init, no download).

Every supported family has a builder here; the four original families (qwen3_moe, qwen2_moe,
olmoe, mixtral) keep their configs unchanged (committed results depend on them).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any, TypeVar

import torch
import transformers
from transformers import AutoModelForCausalLM, PretrainedConfig, PreTrainedModel

from gspo_bench.models.families import SUPPORTED_FAMILIES, UnsupportedModelError, unsupported_message
from gspo_bench.models.tokenizer import BOS_ID, EOS_ID, PAD_ID


@dataclass(frozen=True)
class TinyMoESpec:
    family: str = "qwen3_moe"
    num_layers: int = 4
    hidden_size: int = 64
    num_experts: int = 8
    top_k: int = 2
    vocab_size: int = 64
    num_heads: int = 4
    num_kv_heads: int = 2
    expert_hidden: int = 64  # intermediate size of each routed expert
    max_positions: int = 512
    aux_loss: bool = False  # load-balancing loss; off unless asked for (it is silently added to `loss`)
    norm_topk_prob: bool | None = None  # renormalise the top-k gate weights (None: the family's own choice)
    shared_expert_hidden: int | None = None  # shared expert width (qwen2_moe only; None: expert_hidden)
    first_k_dense: int = 0  # leading dense (non-MoE) decoder layers, for the families in DENSE_FIRST
    n_group: int = 1  # expert groups of group-limited top-k, for the families in GROUPED
    topk_group: int = 1  # groups a token may pick its experts from
    router_scale: float = 1.0  # factor on every router weight after initialisation (build_tiny_moe)


# families whose renormalisation is fixed by the architecture
FIXED_RENORMALISATION = {
    "mixtral": True, "minimax": True, "hunyuan_v1_moe": True, "ernie4_5_moe": True, "gpt_oss": True,
    "granitemoe": True, "granitemoeshared": True, "deepseek_v2": False, "jamba": False, "llama4_text": False,
}
DENSE_FIRST = ("qwen3_moe", "qwen2_moe", "qwen3_next", "deepseek_v3", "glm4_moe", "dots1", "deepseek_v2",
               "ernie4_5_moe", "llama4_text")
GROUPED = ("deepseek_v3", "glm4_moe", "dots1", "deepseek_v2")
# where a decoder layer keeps its router weight, where not mlp.gate (tests check it against moe.routers)
ROUTER_WEIGHTS = {"gpt_oss": "mlp.router", "granitemoe": "block_sparse_moe.router",
                  "granitemoeshared": "block_sparse_moe.router", "hunyuan_v1_moe": "mlp.gate.wg",
                  "dbrx": "ffn.router.layer", "jamba": "feed_forward.router", "llama4_text": "feed_forward.router"}
ZERO_ROUTERS = ("ernie4_5_moe",)  # families whose router weights are initialised to zero (every logit ties)


def tiny_config(spec: TinyMoESpec) -> PretrainedConfig:
    """The transformers config of a tiny MoE; token ids set explicitly (<pad>=0, <s>=1, </s>=2)."""
    if spec.family not in SUPPORTED_FAMILIES:
        raise UnsupportedModelError(unsupported_message(f"family {spec.family!r}"))
    _check(spec)
    return _BUILDERS[spec.family](spec, _common(spec))


def _check(spec: TinyMoESpec) -> None:
    family = spec.family
    if not 1 <= spec.top_k <= spec.num_experts:
        raise ValueError(f"top_k must be in [1, num_experts={spec.num_experts}], got {spec.top_k}")
    if spec.hidden_size % spec.num_heads or spec.num_heads % spec.num_kv_heads:
        raise ValueError("hidden_size must divide by num_heads, and num_heads by num_kv_heads")
    if spec.shared_expert_hidden is not None and family != "qwen2_moe":
        raise ValueError(f"shared_expert_hidden: of the tiny families only qwen2_moe has one to size, not {family} "
                         "(other families' shared experts are expert_hidden wide)")
    fixed = FIXED_RENORMALISATION.get(family)
    if spec.norm_topk_prob is not None and fixed is not None and spec.norm_topk_prob != fixed:
        raise ValueError(f"{family} {'always' if fixed else 'never'} renormalises its top-k weights")
    if spec.first_k_dense and family not in DENSE_FIRST:
        raise ValueError(f"first_k_dense: {family} has no dense first layers; families with: {', '.join(DENSE_FIRST)}")
    if not 0 <= spec.first_k_dense < spec.num_layers:
        raise ValueError(f"first_k_dense must be in [0, num_layers={spec.num_layers}), got {spec.first_k_dense}")
    _check_groups(spec)
    _check_router_scale(spec)


def _check_router_scale(spec: TinyMoESpec) -> None:
    if not (math.isfinite(spec.router_scale) and spec.router_scale > 0):
        raise ValueError(f"router_scale must be a finite number > 0, got {spec.router_scale}")
    if spec.router_scale != 1.0 and spec.family in ZERO_ROUTERS:
        raise ValueError(f"router_scale: {spec.family} initialises its routers to zero, which no scale changes")


def _check_groups(spec: TinyMoESpec) -> None:
    if (spec.n_group, spec.topk_group) == (1, 1):
        return
    if spec.family not in GROUPED:
        raise ValueError(f"n_group/topk_group: {spec.family} has no expert groups; families with: {', '.join(GROUPED)}")
    if spec.n_group < 1 or spec.num_experts % spec.n_group:
        raise ValueError(f"num_experts={spec.num_experts} must divide into n_group={spec.n_group} groups")
    if not 1 <= spec.topk_group <= spec.n_group:
        raise ValueError(f"topk_group must be in [1, n_group={spec.n_group}], got {spec.topk_group}")
    per_group = spec.num_experts // spec.n_group
    if per_group < 2 or spec.top_k > spec.topk_group * per_group:
        raise ValueError(f"{spec.topk_group} of {spec.n_group} groups of {per_group} experts cannot hold top_k="
                         f"{spec.top_k} (a group scores its best two experts: at least 2 per group)")


def _common(spec: TinyMoESpec) -> dict[str, Any]:
    return dict(
        vocab_size=spec.vocab_size,
        hidden_size=spec.hidden_size,
        num_hidden_layers=spec.num_layers,
        num_attention_heads=spec.num_heads,
        num_key_value_heads=spec.num_kv_heads,
        max_position_embeddings=spec.max_positions,
        num_experts_per_tok=spec.top_k,
        output_router_logits=spec.aux_loss,
        pad_token_id=PAD_ID,
        bos_token_id=BOS_ID,
        eos_token_id=EOS_ID,
        tie_word_embeddings=False,
    )


T = TypeVar("T")


def _choose(value: T | None, default: T) -> T:
    return default if value is None else value


def _head_dim(spec: TinyMoESpec) -> int:
    return spec.hidden_size // spec.num_heads


# ---------------------------------------------------------------- softmax routers, top-k of all experts
def _qwen3_moe(spec: TinyMoESpec, common: dict[str, Any]) -> PretrainedConfig:  # top-k weights renormalised, as in Qwen3-30B-A3B
    return transformers.Qwen3MoeConfig(
        **common, num_experts=spec.num_experts, intermediate_size=spec.expert_hidden * 2,
        moe_intermediate_size=spec.expert_hidden, head_dim=_head_dim(spec), decoder_sparse_step=1,
        mlp_only_layers=list(range(spec.first_k_dense)), norm_topk_prob=_choose(spec.norm_topk_prob, True),
    )  # type: ignore[call-arg]  # the @strict config keeps keys beyond its declared fields (head_dim) as attributes


def _qwen2_moe(spec: TinyMoESpec, common: dict[str, Any]) -> PretrainedConfig:  # a gated shared expert beside the routed ones, no renormalisation
    return transformers.Qwen2MoeConfig(
        **common, num_experts=spec.num_experts, intermediate_size=spec.expert_hidden * 2,
        moe_intermediate_size=spec.expert_hidden,
        shared_expert_intermediate_size=_choose(spec.shared_expert_hidden, spec.expert_hidden),
        decoder_sparse_step=1, mlp_only_layers=list(range(spec.first_k_dense)),
        norm_topk_prob=_choose(spec.norm_topk_prob, False),
    )


def _qwen3_next(spec: TinyMoESpec, common: dict[str, Any]) -> PretrainedConfig:  # gated DeltaNet and full attention alternating, a gated shared expert
    layer_types = ["full_attention" if i % 2 or spec.num_layers == 1 else "linear_attention" for i in range(spec.num_layers)]
    heads = spec.num_heads
    return transformers.Qwen3NextConfig(
        **common, num_experts=spec.num_experts, intermediate_size=spec.expert_hidden * 2,
        moe_intermediate_size=spec.expert_hidden, shared_expert_intermediate_size=spec.expert_hidden,
        head_dim=_head_dim(spec), layer_types=layer_types, linear_num_key_heads=spec.num_kv_heads,
        linear_num_value_heads=heads, linear_key_head_dim=_head_dim(spec), linear_value_head_dim=_head_dim(spec),
        decoder_sparse_step=1, mlp_only_layers=list(range(spec.first_k_dense)),
        norm_topk_prob=_choose(spec.norm_topk_prob, True),
    )


def _olmoe(spec: TinyMoESpec, common: dict[str, Any]) -> PretrainedConfig:  # no renormalisation, as OLMoE-1B-7B
    return transformers.OlmoeConfig(
        **common, num_experts=spec.num_experts, intermediate_size=spec.expert_hidden,
        norm_topk_prob=_choose(spec.norm_topk_prob, False),
    )


def _flex_olmo(spec: TinyMoESpec, common: dict[str, Any]) -> PretrainedConfig:
    return transformers.FlexOlmoConfig(
        **common, num_experts=spec.num_experts, intermediate_size=spec.expert_hidden,
        norm_topk_prob=_choose(spec.norm_topk_prob, False),
    )


def _mixtral(spec: TinyMoESpec, common: dict[str, Any]) -> PretrainedConfig:  # always renormalises its top-k weights
    return transformers.MixtralConfig(
        **common, num_local_experts=spec.num_experts, intermediate_size=spec.expert_hidden, router_jitter_noise=0.0
    )


def _minimax(spec: TinyMoESpec, common: dict[str, Any]) -> PretrainedConfig:  # lightning (linear) and full attention alternating; Mixtral's router
    return transformers.MiniMaxConfig(
        **common, num_local_experts=spec.num_experts, intermediate_size=spec.expert_hidden,
        head_dim=_head_dim(spec), block_size=16, router_jitter_noise=0.0,
    )


def _hunyuan_v1_moe(spec: TinyMoESpec, common: dict[str, Any]) -> PretrainedConfig:  # shared MLP and experts both intermediate_size wide
    common = {k: v for k, v in common.items() if k != "num_experts_per_tok"}
    return transformers.HunYuanMoEV1Config(
        **common, num_experts=spec.num_experts, moe_topk=spec.top_k, intermediate_size=spec.expert_hidden,
        head_dim=_head_dim(spec),
    )


def _ernie4_5_moe(spec: TinyMoESpec, common: dict[str, Any]) -> PretrainedConfig:  # one shared expert; correction bias in selection only
    common = {k: v for k, v in common.items() if k != "num_experts_per_tok"}
    return transformers.Ernie4_5_MoeConfig(
        **common, moe_num_experts=spec.num_experts, moe_k=spec.top_k, intermediate_size=spec.expert_hidden * 2,
        moe_intermediate_size=spec.expert_hidden, moe_num_shared_experts=1, moe_layer_start_index=spec.first_k_dense,
    )


def _dbrx(spec: TinyMoESpec, common: dict[str, Any]) -> PretrainedConfig:  # p-norm (p=1) renormalisation; attention clips qkv at 8 as DBRX does
    ffn = {"moe_num_experts": spec.num_experts, "moe_top_k": spec.top_k, "ffn_hidden_size": spec.expert_hidden,
           "moe_normalize_expert_weights": 1.0 if _choose(spec.norm_topk_prob, True) else None}
    attn = {"kv_n_heads": spec.num_kv_heads, "rope_theta": 10000.0, "clip_qkv": 8.0}
    return transformers.DbrxConfig(
        d_model=spec.hidden_size, n_heads=spec.num_heads, n_layers=spec.num_layers, max_seq_len=spec.max_positions,
        vocab_size=spec.vocab_size, attn_config=attn, ffn_config=ffn, output_router_logits=spec.aux_loss,
        pad_token_id=PAD_ID, bos_token_id=BOS_ID, eos_token_id=EOS_ID, tie_word_embeddings=False,
    )


def _jamba(spec: TinyMoESpec, common: dict[str, Any]) -> PretrainedConfig:  # Mamba and attention layers alternating, every layer MoE
    return transformers.JambaConfig(
        **common, num_experts=spec.num_experts, intermediate_size=spec.expert_hidden, expert_layer_period=1,
        expert_layer_offset=0, attn_layer_period=2, attn_layer_offset=1, mamba_d_state=8, mamba_expand=1,
    )


# ---------------------------------------------------------------- top-k over logits, then softmax over the k
def _gpt_oss(spec: TinyMoESpec, common: dict[str, Any]) -> PretrainedConfig:  # sliding and full attention alternating, router bias, plain RoPE
    return transformers.GptOssConfig(
        **common, num_local_experts=spec.num_experts, intermediate_size=spec.expert_hidden,
        head_dim=_head_dim(spec), sliding_window=16, rope_parameters={"rope_type": "default", "rope_theta": 150000.0},
    )


def _granitemoe(spec: TinyMoESpec, common: dict[str, Any]) -> PretrainedConfig:
    return transformers.GraniteMoeConfig(**common, num_local_experts=spec.num_experts, intermediate_size=spec.expert_hidden)


def _granitemoeshared(spec: TinyMoESpec, common: dict[str, Any]) -> PretrainedConfig:
    return transformers.GraniteMoeSharedConfig(
        **common, num_local_experts=spec.num_experts, intermediate_size=spec.expert_hidden,
        shared_intermediate_size=spec.expert_hidden,
    )


# ---------------------------------------------------------------- sigmoid routers
def _deepseek_style(spec: TinyMoESpec) -> dict[str, Any]:
    """Sizes shared by DeepSeek-V3-like configs: dense first layers, one shared expert, expert groups."""
    return dict(
        n_routed_experts=spec.num_experts, n_shared_experts=1, moe_intermediate_size=spec.expert_hidden,
        intermediate_size=spec.expert_hidden * 2, first_k_dense_replace=spec.first_k_dense,
        n_group=spec.n_group, topk_group=spec.topk_group,
    )


def _mla(spec: TinyMoESpec, common: dict[str, Any]) -> dict[str, Any]:
    """Multi-head latent attention sizes (DeepSeek V2/V3): every head has its own keys and values."""
    head = _head_dim(spec)
    return common | dict(num_key_value_heads=spec.num_heads, kv_lora_rank=spec.hidden_size // 2, q_lora_rank=None,
                         qk_rope_head_dim=head // 2, qk_nope_head_dim=head // 2, v_head_dim=head)


def _deepseek_v3(spec: TinyMoESpec, common: dict[str, Any]) -> PretrainedConfig:  # routed_scaling_factor 2.5, renormalised, as DeepSeek-V3
    return transformers.DeepseekV3Config(
        **_mla(spec, common), **_deepseek_style(spec), norm_topk_prob=_choose(spec.norm_topk_prob, True),
        routed_scaling_factor=2.5,
    )


def _deepseek_v2(spec: TinyMoESpec, common: dict[str, Any]) -> PretrainedConfig:  # softmax router, group-limited greedy when grouped, scaling factor
    return transformers.DeepseekV2Config(
        **_mla(spec, common), **_deepseek_style(spec), routed_scaling_factor=1.5,
        topk_method="group_limited_greedy" if spec.n_group > 1 else "greedy",
    )


def _glm4_moe(spec: TinyMoESpec, common: dict[str, Any]) -> PretrainedConfig:
    return transformers.Glm4MoeConfig(
        **common, **_deepseek_style(spec), norm_topk_prob=_choose(spec.norm_topk_prob, True), routed_scaling_factor=2.5,
    )


def _dots1(spec: TinyMoESpec, common: dict[str, Any]) -> PretrainedConfig:
    return transformers.Dots1Config(
        **common, **_deepseek_style(spec), norm_topk_prob=_choose(spec.norm_topk_prob, True), routed_scaling_factor=2.5,
    )


def _llama4_text(spec: TinyMoESpec, common: dict[str, Any]) -> PretrainedConfig:  # sigmoid of the top-k logits, a shared expert, dense layers 2x wide
    return transformers.Llama4TextConfig(
        **common, num_local_experts=spec.num_experts, intermediate_size=spec.expert_hidden,
        intermediate_size_mlp=spec.expert_hidden * 2, head_dim=_head_dim(spec),
        moe_layers=list(range(spec.first_k_dense, spec.num_layers)),
    )


_BUILDERS: dict[str, Callable[[TinyMoESpec, dict[str, Any]], PretrainedConfig]] = {
    "qwen3_moe": _qwen3_moe, "qwen2_moe": _qwen2_moe, "olmoe": _olmoe, "mixtral": _mixtral,
    "deepseek_v3": _deepseek_v3, "glm4_moe": _glm4_moe, "dots1": _dots1, "deepseek_v2": _deepseek_v2,
    "gpt_oss": _gpt_oss, "granitemoe": _granitemoe, "granitemoeshared": _granitemoeshared, "minimax": _minimax,
    "hunyuan_v1_moe": _hunyuan_v1_moe, "ernie4_5_moe": _ernie4_5_moe, "qwen3_next": _qwen3_next,
    "flex_olmo": _flex_olmo, "dbrx": _dbrx, "jamba": _jamba, "llama4_text": _llama4_text,
}


def build_tiny_moe(family: str = "qwen3_moe", *, seed: int = 0, dtype: torch.dtype = torch.float32,
                   **sizes: Any) -> PreTrainedModel:
    """A randomly initialised tiny MoE causal LM of `family`; `sizes` are `TinyMoESpec` fields.

    The init is deterministic for `seed` and does not touch the global RNG state.
    """
    unknown = set(sizes) - set(TinyMoESpec.__dataclass_fields__)
    if unknown:
        raise TypeError(f"unknown tiny-model fields {sorted(unknown)}; valid: {sorted(asdict(TinyMoESpec()))}")
    spec = TinyMoESpec(family=family, **sizes)
    config = tiny_config(spec)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model: PreTrainedModel = AutoModelForCausalLM.from_config(config, dtype=dtype)
    scale_routers(model, family, spec.router_scale)
    model.generation_config.pad_token_id = PAD_ID
    model.generation_config.eos_token_id = EOS_ID
    model.generation_config.bos_token_id = BOS_ID
    return model


def scale_routers(model: torch.nn.Module, family: str, scale: float) -> None:
    """Multiply every router weight [E, H] of a tiny `family` model by `scale` in place: its router
    logits scale by it. (The routers are found by name here: models sit below gspo_bench.moe.)"""
    if scale == 1.0:
        return
    suffix = f".{ROUTER_WEIGHTS.get(family, 'mlp.gate')}.weight"
    weights = [p for name, p in model.named_parameters() if name.endswith(suffix)]
    if not weights:
        raise RuntimeError(f"router_scale: no {suffix[1:]} parameter in this {family} model")
    with torch.no_grad():
        for weight in weights:
            weight.mul_(scale)
