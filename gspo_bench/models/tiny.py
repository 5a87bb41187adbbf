"""Tiny MoE language models built from transformers configs (random init, no download)."""

from __future__ import annotations

from dataclasses import asdict, dataclass

import torch
from transformers import (
    AutoModelForCausalLM,
    MixtralConfig,
    OlmoeConfig,
    PretrainedConfig,
    Qwen2MoeConfig,
    Qwen3MoeConfig,
)

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


def tiny_config(spec: TinyMoESpec) -> PretrainedConfig:
    """The transformers config of a tiny MoE; token ids set explicitly (<pad>=0, <s>=1, </s>=2)."""
    if spec.family not in SUPPORTED_FAMILIES:
        raise UnsupportedModelError(unsupported_message(f"family {spec.family!r}"))
    if not 1 <= spec.top_k <= spec.num_experts:
        raise ValueError(f"top_k must be in [1, num_experts={spec.num_experts}], got {spec.top_k}")
    if spec.hidden_size % spec.num_heads or spec.num_heads % spec.num_kv_heads:
        raise ValueError("hidden_size must divide by num_heads, and num_heads by num_kv_heads")
    if spec.shared_expert_hidden is not None and spec.family != "qwen2_moe":
        raise ValueError(f"shared experts: of the tiny families only qwen2_moe has one, not {spec.family}")
    if spec.norm_topk_prob is False and spec.family == "mixtral":
        raise ValueError("mixtral always renormalises its top-k weights (top-k, then softmax)")
    common = dict(
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
    if spec.family == "qwen3_moe":  # top-k weights renormalised, as in Qwen3-30B-A3B
        return Qwen3MoeConfig(
            **common, num_experts=spec.num_experts, intermediate_size=spec.expert_hidden * 2,
            moe_intermediate_size=spec.expert_hidden, head_dim=spec.hidden_size // spec.num_heads,
            decoder_sparse_step=1, mlp_only_layers=[], norm_topk_prob=_choose(spec.norm_topk_prob, True),
        )
    if spec.family == "qwen2_moe":  # a gated shared expert beside the routed ones, no renormalisation
        return Qwen2MoeConfig(
            **common, num_experts=spec.num_experts, intermediate_size=spec.expert_hidden * 2,
            moe_intermediate_size=spec.expert_hidden,
            shared_expert_intermediate_size=_choose(spec.shared_expert_hidden, spec.expert_hidden),
            decoder_sparse_step=1, mlp_only_layers=[], norm_topk_prob=_choose(spec.norm_topk_prob, False),
        )
    if spec.family == "olmoe":  # no renormalisation, as OLMoE-1B-7B
        return OlmoeConfig(
            **common, num_experts=spec.num_experts, intermediate_size=spec.expert_hidden,
            norm_topk_prob=_choose(spec.norm_topk_prob, False),
        )
    return MixtralConfig(  # mixtral: always renormalises its top-k weights
        **common, num_local_experts=spec.num_experts, intermediate_size=spec.expert_hidden, router_jitter_noise=0.0
    )


def _choose(value, default):
    return default if value is None else value


def build_tiny_moe(family: str = "qwen3_moe", *, seed: int = 0, dtype: torch.dtype = torch.float32, **sizes):
    """A randomly initialised tiny MoE causal LM of `family`; `sizes` are `TinyMoESpec` fields.

    The init is deterministic for `seed` and does not touch the global RNG state.
    """
    unknown = set(sizes) - set(TinyMoESpec.__dataclass_fields__)
    if unknown:
        raise TypeError(f"unknown tiny-model fields {sorted(unknown)}; valid: {sorted(asdict(TinyMoESpec()))}")
    config = tiny_config(TinyMoESpec(family=family, **sizes))
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = AutoModelForCausalLM.from_config(config, dtype=dtype)
    model.generation_config.pad_token_id = PAD_ID
    model.generation_config.eos_token_id = EOS_ID
    model.generation_config.bos_token_id = BOS_ID
    return model
