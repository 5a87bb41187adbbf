"""The training model's weights in its checkpoint's format, for engines that load checkpoints (vLLM).

transformers 5 holds each MoE layer's experts packed (`mlp.experts.gate_up_proj` [E, 2I, H] with the
gate half first, `mlp.experts.down_proj` [E, H, I]) and converts at load time from the checkpoint's
per-expert tensors (`mlp.experts.{e}.gate_proj.weight`, ...). vLLM's model loaders read the
checkpoint's names, so pushing the packed tensors as they are mis-loads the experts. Here the
conversion is transformers' own, reversed exactly as `save_pretrained` reverses it (tied weights
dropped, then `revert_weight_conversion`): what is pushed is, name for name, what a save would write.

Families whose released checkpoints keep experts packed (gpt-oss, DBRX, Llama 4) need no conversion;
any other family whose experts are packed and for which the installed transformers has no conversion
is refused with a message, never pushed in a layout the engine would read wrongly.
"""

from __future__ import annotations

import re

import torch

from gspo_bench.models.families import hf_model

# model_type of families whose checkpoints store the experts packed, as the transformers modules do
PACKED_IN_CHECKPOINT = frozenset({"gpt_oss", "dbrx", "llama4_text"})
_PACKED_EXPERTS = re.compile(r"experts\.(?:mlp\.)?[a-z_]\w*$")  # `experts.gate_up_proj`, not `experts.3.up_proj.weight`


class UnconvertibleWeightsError(ValueError):
    """The model's packed experts have no known checkpoint layout."""


def checkpoint_tensors(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The model's tensors under its checkpoint's names and layouts (views of the live weights where
    the conversion only splits: no copy), exactly what `model.save_pretrained` would write."""
    from transformers.core_model_loading import revert_weight_conversion
    from transformers.modeling_utils import remove_tied_weights_from_state_dict

    hf = hf_model(model, "the engine's weights")
    state = remove_tied_weights_from_state_dict(hf.state_dict(), hf)
    converted: dict[str, torch.Tensor] = revert_weight_conversion(hf, state)
    model_type = hf.config.model_type
    packed = [name for name in converted if _PACKED_EXPERTS.search(name)]
    if packed and model_type not in PACKED_IN_CHECKPOINT:
        raise UnconvertibleWeightsError(
            f"{model_type}: the installed transformers has no checkpoint conversion for its packed experts "
            f"({packed[0]}), so they cannot be pushed to the engine in its checkpoint's layout; "
            "use rollout.engine: hf for this family")
    return converted
