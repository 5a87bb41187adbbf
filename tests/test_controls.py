"""Controls inside one suite: sweeping keys of free-form mappings (rollout.engine_options), an arm with
its own settings (`set:`), several warm starts; how each is validated, planned and recorded."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import yaml

from gspo_bench.config import load_suite, parse_suite
from gspo_bench.config.load import SuiteError, apply_overrides
from gspo_bench.config.run import config_changes, resolved_config
from gspo_bench.suite.preflight import check_runnable
from gspo_bench.suite.runner import plan_runs, weights_key

NOISY = {"engine_options": {"router_noise": 0.3}}


def suite(**changes) -> dict:
    data = {"name": "ctl", "task": {"name": "sort"}, "budget": {"kind": "flops", "value": 1e12},
            "rollout": {"prompts_per_step": 2, "group_size": 4}, "objectives": [{"name": "grpo"}], "seeds": [0, 1]}
    return data | changes


# ------------------------------------------------------------------ sweeping a key of engine_options


def test_a_sweep_sets_an_engine_option_the_suite_does_not_hold():
    parsed = parse_suite(suite(sweep={"rollout.engine_options.router_noise": [0.0, 0.3]}))
    runs = plan_runs(parsed, Path("/out"))
    assert [(r.name, r.suite.rollout.engine_options) for r in runs if r.seed == 0] == [
        ("grpo@router_noise=0-s0", {"router_noise": 0.0}), ("grpo@router_noise=0.3-s0", {"router_noise": 0.3})]
    assert runs[0].sweep == {"router_noise": 0.0}
    with_set = apply_overrides(parse_suite(suite()), {"rollout.engine_options.router_noise": 0.5})
    assert with_set.rollout.engine_options == {"router_noise": 0.5}


def test_only_free_form_mappings_take_new_keys_and_the_engine_checks_them():
    with pytest.raises(SuiteError, match=r"sweep\.rollout\.noise: rollout has no field 'noise'"):
        parse_suite(suite(sweep={"rollout.noise": [0.0, 0.3]}))
    with pytest.raises(SuiteError, match=r"engine_options has no field 'router_noise'"):
        parse_suite(suite(sweep={"rollout.engine_options.router_noise.x": [0.0]}))
    misspelt = parse_suite(suite(sweep={"rollout.engine_options.router_nosie": [0.0, 0.3]}))
    with pytest.raises(SuiteError, match=r"rollout\.engine_options \(grpo\): hf engine: unknown engine_options "
                                         r"router_nosie"):
        check_runnable(misspelt)


# ------------------------------------------------------------------ an arm with its own settings


def control_suite(**changes) -> dict:
    return suite(rollout={"prompts_per_step": 2, "group_size": 4, **NOISY},
                 objectives=[{"name": "grpo"}, {"name": "grpo", "label": "grpo_clean",
                                                "set": {"rollout.engine_options.router_noise": 0.0}}], **changes)


def test_a_noise_free_control_arm_is_one_entry_of_the_stress_suite():
    parsed = parse_suite(control_suite())
    check_runnable(parsed)
    runs = {r.name: r for r in plan_runs(parsed, Path("/out"))}
    assert sorted(runs) == ["grpo-s0", "grpo-s1", "grpo_clean-s0", "grpo_clean-s1"]
    assert runs["grpo-s0"].suite.rollout.engine_options == {"router_noise": 0.3}
    assert runs["grpo_clean-s0"].suite.rollout.engine_options == {"router_noise": 0.0}
    # the same starting weights and the same budget as the other arms: paired and matched in compute
    assert weights_key(runs["grpo_clean-s0"]) == weights_key(runs["grpo-s0"])
    assert runs["grpo_clean-s1"].suite.budget == runs["grpo-s1"].suite.budget
    recorded = yaml.safe_load(resolved_config(runs["grpo_clean-s0"]))
    assert recorded["run"]["set"] == {"rollout.engine_options.router_noise": 0.0}
    assert recorded["suite"]["rollout"]["engine_options"] == {"router_noise": 0.0}
    assert yaml.safe_load(resolved_config(runs["grpo-s0"]))["run"]["set"] == {}


def test_a_set_value_reaches_every_arm_but_one_that_sets_the_field_itself():
    runs = {r.name: r for r in plan_runs(apply_overrides(parse_suite(control_suite()),
                                                         {"rollout.engine_options.router_noise": 0.5}), Path("/out"))}
    assert runs["grpo-s0"].suite.rollout.engine_options == {"router_noise": 0.5}
    assert runs["grpo_clean-s0"].suite.rollout.engine_options == {"router_noise": 0.0}


def test_an_arm_with_a_swept_sweep_still_gets_its_own_value_at_every_point():
    parsed = parse_suite(control_suite(sweep={"train.lr": [1e-4, 3e-4]}))
    clean = [r for r in plan_runs(parsed, Path("/out")) if r.arm == "grpo_clean" and r.seed == 0]
    assert [(r.suite.train.lr, r.suite.rollout.engine_options["router_noise"]) for r in clean] == [
        (1e-4, 0.0), (3e-4, 0.0)]


@pytest.mark.parametrize("entry, match", [
    ({"name": "grpo", "set": {"model.num_experts": 4}}, r"model\.num_experts: an arm may set fields under rollout and train"),
    ({"name": "grpo", "set": {"rollout": {"group_size": 2}}}, r"rollout: an arm may set fields under rollout and train"),
    ({"name": "grpo", "set": {"rollout.group_sise": 2}}, r"objectives\.1 \(grpo_x\)\.set\.rollout\.group_sise: rollout has no field"),
    ({"name": "grpo", "set": {"rollout.group_size": 1}}, r"objectives\.1 \(grpo_x\)\.set: rollout\.group_size: Input should be greater"),
    ({"name": "grpo", "set": {"train.lr": float("nan")}}, r"every number must be finite"),
])
def test_an_arms_settings_are_checked_and_named(entry, match):
    data = suite(objectives=[{"name": "grpo"}, {**entry, "label": "grpo_x"}])
    with pytest.raises(SuiteError, match=match):
        parse_suite(data)


def test_an_arm_needs_its_own_label_and_cannot_set_a_swept_field():
    with pytest.raises(SuiteError, match="labels must be unique"):
        parse_suite(suite(objectives=[{"name": "grpo"}, {"name": "grpo", "set": {"train.lr": 3e-4}}]))
    with pytest.raises(SuiteError, match=r"objectives\.1 \(grpo_clean\)\.set\.rollout\.engine_options\.router_noise: "
                                         "the suite sweeps this field"):
        parse_suite(control_suite(sweep={"rollout.engine_options.router_noise": [0.1, 0.3]}))


def test_an_override_that_breaks_an_arm_is_refused(tmp_path):
    data = control_suite()
    data["objectives"][1]["set"] = {"rollout.engine_options.router_noise": 0.0, "rollout.group_size": 2}
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(data))
    assert load_suite(path, {"train.minibatches": 4}).train.minibatches == 4
    # 6 minibatches fit the suite's 2 x 4 responses, not the arm's 2 x 2
    with pytest.raises(SuiteError, match=r"--set train\.minibatches=6: objectives\.1 \(grpo_clean\)\.set: \(top level\): "
                                         r"train\.minibatches \(6\) is more than the 4 responses"):
        load_suite(path, {"train.minibatches": 6})


def test_resume_compares_an_arms_settings_like_any_other(tmp_path):
    runs = {r.name: r for r in plan_runs(parse_suite(control_suite()), tmp_path)}
    run = runs["grpo_clean-s0"]
    run.run_dir.mkdir(parents=True)
    (run.run_dir / "config.yaml").write_text(resolved_config(run))
    assert config_changes(run.run_dir, run) == []
    data = control_suite()
    data["objectives"][1]["set"] = {"rollout.engine_options.router_noise": 0.1}
    edited = {r.name: r for r in plan_runs(parse_suite(data), tmp_path)}["grpo_clean-s0"]
    changes = config_changes(run.run_dir, edited)
    assert "run.set.rollout.engine_options.router_noise: 0.0 -> 0.1" in changes
    assert "suite.rollout.engine_options.router_noise: 0.3 -> 0.3" not in changes


# ------------------------------------------------------------------ several warm starts


def test_rl_seeds_start_from_warm_starts_by_the_documented_rule():
    parsed = parse_suite(suite(warm_start={"seeds": [7, 3]}, seeds=[0, 1, 2, 3, 4, 5]))
    assert [parsed.warm_start.seed_for(s) for s in parsed.seeds] == [7, 3, 7, 3, 7, 3]  # seeds[s mod 2]
    keys = {r.seed: weights_key(r) for r in plan_runs(parsed, Path("/out"))}
    assert keys[0] == keys[2] == keys[4] != keys[1] == keys[3] == keys[5]
    assert [keys[s][0] for s in (0, 1)] == [7, 3]
    one = parse_suite(suite(warm_start={"seed": 0}, seeds=[0, 1]))
    assert [one.warm_start.seed_for(s) for s in one.seeds] == [0, 0]
    own = parse_suite(suite(seeds=[4, 9]))  # neither: each RL seed its own starting model
    assert [own.warm_start.seed_for(s) for s in own.seeds] == [4, 9]


@pytest.mark.parametrize("warm_start, seeds, match", [
    ({"seed": 0, "seeds": [0, 1]}, [0, 1], "set seed .* or seeds .*, not both"),
    ({"seeds": [1, 1]}, [0, 1], "seeds must be distinct"),
    ({"seeds": [0, 1, 2]}, [0, 1], r"no RL seed starts from the warm start of seed\(s\) \[2\]"),
    ({"seeds": [0, 1]}, [0, 2, 4], r"no RL seed starts from the warm start of seed\(s\) \[1\]"),
])
def test_warm_start_seeds_are_checked(warm_start, seeds, match):
    with pytest.raises(SuiteError, match=match):
        parse_suite(suite(warm_start=warm_start, seeds=seeds))


def test_each_warm_start_is_cached_on_its_own_key(tmp_path, monkeypatch):
    import gspo_bench.train.warmstart
    from gspo_bench.suite.runner import starting_weights

    keys = []

    def fake_warm_start(build, tokenizer, task, params, key_parts, cache, on_eval, shipped=None):
        keys.append((key_parts["seed"], params.seed))
        return None, {"path": str(tmp_path), "cached": True, "accuracy": 0.0, "steps": 0}

    monkeypatch.setattr(gspo_bench.train.warmstart, "warm_start", fake_warm_start)
    parsed = parse_suite(suite(warm_start={"seeds": [0, 1]}, seeds=[0, 1, 2]))
    for run in plan_runs(parsed, Path("/out")):
        starting_weights(run.start, run.seed, log=lambda m: None)
    assert keys == [(0, 0), (1, 1), (0, 0)]


def test_a_warm_start_judged_on_128_examples_needs_a_test_split_that_large():
    chain = {"name": "chain", "params": {"steps": 30, "max_operand": 3, "max_value": 9}}
    assert parse_suite(suite(task=chain, warm_start={"eval_examples": 128})).warm_start.eval_examples == 128
    with pytest.raises(SuiteError, match=r"warm_start\.eval_examples \(128\): task sort \{'max_len': 3\}: the task's "
                                         r"test split has fewer than 128 distinct problems \(102 found\)"):
        parse_suite(suite(task={"name": "sort", "params": {"max_len": 3}}, warm_start={"eval_examples": 128}))
    no_warm_start = suite(task={"name": "sort", "params": {"max_len": 3}},
                          warm_start={"eval_examples": 128, "enabled": False})
    assert not parse_suite(no_warm_start).warm_start.enabled


def test_a_fixed_step_warm_start_trains_exactly_its_steps_whatever_the_band(monkeypatch):
    """`warm_start.steps`: no first-in-band stop (which one noisy evaluation can move), the accuracy
    reached recorded with whether it lies in the band; evaluations every eval_every and at the end."""
    import gspo_bench.train.warmstart as ws
    from gspo_bench.train.warmstart import WarmStartParams, finetune

    taken, scores = [], iter([0.0, 0.3, 0.9, 0.95])
    monkeypatch.setattr(ws, "sft_step", lambda *a: taken.append(1))
    monkeypatch.setattr(ws, "sampled_accuracy", lambda *a, **k: next(scores))

    class Task:
        def test_examples(self, n):
            return []

    params = WarmStartParams(steps=7, eval_every=3, band=(0.2, 0.6), max_steps=2)
    info = finetune(torch.nn.Linear(1, 1), None, Task(), params)
    assert len(taken) == 7  # not stopped in the band at step 3, not capped by max_steps
    assert info == {"steps": 7, "accuracy": 0.95, "history": [(0, 0.0), (3, 0.3), (6, 0.9), (7, 0.95)],
                    "in_band": False}
    assert parse_suite(suite(warm_start={"steps": 600})).warm_start.steps == 600
    with pytest.raises(SuiteError, match=r"warm_start\.steps"):
        parse_suite(suite(warm_start={"steps": 0}))
