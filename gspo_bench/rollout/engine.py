"""Rollout engines: sample G responses per prompt and return ids, masks, sampling log-probs, routing.

An engine is any object with `name`, `generate(model, prompts, params) -> Rollout` and
`sync_weights(model)` (push training weights into the engine; nothing to do for `hf`, which samples
from the training model itself). Engines are registered by name: `hf` here, `vllm` as an extra.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import torch

from gspo_bench.registry import Registry, origin_of


@dataclass(frozen=True)
class SamplingParams:
    group_size: int  # G responses per prompt (rows of one group are consecutive)
    max_new_tokens: int
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0  # the k most probable tokens only (0: off), before top_p
    seed: int = 0
    capture_routing: bool = True
    ignore_eos: bool = False  # never sample </s>: every response is max_new_tokens long (benchmarks)
    synced: bool = False  # distributed ranks decode in lock step until all are done (FSDP2 forwards)
    row_keys: tuple[int, ...] | None = None  # each row's sampling key (hf engine); None: 0..B-1 in order
    record_kept: bool = False  # return each token's kept set (Rollout.sampling_kept: train.sampling_mask)


@dataclass
class Rollout:
    input_ids: torch.Tensor  # [B, L] left-padded prompt, then response (padding after </s>)
    attention_mask: torch.Tensor  # [B, L] 1 at prompt tokens and valid response tokens
    response_mask: torch.Tensor  # [B, T] bool, response tokens up to and including </s>
    sampling_logp: torch.Tensor  # [B, T] fp32 log-prob of each token under the sampling distribution
    routing: torch.Tensor | None  # [L_moe, B, L - 1, k] experts chosen during generation, if captured
    finite: torch.Tensor | None = None  # 0-d bool: every sampling distribution was finite (None: not checked)
    sampling_kept: torch.Tensor | None = None  # [B, T, K] ids of the tokens each position's truncated sampling
    #                                            kept, -1 past its set (SamplingParams.record_kept), or None

    @property
    def prompt_width(self) -> int:
        return self.input_ids.shape[1] - self.response_mask.shape[1]

    @property
    def response_ids(self) -> torch.Tensor:
        return self.input_ids[:, self.prompt_width :]  # [B, T]


def check_prompt_lengths(prompts: list[list[int]], limit: int | None) -> None:
    """ValueError when a prompt is longer than `limit` tokens (`rollout.max_prompt_tokens`; None: no limit).
    A prompt is never truncated: the run's plan (`--dry-run`) counted on the limit."""
    check_prompt_length(max((len(p) for p in prompts), default=0), limit)


def check_prompt_length(longest: int, limit: int | None) -> None:
    """ValueError when the longest prompt, of `longest` tokens, is longer than `limit` (None: no limit)."""
    if limit is not None and longest > limit:
        raise ValueError(f"a prompt of {longest} tokens is longer than rollout.max_prompt_tokens = {limit}: raise "
                         "the limit (and check the dry run's memory plan), or shorten the task's prompts")


class RolloutEngine(Protocol):
    name: str

    def generate(self, model: torch.nn.Module, prompts: list[list[int]], params: SamplingParams) -> Rollout: ...

    def sync_weights(self, model: torch.nn.Module) -> None: ...


EngineFactory = Callable[..., RolloutEngine]
_ENGINES: Registry[EngineFactory] = Registry("rollout engine", "engines")


def register_engine(name: str) -> Callable[[EngineFactory], EngineFactory]:
    def decorate(factory: EngineFactory) -> EngineFactory:
        _ENGINES.add(name, factory, origin_of("rollout engine", name, factory))
        return factory

    return decorate


def list_engines() -> list[str]:
    return _ENGINES.names()


def make_engine(name: str, **kwargs: Any) -> RolloutEngine:
    return _ENGINES.lookup(name)(**kwargs)
