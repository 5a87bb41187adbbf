"""Activation checkpointing that keeps its routes (`train.activation_checkpointing`, `moe.recompute`).

The recompute in backward must route as the forward it recomputes did: with the replay context gone
(R2/R3: the update forward's capture ends before its backward), with a router that would choose
otherwise, with a capture still open. Gradients are compared with the plain (uncheckpointed)
computation in fp32 with `assert_close`'s defaults (rtol 1.3e-6, atol 1e-5); on CPU they come out equal.
"""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import torch
from torch.testing import assert_close

from gspo_bench.models import SUPPORTED_FAMILIES, family_of
from gspo_bench.models.checkpointing import checkpoint_layers, checkpointed, decoder_layers
from gspo_bench.moe import RoutingCapture, find_routers
from gspo_bench.moe.recompute import recomputing
from gspo_bench.moe.sites import attach
from gspo_bench.train.policy import checkpoint_activations
from tests.helpers.moe import batch, captured, perturb_routers, tiny


def pair(family: str) -> tuple[torch.nn.Module, torch.nn.Module]:
    """A tiny model in training mode and a copy of it with checkpointed decoder layers."""
    plain = tiny(family).train()
    ckpt = copy.deepcopy(plain)
    assert checkpoint_activations(ckpt) == 3 and checkpointed(ckpt) and not checkpointed(plain)
    return plain, ckpt


def grads(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}


def loss_of(model, ids, am, replay=None):
    """The forward under a capture (replaying `replay`), closed before the backward, as an update does."""
    model.zero_grad(set_to_none=True)
    capture, logits = captured(model, ids, am, replay=replay)
    return logits[am.bool()].pow(2).mean(), capture


def other_routing(model, ids, am) -> torch.Tensor:
    """A valid routing other than the model's own for every token: each expert id shifted by one."""
    capture, _ = captured(model, ids, am, no_grad=True)
    return (capture.routing + 1) % find_routers(model)[0].num_experts


@pytest.mark.parametrize("family", SUPPORTED_FAMILIES)
def test_checkpointed_replay_gives_the_plain_gradients_on_every_family(family):
    """The replayed experts of the forward are the recompute's, though its capture has ended."""
    plain, ckpt = pair(family)
    ids, am = batch()
    replay = other_routing(plain, ids, am)
    results = []
    for model in (plain, ckpt):
        loss, capture = loss_of(model, ids, am, replay=replay)
        loss.backward()
        results.append((loss.detach(), grads(model), capture.routing, capture.n_sequences))
    (loss0, g0, routing0, n0), (loss1, g1, routing1, n1) = results
    assert_close(loss1, loss0)
    assert g1.keys() == g0.keys() and len(g0) > 0
    for name in g0:
        assert_close(g1[name], g0[name], msg=name)
    assert n0 == n1 == 1 and torch.equal(routing1, routing0)  # recorded once, the model's own choice


# one family per routing site (sites.py) whose read reports a replaced choice; Llama 4's read re-derives the
# ids from the logits, so a flip written into its dense scores is invisible to it (its replay: above)
FAMILIES_BY_SITE = ["qwen3_moe", "granitemoe", "dbrx", "jamba", "deepseek_v3", "gpt_oss"]


def rerouting(model):
    """Hooks making every router choose other experts (the model's own choice, as a near-tie flipped
    by other kernels would), the logits untouched: what the recompute would do without the keeper."""
    handles = []
    for router in find_routers(model):
        def on_route(logits, weights, ids, router=router):
            with torch.no_grad():  # computes nothing autograd keeps: only the choice changes
                flipped = torch.topk(-logits.float(), ids.shape[-1], dim=-1).indices  # the k least likely experts
                return router.rule.weights(logits, flipped).to(weights.dtype), flipped.to(ids.dtype)

        handles.append(attach(router.site, router.module, router.block, on_route, own=True))
    return handles


@pytest.mark.parametrize("family", FAMILIES_BY_SITE)
def test_a_recompute_that_would_route_otherwise_keeps_the_forwards_experts(family):
    plain, ckpt = pair(family)
    ids, am = batch()
    expected = []
    for model in (plain, ckpt):
        loss, _ = loss_of(model, ids, am)
        handles = rerouting(model)  # between forward and backward: only the recompute sees them
        try:
            loss.backward()  # no CheckpointError
        finally:
            for handle in reversed(handles):
                handle.remove()
        expected.append(grads(model))
    for name in expected[0]:
        assert_close(expected[1][name], expected[0][name], msg=name)


def expert_gradients(model) -> torch.Tensor:
    """[L, E] bool: which routed experts of each MoE layer received any gradient."""
    rows = []
    for router in find_routers(model):
        per_expert = [p.grad.reshape(router.num_experts, -1).abs().sum(-1) for p in router.experts.parameters()
                      if p.grad is not None and p.shape[0] == router.num_experts]
        rows.append(torch.stack(per_expert).sum(0) > 0)
    return torch.stack(rows)


def test_router_weights_moved_between_forward_and_backward_do_not_reroute_the_recompute():
    """The recompute's logits are the moved router's, its experts still the forward's: the experts that
    get gradient are exactly those the forward routed to, and no CheckpointError."""
    _, model = pair("qwen3_moe")
    ids, am = batch(b=2, t=5, left_pad=False)
    loss, capture = loss_of(model, ids, am)
    routed = torch.zeros(len(find_routers(model)), 8, dtype=torch.bool)
    for layer, ids_layer in enumerate(capture.routing):
        routed[layer, ids_layer.unique()] = True
    perturb_routers(model, scale=5.0, seed=3)
    moved, _ = captured(model, ids, am, no_grad=True)
    assert not torch.equal(moved.routing, capture.routing)  # the live routers now choose otherwise
    loss.backward()
    assert torch.equal(expert_gradients(model), routed)


