"""Stress knobs that make routing less stable: model.router_scale (initial router weights),
train.router_lr_scale (the routers' own learning rate) and up to 16 minibatches a step."""

from __future__ import annotations

import copy
import dataclasses

import pytest
import torch
from torch.testing import assert_close

from gspo_bench.config import SuiteError, TrainConfig, parse_suite
from gspo_bench.config.load import arm_suite
from gspo_bench.models import build_char_tokenizer, build_tiny_moe
from gspo_bench.models.families import SUPPORTED_FAMILIES
from gspo_bench.models.tiny import DENSE_FIRST, ZERO_ROUTERS
from gspo_bench.moe.routers import find_routers
from gspo_bench.objectives import get_objective
from gspo_bench.rollout import SamplingParams, make_engine
from gspo_bench.tasks import make_task
from gspo_bench.train.checkpoint import load_checkpoint_state, save_checkpoint
from gspo_bench.train.old_policy import old_policy_pass
from gspo_bench.train.optim import ROUTER_GROUP, make_optimizer, set_lr
from gspo_bench.train.policy import Policy
from gspo_bench.train.rollout import collect_rollout, draw_examples
from gspo_bench.train.update import UpdateSettings, update_policy

SIZES = dict(num_layers=2, hidden_size=32, expert_hidden=32, num_experts=4, top_k=2)


def tiny_suite(**changes) -> dict:
    suite = {"name": "knobs", "model": dict(SIZES), "task": {"name": "sort", "params": {"max_len": 3}},
             "warm_start": {"enabled": False}, "rollout": {"prompts_per_step": 2, "group_size": 4},
             "train": {"minibatches": 2}, "budget": {"kind": "steps", "value": 1}, "objectives": [{"name": "grpo"}]}
    for key, value in changes.items():
        suite[key] = {**suite[key], **value}
    return suite


# ---------------------------------------------------------------------------------------- model.router_scale

