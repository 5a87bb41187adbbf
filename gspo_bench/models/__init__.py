"""Models: tiny MoE language models built from transformers configs, an offline character
tokenizer, and loading of local Hugging Face MoE checkpoints."""

from gspo_bench.models.families import SUPPORTED_FAMILIES, UnsupportedModelError, family_of
from gspo_bench.models.loading import load_moe, save_model
from gspo_bench.models.tiny import TinyMoESpec, build_tiny_moe
from gspo_bench.models.tokenizer import DEFAULT_ALPHABET, build_char_tokenizer

__all__ = [
    "DEFAULT_ALPHABET",
    "SUPPORTED_FAMILIES",
    "TinyMoESpec",
    "UnsupportedModelError",
    "build_char_tokenizer",
    "build_tiny_moe",
    "family_of",
    "load_moe",
    "save_model",
]
