"""The RL loop end to end: schema, invariants, determinism, resume, collapse, the CLI."""

from __future__ import annotations

import math
import random
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
import yaml
from typer.testing import CliRunner

from gspo_bench.cli import app
from gspo_bench.config import parse_suite
from gspo_bench.rundir.folder import GPU_COLUMNS, REQUIRED_COLUMNS, TIMING_COLUMNS, RunDir
from gspo_bench.runtime.kernels import torch_threads
from gspo_bench.suite.runner import plan_runs, starting_weights, weights_key
from gspo_bench.train.loop import RunSpec, train_run

EXPERIMENTS = Path(__file__).resolve().parent.parent / "experiments"
TIME_COLUMNS = set(TIMING_COLUMNS)


@pytest.fixture(scope="module")
def cache(tmp_path_factory) -> Path:
    """One warm-start cache for the module: the tiny warm start is trained once, then reused."""
    return tmp_path_factory.mktemp("warmstart-cache")


def tiny_suite(cache: Path, **changes) -> dict:
    suite = {
        "name": "tiny",
        "model": {"num_layers": 2, "hidden_size": 32, "expert_hidden": 32, "num_experts": 4, "top_k": 2},
        "task": {"name": "sort", "params": {"max_len": 3}},
        # a short warm start so that rewards (and so gradients) are not all zero
        "warm_start": {"cache_dir": str(cache), "band": [0.1, 1.0], "eval_every": 20, "eval_examples": 32},
        "rollout": {"prompts_per_step": 2, "group_size": 4, "max_new_tokens": 8},
        "train": {"lr": 1e-3, "minibatches": 2, "threads": 1},
        "budget": {"kind": "steps", "value": 3},
        "objectives": [{"name": "grpo"}, {"name": "grpo_rr"}, {"name": "gspo"}],
    }
    for key, value in changes.items():
        suite[key] = {**suite[key], **value} if isinstance(value, dict) and key in suite else value
    return suite


def signal_suite(cache: Path, steps: int = 1, **changes) -> dict:
    """`tiny_suite`, warm-started further and with 16 responses a step, so that every step has rewards
    that differ within groups (non-zero advantages: every update is a real one)."""
    base = tiny_suite(cache, warm_start={"band": [0.4, 0.9]}, rollout={"prompts_per_step": 4},
                      budget={"kind": "steps", "value": steps})
    for key, value in changes.items():
        base[key] = {**base[key], **value} if isinstance(value, dict) and key in base else value
    return base


def run_suite(data: dict, out: Path, resume: bool = False, on_step=None) -> dict[str, dict]:
    suite = parse_suite(data)
    statuses = {}
    for planned in plan_runs(suite, out):
        weights = starting_weights(planned.suite, suite.seeds[0], log=lambda m: None)  # cached after the first
        spec = RunSpec(suite=planned.suite, entry=planned.entry, seed=planned.seed, run_dir=planned.run_dir,
                       init_weights=weights, sweep=planned.sweep, arm=planned.arm)
        statuses[planned.name] = train_run(spec, resume=resume, on_step=on_step)
    return statuses


def run_interrupted(data: dict, out: Path, at_step: int) -> None:
    """Run `data` into `out`, interrupted (KeyboardInterrupt) after step `at_step`'s row is written,
    before its checkpoint."""

    def interrupt(row):
        if row["step"] == at_step:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_suite(data, out, on_step=interrupt)


def metrics(out: Path, suite: str, run: str) -> pd.DataFrame:
    return pd.read_parquet(out / suite / run / "metrics.parquet")


def assert_same_metrics(a: pd.DataFrame, b: pd.DataFrame) -> None:
    cols = [c for c in a.columns if c not in TIME_COLUMNS]
    pd.testing.assert_frame_equal(a[cols].reset_index(drop=True), b[cols].reset_index(drop=True))


