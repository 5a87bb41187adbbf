"""Models: tiny MoE language models built from transformers configs, an offline character
tokenizer, and loading of local Hugging Face MoE checkpoints.

Names are imported on first use (PEP 562), so `gspo_bench.models.families` (needed by the routing
code) can be imported without importing transformers.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "SUPPORTED_FAMILIES": "families", "UnsupportedModelError": "families", "family_of": "families",
    "load_moe": "loading", "save_model": "loading",
    "TinyMoESpec": "tiny", "build_tiny_moe": "tiny",
    "DEFAULT_ALPHABET": "tokenizer", "build_char_tokenizer": "tokenizer",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:  # the export, imported on first use
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_EXPORTS[name]}"), name)
