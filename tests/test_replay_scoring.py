"""Paired replay scoring (gspo_bench.train.replay_scoring) on a hand-routed batch of a tiny MoE: an engine
that routed every token to other experts (expert e -> e + 1) and whose log-probs are the model's under
those routes, i.e. a mismatch of router choice alone. R3 replays the engine's routes: k3 0. The live
scoring's k3 is worked out from the two log-probs by the formula; R2, which replays the old-policy
pass's own routes, equals the old-policy pass's `mismatch/k3_kl`."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from gspo_bench.models.forward import response_forward
from gspo_bench.moe import RoutingCapture
from gspo_bench.train.old_policy import old_policy_pass
from gspo_bench.train.policy import Policy
from gspo_bench.train.replay_scoring import LIVE, R2, R3, replay_scores
from tests.helpers.phases import rollout, shifted


@pytest.fixture(scope="module")
def hand_routed(parts):  # noqa: F811
    """A rollout whose engine routed every token to the next experts, with the model's log-probs under them."""
    batch = rollout(parts)
    model = parts[1]
    engine_routes = shifted(batch.routing)
    with torch.no_grad(), RoutingCapture(model, replay=engine_routes):
        engine_logp, _ = response_forward(model, batch.input_ids, batch.attention_mask, batch.n_response)
    return model, dataclasses.replace(batch, routing=engine_routes, sampling_logp=engine_logp)


def test_r3_removes_a_mismatch_of_routing_alone_and_r2_equals_the_old_pass(hand_routed):
    model, batch = hand_routed
    scores = {k: float(v) for k, v in replay_scores(Policy(model), batch, temperature=1.0).items()}
    with torch.no_grad():
        live_logp, _ = response_forward(model, batch.input_ids, batch.attention_mask, batch.n_response)
    d = (live_logp - batch.sampling_logp).double()[batch.response_mask.bool()]  # log pi_train - log pi_engine
    by_hand = float((d.exp() - 1 - d).mean())  # k3 = r - 1 - log r, averaged over response tokens
    assert by_hand > 1e-6  # the routes differ, so the log-probs do (1.6e-5 on this model)
    assert scores[LIVE] == pytest.approx(by_hand, rel=1e-9)
    assert abs(scores[R3]) < 1e-12
    old = old_policy_pass(Policy(model), batch, temperature=1.0)
    assert scores[R2] == pytest.approx(float(old.metrics["mismatch/k3_kl"]), rel=1e-12)
    assert scores[R2] == pytest.approx(scores[LIVE], rel=1e-12)


def test_scoring_needs_the_engines_routing(hand_routed):
    model, batch = hand_routed
    with pytest.raises(ValueError, match="recorded no routing"):
        replay_scores(Policy(model), dataclasses.replace(batch, routing=None), temperature=1.0)


def test_a_run_logs_the_three_scorings_before_its_updates(tmp_path):
    """The loop's wiring (`train.replay_scoring`), the one test here that trains: 1 step of the tiniest
    suite (no warm start) under router noise 1. R3's k3 is 0 (the engine's mismatch is its expert choice
    alone), the live and R2 scorings are the old-policy pass's `mismatch/k3_kl` (the same un-updated
    policy), and compute/tokens_forward counts 3 more passes than a run without the scoring."""
    from tests.helpers.runs import metrics, run_suite, tiny_suite

    rows = {}
    for scoring in (False, True):
        data = tiny_suite(tmp_path / "cache", warm_start={"enabled": False}, budget={"kind": "steps", "value": 1},
                          rollout={"engine_options": {"router_noise": 1.0}}, objectives=[{"name": "grpo"}],
                          train={"replay_scoring": scoring})
        run_suite(data, tmp_path / str(scoring))
        rows[scoring] = metrics(tmp_path / str(scoring), "tiny", "grpo-s0").iloc[0]
    row = rows[True]
    assert row["mismatch/k3_kl"] > 1e-6
    assert row[R3] < 1e-10
    assert row[LIVE] == pytest.approx(row["mismatch/k3_kl"], rel=1e-9)
    assert row[R2] == pytest.approx(row[LIVE], rel=1e-12)
    assert R3 not in rows[False]
    assert row["compute/tokens_forward"] == rows[False]["compute/tokens_forward"] * 5 / 2  # 2 passes + 3
