"""The eval-limit preflight (gspo_bench.suite.preflight._eval_limits) at every sweep point: a sweep over
`task.params.max_len: [3, 4]` with `eval.limit: 128` passed validate, and every run at max_len 3 (102
test problems) failed at its first evaluation."""

from __future__ import annotations

from pathlib import Path

import yaml

from gspo_bench.config.load import parse_suite
from gspo_bench.suite.preflight import _eval_limits

CI = Path(__file__).resolve().parent.parent / "experiments" / "ci.yaml"


def test_a_sweep_point_with_too_few_test_problems_is_named():
    data = yaml.safe_load(CI.read_text()) | {"task": {"name": "sort", "params": {"max_len": 4}},
                                             "eval": {"tasks": ["sort"], "limit": 128},
                                             "sweep": {"task.params.max_len": [3, 4]}}
    problems = _eval_limits(parse_suite(data, "suite.yaml"))
    assert len(problems) == 1
    assert problems[0].startswith("eval.limit (128) at sweep point task.params.max_len=3: task sort")
    assert "fewer than 128 distinct problems (102 found)" in problems[0]


def test_without_a_small_point_nothing_is_said():
    data = yaml.safe_load(CI.read_text()) | {"eval": {"tasks": ["sort"], "limit": 64},
                                             "sweep": {"task.params.max_len": [3, 4]}}
    assert _eval_limits(parse_suite(data, "suite.yaml")) == []
