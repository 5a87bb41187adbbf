"""Routing Replay and gate scores on every supported MoE family, checked against hand computations.

The hand rules here are written from the transformers modeling code of each family, independently
of gspo_bench.moe.gates: a replay must give the experts the family's own gate weights, computed from
the live router logits at the replayed experts (also those the live router would not pick).
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch.testing import assert_close
from transformers import AutoModelForCausalLM, PhimoeConfig

from gspo_bench.models import SUPPORTED_FAMILIES, UnsupportedModelError, build_tiny_moe, family_of, load_moe
from gspo_bench.models.tiny import DENSE_FIRST, GROUPED, TinyMoESpec, tiny_config
from gspo_bench.moe import RoutingCapture, find_routers, routing_drift
from gspo_bench.moe.routers import FAMILY_ROUTING, gate_rule
from gspo_bench.train.compute import active_parameters
from tests.helpers.moe import VOCAB, batch, captured, perturb_routers

FAMILIES = list(SUPPORTED_FAMILIES)
SOFTMAX_RENORMALISED_IF_CONFIGURED = {"qwen3_moe", "qwen2_moe", "olmoe", "flex_olmo", "qwen3_next"}
SOFTMAX_RENORMALISED = {"mixtral", "minimax", "hunyuan_v1_moe"}
TOPK_THEN_SOFTMAX = {"gpt_oss", "granitemoe", "granitemoeshared"}
SIGMOID_WITH_CORRECTION_BIAS = {"deepseek_v3", "glm4_moe", "dots1"}
SIGMOID_SCORED = SIGMOID_WITH_CORRECTION_BIAS | {"llama4_text"}


def tiny(family, **kw):
    """A tiny model; selection-only correction biases set to random values, so they matter."""
    sizes = dict(num_layers=3, hidden_size=32, num_experts=8, top_k=2, vocab_size=VOCAB, expert_hidden=32)
    model = build_tiny_moe(family, seed=1, **(sizes | kw))
    gen = torch.Generator().manual_seed(7)
    with torch.no_grad():
        for name, t in [*model.named_buffers(), *model.named_parameters()]:
            if name.endswith("e_score_correction_bias"):
                t.copy_(0.2 * torch.randn(t.shape, generator=gen))
    return model


def handed_to_experts(model, modules=None):
    """Hooks recording the dense gate weights [N, E] each MoE layer hands its experts (0: expert not used).

    Register them inside a replay capture. Llama 4's experts take dense inputs, so its (replayed) router
    output is read; the others' experts take (hidden_states, top_k_index, top_k_weights).
    """
    got, handles = [], []
    for router in find_routers(model):
        if family_of(model) == "llama4_text":
            handles.append(router.module.register_forward_hook(lambda m, args, out: got.append(out[0].detach().float())))
        else:
            handles.append(router.experts.register_forward_pre_hook(_dense_recorder(got, router.num_experts)))
    return got, handles


def _dense_recorder(got, num_experts):
    def hook(module, args):
        ids, weights = args[1], args[2]
        got.append(torch.zeros(ids.shape[0], num_experts).scatter(1, ids.long(), weights.detach().float()))

    return hook


def dense(ids, weights, num_experts):
    """[N, k] ids and weights as a dense [N, E] matrix."""
    return torch.zeros(ids.shape[0], num_experts).scatter(1, ids, weights.float())


def router_logits(router, hidden):
    """Layer logits [N, E] from the router's input, as the family computes them (GPT-OSS adds a bias)."""
    bias = getattr(router.module, "bias", None)
    return F.linear(hidden.reshape(-1, router.weight.shape[1]).float(), router.weight.float(),
                    None if bias is None else bias.float())


def hand_weights(family, config, logits, ids):
    """The gate weights family `family` gives experts `ids` [N, k], from the transformers modeling code."""
    probs = torch.softmax(logits, -1).gather(-1, ids)
    sigmoids = torch.sigmoid(logits).gather(-1, ids)
    if family in TOPK_THEN_SOFTMAX:
        return torch.softmax(logits.gather(-1, ids), -1)
    if family == "llama4_text":
        return sigmoids
    if family in SIGMOID_WITH_CORRECTION_BIAS:
        weights = sigmoids / (sigmoids.sum(-1, keepdim=True) + 1e-20) if config.norm_topk_prob else sigmoids
        return weights * config.routed_scaling_factor
    if family == "deepseek_v2":
        return probs * config.routed_scaling_factor
    if family == "ernie4_5_moe":
        return probs / probs.sum(-1, keepdim=True).clamp(min=config.moe_norm_min)
    if family == "dbrx":
        p = config.ffn_config.moe_normalize_expert_weights
        return probs if p is None else probs / torch.norm(probs, p=p, dim=-1, keepdim=True)
    if family == "jamba":
        return probs
    assert family in SOFTMAX_RENORMALISED | SOFTMAX_RENORMALISED_IF_CONFIGURED, family
    renormalised = family in SOFTMAX_RENORMALISED or config.norm_topk_prob
    return probs / probs.sum(-1, keepdim=True) if renormalised else probs


