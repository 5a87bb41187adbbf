"""Router margins and the predicted flip rate (gspo_bench.moe.margins): hand-computed cases, their
capture on a tiny MoE, and their wiring into a run's rows (layers.parquet, the step's summary, the
nondeterminism floor), with the routing confidence recorded beside them."""

from __future__ import annotations

import copy
from pathlib import Path

import pandas as pd
import pytest
import torch

from gspo_bench.models import build_tiny_moe
from gspo_bench.moe import RoutingCapture, routing_drift
from gspo_bench.moe.margins import margin_stats, predicted_flip_rate, router_margins
from tests.helpers.moe import captured
from tests.helpers.runs import metrics, run_suite
from tests.helpers.runs import signal_suite as suite


def test_the_margin_pair_is_the_weakest_chosen_and_the_strongest_unchosen_expert():
    logits = torch.tensor([[3.0, 1.0, 2.0, 0.0],   # chose {0, 2}: weakest chosen 2 (2.0), best unchosen 1 (1.0)
                           [0.5, 4.0, -1.0, 0.7]])  # chose {1, 3}: weakest chosen 3 (0.7), best unchosen 0 (0.5)
    ids = torch.tensor([[0, 2], [1, 3]])
    assert router_margins(logits, ids).tolist() == [[2, 1], [3, 0]]
    assert router_margins(logits[:, :2], torch.tensor([[0, 1], [1, 0]])).tolist() == [[1, 1], [0, 0]]  # k = E


def pairs(margins, dms, a_moves):
    """[B=1, T, 2] logits before and after: a at its margin over b (b at 0), then a moved by
    `a_moves` and b by a_moves - dm, so that the margin changes by exactly dm."""
    old = torch.tensor([[[m, 0.0] for m in margins]])
    new = torch.tensor([[[m + a, a - dm] for m, dm, a in zip(margins, dms, a_moves, strict=True)]])
    return old, new


def test_margin_figures_of_a_two_layer_case_by_hand():
    # layer 0: margins 0.05, 0.5, 2.0, 0.005; changes -0.1, 0, -0.3, +0.01
    old0, new0 = pairs([0.05, 0.5, 2.0, 0.005], [-0.1, 0.0, -0.3, 0.01], [0.2, 0.0, -0.1, 0.0])
    # layer 1: margins 0.2, 0.02, 0.3, 9.0 (the last position is padding); changes -0.5, -0.01, 0, -20
    old1, new1 = pairs([0.2, 0.02, 0.3, 9.0], [-0.5, -0.01, 0.0, -20.0], [0.0, 0.0, 0.0, 0.0])
    mask = torch.tensor([[1, 1, 1, 0]])
    stats = margin_stats(torch.stack([old0, old1]), torch.stack([new0, new1]), torch.tensor([[1, 1, 1, 1]]))
    # layer 0 crossed: 0.05 - 0.1 < 0 only; predicted: -dm = 0.1 -> {0.05, 0.005} below, 0 -> none,
    # 0.3 -> {0.05, 0.005}, -0.01 -> none: (2 + 0 + 2 + 0) / 16
    assert stats["moe/margin_crossed"][0] == pytest.approx(0.25)
    assert stats["moe/flip_pred"][0] == pytest.approx(4 / 16)
    assert stats["moe/margin_lt_0.01"][0] == pytest.approx(0.25)
    assert stats["moe/margin_lt_0.1"][0] == pytest.approx(0.5)
    assert stats["moe/margin_lt_1"][0] == pytest.approx(0.75)
    assert stats["moe/margin_median"][0] == pytest.approx(0.05)  # the lower middle value, as torch.median
    # |delta s|: a moved |0.2|, 0, |-0.1|, 0; b moved |0.2 + 0.1|, 0, |-0.1 + 0.3|, |-0.01|
    assert stats["moe/dscore"][0] == pytest.approx((0.2 + 0.3 + 0 + 0 + 0.1 + 0.2 + 0 + 0.01) / 8)
    assert stats["moe/dmargin_abs"][0] == pytest.approx((0.1 + 0 + 0.3 + 0.01) / 4)
    masked = margin_stats(torch.stack([old0, old1]), torch.stack([new0, new1]), mask)
    # layer 1 without its padding: margins 0.2, 0.02, 0.3; crossed: 0.2 - 0.5 only (0.02 - 0.01 > 0);
    # predicted: -dm = 0.5 -> 3 below, 0.01 -> 0, 0 -> 0: 3 / 9
    assert masked["moe/margin_crossed"][1] == pytest.approx(1 / 3)
    assert masked["moe/flip_pred"][1] == pytest.approx(3 / 9)
    assert stats["moe/margin_crossed"][1] == pytest.approx(2 / 4)  # with it, 9 - 20 < 0 counts


