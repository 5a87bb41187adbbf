"""A rollout on a tiny MoE whose rewards spread within groups."""

from __future__ import annotations

import dataclasses

import torch

from gspo_bench.models import build_char_tokenizer, build_tiny_moe
from gspo_bench.rollout import SamplingParams, make_engine
from gspo_bench.tasks import make_task
from gspo_bench.train.policy import Policy
from gspo_bench.train.rollout import collect_rollout, draw_examples


def tiny_spread_rollout(prompts: int):
    """A tiny MoE (2 layers, 4 experts, top-2) and one rollout of `prompts` sort prompts x 4 responses,
    its advantages spread evenly over [-1.5, 1.5]."""
    tokenizer = build_char_tokenizer()
    model = build_tiny_moe(vocab_size=len(tokenizer), num_layers=2, hidden_size=32, expert_hidden=32,
                           num_experts=4, top_k=2, seed=5)
    task = make_task("sort", max_len=3)
    params = SamplingParams(group_size=4, max_new_tokens=8, seed=0)
    batch = collect_rollout(Policy(model), make_engine("hf", pad_id=0, eos_id=2), tokenizer, task,
                            draw_examples(task, prompts, 0), params)
    return model, dataclasses.replace(batch, advantages=torch.linspace(-1.5, 1.5, len(batch)))