def hand_scores(family, logits, ids):
    """The family's gate score: sigmoid for sigmoid routers, else the softmax over all experts."""
    return (torch.sigmoid(logits) if family in SIGMOID_SCORED else torch.softmax(logits, -1)).gather(-1, ids)


def test_every_family_has_a_builder_a_routing_entry_and_its_architecture():
    assert len(FAMILIES) >= 12
    assert set(FAMILY_ROUTING) == set(SUPPORTED_FAMILIES)
    for family in FAMILIES:
        assert gate_rule(family)
        config = tiny_config(TinyMoESpec(family=family))
        assert config.model_type == family
        assert (config.pad_token_id, config.bos_token_id, config.eos_token_id) == (0, 1, 2)
    assert set(SOFTMAX_RENORMALISED_IF_CONFIGURED | SOFTMAX_RENORMALISED | TOPK_THEN_SOFTMAX | SIGMOID_SCORED
               | {"deepseek_v2", "ernie4_5_moe", "dbrx", "jamba"}) == set(FAMILIES)  # the hand rules cover all


@pytest.mark.parametrize("family", FAMILIES)
def test_replaying_the_recording_changes_nothing(family):
    model = tiny(family)
    assert type(model).__name__ == SUPPORTED_FAMILIES[family]
    routers = find_routers(model)
    ids, am = batch()
    cap, reference = captured(model, ids, am)
    reference[am.bool()].pow(2).mean().backward()
    reference_grads = [r.weight.grad.clone() for r in routers]
    model.zero_grad()
    again, replayed = captured(model, ids, am, replay=cap.routing)
    replayed[am.bool()].pow(2).mean().backward()
    assert_close(replayed, reference)
    for router, expected in zip(routers, reference_grads):
        assert expected.abs().sum() > 0, router.name
        assert_close(router.weight.grad, expected)
    assert torch.equal(again.routing, cap.routing)  # what the model itself chose is unchanged: no drift
    stats = routing_drift(cap.routing, again.routing, am)
    assert stats["moe/drift"] == 0 and stats["moe/drift_expert"] == 0 and not stats["moe/drift_layer"].any()


@pytest.mark.parametrize("family", FAMILIES)
def test_replay_after_the_router_moved_forces_the_recorded_experts_and_trains_the_router(family):
    model = tiny(family)
    ids, am = batch()
    cap, _ = captured(model, ids, am)
    recorded = cap.routing
    perturb_routers(model)
    with RoutingCapture(model, replay=recorded):
        handed, handles = handed_to_experts(model)
        with RoutingCapture(model) as live:  # nested: what the moved router would choose
            out = model(input_ids=ids, attention_mask=am).logits
    for handle in handles:
        handle.remove()
    assert routing_drift(recorded, live.routing, am)["moe/drift"] > 0.3  # the perturbation matters
    for layer, weights in enumerate(handed):
        sent = F.one_hot(recorded[layer].reshape(-1, 2), 8).sum(1).bool()  # [N, E]
        assert torch.equal(weights.ne(0), sent), f"layer {layer}"
    out[am.bool()].pow(2).mean().backward()
    for router in find_routers(model):
        assert router.weight.grad.abs().sum() > 0, router.name


@pytest.mark.parametrize("family", FAMILIES)
def test_a_replayed_expert_outside_the_live_top_k_gets_its_weight_and_gradient(family):
    model = tiny(family)
    perturb_routers(model)
    ids = torch.tensor([[11]])  # one token: layer 0's router sees nothing else
    live, _ = captured(model, ids)
    forced = live.routing.clone()
    chosen = forced[0, 0, 0]
    outside = next(e for e in range(8) if e not in chosen.tolist())
    forced[0, 0, 0, 0] = outside  # one expert the live router does not pick, one it does
    router = find_routers(model)[0]
    with RoutingCapture(model, replay=forced):
        handed, handles = handed_to_experts(model)
        out = model(input_ids=ids).logits
    for handle in handles:
        handle.remove()
    assert handed[0][0, outside] > 0
    out.pow(2).sum().backward()
    assert router.weight.grad[outside].abs().sum() > 0


