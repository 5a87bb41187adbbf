"""The MoE families gspo-bench supports, keyed by the transformers `model_type`.

Each has a tiny config builder (`tiny.py`) and a routing entry with its gate rule
(`gspo_bench.moe.routers`, whose docstring tables the rules and the families refused).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the family table imports without torch (the suite schema reads it)
    import torch
    from transformers import PreTrainedModel

# model_type -> the architecture class name real checkpoints of that family declare.
SUPPORTED_FAMILIES: dict[str, str] = {
    "qwen3_moe": "Qwen3MoeForCausalLM",
    "qwen2_moe": "Qwen2MoeForCausalLM",
    "olmoe": "OlmoeForCausalLM",
    "mixtral": "MixtralForCausalLM",
    "deepseek_v3": "DeepseekV3ForCausalLM",
    "glm4_moe": "Glm4MoeForCausalLM",
    "dots1": "Dots1ForCausalLM",
    "deepseek_v2": "DeepseekV2ForCausalLM",
    "gpt_oss": "GptOssForCausalLM",
    "granitemoe": "GraniteMoeForCausalLM",
    "granitemoeshared": "GraniteMoeSharedForCausalLM",
    "minimax": "MiniMaxForCausalLM",
    "hunyuan_v1_moe": "HunYuanMoEV1ForCausalLM",
    "ernie4_5_moe": "Ernie4_5_MoeForCausalLM",
    "qwen3_next": "Qwen3NextForCausalLM",
    "flex_olmo": "FlexOlmoForCausalLM",
    "dbrx": "DbrxForCausalLM",
    "jamba": "JambaForCausalLM",
    "llama4_text": "Llama4ForCausalLM",
}

# Families whose transformers model computes no load-balancing `aux_loss` under output_router_logits (they
# balance by a bias in expert selection, or have none): model.router_aux_loss_coef is refused for them.
# Measured on transformers 5.19 (tests/test_router_aux_loss.py builds each family and checks both ways).
NO_AUX_LOSS_FAMILIES: frozenset[str] = frozenset(
    {"deepseek_v3", "glm4_moe", "dots1", "deepseek_v2", "hunyuan_v1_moe", "llama4_text"})


class UnsupportedModelError(ValueError):
    """A model or checkpoint that is not one of the supported MoE families."""


def unsupported_message(what: str) -> str:
    return f"{what} is not a supported MoE family; supported model_type values: {', '.join(SUPPORTED_FAMILIES)}"


def family_of(model: torch.nn.Module) -> str:
    """The supported family (`model_type`) of a transformers model, or UnsupportedModelError."""
    model_type = getattr(getattr(model, "config", None), "model_type", None)
    if not isinstance(model_type, str) or model_type not in SUPPORTED_FAMILIES:
        raise UnsupportedModelError(unsupported_message(f"{type(model).__name__} (model_type={model_type!r})"))
    return model_type


def hf_model(model: torch.nn.Module, what: str) -> PreTrainedModel:
    """`model` as the transformers model `what` needs (its output head, its checkpointing switch);
    TypeError naming the type of any other module."""
    from transformers import PreTrainedModel

    if not isinstance(model, PreTrainedModel):
        raise TypeError(f"{what} needs a transformers model, got {type(model).__name__}")
    return model
