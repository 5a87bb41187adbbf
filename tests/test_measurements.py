"""Accumulating a step's measurements over minibatches on the device, one host copy, switching them off."""

from __future__ import annotations

import math

import pytest
import scipy.stats
import torch
from torch.testing import assert_close

from gspo_bench.objectives import get_objective, list_objectives, objective_spec
from gspo_bench.objectives.metrics import measurements_off, term_share_metrics
from gspo_bench.objectives.reduce import recording_terms
from gspo_bench.train.measurements import MeanOf, StepMeasurements, TokenRatios
from gspo_bench.train.row import to_host

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


# ------------------------------------------------------------ robust ratio statistics, one token's share


def log_of(*ratios):
    return torch.tensor([list(ratios)], dtype=torch.float64).log()


def test_token_ratios_median_trimmed_mean_and_tail_counts_by_hand():
    """Ten measured ratios over two applied minibatches (a tie at 1; padding and a skipped minibatch's
    huge ratios left out): sorted 0.25 0.5 1 1 2 3 9 20 150 2000."""
    ratios = TokenRatios()
    ratios.add(log_of(0.5, 2000.0, 1.0, 3.0, 5e6), torch.tensor([[True, True, True, True, False]]), KEPT)
    ratios.add(log_of(20.0, 1.0, 150.0, 0.25, 2.0, 9.0), torch.ones(1, 6, dtype=torch.bool), KEPT)
    ratios.add(log_of(5000.0, 4000.0), torch.ones(1, 2, dtype=torch.bool), SKIPPED)
    out = to_host(ratios.result())
    assert out["ratio/token_median"] == pytest.approx((2.0 + 3.0) / 2)  # even count: the two middle values
    # 10% of 10 = 1 value cut at each end (0.25 and 2000)
    assert out["ratio/token_trimmed_mean"] == pytest.approx((0.5 + 1 + 1 + 2 + 3 + 9 + 20 + 150) / 8)
    assert (out["ratio/token_gt_10"], out["ratio/token_gt_100"], out["ratio/token_gt_1000"]) == (3.0, 2.0, 1.0)
    values = [0.5, 2000.0, 1.0, 3.0, 20.0, 1.0, 150.0, 0.25, 2.0, 9.0]
    assert out["ratio/token_trimmed_mean"] == pytest.approx(scipy.stats.trim_mean(values, 0.1))


def test_token_ratios_odd_count_and_nothing_measured():
    ratios = TokenRatios()
    ratios.add(log_of(3.0, 0.5, 1.5), torch.ones(1, 3, dtype=torch.bool), KEPT)
    out = to_host(ratios.result())
    assert out["ratio/token_median"] == pytest.approx(1.5)
    assert out["ratio/token_trimmed_mean"] == pytest.approx(5.0 / 3)  # floor(3 / 10) = 0: nothing cut
    nothing = TokenRatios()
    nothing.add(log_of(3.0), torch.ones(1, 1, dtype=torch.bool), SKIPPED)
    out = to_host(nothing.result())
    assert math.isnan(out["ratio/token_median"]) and math.isnan(out["ratio/token_trimmed_mean"])
    assert out["ratio/token_gt_10"] == 0.0 and TokenRatios().result() == {}


def test_the_share_of_one_token_in_a_grpo_loss_by_hand():
    """GRPO's contributions: w terms over (B |y_i|): response 0 (A=+1, 3 tokens) 1.1, 0.5, 1.27 (clipped)
    over 6; response 1 (A=-1, 2 tokens) -0.8 (clipped), -1.3 over 4. The largest is 1.3 / 4."""
    old = torch.tensor([[-1.0, -2.0, -0.5], [-1.5, -0.7, -3.0]])
    logp = old + torch.tensor([[1.1, 0.5, 1.5], [0.7, 1.3, 1.0]]).log()
    mask = torch.tensor([[True, True, True], [True, True, False]])
    with recording_terms() as terms:
        loss, _ = get_objective("grpo")(logp=logp, old_logp=old, advantages=torch.tensor([1.0, -1.0]), mask=mask)
    share = to_host(term_share_metrics(terms))["loss/max_token_share"]
    assert share == pytest.approx((1.3 / 4) / ((1.1 + 0.5 + 1.27) / 6 + (0.8 + 1.3) / 4))
    assert float(terms[0][1, 2]) == 0.0  # padding contributes nothing
    with measurements_off():
        assert term_share_metrics(terms) == {}
    assert term_share_metrics([torch.zeros(2, 3)]) == {"loss/max_token_share": torch.tensor(0.0, dtype=torch.float64)}


@pytest.mark.parametrize("name", list_objectives())
def test_the_recorded_contributions_add_up_to_every_objectives_loss(name):
    torch.manual_seed(3)
    logp, old = -torch.rand(3, 4) * 2, -torch.rand(3, 4) * 2
    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0], [1, 1, 1, 1]], dtype=torch.bool)
    extra = {"sampling_logp": old, "router_shift": torch.zeros(3, 4), "generator": torch.Generator().manual_seed(0)}
    inputs = {k: v for k, v in extra.items() if k in objective_spec(name).inputs}
    with recording_terms() as terms:
        loss, _ = get_objective(name)(logp=logp, old_logp=old, advantages=torch.tensor([1.0, -0.5, 0.3]), mask=mask,
                                      **inputs)
    assert len(terms) >= 1
    assert_close(-torch.stack(terms).sum(), loss)


def test_the_step_keeps_the_largest_share_of_its_applied_minibatches():
    acc = StepMeasurements()
    for share, kept in ((0.3, KEPT), (0.6, KEPT), (0.9, SKIPPED)):
        acc.add({"loss/max_token_share": t(share)}, n_tokens=t(10), n_responses=t(2), kept=kept)
    assert to_host(acc.result())["loss/max_token_share"] == pytest.approx(0.6)


def test_gradient_cosines_between_consecutive_applied_updates_by_hand():
    """Gradients (1, 0 | r 2), (1, 1 | r 1), a skipped update's (9, -9 | r 5), (0, 1 | r 1), (0, 2 | r 0): the pairs
    of consecutive applied updates are 1-2 and 4-5 (the skipped update breaks 2-3 and 3-4). Whole model:
    cos((1, 0, 2), (1, 1, 1)) = 3 / (sqrt 5 sqrt 3) and cos((0, 1, 1), (0, 2, 0)) = 1 / sqrt 2; routers: 1 and
    NaN (a zero gradient), so their mean is NaN."""
    from gspo_bench.train.measurements import GradientCosines

    w, r = torch.nn.Parameter(torch.zeros(2)), torch.nn.Parameter(torch.zeros(1))
    cosines = GradientCosines(lambda: [w, r], lambda: [r])
    for grad, router, applied in (([1.0, 0.0], 2.0, True), ([1.0, 1.0], 1.0, True), ([9.0, -9.0], 5.0, False),
                                  ([0.0, 1.0], 1.0, True), ([0.0, 2.0], 0.0, True)):
        w.grad, r.grad = torch.tensor(grad), torch.tensor([router])
        cosines.add(torch.tensor(applied))
    out = cosines.result()
    expected = (3 / (math.sqrt(5.0) * math.sqrt(3.0)) + 1 / math.sqrt(2.0)) / 2
    assert float(out["grad/cos_prev"]) == pytest.approx(expected)
    assert math.isnan(float(out["grad/cos_prev_router"]))
    single = GradientCosines(lambda: [w], lambda: [r])
    single.add(torch.tensor(True))
    assert math.isnan(float(single.result()["grad/cos_prev"]))  # one update: no pair