@pytest.mark.parametrize("family", FAMILIES)
def test_full_replay_after_the_router_moved_is_the_recorded_forward_and_freezes_the_router(family):
    """Full replay (experts and combine weights, grpo_rr_full): after the routers moved, the forward is the
    recorded one (only the routers changed, and nothing they compute reaches the output) and no gradient
    reaches them, so the update leaves them where they were."""
    model = tiny(family)
    ids, am = batch()
    cap, reference = captured(model, ids, am)
    perturb_routers(model)
    model.zero_grad(set_to_none=True)
    with RoutingCapture(model, replay=cap.routing, replay_weights=cap.weights):
        out = model(input_ids=ids, attention_mask=am).logits
    assert_close(out, reference, rtol=1e-5, atol=1e-6)
    out[am.bool()].pow(2).mean().backward()
    for router in find_routers(model):
        grad = router.weight.grad
        assert grad is None or not grad.any(), router.name
    assert any(p.grad is not None and p.grad.any() for p in model.parameters())  # the rest trains


def hand_confidence(family, logits, ids):
    """Routing confidence: the share of the router's score mass on experts `ids` [N, k], the scores being
    the softmax over all experts, or each expert's sigmoid (normalised here over all experts)."""
    scores = torch.sigmoid(logits) if family in SIGMOID_SCORED else torch.softmax(logits, -1)  # [N, E]
    return scores.gather(-1, ids).sum(-1) / scores.sum(-1)  # [N]


@pytest.mark.parametrize("family", FAMILIES)
def test_routing_confidence_is_the_score_mass_on_the_chosen_experts(family):
    model = tiny(family)
    ids, am = batch()
    router, inputs = find_routers(model)[0], []
    handle = router.module.register_forward_pre_hook(lambda m, args: inputs.append(args[0]))
    try:
        cap, _ = captured(model, ids, am, confidence=True, no_grad=True)
    finally:
        handle.remove()
    conf = cap.route_confidence  # [L, B, T]
    assert conf.shape == cap.routing.shape[:3] and conf.dtype == torch.float32
    logits = router_logits(router, inputs[0])  # layer 0: its input does not depend on the routing
    assert_close(conf[0].reshape(-1), hand_confidence(family, logits, cap.routing[0].reshape(-1, 2)))
    assert ((conf > 0) & (conf <= 1 + 1e-6)).all()
    with pytest.raises(RuntimeError, match="confidence=True"):
        _ = RoutingCapture(model).route_confidence


@pytest.mark.parametrize("family", FAMILIES)
def test_gate_weights_and_scores_follow_the_family_rule(family):
    check_gate_rule(family, tiny(family))


@pytest.mark.parametrize("family", sorted(SIGMOID_WITH_CORRECTION_BIAS | SOFTMAX_RENORMALISED_IF_CONFIGURED))
def test_a_configurable_renormalisation_follows_the_config_both_ways(family):
    default = tiny_config(TinyMoESpec(family=family)).norm_topk_prob
    model = tiny(family, norm_topk_prob=not default)
    assert model.config.norm_topk_prob is (not default)
    check_gate_rule(family, model)