def router_logits(model) -> tuple[torch.Tensor, ...]:
    ids = torch.randint(3, 60, (2, 7), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        return model(input_ids=ids, output_router_logits=True).router_logits


@pytest.mark.parametrize("family", ["qwen3_moe", "mixtral"])
def test_router_scale_scales_the_first_layers_router_logits_and_nothing_else(family):
    base = build_tiny_moe(family, seed=3, **SIZES)
    half = build_tiny_moe(family, seed=3, router_scale=0.5, **SIZES)
    # layer 0 sees the same hidden states, so its logits are exactly half (later layers see other gates)
    assert torch.equal(router_logits(half)[0], 0.5 * router_logits(base)[0])
    routers = {r.name for r in find_routers(base)}
    weights = {f"{name}.weight" for name in routers}
    for name, value in base.state_dict().items():
        expected = 0.5 * value if name in weights else value
        assert torch.equal(half.state_dict()[name], expected), name
    assert len(weights) == 2


@pytest.mark.parametrize("family", SUPPORTED_FAMILIES)
def test_router_scale_reaches_the_routers_of_every_family(family):
    if family in ZERO_ROUTERS:  # nothing to scale: refused, and the routers are indeed zero
        assert all(not r.weight.any() for r in find_routers(build_tiny_moe(family, seed=1)))
        with pytest.raises(ValueError, match="initialises its routers to zero"):
            build_tiny_moe(family, seed=1, router_scale=3.0)
        return
    sizes = {"first_k_dense": 1, "num_layers": 3} if family in DENSE_FIRST else {}
    base = build_tiny_moe(family, seed=1, **sizes)
    scaled = build_tiny_moe(family, seed=1, router_scale=3.0, **sizes)
    # the routers as gspo_bench.moe finds them, and nothing else, are scaled (dense layers and shared-expert gates not)
    routers = {id(r.weight) for r in find_routers(base)}
    assert len(routers) == (2 if sizes else 4)  # one per MoE layer
    for (name, a), b in zip(base.named_parameters(), scaled.parameters(), strict=True):
        if id(a) in routers:
            assert_close(b, 3.0 * a)
            assert a.any(), name
        else:
            assert torch.equal(a, b), name


def test_router_scale_is_checked_and_refused_with_a_real_checkpoint():
    assert parse_suite(tiny_suite(model={"router_scale": 0.25})).model.router_scale == 0.25
    for bad in (0, -1.0, float("nan"), float("inf")):
        with pytest.raises(SuiteError, match="model.router_scale"):
            parse_suite(tiny_suite(model={"router_scale": bad}))
    with pytest.raises(SuiteError, match="router_scale .*model.path"):
        parse_suite(tiny_suite(model={"path": "/some/checkpoint", "router_scale": 2.0}))
    with pytest.raises(ValueError, match="router_scale"):
        build_tiny_moe("qwen3_moe", router_scale=-1.0, **SIZES)
    with pytest.raises(SuiteError, match="model: .*ernie4_5_moe initialises its routers to zero"):
        parse_suite(tiny_suite(model={"family": "ernie4_5_moe", "router_scale": 2.0}))


def test_the_warm_start_cache_key_holds_router_scale_only_where_it_is_set(tmp_path, monkeypatch):
    import gspo_bench.train.warmstart
    from gspo_bench.suite.runner import starting_weights

    keys, built = [], []

    def fake_warm_start(build, tokenizer, task, params, key_parts, cache, on_eval, shipped=None):
        keys.append(key_parts)
        built.append(build())
        return None, {"path": str(tmp_path), "cached": True, "accuracy": 0.0, "steps": 0}

    monkeypatch.setattr(gspo_bench.train.warmstart, "warm_start", fake_warm_start)
    for scale in (1.0, 0.5):
        starting_weights(parse_suite(tiny_suite(model={"router_scale": scale})), 0, log=lambda m: None)
    assert "router_scale" not in keys[0]["model"]  # the default: the key (and the cache) of before the knob
    assert keys[1]["model"]["router_scale"] == 0.5
    assert_close(find_routers(built[1])[0].weight, 0.5 * find_routers(built[0])[0].weight)


# ---------------------------------------------------------------------------------------- train.router_lr_scale

def one_step(router_lr_scale: float, lr: float = 1e-2):
    model = build_tiny_moe("qwen3_moe", seed=2, **SIZES).train()
    before = copy.deepcopy(model.state_dict())
    optimizer = make_optimizer(model, TrainConfig(router_lr_scale=router_lr_scale), lr=lr)
    ids = torch.randint(3, 60, (2, 7), generator=torch.Generator().manual_seed(0))
    model(input_ids=ids, labels=ids).loss.backward()
    optimizer.step()
    routers = {f"{r.name}.weight" for r in find_routers(model)}
    return model, optimizer, before, routers


def changed(model, before, names) -> list[bool]:
    return [not torch.equal(model.state_dict()[n], before[n]) for n in names]


def test_router_lr_scale_zero_freezes_the_routers_only():
    model, optimizer, before, routers = one_step(0.0)
    others = [n for n, _ in model.named_parameters() if n not in routers]
    assert routers and not any(changed(model, before, routers))
    assert all(changed(model, before, others))
    assert optimizer.param_groups[0]["lr"] == 1e-2 and optimizer.param_groups[1]["lr"] == 0.0


def test_router_lr_scale_sets_the_router_groups_lr_and_the_main_group_stays_first():
    model, optimizer, before, routers = one_step(2.0, lr=3e-3)
    main, router = optimizer.param_groups
    assert main["lr"] == 3e-3 and router["lr"] == 6e-3 and router["name"] == ROUTER_GROUP
    assert {id(p) for p in router["params"]} == {id(r.weight) for r in find_routers(model)}
    assert len(main["params"]) + len(router["params"]) == len(list(model.parameters()))
    assert all(changed(model, before, routers))


def test_router_lr_scale_one_is_one_group_and_trains_the_routers():
    model, optimizer, before, routers = one_step(1.0)
    assert len(optimizer.param_groups) == 1 and optimizer.param_groups[0]["lr"] == 1e-2
    assert all(changed(model, before, routers))


def adamw_first_step(param: torch.Tensor, grad: torch.Tensor, lr: float, weight_decay: float,
                     eps: float = 1e-8) -> torch.Tensor:
    """AdamW's first step by hand: after bias correction m_hat = g and v_hat = g^2, so
    p1 = p0 (1 - lr wd) - lr g / (|g| + eps), whatever the betas."""
    return param * (1 - lr * weight_decay) - lr * grad / (grad.abs() + eps)


@pytest.mark.parametrize("family", SUPPORTED_FAMILIES)
def test_the_router_group_takes_adamws_step_at_lr_times_the_scale_in_every_family(family):
    """Each router module's parameters (by name: the weight, and gpt_oss's router bias) step at lr x s,
    weight decay included, every other trained parameter at lr; at s = 0 the routers do not move at
    all while the experts do. The reference is AdamW's first step by hand from the gradients; the
    tolerance (assert_close's fp32 default, atol 1e-5) is far above the rounding of steps of size <= lr
    (~1e-8) and far below the step itself (lr x s = 3e-2 per element, or lr x wd x |p| = 1e-3 |p|)."""
    model = build_tiny_moe(family, seed=4, **SIZES).train()
    ids = torch.randint(3, 60, (2, 9), generator=torch.Generator().manual_seed(1))
    model(input_ids=ids, labels=ids).loss.backward()
    prefixes = tuple(f"{r.name}." for r in find_routers(model))
    routers = {name for name, _ in model.named_parameters() if name.startswith(prefixes)}
    experts = {f"{r.name.rsplit('.', 1)[0]}.experts.{name}" for r in find_routers(model)
               for name, _ in r.experts.named_parameters()}
    assert len(routers) >= 2 and experts and routers.isdisjoint(experts)
    lr, decay = 1e-2, 0.1
    for scale in (0.0, 3.0):
        trained = copy.deepcopy(model)
        for param, copied in zip(model.parameters(), trained.parameters(), strict=True):
            copied.grad = None if param.grad is None else param.grad.clone()  # deepcopy leaves them out
        make_optimizer(trained, TrainConfig(router_lr_scale=scale, weight_decay=decay), lr=lr).step()
        after = dict(trained.named_parameters())
        for name, before in model.named_parameters():
            if before.grad is None:  # trains nothing (ernie4_5_moe's e_score_correction_bias)
                assert torch.equal(after[name], before), name
            elif name in routers and scale == 0.0:
                assert torch.equal(after[name], before), name  # not even weight decay moves them
            else:
                rate = lr * scale if name in routers else lr
                assert_close(after[name], adamw_first_step(before.detach(), before.grad, rate, decay),
                             msg=lambda message, name=name: f"{name}: {message}")
        assert all(not torch.equal(after[name], model.get_parameter(name)) for name in experts)


def test_the_router_group_round_trips_a_checkpoint_and_a_resume_sets_its_lr(tmp_path):
    model, optimizer, _, _ = one_step(2.0, lr=3e-3)
    save_checkpoint(tmp_path, model, build_char_tokenizer(), optimizer, step=1)
    fresh = build_tiny_moe("qwen3_moe", seed=2, **SIZES).train()
    restored = make_optimizer(fresh, TrainConfig(router_lr_scale=2.0), lr=3e-3)
    load_checkpoint_state(tmp_path / "checkpoint", fresh, restored, torch.device("cpu"))
    set_lr(restored, 1e-3, 0.5)  # a resume with other settings: the current ones apply
    assert [g.get("name") for g in restored.param_groups] == [None, ROUTER_GROUP]
    assert [g["lr"] for g in restored.param_groups] == [1e-3, 5e-4]
    saved, loaded = optimizer.state_dict()["state"], restored.state_dict()["state"]
    assert saved.keys() == loaded.keys()
    for index in saved:
        for key, value in saved[index].items():
            assert torch.equal(loaded[index][key], value), (index, key)


FSDP_SCRIPT = """
import sys, torch, torch.distributed as dist
dist.init_process_group("gloo", init_method="file://" + sys.argv[1], rank=0, world_size=1)
from gspo_bench.config import TrainConfig
from gspo_bench.runtime.distributed import shard
from gspo_bench.models import build_tiny_moe
from gspo_bench.moe.routers import find_routers
from gspo_bench.train.optim import make_optimizer
model = build_tiny_moe("qwen3_moe", seed=2, num_layers=2, hidden_size=32, expert_hidden=32, num_experts=4, top_k=2)
shard(model.train())
optimizer = make_optimizer(model, TrainConfig(router_lr_scale=0.0), lr=1e-2, distributed=True)
routers = {f"{r.name}.weight" for r in find_routers(model)}
assert [type(p).__name__ for p in optimizer.param_groups[1]["params"]] == ["DTensor", "DTensor"]
before = {n: p.full_tensor().clone() for n, p in model.named_parameters()}
ids = torch.randint(3, 60, (2, 7), generator=torch.Generator().manual_seed(0))
model(input_ids=ids, labels=ids).loss.backward()
optimizer.step()
moved = {n: not torch.equal(p.full_tensor(), before[n]) for n, p in model.named_parameters()}
assert len(routers) == 2 and not any(moved[n] for n in routers), moved
assert all(v for n, v in moved.items() if n not in routers), moved
dist.destroy_process_group()
"""


def test_under_fsdp2_the_router_group_holds_the_sharded_router_weights(tmp_path):
    import os
    import subprocess
    import sys

    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    env.pop("WORLD_SIZE", None)
    done = subprocess.run([sys.executable, "-c", FSDP_SCRIPT, str(tmp_path / "store")], env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]

def test_router_lr_scale_is_checked_and_a_frozen_router_arm_is_one_entry():
    assert TrainConfig().router_lr_scale == 1.0
    frozen = {"name": "grpo", "label": "grpo_frozen_router", "set": {"train.router_lr_scale": 0.0}}
    suite = parse_suite(tiny_suite() | {"objectives": [{"name": "grpo"}, frozen]})
    assert [arm_suite(suite, entry).train.router_lr_scale for entry in suite.objectives] == [1.0, 0.0]
    for bad in (-0.5, float("nan"), float("inf")):
        with pytest.raises(SuiteError, match="train.router_lr_scale"):
            parse_suite(tiny_suite(train={"router_lr_scale": bad}))


# ---------------------------------------------------------------------------------------- K minibatches

def test_sixteen_minibatches_of_24_rows_are_16_updates_over_every_row():
    tokenizer = build_char_tokenizer()
    model = build_tiny_moe(vocab_size=len(tokenizer), seed=5, **SIZES)
    task = make_task("sort", max_len=3)
    params = SamplingParams(group_size=4, max_new_tokens=8, temperature=1.0, seed=0)
    batch = collect_rollout(Policy(model), make_engine("hf", pad_id=0, eos_id=2), tokenizer, task,
                            draw_examples(task, 6, 0), params)
    batch = dataclasses.replace(batch, advantages=torch.linspace(-1.5, 1.5, len(batch)))
    assert len(batch) == 24
    old = old_policy_pass(Policy(model), batch, temperature=1.0)
    trained = copy.deepcopy(model).train()
    policy = Policy(trained, make_optimizer(trained, TrainConfig(), lr=1e-3))
    steps = []
    policy.optimizer.register_step_post_hook(lambda opt, args, kwargs: steps.append(1))
    objective = get_objective("grpo")
    result = update_policy(policy, objective, batch, old, torch.randperm(24, generator=torch.Generator().manual_seed(0)),
                           16, UpdateSettings())
    assert len(steps) == 16  # .chunk(16) of 24 rows gives 12 chunks of 2
    assert int(result.metrics["nonfinite/minibatches"]) == 0
    assert int(result.tokens_trained) == int(batch.attention_mask.sum())  # every row in some minibatch


def test_a_suite_with_fewer_responses_than_minibatches_is_refused():
    assert parse_suite(tiny_suite(rollout={"prompts_per_step": 4, "group_size": 4}, train={"minibatches": 16}))
    with pytest.raises(SuiteError, match=r"train.minibatches \(16\) is more than the 8 responses"):
        parse_suite(tiny_suite(train={"minibatches": 16}))
    assert parse_suite(tiny_suite(train={"minibatches": 8})).train.minibatches == 8  # one response each
    with pytest.raises(SuiteError, match=r"train.minibatches \(9\) is more than the 8 responses"):
        parse_suite(tiny_suite(train={"minibatches": 9}))


def test_a_run_with_its_own_router_lr_resumes_as_if_uninterrupted(tmp_path):
    """End to end, with an objective entry's lr: the router group survives the checkpoint and a resume
    sets its lr (entry lr x router_lr_scale) again; the logged lr is the main group's."""
    from tests.helpers.runs import assert_same_metrics, metrics, run_interrupted, run_suite
    from tests.helpers.runs import tiny_suite as harness_suite

    data = harness_suite(tmp_path / "cache", budget={"kind": "steps", "value": 4}, train={"router_lr_scale": 3.0},
                         objectives=[{"name": "grpo", "lr": 2e-3}])
    run_suite(data, tmp_path / "full")
    run_interrupted(data, tmp_path / "cut", at_step=3)  # after step 3's row, before its checkpoint
    run_suite(data, tmp_path / "cut", resume=True)
    full = metrics(tmp_path / "full", "tiny", "grpo-s0")
    assert full["lr"].tolist() == [2e-3] * 4
    assert_same_metrics(metrics(tmp_path / "cut", "tiny", "grpo-s0"), full)
