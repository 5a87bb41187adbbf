"""What a suite's schema refuses about its arms (gspo_bench.config.schema): `paper_checks: true` where no
paper check can be made, and a clip range or a loop input put in an entry's `kwargs`."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from gspo_bench.config.load import SuiteError, parse_suite

CI = Path(__file__).resolve().parent.parent / "experiments" / "ci.yaml"


def suite(**fields) -> dict:
    return yaml.safe_load(CI.read_text()) | fields


def refusal(data: dict) -> str:
    with pytest.raises(SuiteError) as err:
        parse_suite(data, "suite.yaml")
    return str(err.value)


@pytest.mark.parametrize(("objectives", "missing"), [
    ([{"name": "grpo"}, {"name": "grpo_rr"}], "no gspo arm"),
    ([{"name": "gspo"}, {"name": "gspo_token"}], "no grpo arm"),
    ([{"name": "grpo_rr"}, {"name": "gspo_token"}], "no grpo and no gspo arm"),
])
def test_paper_checks_need_a_grpo_and_a_gspo_arm(objectives, missing):
    analysis = {"primary": {"each_vs": objectives[0]["name"], "paper_checks": True}}
    message = refusal(suite(objectives=objectives, analysis=analysis))
    assert "analysis.primary.paper_checks" in message and missing in message


def test_paper_checks_with_both_arms_are_accepted():
    parsed = parse_suite(suite(analysis={"primary": {"each_vs": "grpo", "paper_checks": True}}), "suite.yaml")
    assert parsed.analysis.primary.paper_checks


@pytest.mark.parametrize("key", ["clip_low", "clip_high"])
def test_a_clip_range_in_kwargs_says_where_it_belongs(key):
    message = refusal(suite(objectives=[{"name": "gspo", "kwargs": {key: 3e-3}}]))
    assert f"kwargs.{key}: the clip range is set with the entry's own clip_low / clip_high" in message
    assert f"{{name: gspo, {key}: 0.003}}" in message and "multiple values" not in message


def test_a_loop_input_in_kwargs_is_refused():
    message = refusal(suite(objectives=[{"name": "grpo", "kwargs": {"advantages": 1.0}}]))
    assert "kwargs.advantages: an input the training loop passes to the objective, not a setting" in message