def check_gate_rule(family, model):
    """The weights transformers gives, the weights a replay gives and the gate scores, against the hand rule."""
    ids, am = batch()
    cap, _ = captured(model, ids, am)
    with RoutingCapture(model, probe=cap.routing) as probed:  # unperturbed: probing the recording = its scores
        model(input_ids=ids, attention_mask=am)
    assert probed.probe_scores.dtype == torch.float32 and not probed.probe_scores.requires_grad
    assert_close(probed.probe_scores, cap.gate_scores)
    assert_close(probed.gate_scores, cap.gate_scores)

    forced = (cap.routing + 1) % 8  # other experts, mostly outside the live top-k
    router = find_routers(model)[0]
    inputs = []
    with RoutingCapture(model, replay=forced, probe=forced) as replayed:
        handed, handles = handed_to_experts(model)
        handles.append(router.module.register_forward_pre_hook(lambda m, args: inputs.append(args[0])))
        with torch.no_grad():
            model(input_ids=ids, attention_mask=am)
    for handle in handles:
        handle.remove()
    logits = router_logits(router, inputs[0])  # layer 0: its input does not depend on the routing
    own, other = cap.routing[0].reshape(-1, 2), forced[0].reshape(-1, 2)
    # the family's own weights (transformers), the replayed ones (ours) and the gate scores, by hand
    assert_close(cap.weights[0].reshape(-1, 2).float(), hand_weights(family, model.config, logits, own))
    assert_close(handed[0], dense(other, hand_weights(family, model.config, logits, other), 8))
    assert_close(cap.gate_scores[0].reshape(-1, 2), hand_scores(family, logits, own))
    assert_close(replayed.probe_scores[0].reshape(-1, 2), hand_scores(family, logits, other))
    assert_close(replayed.gate_scores[0], cap.gate_scores[0])  # scores of the model's own choice


