"""A data-set task (jsonl, hf_dataset) rewarded by the user's own function instead of math-verify
(`task.reward: {from: score.py, name: compute_score}` in a suite).

The function is called as `fn(response, fields)`, `fields` the example's record ({prompt, answer} and
every field of its line or row), and must return a number in [0, 1]. Every call is checked: anything
else is a ValueError naming the function, the value and the example's prompt, which fails the run
(`validate` calls the function on a few examples first: `check_reward`).
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from gspo_bench.tasks.base import Example, Task

RewardFn = Callable[[str, dict[str, Any]], Any]


def example_fields(example: Example) -> dict[str, Any]:
    """What the reward function is given besides the response: the record, with its prompt and answer."""
    return {**example.meta, "prompt": example.prompt, "answer": example.answer}


def checked_reward(fn: RewardFn, where: str, response: str, example: Example) -> float:
    """`fn`'s reward of `response`, or ValueError naming `where` (file:name), the value and the example."""
    value = fn(response, example_fields(example))
    number = isinstance(value, int | float) and not isinstance(value, bool)
    if not number or not math.isfinite(value) or not 0.0 <= value <= 1.0:
        raise ValueError(f"{where} returned {value!r} ({type(value).__name__}) for the example with prompt "
                         f"{example.prompt[:80]!r}: a reward is a number in [0, 1]")
    return float(value)


@dataclass(frozen=True)
class FileRewardTask:
    """`task`'s examples, rewarded by `fn` (from `where`, "score.py:compute_score")."""

    task: Task
    fn: RewardFn
    where: str

    @property
    def name(self) -> str:
        return self.task.name

    def train_example(self, rng: random.Random) -> Example:
        return self.task.train_example(rng)

    def test_examples(self, n: int) -> list[Example]:
        return self.task.test_examples(n)

    def reward(self, response: str, example: Example) -> float:
        return checked_reward(self.fn, self.where, response, example)


def check_reward(task: FileRewardTask, examples: int = 8) -> None:
    """Call the reward on the first train and test examples, with the reference answer and with an
    empty response: ValueError (checked_reward's) on the first bad value, before any compute."""
    rng = random.Random(0)
    for example in [task.train_example(rng) for _ in range(examples)] + task.test_examples(examples):
        for response in (example.answer, ""):
            task.reward(response, example)
