"""Rollout lag (`rollout.lag`, `gspo_bench.train.lag`) and which policy is pi_old (`train.old_logp`: recompute,
rollout = naive, decoupled): the queue's schedule on a hand-made policy sequence, a lagged run end to end (step t
trains on the batch of step t sampled t - lag updates before, its sampler counted once), resume mid-queue, the
naive and decoupled ratios and weights (AReaL's loss), R2 and R3 under lag, the lag columns by hand, and what
`validate` refuses."""

from __future__ import annotations

import copy
import dataclasses
from pathlib import Path

import pytest
import torch
from torch.testing import assert_close

from gspo_bench.config import BudgetConfig, SuiteError, parse_suite
from gspo_bench.config.schema import UniformLag
from gspo_bench.models.forward import response_forward
from gspo_bench.moe import RoutingCapture
from gspo_bench.objectives import get_objective
from gspo_bench.rundir.folder import RunDir
from gspo_bench.train import step_seed
from gspo_bench.train.lag import (
    LAG_STREAM,
    LagSchedule,
    Sampled,
    decoupled_weights,
    last_step,
    record_lagged_routes,
    routes_apart,
    sampler_gap,
    take_batch,
)
from gspo_bench.train.old_policy import OldPolicy, old_policy_pass
from gspo_bench.train.policy import Policy
from gspo_bench.train.rollout import RolloutBatch
from gspo_bench.train.row import with_sampler_routes
from gspo_bench.train.update import UpdateSettings, policy_loss
from tests.helpers.cli import one_line_error, write_suite
from tests.helpers.phases import rollout
from tests.helpers.runs import assert_same_metrics, metrics, run_interrupted, run_suite, tiny_suite


