"""The MoE families gspo-bench supports, keyed by the transformers `model_type`."""

from __future__ import annotations

import torch

# model_type -> the architecture class name real checkpoints of that family declare.
SUPPORTED_FAMILIES: dict[str, str] = {
    "qwen3_moe": "Qwen3MoeForCausalLM",
    "qwen2_moe": "Qwen2MoeForCausalLM",
    "olmoe": "OlmoeForCausalLM",
    "mixtral": "MixtralForCausalLM",
}


class UnsupportedModelError(ValueError):
    """A model or checkpoint that is not one of the supported MoE families."""


def unsupported_message(what: str) -> str:
    return f"{what} is not a supported MoE family; supported model_type values: {', '.join(SUPPORTED_FAMILIES)}"


def family_of(model: torch.nn.Module) -> str:
    """The supported family (`model_type`) of a transformers model, or UnsupportedModelError."""
    model_type = getattr(getattr(model, "config", None), "model_type", None)
    if model_type not in SUPPORTED_FAMILIES:
        raise UnsupportedModelError(unsupported_message(f"{type(model).__name__} (model_type={model_type!r})"))
    return model_type
