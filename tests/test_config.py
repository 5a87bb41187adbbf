from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from gspo_bench.cli import app
from gspo_bench.config import SuiteError, load_suite

EXPERIMENTS = Path(__file__).resolve().parent.parent / "experiments"
GOOD = {
    "name": "t",
    "task": {"name": "sort", "params": {"max_len": 3}},
    "budget": {"kind": "steps", "value": 2},
    "objectives": [{"name": "grpo"}, {"name": "gspo"}],
}


def write(tmp_path, data) -> Path:
    path = tmp_path / "suite.yaml"
    path.write_text(yaml.safe_dump(data) if not isinstance(data, str) else data)
    return path


@pytest.mark.parametrize("name", ["quickstart.yaml", "ci.yaml", "qwen3_30b_a3b.yaml"])
def test_shipped_suites_validate(name):
    suite = load_suite(EXPERIMENTS / name)
    labels = {o.run_label for o in suite.objectives}
    assert {"grpo", "grpo_rr", "gspo", "gspo_token"} <= labels
    rr = next(o for o in suite.objectives if o.name == "grpo_rr")
    assert rr.objective == "grpo" and rr.use_replay
    assert suite.train.minibatches == 4


@pytest.mark.parametrize("name", ["stress_cpu.yaml", "paper_gpu.yaml"])
def test_the_stress_suites_hold_every_ingredient(name):
    """The stress comparison: GRPO, R2, R3, GSPO, GRPO + TIS and the noise-free control (router noise 0 in
    that arm only), >= 6 seeds over two warm starts, N = 8, long chain responses, an engine that routes
    otherwise than the trainer, and a held-out evaluation the learnability gate can use."""
    suite = load_suite(EXPERIMENTS / name)
    assert [o.run_label for o in suite.objectives] == ["grpo", "grpo_rr", "grpo_r3", "gspo", "grpo_tis", "grpo_clean"]
    by_label = {o.run_label: o for o in suite.objectives}
    assert by_label["grpo_tis"].correction == {"kind": "tis", "params": {}} and by_label["grpo_tis"].name == "grpo"
    assert by_label["grpo_clean"].set == {"rollout.engine_options.router_noise": 0.0}
    assert all(o.correction is None for label, o in by_label.items() if label != "grpo_tis")
    assert all(not o.set for label, o in by_label.items() if label != "grpo_clean")  # noise off in the control only
    assert len(suite.seeds) >= 6 and suite.warm_start.seeds == [0, 1] and suite.warm_start.eval_examples >= 128
    assert suite.warm_start.band[0] >= 0.5  # the pilot's round 2: at 0.33 the control rose too slowly to pass the gate
    assert suite.train.minibatches == 8 and suite.task.name == "chain" and suite.rollout.max_new_tokens >= 170
    assert suite.rollout.engine == "hf" and suite.rollout.engine_options["router_noise"] > 0
    assert suite.eval.tasks == ["chain"] and suite.eval.limit >= 128 and suite.eval.every > 0
    assert suite.eval.engine == "rollout"  # the held-out reward is sampled with the engine's router noise off
    assert suite.task.instance().test_examples(1)[0].answer.count(";") == 25  # 26 written steps


def test_the_moe_rl_methods_suite_builds_a_grouped_deepseek_v3_with_a_dense_first_layer():
    from gspo_bench.models.tiny import TinyMoESpec, tiny_config

    suite = load_suite(EXPERIMENTS / "moe_rl_methods.yaml")
    assert {"grpo_icepop", "gspo", "rspo", "grpo_r3"} <= {o.run_label for o in suite.objectives}
    assert suite.rollout.dtype == "bfloat16"
    assert next(o for o in suite.objectives if o.run_label == "grpo_icepop").correction["kind"] == "icepop"
    config = tiny_config(TinyMoESpec(family=suite.model.family, **suite.model.tiny_sizes()))
    assert (config.first_k_dense_replace, config.n_group, config.topk_group) == (1, 2, 1)


def test_quickstart_is_deep_enough_for_drift():
    # drift per layer needs layers to compare: 4 (the paper's "deeper layers drift more" is checked on them)
    assert load_suite(EXPERIMENTS / "quickstart.yaml").model.num_layers >= 4


