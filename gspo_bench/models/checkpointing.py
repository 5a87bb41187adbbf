"""Activation checkpointing per decoder layer (`train.activation_checkpointing`).

Every decoder layer of a transformers model is a `GradientCheckpointingLayer`: with checkpointing on
and the model in training mode, a layer keeps only its inputs in the forward and runs again in
backward (`torch.utils.checkpoint.checkpoint`, non-reentrant). What a training forward keeps for
its backward drops from every layer's activations to one hidden state per layer and token, plus the
activations of the one layer being recomputed; the backward costs one more forward. No-grad
forwards (old-policy pass, generation) are not affected: nothing is saved there.

An MoE layer's recompute must route as its forward did: pass `context_fn` (`moe.recompute.RouteKeeper`,
which this layer cannot import: models sit below moe) to keep the routes.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

import torch

ContextFn = Callable[[], tuple[AbstractContextManager[Any], AbstractContextManager[Any]]]


def decoder_layers(model: torch.nn.Module) -> list[torch.nn.Module]:
    """The checkpointable decoder layers of `model` (outermost `GradientCheckpointingLayer`s), in order."""
    from transformers.modeling_layers import GradientCheckpointingLayer

    layers: dict[str, torch.nn.Module] = {}
    for name, module in model.named_modules():
        inside = any(name.startswith(f"{outer}.") for outer in layers)
        if isinstance(module, GradientCheckpointingLayer) and not inside:
            layers[name] = module
    return list(layers.values())


def checkpoint_layers(model: torch.nn.Module, context_fn: ContextFn | None = None) -> int:
    """Checkpoint every decoder layer of `model` (non-reentrant, each call's forward and recompute
    under `context_fn()`'s two contexts); returns how many layers. ValueError for a model without
    checkpointable decoder layers."""
    from transformers import PreTrainedModel

    layers = decoder_layers(model)
    if not layers or not isinstance(model, PreTrainedModel) or not model.supports_gradient_checkpointing:
        raise ValueError(f"{type(model).__name__} has no decoder layers transformers can checkpoint; "
                         "set train.activation_checkpointing: false")
    kwargs: dict[str, Any] = {"use_reentrant": False}
    if context_fn is not None:
        kwargs["context_fn"] = context_fn
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)
    return len(layers)


def checkpointed(model: torch.nn.Module) -> bool:
    """Whether `model`'s decoder layers are checkpointed (in training mode)."""
    return any(getattr(layer, "gradient_checkpointing", False) for layer in decoder_layers(model))
