"""Routing capture, replay and drift on the supported transformers MoE families (per-family gate rules: test_families.py)."""

from __future__ import annotations

import copy
import math

import pytest
import torch
from torch.testing import assert_close

from gspo_bench.models import SUPPORTED_FAMILIES, UnsupportedModelError, family_of
from gspo_bench.moe import RoutingCapture, find_routers, routing_drift
from tests.helpers.moe import batch, captured, perturb_routers, tiny


def experts_inputs(model):
    """Hooks recording the expert ids [N, k] (sorted) each MoE layer sends its tokens to. Register them
    inside a replay capture: Llama 4's experts take dense inputs, so its (replayed) router output is read."""
    seen, handles = [], []
    for router in find_routers(model):
        if family_of(model) == "llama4_text":  # dense gate scores [N, E], 0 where a token is not routed
            hook = lambda m, args, out: seen.append(out[0].ne(0).nonzero()[:, 1].reshape(out[0].shape[0], -1))  # noqa: E731
            handles.append(router.module.register_forward_hook(hook))
        else:  # experts(hidden_states, top_k_index, top_k_weights)
            hook = lambda m, args: seen.append(args[1].sort(-1).values.clone())  # noqa: E731
            handles.append(router.experts.register_forward_pre_hook(hook))
    return seen, handles


@pytest.mark.parametrize("family", SUPPORTED_FAMILIES)
def test_replay_sends_tokens_to_the_recorded_experts(family):
    model = tiny(family)
    ids, am = batch()
    cap, _ = captured(model, ids, am)
    recorded = cap.routing  # [L, B, T, k]
    assert recorded.shape == (3, 3, 7, 2) and recorded.dtype == torch.long
    perturb_routers(model)
    free, _ = captured(model, ids, am)
    assert routing_drift(recorded, free.routing, am)["moe/drift"] > 0.5  # the perturbation matters
    with RoutingCapture(model, replay=recorded) as cap2:
        seen, handles = experts_inputs(model)
        model(input_ids=ids, attention_mask=am)
    for h in handles:
        h.remove()
    for layer, given in enumerate(seen):
        assert torch.equal(given.reshape(3, 7, 2).long(), recorded[layer].sort(-1).values)
    # layer 0 sees the same hidden states, so what it *would* have chosen is the free routing
    assert torch.equal(cap2.routing[0], free.routing[0])


@pytest.mark.parametrize("family", SUPPORTED_FAMILIES)
def test_full_replay_reproduces_unperturbed_logits(family):
    model = tiny(family)
    ids, am = batch()
    cap, reference = captured(model, ids, am, no_grad=True)
    perturb_routers(model)
    with torch.no_grad():
        perturbed = model(input_ids=ids, attention_mask=am).logits
    assert (perturbed - reference).abs().max() > 1e-4  # well above assert_close's atol (MiniMax's experts are quiet at init)
    with RoutingCapture(model, replay=cap.routing, replay_weights=cap.weights), torch.no_grad():
        replayed = model(input_ids=ids, attention_mask=am).logits
    valid = am.bool()
    assert_close(replayed[valid], reference[valid])


@pytest.mark.parametrize("family", SUPPORTED_FAMILIES)
def test_replay_keeps_router_gradient(family):
    model = tiny(family)
    ids, am = batch()
    cap, _ = captured(model, ids, am)
    perturb_routers(model, scale=0.5)
    with RoutingCapture(model, replay=cap.routing):
        out = model(input_ids=ids, attention_mask=am).logits
    out[am.bool()].pow(2).mean().backward()
    for router in find_routers(model):
        assert router.weight.grad is not None
        assert router.weight.grad.abs().sum() > 0, router.name


@pytest.mark.parametrize("family", ["qwen3_moe", "qwen2_moe", "olmoe", "mixtral"])
def test_replay_hands_the_experts_the_live_softmax(family):
    # softmax families read at a router module's output; every family's own rule is checked against a
    # hand computation in test_families.py
    model = tiny(family)
    ids, am = batch()
    cap, _ = captured(model, ids, am)
    perturb_routers(model, scale=0.5)
    router = find_routers(model)[0]
    grabbed = []
    with RoutingCapture(model, replay=cap.routing):
        handle = router.module.register_forward_hook(lambda m, a, out: grabbed.append(out))  # runs after replay
        with torch.no_grad():
            model(input_ids=ids, attention_mask=am)
        handle.remove()
    logits, weights, experts = grabbed[0]
    assert torch.equal(experts.reshape(3, 7, 2), cap.routing[0])
    expected = torch.softmax(logits.float(), -1).gather(-1, experts)
    if router.rule.renormalise:
        expected = expected / expected.sum(-1, keepdim=True)
    assert_close(weights.float(), expected)


