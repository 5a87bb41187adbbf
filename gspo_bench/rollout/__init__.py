"""Rollout engines (hf by default; vllm as an optional extra) and the batching they share."""

from gspo_bench.models.padding import left_pad, position_ids  # the engines' padding, re-exported
from gspo_bench.rollout import hf, vllm_engine  # noqa: F401  (register "hf" and "vllm"; vLLM is imported on use)
from gspo_bench.rollout.batching import mask_after_eos
from gspo_bench.rollout.engine import (
    Rollout,
    RolloutEngine,
    SamplingParams,
    list_engines,
    make_engine,
    register_engine,
)

__all__ = [
    "Rollout", "RolloutEngine", "SamplingParams", "left_pad", "list_engines", "make_engine",
    "mask_after_eos", "position_ids", "register_engine",
]