def test_the_predicted_rate_assumes_margins_and_changes_independent():
    margin = torch.tensor([[0.1, 0.2, 0.3, 0.4]])
    # every token's own change just fails to cross its own margin, yet the small margins would be
    # crossed by the larger changes: the prediction is not the per-token count
    dm = torch.tensor([[-0.09, -0.19, -0.29, -0.39]])
    assert float(predicted_flip_rate(margin, dm)[0]) == pytest.approx((0 + 1 + 2 + 3) / 16)
    assert float(((margin + dm) < 0).float().mean()) == 0.0


def test_a_margin_closed_exactly_to_zero_is_not_a_flip():
    """Ties at every boundary (values exact in binary): a margin moved exactly to 0, a margin that was
    already 0 and stays there, a change that equals another token's margin, a margin equal to a
    threshold. A flip needs the order to reverse (m + dm < 0); a tie keeps the chosen expert."""
    old, new = pairs([0.5, 0.25, 1.0, 0.0], [-0.5, -0.5, 0.25, 0.0], [0.0, 0.0, 0.0, 0.0])
    stats = margin_stats(old[None], new[None], torch.ones(1, 4))
    # m + dm = 0, -0.25, 1.25, 0: only the second token's order reversed
    assert stats["moe/margin_crossed"].tolist() == [0.25]
    # -dm_j = 0.5, 0.5, -0.25, 0: margins strictly below are {0, 0.25}, {0, 0.25}, {}, {} -> 4 of 16
    # (a margin equal to -dm_j, 0.5 or 0, is a tie: not counted)
    assert stats["moe/flip_pred"].tolist() == [4 / 16]
    assert stats["moe/margin_lt_1"].tolist() == [0.75]  # 1.0 is not below 1
    assert stats["moe/margin_lt_0.01"].tolist() == [0.25] and stats["moe/margin_median"].tolist() == [0.25]


def test_the_predicted_rate_is_a_mean_over_pairs_per_layer():
    """n margins and n changes make n * n pairs; each layer is its own sample (here n = 2 and 3)."""
    margin = torch.tensor([[0.0, 2.0, 0.0], [1.0, 3.0, 5.0]])
    dm = torch.tensor([[-4.0, -1.0, 0.0], [-3.0, -3.0, -6.0]])
    # layer 0 (sizes 3): -dm = 4 -> {0, 2, 0}, 1 -> {0, 0}, 0 -> {} : 5 / 9
    # layer 1: -dm = 3 -> {1}, 3 -> {1}, 6 -> {1, 3, 5}: 5 / 9
    assert predicted_flip_rate(margin, dm).tolist() == pytest.approx([5 / 9, 5 / 9])
    assert predicted_flip_rate(margin[:, :2], dm[:, :2]).tolist() == pytest.approx([3 / 4, 2 / 4])
    assert predicted_flip_rate(torch.tensor([[0.5]]), torch.tensor([[-0.5]])).tolist() == [0.0]  # a lone tie
    assert predicted_flip_rate(margin[:, :0], dm[:, :0]).isnan().all()  # no token: undefined


@pytest.fixture(scope="module")
def model():
    return build_tiny_moe(vocab_size=40, num_layers=2, hidden_size=32, expert_hidden=32, num_experts=6, top_k=2, seed=3)


def test_a_capture_records_margin_pairs_and_reads_them_back_after_an_update(model):
    ids = torch.randint(3, 40, (3, 7), generator=torch.Generator().manual_seed(0))
    before, _ = captured(model, ids, margins=True, no_grad=True)
    pair, pair_logits = before.margin_pairs, before.pair_logits  # [L, B, T, 2]
    chosen = before.routing
    assert (pair[..., :1] == chosen).any(-1).all() and not (pair[..., 1:] == chosen).any(-1).any()
    assert (pair_logits[..., 0] >= pair_logits[..., 1]).all()  # top-k of the logits: margins >= 0
    moved = copy.deepcopy(model)
    with torch.no_grad():
        for layer in moved.model.layers:
            layer.mlp.gate.weight.add_(torch.randn_like(layer.mlp.gate.weight), alpha=0.5)
    with torch.no_grad(), RoutingCapture(model, pairs=pair) as same, RoutingCapture(moved, pairs=pair) as after:
        model(input_ids=ids)
        moved(input_ids=ids)
    assert torch.equal(same.pair_logits, pair_logits)
    mask = torch.ones(3, 7)
    unchanged = margin_stats(pair_logits, same.pair_logits, mask)
    assert (unchanged["moe/flip_pred"] == 0).all() and (unchanged["moe/dscore"] == 0).all()
    stats = margin_stats(pair_logits, after.pair_logits, mask)
    drift = routing_drift(chosen, after.routing)["moe/drift_layer"]
    assert (drift > 0).all() and (stats["moe/margin_crossed"] > 0).all()
    # a k-th / (k+1)-th swap changes the expert set: crossed margins are measured drift
    assert (stats["moe/margin_crossed"] <= drift + 1e-6).all()
    with pytest.raises(ValueError, match="pass one"):
        RoutingCapture(model, margins=True, pairs=pair)