def test_drift_identical_disjoint_and_exact_small_case():
    old = torch.tensor([[[[0, 1], [2, 3]]], [[[4, 5], [6, 7]]]])  # [L=2, B=1, T=2, k=2]
    assert routing_drift(old, old.clone())["moe/drift"] == 0.0
    assert routing_drift(old, old.flip(-1))["moe/drift"] == 0.0  # a set: order does not matter
    disjoint = (old + 1) % 8 + 8  # ids 8.. never chosen before
    stats = routing_drift(old, disjoint)
    assert stats["moe/drift"] == 1.0 and stats["moe/drift_expert"] == 1.0
    new = old.clone()
    new[0, 0, 0] = torch.tensor([0, 7])  # layer 0, token 0: one of two experts changed
    new[1, 0, 1] = torch.tensor([0, 1])  # layer 1, token 1: both changed
    stats = routing_drift(old, new)
    assert stats["moe/drift"] == pytest.approx(2 / 4)
    assert stats["moe/drift_expert"] == pytest.approx((1 + 2) / (4 * 2))
    assert stats["moe/drift_layer"].tolist() == pytest.approx([1 / 2, 1 / 2])
    # masking token 1 away leaves only layer 0's change
    stats = routing_drift(old, new, mask=torch.tensor([[1, 0]]))
    assert stats["moe/drift"] == pytest.approx(1 / 2)
    assert stats["moe/drift_layer"][1] == 0.0


def test_routing_confidence_by_hand_and_its_rules():
    from gspo_bench.moe.confidence import routing_confidence
    from gspo_bench.moe.gates import Sigmoid, Softmax, TopKSoftmax

    conf = torch.tensor([[[0.5, 0.7, 0.9]], [[1.0, 0.8, 0.1]]])  # [L=2, B=1, T=3]
    stats = routing_confidence(conf, torch.tensor([[1, 1, 0]]))  # the last position is padding
    assert stats["moe/route_conf_layer"].tolist() == pytest.approx([0.6, 0.9])
    assert float(stats["moe/route_conf"]) == pytest.approx(0.75)
    assert float(routing_confidence(conf)["moe/route_conf"]) == pytest.approx((2.1 + 1.9) / 6)
    assert torch.isnan(routing_confidence(conf, torch.zeros(1, 3))["moe/route_conf"])
    ln3 = math.log(3.0)
    ids = torch.tensor([[1, 0]])
    # softmax over 4 experts of (0, ln 3, 0, 0) = (1, 3, 1, 1) / 6: experts 1 and 0 hold 4/6, whatever the weights rule
    for rule in (Softmax(), Softmax(renormalise=True), TopKSoftmax()):
        assert float(rule.confidence(torch.tensor([[0.0, ln3, 0.0, 0.0]]), ids)) == pytest.approx(4 / 6)
    # sigmoids of (0, ln 3, -ln 3, 0) = (1/2, 3/4, 1/4, 1/2), sum 2: experts 1 and 0 hold (3/4 + 1/2) / 2
    assert float(Sigmoid(renormalise=True).confidence(torch.tensor([[0.0, ln3, -ln3, 0.0]]), ids)) == pytest.approx(0.625)
    for rule in (Softmax(), TopKSoftmax(), Sigmoid()):  # a router that cannot tell experts apart: k / E
        assert float(rule.confidence(torch.full((1, 4), 0.3), ids)) == pytest.approx(2 / 4)


def test_drift_ignores_left_padding():
    model = tiny("qwen3_moe")
    ids, am = batch()
    cap, _ = captured(model, ids, am)
    scrambled = cap.routing.clone()
    scrambled[:, 0, :3] = torch.tensor([6, 7])  # change only the padded positions of row 0
    assert routing_drift(cap.routing, scrambled, am)["moe/drift"] == 0.0
    assert routing_drift(cap.routing, scrambled)["moe/drift"] > 0.0


