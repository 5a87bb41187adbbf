"""A tiny MoE with its tokenizer and a sort task (`tiny_parts`, the `parts` fixture of tests/conftest.py),
one rollout of it, and a routing shifted by one expert: the training phases' shared case."""

from __future__ import annotations

import dataclasses

import torch

from gspo_bench.models import build_char_tokenizer, build_tiny_moe
from gspo_bench.rollout import SamplingParams, make_engine
from gspo_bench.tasks import make_task
from gspo_bench.train.policy import Policy
from gspo_bench.train.rollout import collect_rollout, draw_examples

EXPERTS = 4


def tiny_parts():
    tokenizer = build_char_tokenizer()
    model = build_tiny_moe(vocab_size=len(tokenizer), num_layers=2, hidden_size=32, expert_hidden=32,
                           num_experts=EXPERTS, top_k=2, seed=5)
    return tokenizer, model, make_task("sort", max_len=3)


def rollout(parts, temperature=1.0, seed=0, policy=None):
    tokenizer, model, task = parts
    policy = policy or Policy(model)
    params = SamplingParams(group_size=4, max_new_tokens=8, temperature=temperature, seed=seed)
    batch = collect_rollout(policy, make_engine("hf", pad_id=0, eos_id=2), tokenizer, task,
                            draw_examples(task, 2, seed), params)
    # rewards of an untrained model are all 0: give the rows distinct advantages so pairing matters
    return dataclasses.replace(batch, advantages=torch.linspace(-1.5, 1.5, len(batch)))


def shifted(routing):
    return (routing + 1) % EXPERTS