@pytest.mark.slow
def test_ci_suite_end_to_end(tmp_path, monkeypatch):
    """`gspo-bench run` of experiments/ci.yaml at a tenth of its budget (the regression check runs it
    whole): schema and invariants of what it writes."""
    monkeypatch.setenv("GSPO_BENCH_CACHE", str(tmp_path / "cache"))
    data = yaml.safe_load((EXPERIMENTS / "ci.yaml").read_text())
    data["budget"]["value"] = float(data["budget"]["value"]) / 10
    data["seeds"] = [0]  # the baseline's three seeds are the regression check's; one shows the schema
    suite = tmp_path / "ci.yaml"
    suite.write_text(yaml.safe_dump(data))
    result = CliRunner().invoke(app, ["run", str(suite), "--out", str(tmp_path / "runs")])
    assert result.exit_code == 0, result.output
    root = tmp_path / "runs" / "ci"
    assert (root / "suite.yaml").is_file()
    finals = {}
    step_flops = []
    for label in ("grpo", "grpo_rr", "gspo", "gspo_token"):
        run = RunDir(root / f"{label}-s0")
        assert run.read_status()["status"] == "done"
        frame = pd.read_parquet(run.path / "metrics.parquet")
        assert set(REQUIRED_COLUMNS) <= set(frame.columns)
        assert frame["step"].tolist() == list(range(1, len(frame) + 1)) and len(frame) >= 3
        # the ratio variance of rerouted (or stable) tokens is NaN in a step with no such token
        numeric = frame[REQUIRED_COLUMNS].drop(columns=["ratio/token_var_rerouted", "ratio/token_var_stable",
                                                        *GPU_COLUMNS])  # blank on CPU: test_gpu_figures
        numeric = numeric.select_dtypes("number")
        assert numeric.notna().all().all() and numeric.map(math.isfinite).all().all()
        assert frame["moe/drift"].between(0, 1).all() and frame["moe/drift_expert"].between(0, 1).all()
        assert frame["clip/frac"].between(0, 1).all()
        assert (frame["compute/cum_flops"].diff().dropna() > 0).all()
        layers = pd.read_parquet(run.path / "layers.parquet")
        assert sorted(layers["layer"].unique()) == [0, 1, 2, 3]
        prov = run.read_json("provenance.json")
        assert prov["packages"]["torch"] and prov["end"] and "commit" in prov["git"]
        # the kernels it computed with: pinned (gspo_bench.runtime.kernels), at the suite's thread count
        assert (prov["kernels"]["aten_cpu_capability"], prov["kernels"]["mkl_branch"]) == ("AVX2", "COMPATIBLE")
        assert prov["kernels"]["threads"] == data["train"]["threads"]
        config = yaml.safe_load((run.path / "config.yaml").read_text())
        assert config["run"]["label"] == label and config["suite"]["name"] == "ci"
        finals[label] = frame["compute/cum_flops"].iloc[-1]
        step_flops.append(frame["compute/flops"].max())
    budget = float(data["budget"]["value"])
    assert all(f >= budget for f in finals.values())
    assert max(finals.values()) - min(finals.values()) <= max(step_flops)  # matched within one step
    gspo, grpo = metrics(tmp_path / "runs", "ci", "gspo-s0"), metrics(tmp_path / "runs", "ci", "grpo-s0")
    assert gspo["clip/frac"].mean() > grpo["clip/frac"].mean()  # the paper's Figure 2 ordering
    # run again: finished runs are refused without --resume, skipped with it
    again = CliRunner().invoke(app, ["run", str(suite), "--out", str(tmp_path / "runs")])
    assert again.exit_code == 2 and "--resume" in again.output
    resumed = CliRunner().invoke(app, ["run", str(suite), "--out", str(tmp_path / "runs"), "--resume"])
    assert resumed.exit_code == 0 and "nothing to do" in resumed.output


