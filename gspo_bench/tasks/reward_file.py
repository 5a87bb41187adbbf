"""A data-set task (jsonl, hf_dataset) rewarded by the user's own function instead of math-verify
(`task.reward: {from: score.py, name: compute_score}` in a suite).

The function is called as `fn(response, fields)`, `fields` a copy of the example's record ({prompt,
answer} and every field of its line or row: what the function changes in it changes no data), and
must return a real number in [0, 1] (a Python or numpy int or float; not a boolean, NaN or infinite).
Every call is checked: another value, an exception or `sys.exit` in the function is a ValueError
naming the file and function, what it returned or raised, and the example (its record's place, its
prompt), which fails the run (`validate` calls the function on a few examples first: `check_reward`).
"""

from __future__ import annotations

import copy
import math
import numbers
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from gspo_bench.tasks.base import Example, Task

RewardFn = Callable[[str, dict[str, Any]], Any]


def example_fields(example: Example) -> dict[str, Any]:
    """What the reward function is given besides the response: a copy of the record (nested lists and
    dicts too), with its prompt and answer."""
    return copy.deepcopy({**example.meta, "prompt": example.prompt, "answer": example.answer})


def example_named(example: Example) -> str:
    """The example as messages name it: where its record is (when known) and its prompt."""
    where = f"at {example.origin} " if example.origin else ""
    return f"the example {where}with prompt {example.prompt[:80]!r}"


def checked_reward(fn: RewardFn, where: str, response: str, example: Example) -> float:
    """`fn`'s reward of `response`, or ValueError naming `where` (file:name), what it returned or raised
    and the example."""
    try:
        value = fn(response, example_fields(example))
    except (Exception, SystemExit) as err:  # not KeyboardInterrupt: Ctrl-C and stop signals stop the run
        what = (f"called sys.exit({err.code!r})" if isinstance(err, SystemExit) else
                f"raised {type(err).__name__}" + (f": {str(err).splitlines()[0]}" if str(err) else ""))
        raise ValueError(f"{where} {what} for {example_named(example)} (response {response[:40]!r})") from err
    problem = reward_problem(value)
    if problem:
        raise ValueError(f"{where} returned {value!r} ({type(value).__name__}) for {example_named(example)}: "
                         f"{problem}")
    return float(value)


def reward_problem(value: Any) -> str | None:
    """What is wrong with `value` as a reward, or None for a real number in [0, 1]."""
    if isinstance(value, bool | np.bool_):  # a boolean is never a number (gspo_bench.config.numbers)
        return "a reward is a number in [0, 1], not a boolean (return 1.0 or 0.0)"
    if not isinstance(value, numbers.Real):
        return "a reward is a number in [0, 1] (a Python or numpy int or float)"
    if not math.isfinite(value):
        return "not a finite number; a reward is a number in [0, 1]"
    if not 0.0 <= float(value) <= 1.0:
        return "outside [0, 1]; a reward is a number in [0, 1]"
    return None


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
