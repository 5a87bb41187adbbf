"""The phases of a training step, each on a tiny MoE: rollout, old-policy pass, one minibatch update,
K updates, the optimizer's guarded step and the precision. Each test pins one wiring the loop relies on."""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import os
import sys
from functools import partial

import pytest
import torch
from torch.testing import assert_close

from gspo_bench.config import TrainConfig
from gspo_bench.models.forward import response_forward
from gspo_bench.moe import RoutingCapture, routing_drift
from gspo_bench.objectives import get_objective, group_advantages
from gspo_bench.objectives.kl import k3
from gspo_bench.rollout import SamplingParams, make_engine
from gspo_bench.train.old_policy import OldPolicy, old_policy_pass
from gspo_bench.train.optim import guarded_step, make_optimizer
from gspo_bench.train.policy import Policy
from gspo_bench.train.precision import Precision
from gspo_bench.train.rollout import collect_rollout, draw_examples
from gspo_bench.train.row import to_host
from gspo_bench.train.update import UpdateSettings, update_minibatch, update_policy
from tests.helpers.phases import EXPERTS, rollout, shifted

GRPO = partial(get_objective("grpo"), clip_low=0.2, clip_high=0.27)


def new_policy(model, lr=1e-3, precision=Precision()):
    model = copy.deepcopy(model).train()
    return Policy(model, make_optimizer(model, TrainConfig(), lr=lr), precision)


# ---------------------------------------------------------------------------------------- rollout

