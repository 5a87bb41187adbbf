"""Accumulating a step's measurements over minibatches on the device, one host copy, switching them off."""

from __future__ import annotations

import math

import torch

from gspo_bench.objectives import get_objective
from gspo_bench.objectives.metrics import measurements_off
from gspo_bench.train.measurements import MeanOf, StepMeasurements, to_host

KEPT, SKIPPED = torch.tensor(True), torch.tensor(False)


def t(x):
    return torch.tensor(float(x))


def test_step_measurements_weight_means_and_combine_extremes_and_counts():
    acc = StepMeasurements()
    acc.add({"clip/frac": t(0.5), "ratio/seq_var": t(2.0), "ratio/token_max": t(3.0), "ratio/token_min": t(0.5),
             "count/tokens_len4-7": t(10.0)}, n_tokens=t(10), n_responses=t(2), kept=KEPT)
    acc.add({"clip/frac": t(0.0), "ratio/seq_var": t(5.0), "ratio/token_max": t(2.0), "ratio/token_min": t(0.25),
             "count/tokens_len4-7": t(30.0)}, n_tokens=t(30), n_responses=t(1), kept=KEPT)
    out = to_host(acc.result())
    assert out["clip/frac"] == 0.5 * 10 / 40  # token-weighted
    assert out["ratio/seq_var"] == (2.0 * 2 + 5.0 * 1) / 3  # response-weighted
    assert out["ratio/token_max"] == 3.0 and out["ratio/token_min"] == 0.25
    assert out["count/tokens_len4-7"] == 40.0  # counts add up


def test_a_skipped_minibatch_counts_for_nothing_even_with_nan_values():
    acc = StepMeasurements()
    acc.add({"clip/frac": t(0.25), "ratio/token_max": t(2.0), "count/tokens_len4-7": t(7)},
            n_tokens=t(8), n_responses=t(2), kept=KEPT)
    acc.add({"clip/frac": t("nan"), "ratio/token_max": t("nan"), "count/tokens_len4-7": t(9)},
            n_tokens=t(8), n_responses=t(2), kept=SKIPPED)
    out = to_host(acc.result())
    assert out == {"clip/frac": 0.25, "ratio/token_max": 2.0, "count/tokens_len4-7": 7.0}


def test_empty_or_all_skipped_minibatches_give_nan_not_a_crash():
    acc = StepMeasurements()
    acc.add({"clip/frac": t(0.0), "ratio/token_min": t(1.0)}, n_tokens=t(0), n_responses=t(0), kept=KEPT)
    assert math.isnan(to_host(acc.result())["clip/frac"])
    skipped = StepMeasurements()
    skipped.add({"ratio/token_min": t(1.0)}, n_tokens=t(3), n_responses=t(1), kept=SKIPPED)
    assert math.isnan(to_host(skipped.result())["ratio/token_min"])
    assert MeanOf().result() == {}


def test_to_host_keeps_names_shapes_and_plain_numbers():
    out = to_host({"a": torch.tensor(1.5), "n": 2, "layers": torch.tensor([0.25, 0.5]), "i": torch.tensor(3)})
    assert out == {"a": 1.5, "n": 2.0, "layers": [0.25, 0.5], "i": 3.0}
    assert to_host({}) == {}


def test_mean_of_averages_tensors_of_any_shape():
    mean = MeanOf()
    mean.add({"moe/drift": t(0.2), "moe/drift_layer": torch.tensor([0.0, 0.4])})
    mean.add({"moe/drift": t(0.4), "moe/drift_layer": torch.tensor([0.2, 0.6])})
    out = to_host(mean.result())
    assert math.isclose(out["moe/drift"], 0.3, rel_tol=1e-7)  # float32 sums
    assert [round(x, 6) for x in out["moe/drift_layer"]] == [0.1, 0.5]


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
