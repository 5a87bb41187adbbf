"""The stress comparison's measurements and controls in tiny runs, end to end: the robust ratio
columns, drift after one update (also with one minibatch, from the drift-after pass) and per layer, a
noise-free control arm and a TIS arm in a suite with engine router noise, evaluation on the clean
engine, the warm start each run used, the floor at the rollout temperature."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

import gspo_bench.train.loop
from tests.helpers.runs import metrics, run_suite
from tests.helpers.runs import signal_suite as suite

NOISE = 1.0  # router noise of the engine: on the tiny MoE it reroutes a large share of (token, layer) pairs


@pytest.fixture(scope="module")
def cache(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("warmstart-cache")


@pytest.fixture(scope="module")
def stress(cache, tmp_path_factory) -> Path:
    """One step of a noisy-engine suite: GRPO, its noise-free control arm and GRPO + TIS, each
    evaluated on the clean engine at steps 0 and 1."""
    out = tmp_path_factory.mktemp("stress")
    data = suite(cache, rollout={"engine_options": {"router_noise": NOISE}}, train={"lr": 3e-3, "minibatches": 2},
                 objectives=[{"name": "grpo"},
                             {"name": "grpo", "label": "grpo_clean", "set": {"rollout.engine_options.router_noise": 0.0}},
                             {"name": "grpo", "label": "grpo_tis", "correction": {"kind": "tis"}}],
                 eval={"engine": "rollout", "tasks": ["sort"], "every": 1, "limit": 8, "samples": 2})
    run_suite(data, out)
    return out


def test_every_step_records_the_robust_ratio_columns_and_drift_after_one_update(stress):
    row = metrics(stress, "tiny", "grpo-s0").iloc[0]
    assert 0 < row["ratio/token_median"] < 10 and 0 < row["ratio/token_trimmed_mean"] < 10
    assert row["ratio/token_gt_10"] >= row["ratio/token_gt_100"] >= row["ratio/token_gt_1000"] >= 0
    assert 0 < row["loss/max_token_share"] <= 1
    # K = 2: the one measured minibatch ran after exactly one update, so the 1..K-1 mean is the same figure
    assert row["moe/drift_1"] == row["moe/drift"] > 0 and row["moe/drift_expert_1"] == row["moe/drift_expert"]
    layers = pd.read_parquet(stress / "tiny" / "grpo-s0" / "layers.parquet")
    once = layers[layers["updates"] == 1]
    assert len(once) == 2 and once["moe/drift_expert"].mean() == pytest.approx(row["moe/drift_expert_1"])


def test_the_control_arm_runs_a_clean_engine_beside_the_noisy_arms(stress):
    noisy, clean = metrics(stress, "tiny", "grpo-s0").iloc[0], metrics(stress, "tiny", "grpo_clean-s0").iloc[0]
    assert noisy["moe/rollout_gap"] > 0.1 and clean["moe/rollout_gap"] == 0.0
    config = yaml.safe_load((stress / "tiny" / "grpo_clean-s0" / "config.yaml").read_text())
    assert config["run"]["set"] == {"rollout.engine_options.router_noise": 0.0}
    assert config["suite"]["rollout"]["engine_options"]["router_noise"] == 0.0
    starts = {json.loads((stress / "tiny" / run / "provenance.json").read_text())["warm_start"]["path"]
              for run in ("grpo-s0", "grpo_clean-s0", "grpo_tis-s0")}
    assert len(starts) == 1  # every arm of the seed starts from the same weights


def test_a_tis_arm_corrects_the_noisy_engines_mismatch(stress):
    """Under router noise pi_old (the trainer's routing) differs from the engine's mu, so TIS's weights
    min(pi_old / mu, 2) are not all 1."""
    row = metrics(stress, "tiny", "grpo_tis-s0").iloc[0]
    assert row["mismatch/k3_kl"] > 1e-4
    assert row["correction/weight_std"] > 1e-3 and row["correction/weight_mean"] != pytest.approx(1.0, abs=1e-3)
    assert row["correction/weight_mean"] <= 2.0


def test_every_arm_is_evaluated_on_the_clean_engine_at_the_same_steps(stress):
    evals = {run: pd.read_parquet(stress / "tiny" / run / "eval.parquet") for run in ("grpo-s0", "grpo_clean-s0")}
    for frame in evals.values():
        assert frame["step"].tolist() == [0, 1] and (frame["engine"] == "rollout:hf").all()
        assert (frame["task"] == "gspo_sort").all() and frame["score"].between(0, 1).all()
    # step 0 is the shared starting model scored with the same seed: the noisy arm's score is the clean one's
    assert evals["grpo-s0"]["score"].iloc[0] == evals["grpo_clean-s0"]["score"].iloc[0]


def test_the_warm_start_a_run_used_is_recorded(stress):
    prov = json.loads((stress / "tiny" / "grpo-s0" / "provenance.json").read_text())
    assert prov["warm_start"]["seed"] == 0 and Path(prov["warm_start"]["path"]).name.startswith("warmstart-")
    assert prov["warm_start"]["key"] in prov["warm_start"]["path"] and 0 <= prov["warm_start"]["accuracy"] <= 1
    assert metrics(stress, "tiny", "grpo-s0")["warm_start/seed"].tolist() == [0]


def test_one_minibatch_takes_drift_after_one_update_from_the_drift_after_pass(tmp_path, cache, monkeypatch):
    temperatures = []
    floor = gspo_bench.train.loop.nondeterminism_floor

    def spy(*args, temperature, **kwargs):
        temperatures.append(temperature)
        return floor(*args, temperature=temperature, **kwargs)

    monkeypatch.setattr(gspo_bench.train.loop, "nondeterminism_floor", spy)
    run_suite(suite(cache, rollout={"temperature": 0.7}, train={"lr": 3e-3, "minibatches": 1},
                    objectives=[{"name": "grpo"}]), tmp_path)
    row = metrics(tmp_path, "tiny", "grpo-s0").iloc[0]
    assert row["moe/drift_1"] == row["moe/drift_after"] == row["moe/drift"] > 0
    assert row["moe/drift_expert_1"] == row["moe/drift_expert_after"]
    layers = pd.read_parquet(tmp_path / "tiny" / "grpo-s0" / "layers.parquet")
    assert (layers["updates"] == 1).all() and layers["moe/drift_expert"].mean() == pytest.approx(row["moe/drift_expert_1"])
    assert temperatures == [0.7]  # the floor's log-probs at the rollout temperature


def test_one_minibatch_whose_update_was_skipped_records_no_drift_after_one_update(tmp_path, cache, monkeypatch):
    """K = 1 with pi_old's log-probs poisoned (NaN): the step's one update is skipped as non-finite, so the
    drift-after pass measures the policy after zero updates: `moe/drift_1` is NaN, `moe/drift_after` is kept."""
    update = gspo_bench.train.loop.update_policy

    def poisoned(policy, objective, batch, old, *args, **kwargs):
        return update(policy, objective, batch, dataclasses.replace(old, logp=old.logp * float("nan")), *args, **kwargs)

    monkeypatch.setattr(gspo_bench.train.loop, "update_policy", poisoned)
    run_suite(suite(cache, train={"minibatches": 1}, objectives=[{"name": "grpo"}]), tmp_path)
    row = metrics(tmp_path, "tiny", "grpo-s0").iloc[0]
    assert row["nonfinite/minibatches"] == 1 and np.isfinite(row["moe/drift_after"])
    assert np.isnan(row["moe/drift_1"]) and np.isnan(row["moe/drift_expert_1"])