def hand_group_limited_top_k(family, config, logits, bias):
    """Group-limited top-k: the `topk_group` best of `n_group` expert groups, then top-k among their experts."""
    if family == "deepseek_v2":  # softmax, a group scores its best expert
        choice = torch.softmax(logits, -1)
        group_score = lambda g: g.max(-1).values  # noqa: E731
    else:  # sigmoid + correction bias, a group scores its best two
        choice = torch.sigmoid(logits) + bias
        group_score = lambda g: g.topk(2, -1).values.sum(-1)  # noqa: E731
    n, e = choice.shape
    groups = choice.reshape(n, config.n_group, e // config.n_group)
    best = group_score(groups).topk(config.topk_group, -1).indices
    allowed = torch.zeros(n, config.n_group, dtype=torch.bool).scatter(1, best, True)
    masked = groups.masked_fill(~allowed[..., None], float("-inf")).reshape(n, e)
    return masked.topk(config.num_experts_per_tok, -1).indices, choice


@pytest.mark.parametrize("family", GROUPED)
def test_group_limited_selection_matches_a_hand_implementation(family):
    model = tiny(family, num_experts=16, top_k=4, n_group=4, topk_group=2)
    router = find_routers(model)[0]
    ids, am = batch()
    inputs = []
    handle = router.module.register_forward_pre_hook(lambda m, args: inputs.append(args[0]))
    cap, reference = captured(model, ids, am)
    handle.remove()
    bias = getattr(router.module, "e_score_correction_bias", torch.zeros(16))
    selected, choice = hand_group_limited_top_k(family, model.config, router_logits(router, inputs[0]), bias)
    assert torch.equal(cap.routing[0].reshape(-1, 4).sort(-1).values, selected.sort(-1).values)
    ungrouped = choice.topk(4, -1).indices.sort(-1).values
    assert not torch.equal(ungrouped, selected.sort(-1).values)  # the groups matter for some token
    with RoutingCapture(model, replay=cap.routing), torch.no_grad():
        assert_close(model(input_ids=ids, attention_mask=am).logits, reference)


@pytest.mark.parametrize("family", DENSE_FIRST)
def test_dense_first_layers_are_not_routed_and_layers_stay_aligned(family):
    model = tiny(family, num_layers=4, first_k_dense=2)
    routers = find_routers(model)
    experts_by_layer = {int(name.split(".")[2]): m for name, m in model.named_modules() if name.endswith(".experts")}
    assert [r.layer for r in routers] == sorted(experts_by_layer) == [2, 3]
    assert [r.experts for r in routers] == [experts_by_layer[2], experts_by_layer[3]]
    ids, am = batch()
    cap, reference = captured(model, ids, am)
    assert cap.routing.shape == cap.gate_scores.shape == (2, 3, 7, 2)  # L_moe = num_layers - first_k_dense
    forced = (cap.routing + torch.tensor([1, 3]).reshape(2, 1, 1, 1)) % 8  # a different shift per MoE layer
    with RoutingCapture(model, replay=forced):
        handed, handles = handed_to_experts(model)
        model(input_ids=ids, attention_mask=am)
    for handle in handles:
        handle.remove()
    for moe_layer, weights in enumerate(handed):  # in layer order: decoder layer 2 gets forced[0], 3 forced[1]
        assert torch.equal(weights.ne(0), F.one_hot(forced[moe_layer].reshape(-1, 2), 8).sum(1).bool())
    with RoutingCapture(model, replay=cap.routing), torch.no_grad():
        assert_close(model(input_ids=ids, attention_mask=am).logits, reference)


@pytest.mark.parametrize("family", FAMILIES)
def test_active_parameters_count_routed_experts_at_top_k_over_num_experts(family):
    model = tiny(family, first_k_dense=1 if family in DENSE_FIRST else 0)
    embeddings = {id(p) for p in model.get_input_embeddings().parameters()}
    total = routed = 0
    for name, p in model.named_parameters():
        if id(p) in embeddings:
            continue
        total += p.numel()
        routed += p.numel() if ".experts." in name else 0  # routed experts only: not shared experts or dense MLPs
    assert routed > 0
    assert active_parameters(model) == round(total - routed * (1 - 2 / 8))


@pytest.mark.parametrize("family", ["dbrx", "jamba"])
def test_method_wrappers_nest_replay_in_recompute_and_are_removed(family):
    model = tiny(family).train()
    blocks = [r.block for r in find_routers(model)]
    ids, am = batch()
    cap, _ = captured(model, ids, am)
    forced = torch.zeros_like(cap.routing)
    forced[..., 1] = 1
    with RoutingCapture(model, replay=forced), RoutingCapture(model) as inner:
        model(input_ids=ids, attention_mask=am)
    assert torch.equal(inner.routing[0], cap.routing[0])  # the model's own choice, not the forced one
    with pytest.raises(ZeroDivisionError), RoutingCapture(model, replay=forced):
        raise ZeroDivisionError("inside the block")
    assert not any("route_tokens_to_experts" in block.__dict__ for block in blocks)
    grads = []
    for checkpointing in (False, True):
        if checkpointing:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        model.zero_grad()
        with RoutingCapture(model, replay=forced) as rc:
            model(input_ids=ids, attention_mask=am).logits[am.bool()].pow(2).mean().backward()
        assert rc.n_sequences == 1 and rc.routing.shape == forced.shape
        grads.append(torch.cat([r.weight.grad.flatten() for r in find_routers(model)]))
    assert_close(grads[1], grads[0])


def test_probe_shape_is_checked_and_probe_scores_need_a_probe():
    model = tiny("qwen3_moe")
    with pytest.raises(ValueError, match="probe must be"):
        RoutingCapture(model, probe=torch.zeros(2, 1, 4, 2, dtype=torch.long))
    ids, am = batch()
    cap, _ = captured(model, ids, am)
    with pytest.raises(RuntimeError, match="needs RoutingCapture"):
        _ = cap.probe_scores
    with pytest.raises(ValueError, match="probe routing covers"), RoutingCapture(model, probe=cap.routing[:, :2]):
        model(input_ids=ids, attention_mask=am)


def test_an_unsupported_moe_family_is_refused_naming_the_supported_ones(tmp_path):
    config = PhimoeConfig(vocab_size=VOCAB, hidden_size=32, intermediate_size=32, num_hidden_layers=1,
                          num_attention_heads=4, num_key_value_heads=2, num_local_experts=4)
    phimoe = AutoModelForCausalLM.from_config(config)
    config.save_pretrained(tmp_path)
    for refuse in (lambda: RoutingCapture(phimoe), lambda: build_tiny_moe("phimoe"), lambda: load_moe(tmp_path)):
        with pytest.raises(UnsupportedModelError, match="phimoe") as err:
            refuse()
        assert all(family in str(err.value) for family in SUPPORTED_FAMILIES)


@pytest.mark.parametrize(("sizes", "message"), [
    ({"family": "olmoe", "first_k_dense": 1}, "olmoe has no dense first layers"),
    ({"family": "qwen3_moe", "n_group": 2}, "qwen3_moe has no expert groups"),
    ({"family": "deepseek_v3", "n_group": 3}, "must divide into n_group=3 groups"),
    ({"family": "deepseek_v3", "n_group": 2, "topk_group": 3}, "topk_group must be in"),
    ({"family": "qwen3_moe", "num_layers": 2, "first_k_dense": 2}, "first_k_dense must be in"),
    ({"family": "gpt_oss", "norm_topk_prob": False}, "gpt_oss always renormalises"),
])
def test_model_sizes_a_family_cannot_have_are_refused_in_the_suite(sizes, message):
    from gspo_bench.config import ModelConfig

    with pytest.raises(ValueError, match=message):
        ModelConfig(**sizes)