def test_replay_run_first_step_equals_grpo_with_one_minibatch(tmp_path, cache):
    """With K=1 the only update is on-policy: replaying the old routing is replaying the live one."""
    data = tiny_suite(cache, train={"minibatches": 1}, budget={"kind": "steps", "value": 1})
    run_suite(data, tmp_path / "out")
    grpo, rr = metrics(tmp_path / "out", "tiny", "grpo-s0"), metrics(tmp_path / "out", "tiny", "grpo_rr-s0")
    keys = ["loss", "grad/norm", "clip/frac", "ratio/token_var", "ratio/seq_var", "kl/old_new", "reward/mean"]
    assert grpo[keys].iloc[0].tolist() == rr[keys].iloc[0].tolist()
    assert not grpo["replay"].iloc[0] and rr["replay"].iloc[0]


def test_drift_after_a_negligible_update_is_zero(tmp_path, cache):
    """The after-update pass routes the same tokens as the old-policy pass: with an update too small
    to move any routing, the drift it measures (and the step's, with K=1) is exactly 0."""
    data = tiny_suite(cache, train={"minibatches": 1, "lr": 1e-12}, budget={"kind": "steps", "value": 2},
                      objectives=[{"name": "grpo"}])
    run_suite(data, tmp_path / "out")
    frame = metrics(tmp_path / "out", "tiny", "grpo-s0")
    assert (frame["moe/drift_after"] == 0).all() and (frame["moe/drift"] == 0).all()


def test_same_seed_twice_gives_identical_metrics_whatever_the_process_state(tmp_path, cache):
    """A run depends on its suite and seed only: not on the global RNGs another test (or a notebook
    cell) drew from, nor on the process's thread count, which the run sets to `train.threads` for
    itself and gives back."""
    data = tiny_suite(cache)
    run_suite(data, tmp_path / "a")
    torch.manual_seed(12345), np.random.seed(12345), random.seed(12345)
    torch.rand(7), np.random.rand(7), random.random()
    with torch_threads(2):
        run_suite(data, tmp_path / "b")
        assert torch.get_num_threads() == 2  # the run's own train.threads (1) was given back
    assert metrics(tmp_path / "a", "tiny", "grpo-s0")["reward/std"].max() > 0  # there was a learning signal
    for run in ("grpo-s0", "grpo_rr-s0", "gspo-s0"):
        assert_same_metrics(metrics(tmp_path / "a", "tiny", run), metrics(tmp_path / "b", "tiny", run))
    run_suite(tiny_suite(cache, seeds=[1]), tmp_path / "c")  # a different seed changes what is sampled
    assert not metrics(tmp_path / "a", "tiny", "grpo-s0")["response/len_mean"].equals(
        metrics(tmp_path / "c", "tiny", "grpo-s1")["response/len_mean"])


def test_resume_after_interruption_equals_uninterrupted(tmp_path, cache):
    data = tiny_suite(cache, budget={"kind": "steps", "value": 4},
                      objectives=[{"name": "grpo_rr"}])
    run_suite(data, tmp_path / "full")
    run_interrupted(data, tmp_path / "cut", at_step=3)
    run_dir = RunDir(tmp_path / "cut" / "tiny" / "grpo_rr-s0")
    assert run_dir.read_status()["status"] == "failed"
    assert len(metrics(tmp_path / "cut", "tiny", "grpo_rr-s0")) == 3
    run_suite(data, tmp_path / "cut", resume=True)
    resumed = metrics(tmp_path / "cut", "tiny", "grpo_rr-s0")
    assert resumed["step"].tolist() == [1, 2, 3, 4]  # none lost, none duplicated
    assert_same_metrics(resumed, metrics(tmp_path / "full", "tiny", "grpo_rr-s0"))
    assert run_dir.read_status()["status"] == "done"
    assert run_dir.read_json("provenance.json")["resumed"][0]["at_step"] == 2


def test_diverging_run_is_marked_collapsed_and_others_finish(tmp_path, cache):
    data = tiny_suite(cache, objectives=[{"name": "grpo", "label": "exploding", "lr": 1.0e30},
                                                      {"name": "gspo"}],
                      budget={"kind": "steps", "value": 6})
    statuses = run_suite(data, tmp_path / "out")
    assert statuses["exploding-s0"]["status"] == "collapsed"
    status = RunDir(tmp_path / "out" / "tiny" / "exploding-s0").read_status()
    assert status["status"] == "collapsed" and status["message"] and status["step"] >= 1
    assert statuses["gspo-s0"]["status"] == "done"
    assert len(metrics(tmp_path / "out", "tiny", "gspo-s0")) == 6


