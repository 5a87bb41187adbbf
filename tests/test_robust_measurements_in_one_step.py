"""The stress comparison's measurements inside one step, on a tiny MoE: drift after exactly one update
(`moe/drift_1`, per layer `moe/drift_expert`), the robust ratio statistics and one token's share of a
loss, each against the minibatch updates replayed one by one."""

from __future__ import annotations

import copy
import dataclasses
from functools import partial

import numpy as np
import pytest
import scipy.stats
import torch

from gspo_bench.config import TrainConfig
from gspo_bench.models.forward import response_forward
from gspo_bench.moe import routing_drift
from gspo_bench.objectives import get_objective
from gspo_bench.train.old_policy import nondeterminism_floor, old_policy_pass
from gspo_bench.train.optim import make_optimizer
from gspo_bench.train.policy import Policy
from gspo_bench.train.precision import Precision
from gspo_bench.train.row import to_host
from gspo_bench.train.update import UpdateSettings, update_minibatch, update_policy
from tests.helpers.rollouts import tiny_spread_rollout

GRPO = partial(get_objective("grpo"), clip_low=0.2, clip_high=0.27)


def test_expert_drift_per_layer_by_hand():
    old = torch.tensor([[[[0, 1], [2, 3]]], [[[4, 5], [6, 7]]]])  # [L=2, B=1, T=2, k=2]
    new = old.clone()
    new[0, 0, 0] = torch.tensor([0, 7])  # layer 0, token 0: one of its two experts changed
    new[1, 0, 1] = torch.tensor([0, 1])  # layer 1, token 1: both changed
    stats = routing_drift(old, new)
    assert stats["moe/drift_expert_layer"].tolist() == pytest.approx([1 / (2 * 2), 2 / (2 * 2)])
    assert float(stats["moe/drift_expert"]) == pytest.approx(float(stats["moe/drift_expert_layer"].mean()))
    masked = routing_drift(old, new, mask=torch.tensor([[1, 0]]))  # token 1 left out
    assert masked["moe/drift_expert_layer"].tolist() == pytest.approx([1 / 2, 0.0])


@pytest.fixture(scope="module")
def step():
    """A tiny MoE, one rollout of 6 prompts x 4 responses with spread advantages, and its old-policy pass."""
    model, batch = tiny_spread_rollout(6)
    return model, batch, old_policy_pass(Policy(model), batch, temperature=1.0)


def policy_of(model, lr: float = 3e-2) -> Policy:  # a large lr: every update reroutes some tokens
    model = copy.deepcopy(model).train()
    return Policy(model, make_optimizer(model, TrainConfig(), lr=lr))


def test_the_step_measures_drift_after_one_update_and_robust_ratios_over_every_minibatch(step):
    """update_policy with K = 3 against the same three updates run one at a time: `moe/drift_1` is the
    second minibatch's drift (one update since pi_old), not the mean over minibatches 2..3; the
    median, trimmed mean and tail counts pool the token ratios of all three; the share is the largest."""
    model, batch, old = step
    order = torch.randperm(len(batch), generator=torch.Generator().manual_seed(0))
    parts = torch.tensor_split(order, 3)
    one_by_one = policy_of(model)
    results = [update_minibatch(one_by_one, GRPO, batch, old, rows, UpdateSettings(), measure_drift=j > 0)
               for j, rows in enumerate(parts)]
    update = update_policy(policy_of(model), GRPO, batch, old, order, 3, UpdateSettings())
    metrics = to_host(update.metrics)
    first = to_host(results[1].drift)
    assert metrics["moe/drift_1"] == pytest.approx(first["moe/drift"], abs=0)
    assert metrics["moe/drift_expert_1"] == pytest.approx(first["moe/drift_expert"], abs=0)
    assert first["moe/drift"] != to_host(results[2].drift)["moe/drift"]  # the two measured minibatches differ
    assert metrics["moe/drift"] != metrics["moe/drift_1"]  # and the 1..2-update mean is another figure
    ratios = np.concatenate([r.log_ratio.double().exp()[batch.response_mask[rows]].numpy()
                             for r, rows in zip(results, parts, strict=True)])
    assert len(ratios) == int(batch.response_mask.sum()) and ratios.std() > 1e-3
    assert metrics["ratio/token_median"] == pytest.approx(np.median(ratios), rel=1e-12)
    assert metrics["ratio/token_trimmed_mean"] == pytest.approx(scipy.stats.trim_mean(ratios, 0.1), rel=1e-12)
    assert metrics["ratio/token_gt_10"] == float((ratios > 10).sum())
    shares = [float(r.metrics["loss/max_token_share"]) for r in results]
    assert metrics["loss/max_token_share"] == max(shares) and 0 < min(shares) < max(shares) < 1
    # per layer: the rows of the first measured minibatch (updates = 1) are the paper's quantity
    layers = to_host(update.layers)
    n_layers = len(results[1].drift["moe/drift_layer"])
    assert layers["moe/drift_expert"][:n_layers] == pytest.approx(first["moe/drift_expert_layer"], abs=0)
    assert len(layers["moe/drift_expert"]) == 2 * n_layers  # minibatches 2 and 3


def test_no_drift_after_one_update_where_the_first_update_was_skipped(step):
    """pi_old's log-probs of minibatch 1's rows poisoned (NaN): its loss is non-finite and its update
    skipped, so minibatch 2 runs after zero updates: `moe/drift_1` and `moe/drift_expert_1` are NaN (not
    that forward's drift), while the mean over minibatches 2..3 is still reported."""
    model, batch, old = step
    order = torch.randperm(len(batch), generator=torch.Generator().manual_seed(0))
    logp = old.logp.clone()
    logp[torch.tensor_split(order, 3)[0]] = float("nan")
    update = update_policy(policy_of(model), GRPO, batch, dataclasses.replace(old, logp=logp), order, 3,
                           UpdateSettings())
    metrics = to_host(update.metrics)
    assert metrics["nonfinite/minibatches"] == 1
    assert np.isnan(metrics["moe/drift_1"]) and np.isnan(metrics["moe/drift_expert_1"])
    assert 0 < metrics["moe/drift"] < 1  # minibatch 3 ran after minibatch 2's update


def test_the_floor_compares_log_probs_at_the_rollout_temperature(step):
    """floor/logp_precision_max is max |log pi_bf16 - log pi_fp32| over response tokens at the rollout's
    temperature (the log-probs the objective uses), here 0.5; at 1.0 it is another number."""
    model, batch, _ = step
    policy = Policy(model, rollout_precision=Precision(compute=torch.bfloat16))

    def gap(temperature: float) -> float:
        logps = []
        for precision in (Precision(), Precision(compute=torch.bfloat16)):
            with torch.no_grad(), precision.autocast():
                logps.append(response_forward(model, batch.input_ids, batch.attention_mask, batch.n_response,
                                              temperature)[0].double())
        return float((logps[1] - logps[0]).abs()[batch.response_mask].max())

    floor = to_host(nondeterminism_floor(policy, batch, temperature=0.5))
    assert floor["floor/logp_precision_max"] == gap(0.5) and floor["floor/logp_repeat_max"] == 0.0
    assert abs(gap(0.5) - gap(1.0)) > 1e-3
