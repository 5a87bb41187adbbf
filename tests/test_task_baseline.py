"""Tasks' chance baselines (what a well-formed response with random choices scores), simulated, against
cases worked out by hand; and `gspo_bench.tasks` importing no torch (the analysis reads baselines)."""

from __future__ import annotations

import random
import re
import subprocess
import sys
from pathlib import Path

import pytest

from gspo_bench.tasks import make_task, task_baseline
from gspo_bench.tasks.chain import random_operations, step_verdicts

ROOT = Path(__file__).resolve().parent.parent


def test_the_chain_baseline_of_one_step_by_hand():
    """steps 1, max_operand 1, max_value 2: start 0 allows only +1, start 2 only -1, start 1 both; the
    policy picks from the same set as the generator: right with probability 1, 1/2, 1 -> 5/6."""
    found = task_baseline("chain", {"steps": 1, "max_operand": 1, "max_value": 2})
    standard_error = (5 / 6 * 1 / 6) ** 0.5 / found.samples ** 0.5
    assert found.mean == pytest.approx(5 / 6, abs=3 * standard_error)
    assert found.std == pytest.approx((5 / 6 * 1 / 6) ** 0.5, abs=0.01)


def test_the_chain_baseline_of_the_stress_suite():
    """{steps: 30, max_operand: 3, max_value: 9}: each step right with probability between 1/6 (both
    operations allowed: 6 choices) and 1/3 (one allowed), mostly 1/6: 0.168 +- 0.069 per response."""
    found = task_baseline("chain", {"steps": 30, "max_operand": 3, "max_value": 9})
    assert 0.163 <= found.mean <= 0.175 and 0.062 <= found.std <= 0.076
    assert found.samples == 4000 and "random operations" in found.policy
    assert task_baseline("chain", {"max_value": 9, "max_operand": 3, "steps": 30}) is found  # simulated once


def test_the_chain_baseline_policy_writes_right_arithmetic_in_range():
    task = make_task("chain", steps=30, max_operand=3, max_value=9)
    rng = random.Random(3)
    example = task.train_example(rng)
    response = random_operations(example, rng, 3, 9)
    verdicts = step_verdicts(response, example)
    assert len(verdicts) == 30
    values = [int(step.split("=")[1]) for step in response.split(";")]
    assert all(0 <= v <= 9 for v in values)
    for (_, _, right), step, (op, b) in zip(verdicts, response.split(";"), example.meta["ops"]):
        a, written_op, written_b, c = re.fullmatch(r"(\d+)([+-])(\d+)=(\d+)", step).groups()
        assert int(c) == (int(a) + int(written_b) if written_op == "+" else int(a) - int(written_b))
        assert right == ((written_op, int(written_b)) == (op, b))  # right exactly where the operation matches


def test_the_countdown_baseline_by_hand():
    """count 2, max_number 1: numbers [1, 1], target 2 (1+1) or 1 (1*1; 1-1 = 0 is no target): random
    + - * hits either with probability 1/3."""
    found = task_baseline("countdown", {"count": 2, "max_number": 1})
    assert found.mean == pytest.approx(1 / 3, abs=3 * (2 / 9) ** 0.5 / found.samples ** 0.5)


def test_tasks_without_a_baseline_say_so():
    assert task_baseline("arithmetic", {}) is None  # declares none
    assert task_baseline("jsonl", {"path": "/nonexistent.jsonl"}) is None  # built from the user's data: never built


def test_importing_the_tasks_loads_no_torch():
    probe = "import sys, gspo_bench.tasks\nprint(sorted({m.split('.')[0] for m in sys.modules} & {'torch', 'transformers'}))"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, cwd=ROOT)
    assert done.stdout.strip() == "[]"
