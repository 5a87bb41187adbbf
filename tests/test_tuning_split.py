"""A task's validation split (what tuning trials are scored on): disjoint from its test split and from
the train side trials draw, for every generated task and for a task of records; overlap refused."""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field

import pytest

from gspo_bench.tasks import generated_tasks, in_test_split, make_task
from gspo_bench.tasks.base import Example
from gspo_bench.tasks.validation import ValidationHeldOut, in_validation_split


@pytest.mark.parametrize("name", generated_tasks())
def test_validation_test_and_train_are_disjoint_per_generated_task(name):
    task = make_task(name)
    held_out = make_task(name, held_out="validation")
    validation = held_out.test_examples(32)
    test = {e.prompt for e in task.test_examples(32)}
    assert len({e.prompt for e in validation}) == 32
    assert all(in_validation_split(e.prompt) and not in_test_split(e.prompt) for e in validation)
    assert not {e.prompt for e in validation} & test
    rng = random.Random(0)
    trained = [held_out.train_example(rng).prompt for _ in range(200)]
    assert not any(in_validation_split(p) or in_test_split(p) for p in trained)
    assert held_out.test_examples(32) == validation  # deterministic: every trial scores the same problems
    assert held_out.name == task.name


def test_a_records_tasks_validation_is_carved_from_its_train_records(tmp_path):
    path = tmp_path / "math.jsonl"
    path.write_text("".join(json.dumps({"prompt": f"{i}+{i}=", "answer": str(2 * i)}) + "\n" for i in range(400)))
    task = make_task("jsonl", path=str(path))
    validation = make_task("jsonl", path=str(path), held_out="validation").test_examples(8)
    prompts = {e.prompt for e in validation}
    assert prompts <= {e.prompt for e in task._train} and not prompts & {e.prompt for e in task._test}


@dataclass(frozen=True)
class Records:
    """A task of fixed records whose train and test share a prompt (as two files of a dataset may)."""

    name: str = "records"
    _train: list[Example] = field(default_factory=list)
    _test: list[Example] = field(default_factory=list)

    def train_example(self, rng: random.Random) -> Example:
        return rng.choice(self._train)

    def test_examples(self, n: int) -> list[Example]:
        return self._test[:n]

    def reward(self, response: str, example: Example) -> float:
        return float(response == example.answer)


def test_a_validation_split_overlapping_the_test_split_is_refused():
    train = [Example(f"q{i}", "a") for i in range(300)]
    shared = next(e for e in train if in_validation_split(e.prompt))
    clean = ValidationHeldOut(Records(_train=train, _test=[Example("other", "a")]))
    assert shared in clean.test_examples(3)
    with pytest.raises(ValueError, match=rf"validation split overlaps the test split \(1 prompt\(s\), e.g. '{shared.prompt}'"):
        ValidationHeldOut(Records(_train=train, _test=[shared])).test_examples(3)


def test_held_out_names_a_split():
    with pytest.raises(ValueError, match="held_out must be one of test, validation, got 'train'"):
        make_task("countdown", held_out="train")


def test_lm_evals_task_files_of_a_trial_hold_validation_problems(tmp_path):
    """A trial's evaluation through lm-eval (the default engine) writes the validation split as its test set."""
    from gspo_bench.train.evaluation import write_task_files

    name = write_task_files(tmp_path, "countdown", {"count": 3, "held_out": "validation"}, limit=8)
    written = [json.loads(line)["prompt"] for line in (tmp_path / f"{name}.jsonl").read_text().splitlines()]
    assert written == [e.prompt for e in make_task("countdown", count=3, held_out="validation").test_examples(8)]
    assert all(in_validation_split(p) and not in_test_split(p) for p in written)
