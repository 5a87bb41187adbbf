"""The loop's wiring, end to end on tiny runs: each test fails when one connection between the phases
breaks (replay not passed to the updates, drift against the wrong routing, FLOPs from total
parameters, the KL penalty's sign, the sampling temperature), and bf16 runs train at RL learning rates."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
import torch
from safetensors.torch import load_file

from tests.helpers.runs import metrics, register_shifted_engine, run_suite
from tests.helpers.runs import signal_suite as suite


@pytest.fixture(scope="module")
def cache(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("warmstart-cache")


def one_step(cache, out, **changes):
    run_suite(suite(cache, **changes), out)
    for run in (out / "tiny").iterdir():
        assert metrics(out, "tiny", run.name)["reward/std"].iloc[0] > 0, "no learning signal in step 1"


def test_routing_replay_runs_replay_in_their_update_forwards(tmp_path, cache):
    """Same seed, same first update: GRPO and GRPO + RR differ only where minibatch 2's routing has
    drifted from the old policy's and replay forces the old experts back."""
    one_step(cache, tmp_path, train={"lr": 3e-3, "minibatches": 2}, objectives=[{"name": "grpo"}, {"name": "grpo_rr"}])
    grpo, rr = metrics(tmp_path, "tiny", "grpo-s0").iloc[0], metrics(tmp_path, "tiny", "grpo_rr-s0").iloc[0]
    assert grpo["reward/mean"] == rr["reward/mean"] and grpo["moe/drift"] > 0
    assert grpo["ratio/token_var"] != rr["ratio/token_var"] and grpo["loss"] != rr["loss"]


def test_r3_replays_the_engines_routing_in_the_update_forwards(tmp_path, cache):
    """With an engine that routes otherwise, R3's old pass and update forwards both use the engine's
    experts: the only update (K = 1) is then exactly on-policy. GRPO's old pass and update agree too,
    each under the trainer's own routing."""
    register_shifted_engine()
    one_step(cache, tmp_path, rollout={"engine": "shifted_routing"}, train={"minibatches": 1},
             objectives=[{"name": "grpo_r3"}, {"name": "grpo"}])
    for run in ("grpo_r3-s0", "grpo-s0"):
        row = metrics(tmp_path, "tiny", run).iloc[0]
        assert row["ratio/token_var"] < 1e-10 and abs(row["ratio/token_mean"] - 1) < 1e-6, run
    assert metrics(tmp_path, "tiny", "grpo-s0")["moe/rollout_gap"].iloc[0] == 1.0  # every position routed otherwise


def test_drift_is_measured_against_the_old_policy(tmp_path, cache):
    """An update too small to move any routing: every minibatch (2..K) routes as the old policy did,
    so drift is exactly 0, whichever rows each minibatch holds."""
    run_suite(suite(cache, steps=2, train={"lr": 1e-12, "minibatches": 4}, objectives=[{"name": "grpo"}]), tmp_path)
    frame = metrics(tmp_path, "tiny", "grpo-s0")
    assert (frame["moe/drift"] == 0).all() and (frame["moe/drift_expert"] == 0).all()


def test_flops_count_active_parameters(tmp_path, cache):
    """2 N_active per token forwarded without gradient, 6 N_active per trained token, with N_active
    counted by hand from the tiny model's shapes (routed experts at k / E, embeddings excluded)."""
    one_step(cache, tmp_path, objectives=[{"name": "grpo"}])
    row = metrics(tmp_path, "tiny", "grpo-s0").iloc[0]
    h, m, layers, experts, k, heads, kv_heads, vocab = 32, 32, 2, 4, 2, 4, 2, 57
    head_dim = h // heads
    attention = 2 * h * heads * head_dim + 2 * h * kv_heads * head_dim + 2 * head_dim  # q, o, k, v, q/k norms
    per_layer = attention + 2 * h + experts * h + k * 3 * m * h  # + norms, router, k active experts
    n_active = layers * per_layer + h + vocab * h  # + final norm, lm_head
    assert n_active == 20704
    # K = 2: generation and the old pass forward every token once each, the updates train each once
    assert row["compute/tokens_forward"] == 2 * row["compute/tokens_trained"] > 0
    assert row["compute/flops"] == 2 * n_active * row["compute/tokens_forward"] + 6 * n_active * row["compute/tokens_trained"]
    assert row["compute/cum_flops"] == row["compute/flops"]