def test_rollout_logprobs_as_old_policy(tmp_path, cache):
    """Section 5.4's option: pi_old from the engine. With hf at top_p=1 the two agree to float noise,
    so the first minibatch is still on-policy; the mismatch columns record the gap."""
    data = tiny_suite(cache, train={"old_logp": "rollout"}, objectives=[{"name": "gspo"}])
    run_suite(data, tmp_path / "out")
    frame = metrics(tmp_path / "out", "tiny", "gspo-s0")
    assert (frame["mismatch/max_abs"] < 1e-4).all() and (frame["mismatch/frac_gt_ln2"] == 0).all()
    assert frame["mismatch/k3_kl"].between(0, 1e-8).all()


def test_token_budget_stops_every_run_at_the_same_compute(tmp_path, cache):
    data = tiny_suite(cache, budget={"kind": "tokens", "value": 300})
    run_suite(data, tmp_path / "out")
    for run in ("grpo-s0", "grpo_rr-s0", "gspo-s0"):
        frame = metrics(tmp_path / "out", "tiny", run)
        assert frame["compute/cum_tokens"].iloc[-1] >= 300
        assert frame["compute/cum_tokens"].iloc[-2] < 300 if len(frame) > 1 else True


def test_warm_start_is_cached_and_reused(tmp_path):
    data = tiny_suite(tmp_path / "cache", warm_start={"enabled": True, "max_steps": 200, "eval_every": 20,
                                                      "eval_examples": 16, "band": [0.0, 1.0]})
    suite = parse_suite(data)
    logs = []
    first = starting_weights(suite, 0, log=logs.append)
    second = starting_weights(suite, 0, log=logs.append)
    assert first == second and any("reused" in m for m in logs)
    other = starting_weights(parse_suite({**data, "task": {"name": "sort", "params": {"max_len": 4}}}), 0, log=logs.append)
    assert other != first  # a different task is a different warm start


def test_a_fixed_warm_start_seed_starts_every_seed_from_one_model(tmp_path):
    data = tiny_suite(tmp_path / "cache", warm_start={"enabled": False}, seeds=[0, 1])
    per_seed = parse_suite(data)
    assert starting_weights(per_seed, 0, log=print) != starting_weights(per_seed, 1, log=print)
    shared = parse_suite({**data, "warm_start": {**data["warm_start"], "seed": 0}})
    assert starting_weights(shared, 1, log=print) == starting_weights(shared, 0, log=print) == \
        starting_weights(per_seed, 0, log=print)
    runs = plan_runs(shared, tmp_path / "out")
    assert len({weights_key(r) for r in runs}) == 1 and {r.seed for r in runs} == {0, 1}


def test_measurements_off_changes_no_training_result(tmp_path, cache):
    """`train.measure: false` (the perf benchmark's baseline) skips the measurements, not the training:
    rewards, losses and grad norms equal a measured run's, for plain and replay runs."""
    data = tiny_suite(cache, budget={"kind": "steps", "value": 2}, objectives=[{"name": "grpo"}, {"name": "grpo_rr"}])
    run_suite(data, tmp_path / "on")
    run_suite({**data, "train": {**data["train"], "measure": False}}, tmp_path / "off")
    for run in ("grpo-s0", "grpo_rr-s0"):
        on, off = metrics(tmp_path / "on", "tiny", run), metrics(tmp_path / "off", "tiny", run)
        for column in ("clip/frac", "moe/drift", "mismatch/k3_kl"):  # the schema is the same, nothing measured
            assert off[column].isna().all() and on[column].notna().all(), column
        for col in ("reward/mean", "loss", "grad/norm", "entropy/mean", "compute/cum_flops"):
            assert off[col].tolist() == on[col].tolist(), col


