"""The hf engine decodes on CPU under torch.inference_mode (gspo_bench.rollout.hf): the same rollout,
bit for bit, as under no_grad alone, and tensors the training step can use, for every MoE family."""

from __future__ import annotations

import pytest
import torch

from gspo_bench.models import SUPPORTED_FAMILIES, build_tiny_moe
from gspo_bench.models.forward import response_forward
from gspo_bench.moe import RoutingCapture
from gspo_bench.rollout import SamplingParams, make_engine
from gspo_bench.rollout import hf as hf_engine
from gspo_bench.rollout.engine import Rollout
from gspo_bench.train.rollout import routing_for_training

PROMPTS = [[1, 5, 9, 4], [1, 7, 3], [1, 8, 8, 6, 2 + 3]]
FIELDS = ("input_ids", "attention_mask", "response_mask", "sampling_logp", "routing", "finite")


def tiny(family: str) -> torch.nn.Module:
    return build_tiny_moe(family, seed=2, num_layers=2, hidden_size=32, num_experts=8, top_k=2, expert_hidden=32)


def sample(model: torch.nn.Module, decode: str, router_noise: float = 1.0) -> Rollout:
    engine = make_engine("hf", pad_id=0, eos_id=2, decode=decode, router_noise=router_noise, logit_noise=0.5)
    return engine.generate(model, PROMPTS, SamplingParams(group_size=2, max_new_tokens=6, seed=3))


def forward_modes(model: torch.nn.Module) -> list[bool]:
    """Records whether inference mode was on at each forward of `model` (a pre-hook; remove it after)."""
    seen: list[bool] = []
    model.register_forward_pre_hook(lambda module, args: seen.append(torch.is_inference_mode_enabled()))
    return seen


@pytest.mark.parametrize("decode", ["generate", "static"])
def test_the_rollout_is_the_one_no_grad_alone_gives_bit_for_bit(decode, monkeypatch):
    model = tiny("qwen3_moe")
    seen = forward_modes(model)
    fast = sample(model, decode)
    assert seen and all(seen)  # every decode forward ran in inference mode
    monkeypatch.setattr(hf_engine, "decodes_in_inference_mode", lambda *args: False)
    seen.clear()
    plain = sample(model, decode)
    assert seen and not any(seen)
    for name in FIELDS:
        assert torch.equal(getattr(fast, name), getattr(plain, name)), name


@pytest.mark.parametrize("family", list(SUPPORTED_FAMILIES))
def test_a_rollout_trains_with_its_routes_replayed_and_samples_again(family):
    model = tiny(family)
    rollout = sample(model, "generate", router_noise=0.0)  # noise is for some families only (tested above)
    for name in FIELDS:
        assert not getattr(rollout, name).is_inference(), name
    n_response = rollout.response_mask.shape[1]
    replay = routing_for_training(rollout.routing, rollout.input_ids.shape[1])
    with RoutingCapture(model, replay=replay):  # R3: the engine's routes, saved for the backward
        logp, _ = response_forward(model, rollout.input_ids, rollout.attention_mask, n_response)
    (logp * rollout.response_mask).sum().backward()
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    assert grads and all(torch.isfinite(g).all() for g in grads)
    with torch.no_grad():
        for param in model.parameters():
            param.add_(0.01 * torch.randn_like(param))  # an optimizer step, in place
    again = sample(model, "generate", router_noise=0.0)  # nothing the first rollout left behind is an inference tensor
    assert not again.input_ids.is_inference()


def test_not_in_inference_mode_under_torchrun_on_a_gpu_or_sharded():
    model = tiny("qwen3_moe")
    params = SamplingParams(group_size=1, max_new_tokens=2)
    assert hf_engine.decodes_in_inference_mode(model, torch.device("cpu"), params)
    assert not hf_engine.decodes_in_inference_mode(model, torch.device("cpu"), SamplingParams(1, 2, synced=True))
    assert not hf_engine.decodes_in_inference_mode(model, torch.device("cuda"), params)
    next(model.parameters()).to_local = lambda: None  # what a DTensor (FSDP2 shard) has
    assert not hf_engine.decodes_in_inference_mode(model, torch.device("cpu"), params)
