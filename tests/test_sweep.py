"""Sweeps in a suite: expansion, labels, errors that name the swept field, and faceted results."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
import yaml
from typer.testing import CliRunner

from analysis.data.load import load_results
from analysis.data.matching import check_matched
from analysis.report.tables import final_reward_by_facet
from analysis.report.writer import write_report
from gspo_bench.cli import app
from gspo_bench.config import SuiteError, parse_suite
from gspo_bench.suite.runner import plan_runs
from tests.helpers.runs import run_suite, tiny_suite


def sweep_suite(cache: Path, sweep: dict, **changes) -> dict:
    return tiny_suite(cache, sweep=sweep, objectives=[{"name": "grpo"}, {"name": "gspo"}], **changes)


def test_a_sweep_crosses_its_values_into_labelled_runs(tmp_path):
    suite = parse_suite(sweep_suite(tmp_path, {"train.lr": [1e-3, 2e-3], "model.num_experts": [4, 8]}))
    runs = plan_runs(suite, tmp_path)
    assert len(runs) == 2 * 2 * 2  # points x objectives x seeds (one seed)
    names = [r.name for r in runs]
    assert names[:2] == ["grpo@lr=0.001,num_experts=4-s0", "gspo@lr=0.001,num_experts=4-s0"]
    assert "gspo@lr=0.002,num_experts=8-s0" in names
    point = next(r for r in runs if r.name == "gspo@lr=0.002,num_experts=8-s0")
    assert point.suite.train.lr == 2e-3 and point.suite.model.num_experts == 8 and not point.suite.sweep
    assert point.sweep == {"lr": 2e-3, "num_experts": 8} and point.arm == "gspo"
    assert plan_runs(suite, tmp_path, only=["gspo"])[0].name == "gspo@lr=0.001,num_experts=4-s0"


def test_clashing_last_names_use_the_whole_path(tmp_path):
    suite = parse_suite(sweep_suite(tmp_path, {"train.lr": [1e-3], "warm_start.lr": [3e-3, 1e-2]}))
    assert plan_runs(suite, tmp_path)[0].name == "grpo@train.lr=0.001,warm_start.lr=0.003-s0"


def test_validate_expands_and_a_bad_swept_path_names_file_and_field(tmp_path):
    good = tmp_path / "good.yaml"
    good.write_text(yaml.safe_dump(sweep_suite(tmp_path, {"train.minibatches": [1, 2]})))
    result = CliRunner().invoke(app, ["validate", str(good)])
    assert result.exit_code == 0 and "4 runs" in result.output and "gspo@minibatches=2-s0" in result.output
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(sweep_suite(tmp_path, {"train.lrr": [1e-3]})))
    result = CliRunner().invoke(app, ["validate", str(bad)])
    assert result.exit_code == 2
    assert "bad.yaml" in result.output and "sweep.train.lrr" in result.output and "'lrr'" in result.output


def test_a_swept_value_that_is_not_valid_names_the_sweep_point(tmp_path):
    with pytest.raises(SuiteError, match=r"(?s)sweep point model.top_k=16.*top_k"):
        parse_suite(sweep_suite(tmp_path, {"model.top_k": [2, 16]}), "s.yaml")
    with pytest.raises(SuiteError, match="seeds cannot be swept"):
        parse_suite(sweep_suite(tmp_path, {"seeds": [[0], [1]]}), "s.yaml")
    with pytest.raises(SuiteError, match="non-empty list"):
        parse_suite(sweep_suite(tmp_path, {"train.lr": []}), "s.yaml")


@pytest.fixture(scope="module")
def swept(tmp_path_factory) -> Path:
    cache, out = tmp_path_factory.mktemp("cache"), tmp_path_factory.mktemp("swept")
    run_suite(sweep_suite(cache, {"train.minibatches": [1, 2]}, budget={"kind": "steps", "value": 2}, seeds=[0, 1]),
              out)
    return out / "tiny"


def test_swept_values_are_in_the_config_and_in_every_row(swept):
    config = yaml.safe_load((swept / "gspo@minibatches=2-s1" / "config.yaml").read_text())
    assert config["run"]["sweep"] == {"minibatches": 2} and config["run"]["arm"] == "gspo"
    assert config["suite"]["train"]["minibatches"] == 2 and config["suite"]["sweep"] == {}
    frame = pd.read_parquet(swept / "gspo@minibatches=2-s1" / "metrics.parquet")
    assert (frame["sweep/minibatches"] == 2).all() and (frame["label"] == "gspo@minibatches=2").all()


def test_report_facets_by_sweep_point(swept, tmp_path):
    results = load_results(swept)
    assert set(results.runs["facet"]) == {"minibatches=1", "minibatches=2"}
    assert set(results.metrics["arm"]) == {"grpo", "gspo"}
    table = final_reward_by_facet(results)
    assert list(table.columns) == ["algorithm", "minibatches=1", "minibatches=2"] and len(table) == 2
    assert "[" in table.iloc[0, 1]  # two seeds: a CI
    paths = write_report(results, tmp_path / "report")
    text = paths["md"].read_text()
    assert "Final reward per sweep point" in text and "reward_by_sweep_point.png" in text
    assert (tmp_path / "report" / "figures" / "reward_by_sweep_point.png").is_file()


def test_compute_is_matched_within_each_sweep_point_not_across(swept):
    """K = 1 and K = 2 spend different compute per step (the drift pass): matched within a point only."""
    results = load_results(swept)
    assert check_matched(results) <= 0.02
    per_facet = results.runs.groupby("facet")["cum_flops"].mean()
    assert per_facet["minibatches=1"] != per_facet["minibatches=2"]


def test_paths_joined_by_commas_move_together(tmp_path):
    suite = parse_suite(sweep_suite(tmp_path, {"model.num_experts,model.top_k": [[4, 1], [8, 4]], "train.lr": [1e-3, 2e-3]}))
    runs = [r for r in plan_runs(suite, tmp_path) if r.arm == "grpo"]
    assert [r.name for r in runs] == ["grpo@num_experts=4,top_k=1,lr=0.001-s0", "grpo@num_experts=4,top_k=1,lr=0.002-s0",
                                      "grpo@num_experts=8,top_k=4,lr=0.001-s0", "grpo@num_experts=8,top_k=4,lr=0.002-s0"]
    assert runs[2].suite.model.num_experts == 8 and runs[2].suite.model.top_k == 4
    with pytest.raises(SuiteError, match="each value must be a list of 2"):
        parse_suite(sweep_suite(tmp_path, {"model.num_experts,model.top_k": [8, 64]}), "s.yaml")


def test_a_sweep_of_whole_engine_options_with_an_empty_point_runs(tmp_path):
    """`rollout.engine_options: [{}, {router_noise: 0.1}]`: validate passes it, and so must the run. A
    mapping (or list) value is recorded in the rows as its JSON text (a table cannot hold an empty struct)."""
    data = tiny_suite(tmp_path / "cache", objectives=[{"name": "grpo"}], budget={"kind": "steps", "value": 1},
                      warm_start={"enabled": False}, sweep={"rollout.engine_options": [{}, {"router_noise": 0.1}]})
    statuses = run_suite(data, tmp_path / "out")
    assert {s["status"] for s in statuses.values()} == {"done"}, statuses
    from gspo_bench.rundir.names import run_folder_name

    for label, text in (("grpo@engine_options={}", "{}"), ("grpo@engine_options={'router_noise': 0.1}", '{"router_noise": 0.1}')):
        frame = pd.read_parquet(tmp_path / "out" / "tiny" / run_folder_name(label, 0) / "metrics.parquet")
        assert frame["sweep/engine_options"].tolist() == [text]


def test_a_sweep_of_more_points_than_the_cap_is_refused_before_it_is_expanded(tmp_path):
    """100 x 100 values once took `validate` minutes (every point is validated as a suite): the product
    is bounded by MAX_SWEEP_POINTS, checked by the schema before any point is built, with the number."""
    from gspo_bench.config import SuiteConfig
    from gspo_bench.config.schema import MAX_SWEEP_POINTS

    data = sweep_suite(tmp_path, {"train.lr": [1e-4 * (i + 1) for i in range(100)],
                                  "train.grad_clip": [1.0 + i for i in range(100)]})
    with pytest.raises(ValueError, match=f"10000 points \\(100 x 100\\), more than {MAX_SWEEP_POINTS}"):
        SuiteConfig.model_validate(data)  # the schema alone: no point expanded
    with pytest.raises(SuiteError, match=f"sweep: 10000 points \\(100 x 100\\), more than {MAX_SWEEP_POINTS}"):
        parse_suite(data, "s.yaml")
    at_cap = {"train.lr": [1e-4 * (i + 1) for i in range(MAX_SWEEP_POINTS // 2)], "train.grad_clip": [1.0, 2.0]}
    SuiteConfig.model_validate(sweep_suite(tmp_path, at_cap))  # exactly the cap: accepted


def test_an_objectives_kwargs_are_set_with_set_and_not_swept_as_the_docs_say(tmp_path):
    """docs/suites.md once said an objective's kwargs could be swept; a sweep crosses suite fields and
    refuses `objectives.*` (the objectives already cross every point). `--set` reaches them; two values
    are two objective entries."""
    from gspo_bench.config import apply_overrides

    data = tiny_suite(tmp_path, objectives=[{"name": "dppo_binary_tv"}])
    with pytest.raises(SuiteError, match="objectives cannot be swept"):
        parse_suite({**data, "sweep": {"objectives.0.kwargs.delta": [0.1, 0.2]}}, "s.yaml")
    assert apply_overrides(parse_suite(data), {"objectives.0.kwargs.delta": 0.1}).objectives[0].params == {"delta": 0.1}
    docs = (Path(__file__).resolve().parent.parent / "docs" / "suites.md").read_text()
    paragraph = " ".join(docs.split("A path may also name a key inside a free-form mapping")[1].split("\n\n")[0].split())
    assert "an objective's `params` and its correction's `params`, by `--set` only" in paragraph