@pytest.mark.parametrize(
    "change, expected",
    [
        ({"objectives": [{"name": "gpso"}]}, r"objectives\.0: unknown objective 'gpso'; expected one of .*gspo"),
        ({"budget": {"kind": "steps", "value": "many"}}, r"budget\.value: Input should be a valid number"),
        ({"budget": None}, r"budget: Input should be a valid dictionary"),
        ({"rollout": {"group_size": 8, "temprature": 0.7}}, r"rollout\.temprature: unknown key"),
        ({"train": {"minibatches": 0}}, r"train\.minibatches: Input should be greater than or equal to 1"),
        ({"task": {"name": "sort", "params": {"maxlen": 3}}}, r"task: task 'sort' has no params \['maxlen'\]"),
        ({"model": {"family": "llama"}}, r"model\.family: expected one of qwen3_moe"),
        ({"objectives": [{"name": "grpo"}, {"name": "grpo"}]}, r"labels must be unique"),
    ],
)
def test_malformed_suites_name_file_field_and_expectation(tmp_path, change, expected):
    data = {**GOOD, **change}
    if change.get("budget", 0) is None:
        data.pop("budget")
        expected = r"budget: required field missing"
    path = write(tmp_path, data)
    with pytest.raises(SuiteError, match=expected) as err:
        load_suite(path)
    assert str(path) in str(err.value)


def test_missing_field_and_bad_yaml(tmp_path):
    data = {k: v for k, v in GOOD.items() if k != "task"}
    with pytest.raises(SuiteError, match="task: required field missing"):
        load_suite(write(tmp_path, data))
    with pytest.raises(SuiteError, match="not valid YAML"):
        load_suite(write(tmp_path, "name: [unclosed\n"))
    with pytest.raises(SuiteError, match="no such file"):
        load_suite(tmp_path / "nope.yaml")


def test_real_checkpoint_needs_warm_start_off(tmp_path):
    data = {**GOOD, "model": {"path": "/models/x"}}
    with pytest.raises(SuiteError, match="warm_start.enabled: false"):
        load_suite(write(tmp_path, data))


def test_cli_validate(tmp_path):
    runner = CliRunner()
    ok = runner.invoke(app, ["validate", str(write(tmp_path, GOOD))])
    assert ok.exit_code == 0 and "2 runs" in ok.output
    bad = runner.invoke(app, ["validate", str(write(tmp_path, {**GOOD, "objectives": [{"name": "nope"}]}))])
    assert bad.exit_code == 2 and "unknown objective 'nope'" in bad.output


ARMS = [{"name": "grpo"}, {"name": "gspo"}, {"name": "grpo", "label": "grpo_tis", "correction": {"kind": "tis"}}]


@pytest.mark.parametrize(
    "analysis, expected",
    [
        ({"primary": {"each_vs": "grpoo"}}, r"analysis\.primary\.each_vs: 'grpoo' not an arm of this suite; its arms "
                                            r"\(run labels\): grpo, gspo, grpo_tis"),
        ({"primary": {"pairs": [["gspo", "grpo"], ["grpo_tis", "gpso"]]}},
         r"analysis\.primary\.pairs: 'gpso' not an arm of this suite"),
        ({"primary": {"pairs": [["gspo", "grpo"], ["grpo", "gspo"]]}},
         r"analysis\.primary: pairs\.0 and pairs\.1: one comparison given twice \(grpo and gspo\)"),
        ({"primary": {"pairs": [["gspo", "gspo"]]}}, r"analysis\.primary: pairs\.0: gspo against itself"),
        ({"primary": {"each_vs": "grpo", "pairs": [["gspo", "grpo"]]}}, r"analysis\.primary: give each_vs .* one of them"),
        ({"primary": {"paper_checks": True}}, r"analysis\.primary: give each_vs .* one of them"),
        ({"primary": {"pairs": [["gspo", "grpo", "grpo_tis"]]}}, r"analysis\.primary\.pairs\.0: Tuple should have at most 2"),
        ({"primary": {"each_vs": "grpo", "paper_checks": 2}}, r"analysis\.primary\.paper_checks: Input should be a valid "
                                                              r"boolean"),
        ({"primary": {"each_vs": "grpo"}, "secondary": {}}, r"analysis\.secondary: unknown key"),
        ({}, r"analysis: declares nothing"),
    ],
)
def test_a_primary_family_names_arms_of_the_suite_or_the_field_that_does_not(tmp_path, analysis, expected):
    with pytest.raises(SuiteError, match=expected) as err:
        load_suite(write(tmp_path, {**GOOD, "objectives": ARMS, "analysis": analysis}))
    assert str(tmp_path / "suite.yaml") in str(err.value)


