"""A tiny MoE moved off its old policy and a batch of uneven prompts and responses (`moved_setting`,
the `setting` fixture of tests/conftest.py), and the check that an update in micro-batches equals the one-shot update."""

from __future__ import annotations

import copy
import dataclasses
from functools import partial

import torch
from torch.testing import assert_close

from gspo_bench.config import TrainConfig
from gspo_bench.models import build_tiny_moe
from gspo_bench.objectives import objective_spec
from gspo_bench.objectives.corrections import get_correction
from gspo_bench.train.old_policy import old_policy_pass
from gspo_bench.train.optim import make_optimizer
from gspo_bench.train.policy import Policy, checkpoint_activations
from gspo_bench.train.rollout import RolloutBatch
from gspo_bench.train.update import UpdateSettings, update_minibatch

VOCAB, EXPERTS, T = 37, 4, 6
PROMPTS = [5, 3, 4, 2, 5, 1, 3, 4]  # prompt lengths (left-padded to 5)
RESPONSES = [6, 2, 4, 6, 1, 3, 5, 6]  # response lengths (right-padded to T = 6)
ROWS = torch.tensor([6, 1, 3, 4, 0, 7])  # the minibatch, in the loop's shuffled order
BUDGET = 16  # tokens: a micro-batch holds one or two rows here
KWARGS = {  # settings under which each coupled part acts on this batch
    "kl_cov": {"ratio_k": 0.2},
    "clip_cov": {"ratio_k": 0.2, "cov_low": 0.0, "cov_high": 100.0},
    "m2po": {"tau": 0.01},
}
CORRECTIONS = {"tis": {"cap": 1.05}, "mis": {"low": 0.9, "high": 1.1, "level": "geometric"},
               "icepop": {"low": 0.9, "high": 1.1}, "opsm": {"delta": 0.05}}


def moved_setting():
    """A tiny MoE moved off its old policy, and a batch of uneven prompts and responses."""
    model = build_tiny_moe(num_layers=2, hidden_size=32, expert_hidden=32, num_experts=EXPERTS, top_k=2,
                           vocab_size=VOCAB, seed=11).train()
    gen = torch.Generator().manual_seed(3)
    width = max(PROMPTS) + T
    attention = torch.zeros(len(PROMPTS), width, dtype=torch.long)
    for row, (p, r) in enumerate(zip(PROMPTS, RESPONSES, strict=True)):
        attention[row, max(PROMPTS) - p : max(PROMPTS) + r] = 1
    ids = torch.where(attention.bool(), torch.randint(4, VOCAB, attention.shape, generator=gen), 0)
    response_mask = attention[:, -T:].bool()
    rewards = torch.tensor([1.0, 0.0, 1.0, 1.0, 0.0, 0.0, 1.0, 0.0])  # ties within each group of 4
    batch = RolloutBatch(input_ids=ids, attention_mask=attention, response_mask=response_mask,
                         sampling_logp=torch.zeros(len(PROMPTS), T), routing=None, rewards=rewards,
                         advantages=torch.tensor([1.2, -0.8, 0.4, 1.2, -1.5, -0.8, 0.9, -0.3]),
                         finite=torch.tensor(True))
    old = old_policy_pass(Policy(model), batch, temperature=0.8, gate_scores=True)
    noise = lambda scale: scale * torch.randn(old.logp.shape, generator=gen)  # noqa: E731
    old = dataclasses.replace(old, logp=torch.where(response_mask, old.logp + noise(0.3), 0.0),
                              gate_scores=old.gate_scores * torch.exp(0.2 * torch.randn(old.gate_scores.shape,
                                                                                       generator=gen)))
    batch = dataclasses.replace(batch, sampling_logp=torch.where(response_mask, old.logp + noise(0.1), 0.0))
    moved = copy.deepcopy(model)  # a policy some updates away from pi_old: its routing has drifted
    with torch.no_grad():
        for name, p in moved.named_parameters():
            if name.endswith("mlp.gate.weight"):
                p.add_(0.3 * torch.randn(p.shape, generator=gen))
    return moved, batch, old


def update(setting, objective_name: str, budget: int | None, correction: str | None = None,
           checkpointed: bool = False, kwargs: dict | None = None, **overrides):
    """One update of a fresh copy of the moved policy (no clipping, lr 0; its decoder layers
    checkpointed where asked): its gradients and result."""
    model, batch, old = setting
    policy = Policy(copy.deepcopy(model))
    if checkpointed:
        checkpoint_activations(policy.model)
    policy.optimizer = make_optimizer(policy.model, TrainConfig(), lr=0.0)
    spec = objective_spec(objective_name)
    objective = partial(spec.fn, **(KWARGS.get(objective_name, {}) if kwargs is None else kwargs))
    settings = UpdateSettings(temperature=0.8, grad_clip=1e9, inputs=spec.inputs, coupled=spec.coupled,
                              generator=torch.Generator().manual_seed(5), micro_batch_tokens=budget,
                              correction=partial(get_correction(correction), **CORRECTIONS[correction])
                              if correction else None, **overrides)
    result = update_minibatch(policy, objective, batch, old, ROWS, settings, measure_drift=True)
    grads = {name: p.grad.clone() for name, p in policy.model.named_parameters() if p.grad is not None}
    return grads, result, settings


def assert_same_update(setting, objective_name: str, correction: str | None = None, checkpointed: bool = False,
                       kwargs: dict | None = None, budget: int = BUDGET, **overrides) -> None:
    plain_grads, plain, _ = update(setting, objective_name, None, correction, kwargs=kwargs)
    grads, micro, _ = update(setting, objective_name, budget, correction, checkpointed, kwargs, **overrides)
    norm = torch.cat([g.flatten() for g in plain_grads.values()]).norm()
    assert norm > 1e-3, "no gradient: the comparison would be empty"
    assert grads.keys() == plain_grads.keys()
    error = torch.cat([(grads[k] - g).flatten() for k, g in plain_grads.items()]).norm()
    assert error <= 1e-5 * norm, f"relative gradient error {float(error / norm):.2e}"
    for name, g in plain_grads.items():
        assert_close(grads[name], g, rtol=1e-5, atol=1e-6 * float(g.abs().max()), msg=name)
    # a loss that carries log pi (VESPO, DRO, VCPO with weights up to 8) cancels to ~1e-3 from terms of ~1: its
    # float noise is absolute (measured: VCPO 1.03e-6 at 3.45e-3)
    assert_close(micro.loss, plain.loss, rtol=1e-5, atol=2e-6)
    assert micro.metrics.keys() == plain.metrics.keys()
    for key, value in plain.metrics.items():  # every measurement is the whole minibatch's
        assert_close(micro.metrics[key], value, rtol=1e-5, atol=1e-7, msg=key)
    valid = setting[1].response_mask[ROWS]  # rerouted tokens count where a token is (padding columns may be cut)
    assert torch.equal(micro.rerouted & valid, plain.rerouted & valid) and micro.drift.keys() == plain.drift.keys()
    for key in plain.drift:
        assert_close(micro.drift[key], plain.drift[key], msg=key)
    for key in plain.layers:
        assert_close(micro.layers[key], plain.layers[key], rtol=1e-5, atol=1e-6, msg=key)
    assert_close(micro.log_ratio[valid], plain.log_ratio[valid], rtol=1e-5, atol=1e-6)