class _ShiftedRoutingEngine:
    """The hf engine, but it reports every generated token as routed to the next expert (mod E):
    a rollout engine whose routing disagrees with the trainer's, as a different kernel would."""

    name = "shifted_routing"
    returns_routing = True

    def __init__(self, pad_id, eos_id, **_):
        from gspo_bench.rollout.hf import HFEngine

        self.inner = HFEngine(pad_id=pad_id, eos_id=eos_id)

    def sync_weights(self, model):
        return None

    def generate(self, model, prompts, params):
        import dataclasses

        rollout = self.inner.generate(model, prompts, params)
        n_experts = model.config.num_experts
        return dataclasses.replace(rollout, routing=(rollout.routing + 1) % n_experts)


def _register_shifted_engine():
    from gspo_bench.rollout import list_engines, register_engine

    if "shifted_routing" not in list_engines():
        register_engine("shifted_routing")(_ShiftedRoutingEngine)


def test_r3_with_one_minibatch_equals_grpo_and_reports_no_rollout_gap(tmp_path, cache):
    """The hf engine routes as the trainer does (fp32): replaying its routing (R3) changes nothing,
    and the measured rollout -> training routing gap is 0."""
    data = tiny_suite(cache, train={"minibatches": 1}, budget={"kind": "steps", "value": 1},
                      objectives=[{"name": "grpo"}, {"name": "grpo_r3"}])
    run_suite(data, tmp_path / "out")
    grpo, r3 = metrics(tmp_path / "out", "tiny", "grpo-s0"), metrics(tmp_path / "out", "tiny", "grpo_r3-s0")
    keys = ["loss", "grad/norm", "clip/frac", "kl/old_new", "reward/mean"]
    assert grpo[keys].iloc[0].tolist() == pytest.approx(r3[keys].iloc[0].tolist(), rel=1e-5, abs=1e-7)
    assert r3["moe/rollout_gap"].iloc[0] == 0.0 and grpo["moe/rollout_gap"].iloc[0] == 0.0
    config = yaml.safe_load((tmp_path / "out" / "tiny" / "grpo_r3-s0" / "config.yaml").read_text())
    assert config["run"]["replay"] is True and config["run"]["replay_from"] == "rollout"


def test_r3_replays_the_rollout_engines_routing(tmp_path, cache):
    """With an engine whose routing disagrees with the trainer's, the gap is measured (every
    token-layer pair differs) and R3's training forwards use the engine's experts: its pi_old
    differs from the trainer's own (GRPO's), while GRPO + RR replays the trainer's routing."""
    _register_shifted_engine()
    data = tiny_suite(cache, rollout={"engine": "shifted_routing"}, train={"minibatches": 1},
                      budget={"kind": "steps", "value": 1},
                      objectives=[{"name": "grpo"}, {"name": "grpo_rr"}, {"name": "grpo_r3"}])
    run_suite(data, tmp_path / "out")
    grpo, rr, r3 = (metrics(tmp_path / "out", "tiny", f"{r}-s0") for r in ("grpo", "grpo_rr", "grpo_r3"))
    assert grpo["moe/rollout_gap"].iloc[0] == 1.0 and grpo["moe/rollout_gap_expert"].iloc[0] > 0.5
    # pi_old under forced experts is not the sampling distribution: the engine mismatch shows it
    assert r3["mismatch/max_abs"].iloc[0] > 1e-3 > grpo["mismatch/max_abs"].iloc[0]
    assert rr["mismatch/max_abs"].iloc[0] == grpo["mismatch/max_abs"].iloc[0]


def test_replay_from_needs_replay():
    with pytest.raises(Exception, match="replay_from"):
        parse_suite(tiny_suite(Path("."), objectives=[{"name": "grpo", "replay": False, "replay_from": "rollout"}]))
    entry = parse_suite(tiny_suite(Path("."), objectives=[{"name": "gspo", "replay_from": "rollout"}])).objectives[0]
    assert entry.use_replay and entry.replay_source == "rollout"