def test_kl_penalty_enters_the_loss_with_its_coefficient(tmp_path, cache):
    """Two runs that differ only in kl_coef share step 1 up to its second minibatch (at the first,
    policy = reference: KL 0 up to float noise); there the penalty adds coef x KL to the loss:
    the stronger penalty gives the higher loss, by an amount proportional to the KL it reports."""
    def step_one(coef, out):
        run_suite(suite(cache, train={"lr": 3e-3, "kl_coef": coef, "minibatches": 2}, objectives=[{"name": "grpo"}]), out)
        return metrics(out, "tiny", "grpo-s0").iloc[0]

    weak, strong = step_one(1e-6, tmp_path / "weak"), step_one(4.0, tmp_path / "strong")
    # the same KL up to float noise: at the first minibatch the trainer's log-probs (half the rows) and the
    # reference's (the whole batch) are summed in other blockings, so the KL gradient there is not exactly 0
    # but ~1e-7 x coef, and AdamW's normalised first step turns it into a small move wherever the policy
    # gradient is ~0 (measured: 9e-5 relative with the pinned kernels)
    assert strong["kl/ref"] == pytest.approx(weak["kl/ref"], rel=1e-3) and weak["kl/ref"] > 0
    raised = strong["loss"] - weak["loss"]  # = (4 - 1e-6) * KL_2 / 2, KL_2 the second minibatch's
    assert 0.5 * (4.0 - 1e-6) * strong["kl/ref"] < raised < 4.0 * strong["kl/ref"] * 4


def test_updates_use_the_rollout_temperature(tmp_path, cache):
    """At temperature 0.7 the old pass equals the engine's log-probs and the only update (K = 1) is
    on-policy: no mismatch, every ratio 1."""
    one_step(cache, tmp_path, rollout={"temperature": 0.7}, train={"minibatches": 1}, objectives=[{"name": "grpo"}])
    row = metrics(tmp_path, "tiny", "grpo-s0").iloc[0]
    assert row["mismatch/max_abs"] < 1e-4
    assert row["ratio/token_var"] < 1e-10 and row["kl/old_new"] < 1e-10


def test_a_bf16_run_at_an_rl_learning_rate_changes_the_weights(tmp_path, cache):
    """fp32 master weights: at lr 1e-6 a bf16 run's weights move, and are saved in fp32."""
    one_step(cache, tmp_path, train={"dtype": "bfloat16", "lr": 1e-6}, objectives=[{"name": "gspo"}])
    from gspo_bench.config import parse_suite
    from gspo_bench.suite.runner import starting_weights

    start = load_file(starting_weights(parse_suite(suite(cache)), 0, log=lambda m: None) / "model.safetensors")
    end = load_file(tmp_path / "tiny" / "gspo-s0" / "checkpoint" / "model" / "model.safetensors")
    assert all(t.dtype == torch.float32 for t in end.values())
    moved = [name for name in start if not torch.equal(start[name], end[name])]
    assert len(moved) > len(start) // 2
    assert max((start[n] - end[n]).abs().max().item() for n in moved) < 1e-5  # steps of ~lr


def test_a_correction_weights_the_updates_of_its_run(tmp_path, cache):
    """Same seed, same bf16 rollout (a real engine mismatch): GRPO with a tight IcePop band rejects
    tokens (its weights reach the row) and its loss differs from plain GRPO's; nothing else does."""
    icepop = {"name": "grpo", "label": "icepop", "correction": {"kind": "icepop", "low": 0.999, "high": 1.001}}
    one_step(cache, tmp_path, rollout={"dtype": "bfloat16"}, objectives=[{"name": "grpo"}, icepop])
    plain, corrected = metrics(tmp_path, "tiny", "grpo-s0").iloc[0], metrics(tmp_path, "tiny", "icepop-s0").iloc[0]
    assert plain["reward/mean"] == corrected["reward/mean"] and plain["mismatch/max_abs"] > 1e-3
    assert 0 < corrected["correction/masked_frac"] < 1 and corrected["correction/ess"] < 1
    assert "correction/masked_frac" not in plain or pd.isna(plain["correction/masked_frac"])
    assert plain["loss"] != corrected["loss"]


def test_rspo_runs_read_the_router_shift_of_their_updates(tmp_path, cache):
    """Same seed, same rollout: RSPO's router-shift weight is below 1 once the router has moved (minibatches
    2..K), so its loss differs from GMPO's, which it equals without a shift."""
    one_step(cache, tmp_path, train={"minibatches": 4}, objectives=[{"name": "gmpo"}, {"name": "rspo", "kwargs": {"gamma_min": 0.0}}])
    gmpo, rspo = metrics(tmp_path, "tiny", "gmpo-s0").iloc[0], metrics(tmp_path, "tiny", "rspo-s0").iloc[0]
    assert gmpo["reward/mean"] == rspo["reward/mean"]
    assert rspo["rspo/shift_mean"] > 0 and rspo["rspo/gamma_mean"] < 1
    assert "rspo/shift_mean" not in gmpo or pd.isna(gmpo["rspo/shift_mean"])
    assert gmpo["loss"] != rspo["loss"]


