"""Accumulating a step's measurements over minibatches, and switching them off."""

from __future__ import annotations

import math

import torch

from gspo_bench.objectives import get_objective
from gspo_bench.objectives.metrics import measurements_off
from gspo_bench.train.measurements import MeanOf, StepMeasurements, as_floats


def test_step_measurements_weight_means_and_combine_extremes_and_counts():
    acc = StepMeasurements()
    acc.add({"clip/frac": torch.tensor(0.5), "ratio/seq_var": torch.tensor(2.0), "ratio/token_max": torch.tensor(3.0),
             "ratio/token_min": 0.5, "count/tokens_len4-7": torch.tensor(10.0)}, n_tokens=10, n_responses=2)
    acc.add({"clip/frac": torch.tensor(0.0), "ratio/seq_var": torch.tensor(5.0), "ratio/token_max": torch.tensor(2.0),
             "ratio/token_min": 0.25, "count/tokens_len4-7": torch.tensor(30.0)}, n_tokens=30, n_responses=1)
    out = acc.result()
    assert out["clip/frac"] == 0.5 * 10 / 40  # token-weighted
    assert out["ratio/seq_var"] == (2.0 * 2 + 5.0 * 1) / 3  # response-weighted
    assert out["ratio/token_max"] == 3.0 and out["ratio/token_min"] == 0.25
    assert out["count/tokens_len4-7"] == 40.0  # counts add up


def test_empty_minibatches_give_nan_not_a_crash():
    acc = StepMeasurements()
    acc.add({"clip/frac": torch.tensor(0.0)}, n_tokens=0, n_responses=0)
    assert math.isnan(acc.result()["clip/frac"])
    assert MeanOf().result() == {}


def test_as_floats_keeps_order_of_mixed_values():
    assert as_floats([torch.tensor(1.5), 2, torch.tensor(3, dtype=torch.int64), 4.25]) == [1.5, 2.0, 3.0, 4.25]
    assert as_floats([]) == []


def test_measurements_off_skips_metrics_but_not_the_loss():
    torch.manual_seed(0)
    logp, old = torch.randn(4, 5), torch.randn(4, 5)
    adv, mask = torch.randn(4), torch.ones(4, 5, dtype=torch.bool)
    for name in ("grpo", "gspo", "gspo_token"):
        loss_on, metrics_on = get_objective(name)(logp=logp, old_logp=old, advantages=adv, mask=mask)
        with measurements_off():
            loss_off, metrics_off = get_objective(name)(logp=logp, old_logp=old, advantages=adv, mask=mask)
        assert metrics_off == {} and "clip/frac" in metrics_on
        assert torch.equal(loss_on, loss_off)
    with measurements_off(False):  # off=False leaves them on
        assert get_objective("grpo")(logp=logp, old_logp=old, advantages=adv, mask=mask)[1]