def test_a_checkpointed_full_replay_keeps_the_replayed_gate_weights_in_the_recompute():
    """A full replay hands the experts recorded ids and recorded weights (no gradient): the recompute must
    use those weights, not rebuild them from its router logits, to give the plain computation's loss and
    gradients (the router then gets none through the gates)."""
    plain, ckpt = pair("qwen3_moe")
    ids, am = batch()
    replay = other_routing(plain, ids, am)
    weights = torch.full(replay.shape, 0.5) + 0.1 * torch.arange(replay.shape[-1])  # [L, B, T, k]: 0.5, 0.6
    results = []
    for model in (plain, ckpt):
        model.zero_grad(set_to_none=True)
        with RoutingCapture(model, replay=replay, replay_weights=weights):
            logits = model(input_ids=ids, attention_mask=am).logits
        loss = logits[am.bool()].pow(2).mean()
        loss.backward()
        results.append((loss.detach(), grads(model)))
    (loss0, g0), (loss1, g1) = results
    assert_close(loss1, loss0)
    assert g1.keys() == g0.keys() and len(g0) > 0
    for name in g0:
        assert_close(g1[name], g0[name], msg=name)


def test_a_capture_open_during_backward_neither_records_nor_replays_the_recompute():
    plain, ckpt = pair("mixtral")
    ids, am = batch()
    replay = other_routing(plain, ids, am)
    loss, forward = loss_of(ckpt, ids, am, replay=replay)
    with RoutingCapture(ckpt) as during:  # no model call in backward: nothing to record, nothing to fail on
        loss.backward()
    assert during.n_sequences == 0 and forward.n_sequences == 1
    g1 = grads(ckpt)
    loss, _ = loss_of(plain, ids, am, replay=replay)
    loss.backward()
    for name, g in grads(plain).items():
        assert_close(g1[name], g, msg=name)
    assert not recomputing()  # the flag is down after every recompute


def test_no_grad_forwards_and_eval_mode_are_untouched():
    plain, ckpt = pair("olmoe")
    ids, am = batch()
    with torch.no_grad():
        assert torch.equal(ckpt(input_ids=ids, attention_mask=am).logits, plain(input_ids=ids, attention_mask=am).logits)
    ckpt.eval()
    out = ckpt(input_ids=ids, attention_mask=am, use_cache=True)
    assert out.past_key_values is not None  # eval (generation): no checkpoint, the cache is kept
    assert len(decoder_layers(ckpt)) == 3 and family_of(ckpt) == "olmoe"


def test_a_model_without_checkpointable_layers_is_refused():
    with pytest.raises(ValueError, match="activation_checkpointing: false"):
        checkpoint_layers(torch.nn.Sequential(torch.nn.Linear(2, 2)))


# ---------------------------------------------------------------------------- a run, checkpointed or not
@pytest.fixture(scope="module")
def cache(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("warmstart-cache")


def test_a_checkpointed_run_measures_what_the_plain_run_measures(tmp_path, cache):
    """3 steps of GRPO + Routing Replay, GSPO and GRPO + R3 under engine router noise, with and without
    checkpointing (no CheckpointError where R3 replays routes the trainer's router would not pick):
    every measured column equal within assert_close's fp32 defaults (timings aside). The updates reroute tokens (drift > 0),
    so the replay in recompute is exercised."""
    from gspo_bench.rundir.folder import TIMING_COLUMNS
    from tests.helpers.runs import metrics, run_suite, tiny_suite

    base = tiny_suite(cache, train={"lr": 1e-2, "minibatches": 2, "threads": 1},
                      rollout={"prompts_per_step": 2, "group_size": 4, "max_new_tokens": 8,
                               "engine_options": {"router_noise": 0.3}},  # R3 replays the noisy engine's routes
                      objectives=[{"name": "grpo_rr"}, {"name": "gspo"}, {"name": "grpo_r3"}])
    runs = {}
    for name, on in (("plain", False), ("ckpt", True)):
        suite = {**base, "name": name, "train": {**base["train"], "activation_checkpointing": on}}
        statuses = run_suite(suite, tmp_path / "out")
        assert all(s["status"] == "done" for s in statuses.values()), statuses
        runs[name] = {run: metrics(tmp_path / "out", name, run) for run in ("grpo_rr-s0", "gspo-s0", "grpo_r3-s0")}
    skip = set(TIMING_COLUMNS) | {"gpu/peak_mem_gib", "perf/rollout_tokens_per_s", "perf/train_tokens_per_s",
                                  "perf/mfu", "lr"}
    for run, plain in runs["plain"].items():
        ckpt = runs["ckpt"][run]
        assert len(plain) == len(ckpt) == 3
        numeric = [c for c in plain.columns if c not in skip and plain[c].dtype.kind in "fiub"]
        for column in numeric:
            assert_close(torch.tensor(ckpt[column].to_numpy(dtype=float)), torch.tensor(plain[column].to_numpy(dtype=float)),
                         equal_nan=True, msg=f"{run} {column}")
    assert (runs["plain"]["grpo_rr-s0"]["moe/drift"].fillna(0) > 0).any()