def test_each_purpose_draws_from_its_own_seed_stream(tmp_path, cache, monkeypatch):
    """`step_seed` gives one stream per purpose: a step's prompts, sampling, minibatch order and an
    objective's draws (Clip-Cov's generator) and the evaluation each take their own, so the evaluation's
    samples are not coupled to Clip-Cov's drops at the same step. Recorded over a one-step Clip-Cov run
    evaluated at steps 0 and 1: no stream serves two purposes of a step, none both a step and an evaluation."""
    import gspo_bench.train.loop as loop

    calls: list[tuple[str, int, int]] = []  # (where, step, stream)
    where = ["step"]
    step_seed, evaluate = loop.step_seed, loop.evaluate

    def recording(seed: int, step: int, stream: int) -> int:
        calls.append((where[0], step, stream))
        return step_seed(seed, step, stream)

    def evaluating(run, state) -> None:
        where[0] = "evaluation"
        try:
            evaluate(run, state)
        finally:
            where[0] = "step"

    monkeypatch.setattr(loop, "step_seed", recording)
    monkeypatch.setattr(loop, "evaluate", evaluating)
    run_suite(suite(cache, objectives=[{"name": "clip_cov"}],
                    eval={"engine": "rollout", "tasks": ["sort"], "every": 1, "limit": 4, "samples": 1}), tmp_path)
    in_step = [stream for kind, _, stream in calls if kind == "step"]
    in_eval = [(step, stream) for kind, step, stream in calls if kind == "evaluation"]
    assert len(in_step) == 4 and len(set(in_step)) == 4  # prompts, sampling, order, Clip-Cov's draws
    assert [step for step, _ in in_eval] == [0, 1] and not {stream for _, stream in in_eval} & set(in_step)


def test_clip_cov_draws_repeat_from_run_to_run(tmp_path, cache):
    """Clip-Cov drops tokens at random from the generator the loop makes for each (seed, step), not from
    torch's global one: two runs of one suite in one process drop the same tokens, whatever was drawn
    before."""
    wide = {"name": "clip_cov", "kwargs": {"ratio_k": 0.3, "cov_low": -100.0, "cov_high": 100.0}}
    rows = []
    for out in (tmp_path / "a", tmp_path / "b"):
        torch.rand(7)  # whatever the process drew before
        one_step(cache, out, train={"minibatches": 2}, objectives=[wide])
        rows.append(metrics(out, "tiny", "clip_cov-s0").iloc[0])
    assert rows[0]["cov/frac"] > 0.1
    assert rows[0]["loss"] == rows[1]["loss"] and rows[0]["grad/norm"] == rows[1]["grad/norm"]


def test_the_load_balancing_loss_enters_a_runs_updates_with_its_coefficient(tmp_path, cache):
    """model.router_aux_loss_coef reaches the updates: a run at 0.5 logs the family's load-balancing loss
    (loss/router_aux, Switch-style: about top_k at a balanced router) and its loss is the objective's plus
    half of it; at the default 0 no aux loss is computed."""
    one_step(cache, tmp_path / "aux", model={"router_aux_loss_coef": 0.5}, train={"minibatches": 1},
             objectives=[{"name": "grpo"}])
    one_step(cache, tmp_path / "off", train={"minibatches": 1}, objectives=[{"name": "grpo"}])
    aux, off = metrics(tmp_path / "aux", "tiny", "grpo-s0").iloc[0], metrics(tmp_path / "off", "tiny", "grpo-s0").iloc[0]
    assert 1.0 < aux["loss/router_aux"] < 4.0 and "loss/router_aux" not in off.index
    # K = 1: the same on-policy batch and update forward, so the loss differs by exactly half the aux loss
    assert aux["loss"] - off["loss"] == pytest.approx(0.5 * aux["loss/router_aux"], rel=1e-4)


def test_full_replay_runs_leave_the_routers_where_they_started(tmp_path, cache):
    """grpo_rr_full replays the old pass's experts and combine weights: after a step of 2 updates its router
    weights are the starting ones bit for bit while the rest moved; grpo_rr's routers moved. Its config.yaml
    says so."""
    one_step(cache, tmp_path, train={"lr": 3e-3, "minibatches": 2}, objectives=[{"name": "grpo_rr_full"}, {"name": "grpo_rr"}])
    from gspo_bench.config import parse_suite
    from gspo_bench.suite.runner import starting_weights

    start = load_file(starting_weights(parse_suite(suite(cache)), 0, log=lambda m: None) / "model.safetensors")
    routers = [name for name in start if name.endswith("mlp.gate.weight")]
    assert routers
    for label, frozen in (("grpo_rr_full", True), ("grpo_rr", False)):
        end = load_file(tmp_path / "tiny" / f"{label}-s0" / "checkpoint" / "model" / "model.safetensors")
        assert all(torch.equal(start[n], end[n]) for n in routers) == frozen, label
        assert any(not torch.equal(start[n], end[n]) for n in start if n not in routers), label
    assert "replay_weights: true" in (tmp_path / "tiny" / "grpo_rr_full-s0" / "config.yaml").read_text()