@pytest.mark.parametrize("family", SUPPORTED_FAMILIES)
def test_capture_in_generate_equals_teacher_forced(family):
    model = tiny(family).eval()
    ids, am = batch(b=3, t=6, seed=2)
    torch.manual_seed(0)
    with RoutingCapture(model) as cap, torch.no_grad():
        seqs = model.generate(input_ids=ids, attention_mask=am, max_new_tokens=6, do_sample=True, top_k=0,
                              pad_token_id=0, eos_token_id=2)
    generated = cap.routing  # prefill + one position per decode step; the last token is never routed
    assert generated.shape[2] == seqs.shape[1] - 1
    full_mask = torch.cat([am, torch.ones(3, seqs.shape[1] - 6, dtype=am.dtype)], dim=1)
    forced, _ = captured(model, seqs, full_mask, no_grad=True)
    teacher = forced.routing[:, :, :-1]
    valid = full_mask[:, :-1].bool()
    assert torch.equal(generated.sort(-1).values[:, valid], teacher.sort(-1).values[:, valid])


def test_hooks_removed_on_exit_and_on_exceptions():
    model = tiny("mixtral")
    pristine = copy.deepcopy(model)
    ids, am = batch()
    cap, _ = captured(model, ids, am)
    with pytest.raises(ZeroDivisionError), RoutingCapture(model, replay=torch.zeros_like(cap.routing)):
        raise ZeroDivisionError("inside the block")
    with pytest.raises(ValueError, match="replay routing covers"), RoutingCapture(model, replay=cap.routing):
        model(input_ids=ids[:2], attention_mask=am[:2])  # wrong batch: the error leaves the block
    for module in model.modules():
        assert not module._forward_hooks and not module._forward_pre_hooks
    with torch.no_grad():
        assert torch.equal(model(input_ids=ids, attention_mask=am).logits,
                           pristine(input_ids=ids, attention_mask=am).logits)


def test_nested_captures_record_the_model_choice():
    model = tiny("olmoe")
    ids, am = batch()
    cap, _ = captured(model, ids, am)
    forced = torch.full_like(cap.routing, 0)
    forced[..., 1] = 1  # replay experts {0, 1} everywhere
    with RoutingCapture(model, replay=forced), RoutingCapture(model) as inner:
        model(input_ids=ids, attention_mask=am)
    assert torch.equal(inner.routing[0], cap.routing[0])  # not the forced ids
    with RoutingCapture(model) as again:  # the model is reusable afterwards
        model(input_ids=ids, attention_mask=am)
    assert torch.equal(again.routing, cap.routing)


def test_gradient_checkpointing_records_once_and_replays_in_recompute():
    ids, am = batch()
    plain = tiny("qwen3_moe").train()
    ckpt = copy.deepcopy(plain)
    ckpt.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    cap, _ = captured(plain, ids, am)
    replay = cap.routing.roll(1, dims=-1).roll(1, dims=2)  # some other valid routing
    grads = []
    for model in (plain, ckpt):
        model.zero_grad()
        with RoutingCapture(model, replay=replay) as rc:
            out = model(input_ids=ids, attention_mask=am).logits
            out[am.bool()].pow(2).mean().backward()
        assert rc.routing.shape == cap.routing.shape and rc.n_sequences == 1
        grads.append(torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None]))
    assert_close(grads[1], grads[0])


def test_unsupported_model_names_the_supported_families():
    from transformers import AutoModelForCausalLM, LlamaConfig

    dense = AutoModelForCausalLM.from_config(
        LlamaConfig(vocab_size=40, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                    num_attention_heads=2, num_key_value_heads=1)
    )
    with pytest.raises(UnsupportedModelError) as err:
        RoutingCapture(dense)
    for family in SUPPORTED_FAMILIES:
        assert family in str(err.value)


def test_bad_replay_shape_is_refused():
    model = tiny("qwen2_moe")
    with pytest.raises(ValueError, match="L = 3 MoE layers"):
        RoutingCapture(model, replay=torch.zeros(2, 1, 4, 2, dtype=torch.long))
    with pytest.raises(ValueError, match="needs replay"):
        RoutingCapture(model, replay_weights=torch.zeros(3, 1, 4, 2))
