"""One RL step of each objective on a tiny MoE, from identical weights and identical rollouts.

The smallest real job of the suite (`gspo-bench probe`): sample G responses for P prompts from a
randomly initialised tiny MoE, score them with a verifiable synthetic reward (the share of digit
characters in the response), run the old-policy pass once, then for every objective take the
paper's K minibatch updates from the same weights with the training loop's own update phase
(`gspo_bench.train.update.update_policy`) and report the step's measurements: clip fraction, ratio
variances, KL and the expert-activation drift of minibatches 2..K against the old policy.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING

import torch

from gspo_bench.config import TrainConfig
from gspo_bench.models import build_char_tokenizer, build_tiny_moe
from gspo_bench.models.tokenizer import EOS_ID, PAD_ID
from gspo_bench.objectives import get_objective, objective_spec
from gspo_bench.rollout import Rollout, SamplingParams, make_engine
from gspo_bench.train import (
    OldPolicy,
    Policy,
    RolloutBatch,
    UpdateSettings,
    make_optimizer,
    old_policy_pass,
    to_host,
    update_policy,
)

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase


@dataclass(frozen=True)
class ProbeConfig:
    objectives: Sequence[str] = ("grpo", "gspo", "gspo_token", "dapo", "gmpo", "sapo", "cispo", "dr_grpo")
    family: str = "qwen3_moe"
    num_layers: int = 4
    prompts: int = 8  # P
    group_size: int = 8  # G
    prompt_len: int = 8
    max_new_tokens: int = 24
    minibatches: int = 4  # K, as the paper
    lr: float = 3e-4
    grad_clip: float = 1.0
    seed: int = 0


def digit_share_reward(texts: list[str]) -> torch.Tensor:
    """Share of digit characters in each response (a verifiable reward in [0, 1])."""
    return torch.tensor([sum(c.isdigit() for c in t) / max(len(t), 1) for t in texts])


def sample_rollouts(model: torch.nn.Module, tokenizer: PreTrainedTokenizerBase, cfg: ProbeConfig) -> Rollout:
    """P random prompts x G responses sampled by the `hf` engine (with the routing it used)."""
    gen = torch.Generator().manual_seed(cfg.seed)
    prompts = torch.randint(4, len(tokenizer), (cfg.prompts, cfg.prompt_len), generator=gen).tolist()
    engine = make_engine("hf", pad_id=PAD_ID, eos_id=EOS_ID)
    return engine.generate(model, prompts, SamplingParams(group_size=cfg.group_size, max_new_tokens=cfg.max_new_tokens,
                                                          seed=cfg.seed))


def probe_batch(model: torch.nn.Module, tokenizer: PreTrainedTokenizerBase, cfg: ProbeConfig) -> tuple[RolloutBatch, OldPolicy]:
    """The shared rollout batch (digit-share rewards, group advantages) and its old-policy pass."""
    rollout = sample_rollouts(model, tokenizer, cfg)
    rewards = digit_share_reward(tokenizer.batch_decode(rollout.response_ids, skip_special_tokens=True))
    batch = RolloutBatch.scored(rollout, rewards, cfg.group_size)
    return batch, old_policy_pass(Policy(model), batch, temperature=1.0, gate_scores=True)  # gate scores: rspo


def probe_objective(base: torch.nn.Module, batch: RolloutBatch, old: OldPolicy, name: str, cfg: ProbeConfig) -> dict:
    """One step of K updates of objective `name` on a copy of `base`: the step's measurements."""
    spec = objective_spec(name)
    clip = {} if spec.clip_low is None else {"clip_low": spec.clip_low, "clip_high": spec.clip_high}
    model = copy.deepcopy(base).train()
    policy = Policy(model, make_optimizer(model, TrainConfig(), lr=cfg.lr))
    order = torch.randperm(len(batch), generator=torch.Generator().manual_seed(cfg.seed + 1))
    start = time.perf_counter()
    update = update_policy(policy, partial(get_objective(name), **clip), batch, old, order, cfg.minibatches,
                           UpdateSettings(grad_clip=cfg.grad_clip, inputs=spec.inputs,
                                          generator=torch.Generator().manual_seed(cfg.seed + 2)))
    row = {"objective": name, **to_host(dict(update.metrics))}
    return row | {"time/update_s": time.perf_counter() - start, "reward/mean": float(batch.rewards.mean())}


def run_probe(cfg: ProbeConfig, on_result: Callable[[dict], None] | None = None) -> list[dict]:
    """Run the probe; returns one dict of step measurements per objective."""
    tokenizer = build_char_tokenizer()
    base = build_tiny_moe(cfg.family, seed=cfg.seed, vocab_size=len(tokenizer), num_layers=cfg.num_layers)
    batch, old = probe_batch(base, tokenizer, cfg)
    results = []
    for name in cfg.objectives:
        results.append(probe_objective(base, batch, old, name, cfg))
        if on_result is not None:
            on_result(results[-1])
    return results


PROBE_COLUMNS = ["loss", "clip/frac", "ratio/token_var", "ratio/seq_var", "kl/old_new", "moe/drift", "moe/drift_expert",
                 "grad/norm", "time/update_s"]  # what `gspo-bench probe` shows of each objective's step


def probe_cells(row: dict) -> list[str]:
    """A probe table row's cells (PROBE_COLUMNS): each value to 3 figures, "-" where the step measured none
    (the drift with K=1: it is measured on minibatches 2..K)."""
    return ["-" if row.get(column) is None or row[column] != row[column] else f"{row[column]:.3g}"
            for column in PROBE_COLUMNS]