@pytest.fixture(scope="module")
def cache(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("warmstart-cache")


def schedule(setting, last=100, seed=0) -> LagSchedule:
    return LagSchedule(setting, lambda step: step_seed(seed, step, LAG_STREAM), last)


def marked(step: int, version: int) -> RolloutBatch:
    """A one-row batch that says which step it is for and which policy version sampled it."""
    return RolloutBatch(input_ids=torch.zeros(1, 3, dtype=torch.long), attention_mask=torch.ones(1, 3),
                        response_mask=torch.ones(1, 1, dtype=torch.bool), sampling_logp=torch.zeros(1, 1), routing=None,
                        rewards=torch.zeros(1), advantages=torch.tensor([float(step), float(version)]),
                        finite=torch.tensor(True))


def trained_versions(plan: LagSchedule, steps: int) -> list[tuple[int, int, int]]:
    """(step, the step whose batch it trained on, the policy version that sampled it) of a hand-made run: the
    "policy" is its version, the number of updates it has had; its batch says (its step, that version)."""
    waiting: dict[int, Sampled] = {}
    version, seen = 0, []
    for step in range(1, steps + 1):
        taken = take_batch(waiting, plan, step, lambda u, v=version: marked(u, v))
        seen.append((step, *map(int, taken.batch.advantages.tolist())))
        version += 1  # the step's update
    return seen


# ------------------------------------------------------------------ the schedule, on a hand-made policy sequence

@pytest.mark.parametrize("lag", [0, 1, 3])
def test_a_lagged_step_trains_on_its_own_batch_sampled_lag_updates_before(lag):
    """Step t trains on step t's batch (its prompts and seeds), sampled by the policy of max(0, t - 1 - lag)
    updates: lag updates before the learner's t - 1, the starting policy over the first steps (warm-up:
    min(lag, t - 1)). Lag 0 samples one batch per step, the step's own, from the policy at its start."""
    plan = schedule(lag, last=8)
    assert trained_versions(plan, 8) == [(t, t, max(0, t - 1 - lag)) for t in range(1, 9)]
    assert [plan.lag(t) for t in range(1, 9)] == [min(lag, t - 1) for t in range(1, 9)]
    if lag == 0:
        assert all(plan.to_sample(t) == [t] for t in range(1, 9))


def test_uniform_lags_are_drawn_per_step_from_the_run_seed_alone():
    """{uniform: S}: each step's lag is an integer of 0..S drawn from (seed, step) alone: every value shows,
    the same seed draws the same lags (no generator state for a checkpoint to keep), another seed others;
    step t still trains on its own batch, sampled by the policy of t - 1 - lag(t) updates."""
    plan = schedule(UniformLag(uniform=3), last=200)
    drawn = [plan.drawn(t) for t in range(1, 201)]
    assert set(drawn) == {0, 1, 2, 3} and drawn == [schedule(UniformLag(uniform=3), last=200).drawn(t) for t in range(1, 201)]
    assert drawn != [schedule(UniformLag(uniform=3), last=200, seed=1).drawn(t) for t in range(1, 201)]
    assert trained_versions(plan, 40) == [(t, t, t - 1 - plan.lag(t)) for t in range(1, 41)]
    assert all(0 <= plan.lag(t) <= min(3, t - 1) for t in range(1, 201))


def test_nothing_is_sampled_past_the_last_step_and_a_missing_batch_is_sampled_at_once():
    plan = schedule(3, last=5)
    assert plan.to_sample(1) == [1, 2, 3, 4] and plan.to_sample(2) == [5] and plan.to_sample(3) == []
    waiting: dict[int, Sampled] = {}
    taken = take_batch(waiting, plan, 6, lambda u: marked(u, 99))
    assert (taken.batch.advantages.tolist(), taken.lag, waiting) == ([6, 99], 0, {})  # (a budget raised on resume)
    assert last_step(BudgetConfig(kind="steps", value=7.5)) == 8
    assert last_step(BudgetConfig(kind="flops", value=1e9, max_steps=40)) == 40


# ------------------------------------------------------------------ the lag columns, by hand

def hand_batch(mu, valid) -> RolloutBatch:
    b, t = valid.shape
    return RolloutBatch(input_ids=torch.zeros(b, t + 2, dtype=torch.long), attention_mask=torch.ones(b, t + 2),
                        response_mask=valid, sampling_logp=mu, routing=None, rewards=torch.zeros(b),
                        advantages=torch.zeros(b), finite=torch.tensor(True))


def test_k3_per_response_and_the_ess_of_the_importance_weights_by_hand():
    """w = pi_old / mu = (2, 1 | 1/2, pad | empty): k3 = w - 1 - log w summed per response, (1 - ln 2) and
    (ln 2 - 1/2), averaged over the two non-empty ones: 1/4; ESS (sum w)^2 / (n sum w^2) = 3.5^2 / (3 x 5.25)."""
    valid = torch.tensor([[True, True], [True, False], [False, False]])
    mu = torch.log(torch.tensor([[0.25, 0.5], [0.4, 0.3], [0.1, 0.1]], dtype=torch.float64))
    learner = torch.log(torch.tensor([[0.5, 0.5], [0.2, 0.9], [0.9, 0.9]], dtype=torch.float64))
    gap = sampler_gap(learner, hand_batch(mu, valid))
    assert float(gap["lag/k3_response"]) == pytest.approx(0.25, abs=1e-12)
    assert float(gap["lag/ess"]) == pytest.approx(3.5**2 / (3 * 5.25), abs=1e-12)
    same = sampler_gap(mu, hand_batch(mu, valid))  # the learner is the sampler: no gap, every weight 1
    assert float(same["lag/k3_response"]) == 0.0 and float(same["lag/ess"]) == pytest.approx(1.0, abs=1e-15)


def test_route_diff_on_a_hand_routed_batch():
    """Sampler and learner routes of one layer and row: position 0 alike, position 1 one expert of two changed,
    position 2 (the batch's last: generation never routes it) not counted: 1 of 4 activated experts differs;
    two layers give the per-layer values and their mean."""
    sampler = torch.tensor([[[[0, 1], [2, 3], [0, 1]]], [[[0, 1], [2, 3], [0, 1]]]])  # [L=2, B=1, T=3, k=2]
    learner = torch.tensor([[[[1, 0], [2, 0], [3, 2]]], [[[2, 3], [0, 1], [0, 1]]]])
    apart = routes_apart(sampler, learner, torch.ones(1, 3))
    assert apart["moe/drift_expert_layer"].tolist() == [0.25, 1.0] and float(apart["moe/drift_expert"]) == 0.625
    old = OldPolicy(logp=torch.zeros(1, 1), entropy=torch.zeros(1, 1), entropy_mean=torch.zeros(()), routing=None, replay=None,
                    route_diff=apart["moe/drift_expert_layer"])
    rows = with_sampler_routes({"moe/drift": torch.zeros(3, 2)}, old)  # 3 measured minibatches
    assert rows["lag/route_diff"].tolist() == [[0.25, 1.0]] * 3 and with_sampler_routes({}, old) == {}


# ------------------------------------------------------------------ which policy is old: naive, recomputed, decoupled

def test_decoupled_weights_by_hand():
    valid = torch.tensor([[True, True, False]])
    prox, mu = torch.log(torch.tensor([[0.5, 0.2, 0.3]])), torch.log(torch.tensor([[0.25, 0.4, 0.9]]))
    weights, measured = decoupled_weights(prox, mu, valid)
    assert_close(weights, torch.tensor([[2.0, 0.5, 0.0]])) and float(measured["decoupled/masked_frac"]) == 0.0
    capped, measured = decoupled_weights(prox, mu, valid, cap=1.5)
    assert_close(capped, torch.tensor([[0.0, 0.5, 0.0]])) and float(measured["decoupled/masked_frac"]) == 0.5


def areal_decoupled_loss(logp, prox, behave, advantages, mask, eps, eps_high, cap=None):
    """AReaL's decoupled PPO actor loss, written here from `ppo_actor_loss_fn` in inclusionAI/AReaL
    areal/utils/functional.py at commit 072480e26a1dc2ac1692164e504315d7e508478b: the ratio against the
    proximal policy, PPO's clip, each token's term times behav_imp_weight = exp(prox - behave) (0 where it
    exceeds behav_imp_weight_cap), summed over the loss mask and divided by its count."""
    ratio = torch.where(mask, torch.exp(logp - prox), 0)
    clipped = torch.clamp(ratio, 1.0 - eps, 1.0 + eps_high)
    pg = torch.max(-advantages * ratio, -advantages * clipped)
    weight = (prox - behave).exp()
    keep = (weight <= cap).logical_and(mask) if cap is not None else mask
    pg = pg * torch.where(keep, weight, 0.0)
    return torch.where(mask, pg, 0).sum() / mask.count_nonzero()


@pytest.mark.parametrize("cap", [None, 1.5])
def test_decoupled_loss_is_areals(cap):
    """`train.old_logp: decoupled` with a token-mean objective (dapo, AReaL's clip-higher range) is AReaL's
    decoupled loss, value and gradient: the ratio against pi_prox (the old pass's log-probs) and each term
    weighted by pi_prox / mu through the objective's `weights`, its normaliser the token count."""
    torch.manual_seed(0)
    valid = torch.tensor([[True, True, True, False], [True, True, False, False]])
    prox, mu = torch.randn(2, 4) * 0.3 - 1.0, torch.randn(2, 4) * 0.3 - 1.0
    logp = (prox + torch.randn(2, 4) * 0.3).requires_grad_()
    advantages = torch.tensor([0.8, -1.1])
    weights, _ = decoupled_weights(prox, mu, valid, cap)
    old = OldPolicy(logp=prox, entropy=torch.zeros(2, 4), entropy_mean=torch.zeros(()), routing=None, replay=None, weights=weights)
    batch = dataclasses.replace(hand_batch(mu, valid), advantages=advantages)
    ours, _ = policy_loss(get_objective("dapo"), logp, old, batch, torch.arange(2), UpdateSettings())
    theirs = areal_decoupled_loss(logp, prox, mu, advantages[:, None].expand(2, 4), valid, 0.2, 0.28, cap)
    assert ours.item() == pytest.approx(theirs.item(), rel=1e-6)
    assert_close(torch.autograd.grad(ours, logp)[0], torch.autograd.grad(theirs, logp)[0])
    plain, _ = policy_loss(get_objective("dapo"), logp, dataclasses.replace(old, weights=None), batch, torch.arange(2))
    assert abs(plain.item() - ours.item()) > 1e-3  # the weights count
    with pytest.raises(ValueError, match="twice"):  # never beside a correction
        policy_loss(get_objective("dapo"), logp, old, batch, torch.arange(2),
                    UpdateSettings(correction=lambda **_: (weights, {})))


def lagged_batch(parts):
    """A batch sampled by an older policy (the tiny model moved off: S updates back), and the learner."""
    _, learner, _ = parts
    sampler = copy.deepcopy(learner)
    with torch.no_grad():
        for p in sampler.parameters():
            p.add_(torch.randn_like(p) * 0.05, alpha=1.0)
    return rollout(parts, policy=Policy(sampler)), learner


def test_naive_recomputed_and_decoupled_pi_old_on_a_lagged_batch(parts):
    """On a batch an older policy sampled: naive (old_logp rollout) takes the sampler's mu as pi_old;
    recomputed and decoupled the learner's log-probs at the step's start, decoupled with the weight
    pi_prox / mu on each valid token (0 at padding); the lag columns compare the learner with the sampler."""
    batch, learner = lagged_batch(parts)
    with torch.no_grad():
        learner_logp, _ = response_forward(learner, batch.input_ids, batch.attention_mask, batch.n_response)
    naive = old_policy_pass(Policy(learner), batch, temperature=1.0, logp_source="rollout")
    recomputed = old_policy_pass(Policy(learner), batch, temperature=1.0)
    decoupled = old_policy_pass(Policy(learner), batch, temperature=1.0, logp_source="decoupled")
    assert torch.equal(naive.logp, batch.sampling_logp) and naive.weights is None and recomputed.weights is None
    assert_close(recomputed.logp, learner_logp) and torch.equal(decoupled.logp, recomputed.logp)
    valid = batch.response_mask
    assert_close(decoupled.weights, torch.where(valid, torch.exp(learner_logp - batch.sampling_logp), 0.0))
    assert (learner_logp - batch.sampling_logp)[valid].abs().max() > 1e-2  # the sampler is another policy
    assert 0 < float(recomputed.metrics["lag/ess"]) < 1 and float(recomputed.metrics["lag/k3_response"]) > 0
    assert float(recomputed.metrics["lag/route_diff"]) == float(recomputed.metrics["moe/rollout_gap_expert"]) > 0
    assert recomputed.route_diff.shape == (2,)  # per MoE layer


def test_r3_under_lag_replays_the_samplers_routes_and_r2_the_learners(parts):
    """R3 replays the routes the older sampler chose; R2 those the learner chooses at the step's start."""
    batch, learner = lagged_batch(parts)
    with torch.no_grad(), RoutingCapture(learner) as own:
        response_forward(learner, batch.input_ids, batch.attention_mask, batch.n_response)
    r2 = old_policy_pass(Policy(learner), batch, temperature=1.0, replay="old_pass")
    r3 = old_policy_pass(Policy(learner), batch, temperature=1.0, replay="rollout")
    assert torch.equal(r2.replay, own.routing) and torch.equal(r3.replay, batch.routing)
    assert not torch.equal(batch.routing[:, :, :-1], own.routing[:, :, :-1])  # the two differ here


@pytest.mark.parametrize(("lag", "delta"), [(3, 1), (3, 2), (2, 2), ({"uniform": 4}, 2)])
def test_lagged_r2_replays_the_learners_routes_of_delta_updates_before_the_step(lag, delta):
    """On a hand-made policy sequence (version = updates so far): step t replays the routes the learner chose at
    the start of step t - delta (version t - 1 - delta) where its batch's sampler is older than that (lag > delta),
    and the sampler's own routes (none recorded) where it is not."""
    plan = schedule(UniformLag(uniform=lag["uniform"]) if isinstance(lag, dict) else lag)
    waiting: dict[int, Sampled] = {}
    version, recorded_any = 0, False
    for step in range(1, 21):
        record_lagged_routes(waiting, step, delta, lambda b, v=version: torch.full((1, 1, 3, 1), v))
        taken = take_batch(waiting, plan, step, lambda u, v=version: marked(u, v))
        routes = taken.batch.lagged_routing
        if plan.lag(step) > delta:
            assert routes is not None and int(routes.flatten()[0]) == step - 1 - delta, step
            recorded_any = True
        else:
            assert routes is None, step
        version += 1
    assert recorded_any == (plan.largest > delta)  # at lag = delta the sampler is the policy delta updates back


def test_old_pass_under_lagged_r2_replays_the_recorded_routes_else_the_samplers(parts):
    batch, learner = lagged_batch(parts)
    with torch.no_grad(), RoutingCapture(learner) as own:
        response_forward(learner, batch.input_ids, batch.attention_mask, batch.n_response)
    recorded = dataclasses.replace(batch, lagged_routing=own.routing)
    assert torch.equal(old_policy_pass(Policy(learner), recorded, temperature=1.0, replay="lagged").replay, own.routing)
    assert torch.equal(old_policy_pass(Policy(learner), batch, temperature=1.0, replay="lagged").replay, batch.routing)
    with pytest.raises(ValueError, match="lagged routing replay needs the engine's routing"):
        old_policy_pass(Policy(learner), dataclasses.replace(batch, routing=None), temperature=1.0, replay="lagged")


# ------------------------------------------------------------------ a lagged run, end to end

class _RecordingEngine:
    """The hf engine, recording what each generate call sampled, for which step (its seed) and from which weights."""

    name = "recording"
    returns_routing = True
    calls: list[dict] = []
    model: torch.nn.Module | None = None

    def __init__(self, pad_id, eos_id, **_):
        from gspo_bench.rollout.hf import HFEngine

        self.inner = HFEngine(pad_id=pad_id, eos_id=eos_id)

    def sync_weights(self, model):
        return self.inner.sync_weights(model)

    def generate(self, model, prompts, params):
        out = self.inner.generate(model, prompts, params)
        type(self).model = model
        type(self).calls.append({"seed": params.seed, "weights": fingerprint(model),
                                 "tokens": int(out.attention_mask.sum()),
                                 "len_mean": float(out.response_mask.sum(-1).double().mean())})
        return out


def fingerprint(model) -> float:
    return float(sum(p.detach().double().sum() for p in model.parameters()))


def test_a_lagged_run_trains_step_t_on_its_batch_sampled_lag_updates_before_and_counts_its_sampler_once(tmp_path, cache):
    """lag 2 over 5 steps: one generation per step's batch (none for a step past the budget), step t's from the
    weights after max(0, t - 3) updates; step t's row is that batch's (its mean response length) and counts
    its generation and old pass once (compute/tokens_forward = 2 x its tokens), whichever step sampled it."""
    from gspo_bench.rollout import list_engines, register_engine

    if "recording" not in list_engines():
        register_engine("recording")(_RecordingEngine)
    _RecordingEngine.calls = []
    versions: list[float] = []
    data = tiny_suite(cache, rollout={"engine": "recording", "lag": 2}, budget={"kind": "steps", "value": 5},
                      objectives=[{"name": "grpo"}])
    run_suite(data, tmp_path / "out", on_step=lambda row: versions.append(fingerprint(_RecordingEngine.model)))
    versions.insert(0, _RecordingEngine.calls[0]["weights"])  # the starting weights sampled the first batch
    assert len(set(versions)) == 6  # every update moved the weights
    by_seed = {call["seed"]: call for call in _RecordingEngine.calls}
    assert len(_RecordingEngine.calls) == len(by_seed) == 5
    rows = metrics(tmp_path / "out", "tiny", "grpo-s0")
    for t, row in zip(range(1, 6), rows.to_dict("records"), strict=True):
        call = by_seed[step_seed(0, t, 1)]
        assert call["weights"] == versions[max(0, t - 3)], t
        assert row["response/len_mean"] == pytest.approx(call["len_mean"], abs=0), t
        assert row["compute/tokens_forward"] == 2 * call["tokens"], t
        assert row["lag/mean"] == row["lag/max"] == min(2, t - 1)
    from analysis.data.load import load_results
    from analysis.report.figure_table import report_figures
    from analysis.report.sections import Context, build_sections

    context = Context(load_results(tmp_path / "out"), 0.0, False, frozenset())
    assert {"sampler-vs-learner", "sampler-vs-learner-reading"} <= {s.anchor for s in build_sections(context)}
    assert "lag_routes" in {figure.name for figure in report_figures(context.sources)}


def test_a_lagged_r2_run_counts_its_route_forward_in_the_step_that_replays_it(tmp_path, cache):
    """lag 2, replay_lag 1: steps 3-5 (lag 2 > 1) replay routes recorded a step before, a forward of their
    batch counted with its generation and old pass (3 x its tokens); steps 1 and 2 replay the sampler's."""
    from gspo_bench.rollout import list_engines, register_engine

    if "recording" not in list_engines():
        register_engine("recording")(_RecordingEngine)
    _RecordingEngine.calls = []
    data = tiny_suite(cache, rollout={"engine": "recording", "lag": 2}, budget={"kind": "steps", "value": 5},
                      objectives=[{"name": "grpo", "label": "lagged", "replay_from": "lagged", "replay_lag": 1}])
    run_suite(data, tmp_path / "out")
    by_seed = {call["seed"]: call for call in _RecordingEngine.calls}
    rows = metrics(tmp_path / "out", "tiny", "lagged-s0")
    passes = [row["compute/tokens_forward"] / by_seed[step_seed(0, t, 1)]["tokens"]
              for t, row in zip(range(1, 6), rows.to_dict("records"), strict=True)]
    assert passes == [2, 2, 3, 3, 3] and rows["replay"].all()


@pytest.mark.parametrize(("objective", "lag"), [("grpo_r3", 2), ("gspo", {"uniform": 2}), ("lagged", 2)])
def test_a_lagged_run_resumed_mid_queue_equals_an_uninterrupted_one(tmp_path, cache, objective, lag):
    """A fixed lag with R3 (the waiting batches carry the sampler's routes), a uniform one and lagged R2 (the
    batch of step 4 carries the routes step 3 recorded... after the checkpoint at step 2: the resumed run
    records them again), stopped after step 3's row (its checkpoint at step 2 holds the batches sampled for
    later steps: 3 and 4 at lag 2) and resumed: every row equals the straight run's, save the time columns."""
    entry = {"name": "grpo", "label": "lagged", "replay_from": "lagged", "replay_lag": 1} if objective == "lagged" \
        else {"name": objective}
    data = tiny_suite(cache, rollout={"lag": lag}, budget={"kind": "steps", "value": 5}, objectives=[entry])
    run_suite(data, tmp_path / "full")
    run_interrupted(data, tmp_path / "cut", at_step=3)
    run = tmp_path / "cut" / "tiny" / f"{objective}-s0"
    state = torch.load(run / "checkpoint" / "state.pt", weights_only=False)
    waiting = [record["step"] for record in state.get("waiting", [])]
    assert state["step"] == 2 and (waiting == [3, 4] if lag == 2 else waiting != [])
    run_suite(data, tmp_path / "cut", resume=True)
    resumed, full = metrics(tmp_path / "cut", "tiny", f"{objective}-s0"), metrics(tmp_path / "full", "tiny", f"{objective}-s0")
    assert resumed["step"].tolist() == [1, 2, 3, 4, 5] and full["lag/max"].max() == 2
    assert_same_metrics(resumed, full)
    assert RunDir(run).read_json("provenance.json")["resumed"][0]["at_step"] == 2


# ------------------------------------------------------------------ what validate refuses

@pytest.mark.parametrize(("sets", "fragment"), [
    (["rollout.lag=-1"], "rollout.lag: a lag counts updates: expected 0..1024 (got -1)"),
    (["rollout.lag={uniform: -2}"], "rollout.lag: a lag counts updates: expected 0..1024 (got {'uniform': -2})"),
    (["rollout.lag=yes"], "rollout.lag: expected a number of updates 0..1024 or {uniform: S}"),
    (["rollout.lag={every: 2}"], "rollout.lag: expected a number of updates 0..1024 or {uniform: S}"),
    (["objectives.0={name: grpo, replay_from: lagged}"], "replay_from: lagged and replay_lag go together"),
    (["objectives.0={name: grpo_rr, replay_lag: 2}"], "replay_from: lagged and replay_lag go together"),
    (["train.decoupled_cap=5"], "decoupled_cap (5.0) caps the decoupled weight pi_prox / mu; old_logp is recompute"),
    (["train.old_logp=decoupled", "train.decoupled_cap=1"], "train.decoupled_cap: Input should be greater than 1"),
    (["train.old_logp=decoupled"], "objectives.1 (tis): train.old_logp decoupled weights each token by pi_prox / mu "
                                   "already; correction tis would weight it by the sampler's ratio again"),
    (["train.old_logp=decoupled", "objectives.1={name: dppo_binary_tv}"],
     "objectives.1 (dppo_binary_tv): objective dppo_binary_tv takes its ratio against the sampler's mu itself"),
])
def test_validate_refuses_a_lag_or_treatment_that_makes_no_sense_in_one_line(tmp_path, cli, sets, fragment):
    suite = write_suite(tmp_path / "s.yaml", tiny_suite(tmp_path / "cache", objectives=[
        {"name": "grpo"}, {"name": "grpo", "label": "tis", "correction": {"kind": "tis"}}]))
    error = one_line_error(cli("validate", suite, *[part for item in sets for part in ("--set", item)]))
    assert fragment in error, error


def test_an_arm_may_be_decoupled_beside_a_corrected_arm(tmp_path):
    """The treatment is judged per arm: an arm's own `set:` makes it decoupled, the TIS arm beside it stays
    recomputed (its suite is the suite's), so the suite is valid; the decoupled arm with a correction is not."""
    arms = [{"name": "grpo", "label": "dec", "set": {"train.old_logp": "decoupled"}},
            {"name": "grpo", "label": "tis", "correction": {"kind": "tis"}}]
    suite = parse_suite(tiny_suite(tmp_path / "cache", objectives=arms, rollout={"lag": {"uniform": 4}}))
    assert suite.rollout.lag == UniformLag(uniform=4) and suite.rollout.max_lag == 4
    with pytest.raises(SuiteError, match=r"objectives.0 \(dec\): train.old_logp decoupled"):
        parse_suite(tiny_suite(tmp_path / "cache", objectives=[{**arms[0], "correction": {"kind": "icepop"}}]))
    assert parse_suite(tiny_suite(tmp_path / "cache")).rollout.max_lag == 0  # the default: synchronous