def test_a_primary_family_is_validated_by_validate_and_run_and_written_in_the_resolved_suite(tmp_path, cli):
    """each_vs: every other arm (suite order) against it; pairs: as given. `validate` and `run --dry-run`
    accept the key, refuse a label that is no arm, and the suite file `run` writes keeps it."""
    from gspo_bench.config import dump_config

    data = {**GOOD, "objectives": ARMS, "analysis": {"primary": {"each_vs": "gspo", "paper_checks": True}}}
    suite = load_suite(write(tmp_path, data))
    primary = suite.analysis.primary
    assert primary.comparisons(["grpo", "gspo", "grpo_tis"]) == [("grpo", "gspo"), ("grpo_tis", "gspo")]
    assert yaml.safe_load(dump_config(suite))["analysis"] == {
        "primary": {"each_vs": "gspo", "pairs": None, "paper_checks": True}, "rules": "v1"}
    pairs = load_suite(write(tmp_path, {**data, "analysis": {"primary": {"pairs": [["grpo_tis", "grpo"]]}}}))
    assert pairs.analysis.primary.comparisons(["grpo", "gspo", "grpo_tis"]) == [("grpo_tis", "grpo")]
    assert load_suite(write(tmp_path, GOOD)).analysis is None
    for command in (["validate"], ["run", "--dry-run"]):
        assert cli(*command, write(tmp_path, data)).exit_code == 0
        bad = cli(*command, write(tmp_path, {**data, "analysis": {"primary": {"each_vs": "nope"}}}))
        assert bad.exit_code == 2 and "analysis.primary.each_vs: 'nope' not an arm of this suite" in bad.output
    swept = cli("validate", write(tmp_path, {**data, "sweep": {"analysis.primary.paper_checks": [True, False]}}))
    assert swept.exit_code == 2 and "analysis cannot be swept" in swept.output


def test_preflight_runs_every_objective_with_its_declared_inputs_and_names_a_bad_kwarg():
    """check_runnable calls each objective once on a tiny batch, with the extra inputs it declares
    (the engine's mu, the router shift, a generator): every registered objective passes; a kwarg
    the objective refuses is named with the entry."""
    from gspo_bench.config import parse_suite
    from gspo_bench.objectives import list_objectives
    from gspo_bench.suite.preflight import check_runnable

    every = [{"name": name} for name in list_objectives()]
    check_runnable(parse_suite(GOOD | {"objectives": every}), "s.yaml")
    bad = GOOD | {"objectives": [{"name": "clip_cov", "kwargs": {"ratio_k": 2.0}}]}
    with pytest.raises(SuiteError, match=r"objectives.0 \(clip_cov\): clip_cov: ratio_k must be in \(0, 1\]"):
        check_runnable(parse_suite(bad), "s.yaml")


def test_full_replay_takes_the_old_pass_routes_only():
    """replay_weights replays the old pass's combine weights: refused without replay, with R3's and with the
    lagged routes (neither records weights); grpo_rr_full is GRPO + Routing Replay with them."""
    from pydantic import ValidationError

    from gspo_bench.config.schema import ObjectiveEntry

    full = ObjectiveEntry(name="grpo_rr_full")
    assert full.objective == "grpo" and full.use_replay and full.replay_source == "old_pass" and full.replays_weights
    assert ObjectiveEntry(name="grpo", replay=True, replay_weights=True).replays_weights
    assert not ObjectiveEntry(name="grpo_rr").replays_weights
    for bad in ({"name": "grpo", "replay_weights": True}, {"name": "grpo_r3", "replay_weights": True},
                {"name": "grpo_rr_full", "replay": False}):
        with pytest.raises(ValidationError, match="replay_weights"):
            ObjectiveEntry(**bad)
