"""Loading a local Hugging Face MoE checkpoint directory, and saving model + tokenizer together."""

from __future__ import annotations

from pathlib import Path

import torch
from transformers import (
    AutoConfig,
    AutoModelForCausalLM,
    AutoTokenizer,
    PreTrainedModel,
    PreTrainedTokenizerBase,
)

from gspo_bench.models.families import SUPPORTED_FAMILIES, UnsupportedModelError, unsupported_message


def load_moe(
    path: str | Path, *, dtype: torch.dtype | str = "auto", device: str | None = None
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """Load `(model, tokenizer)` from a local directory (e.g. a downloaded Qwen3-30B-A3B); never downloads.

    Raises FileNotFoundError for a missing directory and UnsupportedModelError for a checkpoint whose
    `model_type` is not a supported MoE family.
    """
    path = Path(path)
    if not (path / "config.json").is_file():
        raise FileNotFoundError(f"{path} is not a Hugging Face checkpoint directory (no config.json)")
    config = AutoConfig.from_pretrained(path, local_files_only=True)
    if config.model_type not in SUPPORTED_FAMILIES:
        raise UnsupportedModelError(unsupported_message(f"checkpoint {path} (model_type={config.model_type!r})"))
    model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype, local_files_only=True)
    if device is not None:
        model = model.to(device)  # type: ignore[arg-type]  # transformers' @wraps(Module.to) reads as unbound
    tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
    return model, tokenizer


def save_model(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, path: str | Path) -> Path:
    """Save model and tokenizer into one directory that any HF tool (lm-eval, vLLM) opens."""
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path