def test_rollout_rewards_are_the_tasks_verdict_on_the_decoded_text(parts):
    tokenizer, model, task = parts
    batch = rollout(parts)
    examples = draw_examples(task, 2, 0)
    texts = tokenizer.batch_decode(batch.input_ids[:, -batch.n_response:], skip_special_tokens=True)
    assert batch.rewards.tolist() == [task.reward(t, examples[i // 4]) for i, t in enumerate(texts)]
    assert batch.routing.shape[2] == batch.input_ids.shape[1]  # extended to the training forward's length
    assert bool(batch.finite)
    raw = collect_rollout(Policy(model), make_engine("hf", pad_id=0, eos_id=2), tokenizer, task, examples,
                          SamplingParams(group_size=4, max_new_tokens=8, seed=0))
    assert torch.equal(raw.advantages, group_advantages(raw.rewards, 4))


def test_a_non_finite_policy_samples_to_the_end_and_says_so(parts):
    tokenizer, model, task = parts
    broken = copy.deepcopy(model)
    with torch.no_grad():
        broken.lm_head.weight[5].fill_(float("nan"))
    batch = collect_rollout(Policy(broken), make_engine("hf", pad_id=0, eos_id=2), tokenizer, task,
                            draw_examples(task, 2, 0), SamplingParams(group_size=4, max_new_tokens=8))
    assert not bool(batch.finite) and bool(rollout(parts).finite)


# ---------------------------------------------------------------------------------------- old-policy pass

@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_old_pass_is_pi_old_at_the_sampling_temperature(parts, temperature):
    batch = rollout(parts, temperature=temperature)
    old = old_policy_pass(Policy(parts[1]), batch, temperature=temperature)
    with torch.no_grad():
        expected, _ = response_forward(parts[1], batch.input_ids, batch.attention_mask, batch.n_response, temperature)
    assert_close(old.logp, expected)
    valid = batch.response_mask
    assert (old.logp - batch.sampling_logp)[valid].abs().max() < 1e-4  # the engine's distribution
    assert float(old.metrics["mismatch/max_abs"]) < 1e-4 and float(old.metrics["moe/rollout_gap"]) == 0.0


def test_old_pass_replay_sources(parts):
    batch = rollout(parts)
    model = parts[1]
    plain = old_policy_pass(Policy(model), batch, temperature=1.0)
    assert plain.replay is None
    rr = old_policy_pass(Policy(model), batch, temperature=1.0, replay="old_pass")
    assert torch.equal(rr.replay, rr.routing) and torch.equal(rr.logp, plain.logp)
    forced = dataclasses.replace(batch, routing=shifted(batch.routing))  # an engine that routed otherwise
    r3 = old_policy_pass(Policy(model), forced, temperature=1.0, replay="rollout")
    with torch.no_grad(), RoutingCapture(model, replay=forced.routing):
        expected, _ = response_forward(model, batch.input_ids, batch.attention_mask, batch.n_response)
    assert_close(r3.logp, expected)  # R3: pi_old under the engine's experts
    assert torch.equal(r3.replay, forced.routing)
    assert torch.equal(r3.routing[0], plain.routing[0])  # what the model chose; later layers see forced inputs
    assert float(r3.metrics["moe/rollout_gap"]) == 1.0
    engine_logp = old_policy_pass(Policy(model), batch, temperature=1.0, logp_source="rollout")
    assert torch.equal(engine_logp.logp, batch.sampling_logp)


def test_old_pass_records_pi_olds_routing_confidence_per_layer(parts):
    """`route_conf` [L] and `moe/route_conf` (their mean) are pi_old's routing confidence over attended
    positions, by hand from a capture of the same forward (qwen3_moe: the softmax mass of the chosen
    experts, the sum of their gate scores); the step's layer rows carry it beside every measured
    minibatch; a pass without measurements records none."""
    from gspo_bench.train.row import with_route_confidence

    batch = rollout(parts)
    model = parts[1]
    old = old_policy_pass(Policy(model), batch, temperature=1.0)
    with torch.no_grad(), RoutingCapture(model) as cap:
        response_forward(model, batch.input_ids, batch.attention_mask, batch.n_response)
    mass = cap.gate_scores.sum(-1).double()  # [L, B, T]
    expected = torch.stack([layer[batch.attention_mask.bool()].mean() for layer in mass])  # [L]
    assert_close(old.route_conf, expected)
    assert float(old.metrics["moe/route_conf"]) == pytest.approx(float(expected.mean()))
    assert float(expected.min()) > 2 / EXPERTS  # the top 2 of 4 by probability hold more than k / E
    rows = with_route_confidence({"moe/drift": torch.zeros(3, len(expected))}, old)  # 3 measured minibatches
    assert torch.equal(rows["moe/route_conf"], old.route_conf.expand(3, -1)) and with_route_confidence({}, old) == {}
    unmeasured = old_policy_pass(Policy(model), batch, temperature=1.0, measure=False)
    assert unmeasured.route_conf is None and "moe/route_conf" not in unmeasured.metrics


# ---------------------------------------------------------------------------------------- one minibatch update

def off_policy(old: OldPolicy, batch, scale=0.3) -> OldPolicy:
    """pi_old moved by a different amount on every row, so the loss depends on which row is which."""
    gen = torch.Generator().manual_seed(1)
    shift = scale * torch.randn(old.logp.shape, generator=gen)
    return dataclasses.replace(old, logp=torch.where(batch.response_mask, old.logp + shift, 0.0))


def expected_loss(model, batch, old, rows, objective=GRPO, replay=None, temperature=1.0):
    with torch.no_grad(), (RoutingCapture(model, replay=replay) if replay is not None else torch.no_grad()):
        logp, _ = response_forward(model, batch.input_ids[rows], batch.attention_mask[rows], batch.n_response,
                                   temperature)
    loss, _ = objective(logp=logp, old_logp=old.logp[rows], advantages=batch.advantages[rows],
                        mask=batch.response_mask[rows])
    return loss


def test_minibatch_loss_pairs_each_row_with_its_own_advantage_and_old_logp(parts):
    batch = rollout(parts)
    old = off_policy(old_policy_pass(Policy(parts[1]), batch, temperature=1.0), batch)
    rows = torch.tensor([6, 1, 3, 4])
    policy = new_policy(parts[1])
    expected = expected_loss(policy.model, batch, old, rows)
    result = update_minibatch(policy, GRPO, batch, old, rows, UpdateSettings())
    assert_close(result.loss, expected)
    mispaired = dataclasses.replace(batch, advantages=batch.advantages.clone())
    mispaired.advantages[rows] = batch.advantages[rows.sort().values]  # the same rows, paired in sorted order
    assert not torch.allclose(expected, expected_loss(parts[1], mispaired, old, rows))  # pairing matters here
    assert result.n_tokens == batch.response_mask[rows].sum() and bool(result.applied)


def test_a_minibatch_log_ratio_is_of_the_forward_before_its_step_and_holds_no_graph(parts):
    """`log_ratio` [b, T] = log pi_theta - log pi_old of the rows in their order, from the forward the
    step was computed on; it is kept past the step for measurements, so it must hold no graph (a
    graph would keep the whole forward's activations alive)."""
    batch = rollout(parts)
    old = off_policy(old_policy_pass(Policy(parts[1]), batch, temperature=1.0), batch)
    rows = torch.tensor([5, 0, 2])
    policy = new_policy(parts[1], lr=0.1)
    with torch.no_grad():
        before, _ = response_forward(policy.model, batch.input_ids[rows], batch.attention_mask[rows], batch.n_response)
    result = update_minibatch(policy, GRPO, batch, old, rows, UpdateSettings())
    assert result.log_ratio.grad_fn is None and not result.log_ratio.requires_grad
    assert result.log_ratio.dtype == torch.float32 and bool(result.applied)
    assert_close(result.log_ratio, before - old.logp[rows])
    assert result.log_ratio[batch.response_mask[rows]].abs().min() > 0  # pi_old moved on every row


def test_update_forward_replays_the_routing_it_is_given(parts):
    batch = rollout(parts)
    old = old_policy_pass(Policy(parts[1]), batch, temperature=1.0)
    forced = dataclasses.replace(old, replay=shifted(old.routing))
    rows = torch.tensor([0, 2, 5, 7])
    policy = new_policy(parts[1])
    with_replay = expected_loss(policy.model, batch, forced, rows, replay=forced.replay[:, rows])
    without = expected_loss(policy.model, batch, forced, rows)
    result = update_minibatch(policy, GRPO, batch, forced, rows, UpdateSettings())
    assert_close(result.loss, with_replay)
    assert not torch.allclose(with_replay, without)
    assert float(result.metrics["ratio/token_var"]) > 1e-7  # replayed experts differ from pi_old's own


@pytest.mark.parametrize("temperature", [0.7, 1.3])
def test_first_update_is_on_policy_at_the_rollout_temperature(parts, temperature):
    batch = rollout(parts, temperature=temperature)
    old = old_policy_pass(Policy(parts[1]), batch, temperature=temperature)
    result = update_minibatch(new_policy(parts[1]), GRPO, batch, old, torch.arange(len(batch)),
                              UpdateSettings(temperature=temperature))
    metrics = to_host(result.metrics)
    assert metrics["ratio/token_var"] < 1e-10 and abs(metrics["ratio/token_mean"] - 1) < 1e-6
    assert metrics["kl/old_new"] < 1e-10


def test_kl_to_reference_is_added_with_a_positive_sign_and_pulls_toward_the_reference(parts):
    batch = dataclasses.replace(rollout(parts), advantages=torch.zeros(8))  # only the KL term moves the policy
    policy = new_policy(parts[1], lr=3e-3)
    reference = copy.deepcopy(parts[1]).requires_grad_(False)
    with torch.no_grad():
        reference.lm_head.weight.add_(0.5 * torch.randn_like(reference.lm_head.weight))
    policy.reference = reference
    old = old_policy_pass(policy, batch, temperature=1.0)
    mask = batch.response_mask
    kl_before = float((k3(old.ref_logp - old.logp) * mask).sum() / mask.sum())
    rows = torch.arange(len(batch))
    result = update_minibatch(policy, GRPO, batch, old, rows, UpdateSettings(kl_coef=0.5))
    assert kl_before > 0.01
    assert_close(float(result.loss), 0.5 * kl_before, rtol=1e-5, atol=1e-7)  # objective term is 0
    assert_close(float(result.metrics["kl/ref"]), kl_before, rtol=1e-5, atol=1e-7)
    for _ in range(3):
        result = update_minibatch(policy, GRPO, batch, old, rows, UpdateSettings(kl_coef=0.5))
    assert float(result.metrics["kl/ref"]) < kl_before  # the penalty brings the policy toward the reference


def test_drift_of_a_minibatch_is_measured_against_the_old_policy_on_its_own_rows(parts):
    batch = rollout(parts)
    old = old_policy_pass(Policy(parts[1]), batch, temperature=1.0)
    unchanged = new_policy(parts[1], lr=0.0)
    for rows in (torch.tensor([1, 3, 5, 7]), torch.tensor([6, 0, 2, 4])):
        result = update_minibatch(unchanged, GRPO, batch, old, rows, UpdateSettings(), measure_drift=True)
        assert float(result.drift["moe/drift"]) == 0.0  # same weights, same tokens: same experts
    moved = new_policy(parts[1], lr=0.2)
    update_minibatch(moved, GRPO, batch, old, torch.tensor([0, 1, 2, 3]), UpdateSettings())
    rows = torch.tensor([4, 5, 6, 7])
    result = update_minibatch(moved, GRPO, batch, old, rows, UpdateSettings(), measure_drift=True)
    assert 0 < float(result.drift["moe/drift"]) < 1  # after an update at lr 0.2 some routing moved


def test_a_non_finite_loss_leaves_weights_and_optimizer_untouched(parts):
    batch = rollout(parts)
    old = old_policy_pass(Policy(parts[1]), batch, temperature=1.0)
    policy = new_policy(parts[1])
    update_minibatch(policy, GRPO, batch, old, torch.arange(4), UpdateSettings())  # a real step first
    before = copy.deepcopy(policy.model.state_dict())
    state = copy.deepcopy(policy.optimizer.state_dict())
    poisoned = dataclasses.replace(old, logp=torch.full_like(old.logp, float("nan")))
    result = update_minibatch(policy, GRPO, batch, poisoned, torch.arange(4, 8), UpdateSettings())
    assert not bool(result.applied)
    for name, value in policy.model.state_dict().items():
        assert torch.equal(value, before[name]), name
    after = policy.optimizer.state_dict()["state"]
    for index, entry in state["state"].items():
        for key, value in entry.items():
            assert torch.equal(after[index][key], value), (index, key)


def test_guarded_step_without_fusion_takes_the_same_decision():
    model = torch.nn.Linear(3, 2)
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.1)
    model(torch.randn(4, 3)).sum().backward()
    weight = model.weight.detach().clone()
    guarded_step(optimizer, torch.tensor(False))
    assert torch.equal(model.weight, weight)
    guarded_step(optimizer, torch.tensor(True))
    assert not torch.equal(model.weight, weight)


# ---------------------------------------------------------------------------------------- K updates

def test_update_policy_drift_is_the_mean_of_minibatches_two_to_k(parts):
    batch = rollout(parts)
    old = old_policy_pass(Policy(parts[1]), batch, temperature=1.0)
    order = torch.tensor([3, 0, 6, 1, 4, 7, 2, 5])
    policy, twin = new_policy(parts[1], lr=0.05), new_policy(parts[1], lr=0.05)
    result = update_policy(policy, GRPO, batch, old, order, 4, UpdateSettings())
    by_hand = [update_minibatch(twin, GRPO, batch, old, rows, UpdateSettings(), measure_drift=j > 0)
               for j, rows in enumerate(order.chunk(4))]
    drifts = [float(r.drift["moe/drift"]) for r in by_hand[1:]]
    assert by_hand[0].drift is None
    assert_close(float(result.metrics["moe/drift"]), sum(drifts) / 3)
    assert_close(result.layers["moe/drift"], torch.stack([r.drift["moe/drift_layer"] for r in by_hand[1:]]))  # [J, L]
    assert_close(result.layers["moe/flip_pred"], torch.stack([r.layers["moe/flip_pred"] for r in by_hand[1:]]))
    assert_close(float(result.metrics["moe/flip_pred"]), float(result.layers["moe/flip_pred"].mean()))
    assert_close(float(result.metrics["loss"]), sum(float(r.loss) for r in by_hand) / 4, rtol=1e-6, atol=1e-9)
    assert int(result.metrics["nonfinite/minibatches"]) == 0
    assert int(result.tokens_trained) == int(batch.attention_mask.sum())
    assert max(drifts) > 0  # lr 0.05 moves some routing


# ---------------------------------------------------------------------------------------- precision

def test_bf16_autocast_losses_agree_with_fp32_to_bf16_precision(parts):
    batch = rollout(parts)
    old = off_policy(old_policy_pass(Policy(parts[1]), batch, temperature=1.0), batch, scale=0.05)
    rows = torch.arange(len(batch))
    fp32 = update_minibatch(new_policy(parts[1]), GRPO, batch, old, rows, UpdateSettings())
    bf16_policy = new_policy(parts[1], precision=Precision("cpu", torch.bfloat16))
    bf16 = update_minibatch(bf16_policy, GRPO, batch, old, rows, UpdateSettings())
    assert fp32.loss.dtype == bf16.loss.dtype == torch.float32
    assert_close(bf16.loss, fp32.loss, rtol=1.6e-2, atol=2e-3)  # bf16 has 8 bits of mantissa
    assert not torch.equal(bf16.loss, fp32.loss)  # autocast did compute in bf16
    assert all(p.dtype == torch.float32 for p in bf16_policy.model.parameters())  # fp32 master weights


def test_bf16_training_applies_updates_a_bf16_weight_would_round_away(parts):
    batch = rollout(parts)
    old = old_policy_pass(Policy(parts[1]), batch, temperature=1.0)
    policy = new_policy(parts[1], lr=1e-6, precision=Precision("cpu", torch.bfloat16))
    before = {n: p.detach().clone() for n, p in policy.model.named_parameters()}
    update_minibatch(policy, GRPO, batch, old, torch.arange(len(batch)), UpdateSettings())
    changed = [n for n, p in policy.model.named_parameters() if not torch.equal(p, before[n])]
    assert len(changed) > len(before) // 2
    rounded = [n for n, p in policy.model.named_parameters()
               if n in changed and not torch.equal(p.bfloat16(), before[n].bfloat16())]
    assert len(rounded) < len(changed)  # most of these updates are below bf16's resolution


def test_routing_drift_is_zero_for_identical_routing(parts):
    batch = rollout(parts)
    assert float(routing_drift(batch.routing, batch.routing.clone(), batch.attention_mask)["moe/drift"]) == 0.0


# ---------------------------------------------------------------------------------------- host copies

class HostCopy(AssertionError):
    pass


@contextlib.contextmanager
def refusing_host_copies():
    """Within the block, code outside transformers that reads a tensor on the host (bool, float, int,
    item, tolist) raises. (transformers' own mask code tests `attention_mask.all()` in every forward:
    one sync per forward that this project cannot remove.)"""
    def guard(name):
        original = getattr(torch.Tensor, name)

        def checked(self, *args, **kwargs):
            caller = sys._getframe(1).f_code.co_filename
            if f"{os.sep}transformers{os.sep}" not in caller:
                raise HostCopy(f"Tensor.{name} called from {caller}")
            return original(self, *args, **kwargs)

        return checked

    with pytest.MonkeyPatch.context() as patch:
        for name in ("__bool__", "__float__", "__int__", "__index__", "item", "tolist"):
            patch.setattr(torch.Tensor, name, guard(name))
        yield


def test_updates_and_their_measurements_stay_on_the_device(parts):
    batch = rollout(parts)
    old = old_policy_pass(Policy(parts[1]), batch, temperature=1.0)
    policy = new_policy(parts[1])
    order = torch.randperm(len(batch), generator=torch.Generator().manual_seed(0))
    with refusing_host_copies():
        result = update_policy(policy, GRPO, batch, old, order, 4, UpdateSettings())
    host = to_host(result.metrics)  # the one copy, after the step
    assert host["moe/drift"] >= 0 and host["nonfinite/minibatches"] == 0


def test_sampling_log_probs_are_recorded_without_a_host_copy_per_token():
    from gspo_bench.rollout.hf import _RecordSamplingLogprobs

    recorder = _RecordSamplingLogprobs()
    scores = torch.randn(3, 11)
    scores[1, 4] = float("nan")
    with refusing_host_copies():
        recorder(torch.zeros(3, 2, dtype=torch.long), scores)
        recorder(torch.ones(3, 3, dtype=torch.long), torch.randn(3, 11))
    assert len(recorder.gathered) == 1 and not bool(recorder.finite)


def test_under_torchrun_each_rank_generates_its_own_rows_with_their_global_keys(parts, monkeypatch):
    """Rank 1 of 2 samples rows 1, 3, 5, 7 (keyed by their global index), then the ranks exchange rows."""
    from gspo_bench.runtime.distributed import World
    from gspo_bench.train import rollout as phase

    seen = {}

    class Recording:
        pad_id = 0

        def generate(self, model, prompts, params):
            seen.update(prompts=prompts, keys=params.row_keys, group=params.group_size)
            return "local rollout"

    monkeypatch.setattr(phase, "gather_rollout", lambda world, local, n_rows, pad_id: (world.rank, local, n_rows))
    prompts = [[5, 6], [7], [8, 9, 10], [11]]
    policy = Policy(parts[1], world=World(rank=1, size=2))
    result = phase.generate(policy, Recording(), prompts, SamplingParams(group_size=2, max_new_tokens=4))
    assert result == (1, "local rollout", 8)
    assert seen == {"prompts": [[5, 6], [7], [8, 9, 10], [11]], "keys": (1, 3, 5, 7), "group": 1}


def test_an_objective_that_scales_the_learning_rate_steps_at_lr_times_its_factor(parts):
    """VCPO on a batch sampled by another policy (mu off the learner): its update equals the same loss stepped
    by an optimizer at lr x the factor it returned; the factor below 1, the lr restored after."""
    from gspo_bench.objectives import objective_spec

    batch = rollout(parts)
    old = old_policy_pass(Policy(parts[1]), batch, temperature=1.0)
    gen = torch.Generator().manual_seed(3)
    batch = dataclasses.replace(batch, sampling_logp=torch.where(
        batch.response_mask, old.logp + 0.4 * torch.randn(old.logp.shape, generator=gen), 0.0))
    rows = torch.tensor([6, 1, 3, 4])
    vcpo = objective_spec("vcpo").fn
    scaled = new_policy(parts[1], lr=1e-2)
    result = update_minibatch(scaled, vcpo, batch, old, rows, UpdateSettings(inputs=frozenset({"sampling_logp"})))
    factor = float(result.metrics["optim/lr_scale"])
    assert 0.1 < factor < 0.99
    assert all(group["lr"] == 1e-2 for group in scaled.trainer().param_groups)
    def unscaled(**kw):  # the same loss, without the factor
        loss, metrics = vcpo(**kw)
        return loss, {k: v for k, v in metrics.items() if k != "optim/lr_scale"}

    by_hand = new_policy(parts[1], lr=1e-2 * factor)
    update_minibatch(by_hand, unscaled, batch, old, rows, UpdateSettings(inputs=frozenset({"sampling_logp"})))
    for (name, a), b in zip(scaled.model.named_parameters(), by_hand.model.parameters()):
        assert_close(a, b, rtol=1e-5, atol=1e-7, msg=name)
    plain = new_policy(parts[1], lr=1e-2)
    update_minibatch(plain, unscaled, batch, old, rows, UpdateSettings(inputs=frozenset({"sampling_logp"})))
    assert any(not torch.allclose(a, b) for a, b in zip(scaled.model.parameters(), plain.model.parameters()))


def test_update_policy_logs_the_cosine_of_consecutive_update_gradients(parts):
    """K = 3 updates: grad/cos_prev is the mean of the two cosines between consecutive minibatches' gradients,
    computed here from the same updates run one by one; the routers' alone too."""
    from gspo_bench.moe.routers import router_parameters

    batch = rollout(parts)
    old = off_policy(old_policy_pass(Policy(parts[1]), batch, temperature=1.0), batch)
    order = torch.randperm(len(batch), generator=torch.Generator().manual_seed(0))
    result = update_policy(new_policy(parts[1], lr=1e-2), GRPO, batch, old, order, 3, UpdateSettings())
    one_by_one = new_policy(parts[1], lr=1e-2)
    grads, routers = [], []
    for rows in torch.tensor_split(order, 3):
        update_minibatch(one_by_one, GRPO, batch, old, rows, UpdateSettings())
        grads.append(torch.cat([p.grad.reshape(-1) for p in one_by_one.model.parameters() if p.grad is not None]))
        routers.append(torch.cat([p.grad.reshape(-1) for p in router_parameters(one_by_one.model)]))

    def mean_cos(vectors):
        return sum(float(torch.nn.functional.cosine_similarity(a.double(), b.double(), dim=0))
                   for a, b in zip(vectors, vectors[1:])) / 2

    assert float(result.metrics["grad/cos_prev"]) == pytest.approx(mean_cos(grads), abs=1e-7)  # fp32 dot products
    assert float(result.metrics["grad/cos_prev_router"]) == pytest.approx(mean_cos(routers), abs=1e-7)