@pytest.fixture(scope="module")
def cache(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("warmstart-cache")


def test_a_run_writes_margins_per_minibatch_and_layer_and_its_floor_once(tmp_path, cache):
    run_suite(suite(cache, steps=2, train={"lr": 3e-3, "minibatches": 3}, rollout={"dtype": "bfloat16"},
                    objectives=[{"name": "grpo"}]), tmp_path)
    frame = metrics(tmp_path, "tiny", "grpo-s0")
    layers = pd.read_parquet(tmp_path / "tiny" / "grpo-s0" / "layers.parquet")
    n_layers = layers["layer"].nunique()
    assert sorted(layers["updates"].unique()) == [1, 2] and len(layers) == 2 * 2 * n_layers  # steps x J x L
    for step, rows in layers.groupby("step"):
        row = frame[frame["step"] == step].iloc[0]
        assert row["moe/drift"] == pytest.approx(rows["moe/drift"].mean())
        assert row["moe/flip_pred"] == pytest.approx(rows["moe/flip_pred"].mean())
        assert row["moe/margin_lt_0.1"] == pytest.approx(rows["moe/margin_lt_0.1"].mean())
    assert (layers["moe/dscore"] > 0).all() and (layers["moe/margin_median"] > 0).all()
    # pi_old's routing confidence (moe.confidence): measured before the updates, so one value per step and
    # layer beside every measured minibatch; the step's column is its mean over layers
    assert (layers.groupby(["step", "layer"])["moe/route_conf"].nunique() == 1).all()
    assert layers["moe/route_conf"].between(0, 1, inclusive="right").all()
    for step, rows in layers[layers["updates"] == 1].groupby("step"):
        assert frame.loc[frame["step"] == step, "moe/route_conf"].iloc[0] == pytest.approx(rows["moe/route_conf"].mean())
    first, second = frame.iloc[0], frame.iloc[1]
    assert first["floor/drift_repeat"] == 0 and first["floor/logp_repeat_max"] == 0  # CPU fp32 repeats exactly
    assert first["floor/logp_precision_max"] > 0  # bf16 autocast against fp32
    assert pd.isna(second["floor/drift_repeat"])  # once per run


def test_a_one_update_step_measures_margins_after_its_update(tmp_path, cache):
    run_suite(suite(cache, train={"lr": 3e-3, "minibatches": 1}, objectives=[{"name": "grpo"}]), tmp_path)
    frame = metrics(tmp_path, "tiny", "grpo-s0")
    layers = pd.read_parquet(tmp_path / "tiny" / "grpo-s0" / "layers.parquet")
    assert (layers["updates"] == 1).all()
    assert frame["moe/dscore"].iloc[0] == pytest.approx(layers["moe/dscore"].mean()) and frame["moe/dscore"].iloc[0] > 0
    assert "floor/drift_precision" not in frame or frame["floor/drift_precision"].isna().all()  # same precision


def test_the_report_tables_and_draws_predicted_against_measured_drift_per_layer():
    from analysis.evidence.margins import has_margins, margin_table
    from analysis.figures.margins_interactive import (
        predicted_vs_measured as predicted_vs_measured_interactive,
    )

    metrics = pd.DataFrame({"label": ["grpo", "grpo", "gspo"], "seed": [0, 1, 0], "step": [1, 1, 1],
                            "moe/drift": [0.1, 0.3, 0.05], "moe/flip_pred": [0.2, 0.4, 0.01],
                            "floor/drift_repeat": [0.0, 0.0, 0.0]})
    table = margin_table(metrics).set_index("objective")
    assert table.loc["grpo", "drift (measured)"] == pytest.approx(0.2)
    assert table.loc["grpo", "independence flip rate"] == pytest.approx(0.3)
    assert table.loc["gspo", "floor: repeat"] == 0.0 and "median margin" not in table  # absent columns left out
    assert "no router-margin columns" in margin_table(metrics.drop(columns="moe/flip_pred"))
    layers = pd.DataFrame({"label": ["grpo"] * 4, "seed": 0, "step": 1, "updates": [1, 1, 2, 2], "layer": [0, 1, 0, 1],
                           "moe/drift": [0.1, 0.2, 0.3, 0.4], "moe/flip_pred": [0.0, 0.1, 0.2, 0.5]})
    assert has_margins(layers) and not has_margins(layers.drop(columns="moe/flip_pred"))
    per_layer, per_update = predicted_vs_measured_interactive(layers)
    traces = {t.name: list(t.y) for t in per_layer.data}
    assert traces == {"grpo: measured drift": pytest.approx([0.2, 0.3]), "grpo: independence rate": pytest.approx([0.1, 0.3])}
    traces = {t.name: list(t.y) for t in per_update.data}  # updates 1 and 2: layers 0 and 1 averaged
    assert traces == {"grpo: measured drift": pytest.approx([0.15, 0.35]),
                      "grpo: independence rate": pytest.approx([0.05, 0.35])}
