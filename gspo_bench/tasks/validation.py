"""A task's validation split: a share of its train side held out for tuning, disjoint from train and test.

Tuning (`tuning:` in a suite) scores its trials on problems the comparison never reports on: a trial
run's task is the suite's task with `held_out: validation` among its params, which `make_task` builds
as `ValidationHeldOut`. Its `test_examples` are validation problems, so the run's evaluation (lm-eval
or the rollout engine) scores the validation split with no change of its own; its `train_example`
draws the train side without the validation share.

The validation share is carved out of the train side by a second hash of the prompt (salted, so it
is independent of the test split's hash): a generated task's validation problems are train-side
problems by construction, hence never in its test split. A task of fixed records (`jsonl`,
`hf_dataset`) whose train and test records share a prompt would put that prompt in both: it is
refused, naming the prompt.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

from gspo_bench.tasks.base import Example, Task, stable_hash

VALIDATION_SHARE = 0.1  # share of a task's train side held out as its validation split
VALIDATION_SEED = 7919  # of the draws that collect a generated task's validation set
HELD_OUT_PARAM = "held_out"  # the task param naming the split a run evaluates on: test (default) or validation
HELD_OUT_SPLITS = ("test", "validation")


def in_validation_split(prompt: str, share: float = VALIDATION_SHARE) -> bool:
    """Whether a train-side `prompt` is in the validation share (a hash salted apart from the test split's)."""
    return stable_hash(f"validation:{prompt}") % 10_000 < share * 10_000


def validation_examples(task: Task, n: int, seed: int = VALIDATION_SEED) -> list[Example]:
    """n distinct validation problems of `task`, deterministic: a task of records (`_train`) gives its
    first n train records in the validation share; a generated task, the first n distinct ones of its
    train draws under `seed`. ValueError where the split holds fewer than n."""
    records: list[Example] | None = getattr(task, "_train", None)
    if records is not None:
        found = [e for e in records if in_validation_split(e.prompt)][:n]
    else:
        rng, seen = random.Random(seed), dict[str, Example]()
        for _ in range(200 * n + 1000):
            example = task.train_example(rng)
            if in_validation_split(example.prompt):
                seen.setdefault(example.prompt, example)
                if len(seen) == n:
                    break
        found = list(seen.values())
    if len(found) < n:
        raise ValueError(f"the task's validation split has fewer than {n} distinct problems ({len(found)} found)")
    return found


def test_overlap(task: Task, validation: list[Example]) -> list[str]:
    """Prompts of `validation` that are also test problems of `task` (all of a records task's test
    records; as many of a generated task's test split as there are validation problems)."""
    test: list[Example] = getattr(task, "_test", None) or task.test_examples(len(validation))
    prompts = {e.prompt for e in test}
    return [e.prompt for e in validation if e.prompt in prompts]


@dataclass(frozen=True)
class ValidationHeldOut:
    """`base` with its validation split in place of its test split, and its train side without it:
    what a tuning trial trains and is scored on. Everything else (reward, steps, baseline) is `base`'s."""

    base: Task

    @property
    def name(self) -> str:
        return self.base.name

    def train_example(self, rng: random.Random, max_tries: int = 10_000) -> Example:
        for _ in range(max_tries):
            example = self.base.train_example(rng)
            if not in_validation_split(example.prompt):
                return example
        raise RuntimeError("could not draw a train example outside the validation split: the problem space is too small")

    def test_examples(self, n: int) -> list[Example]:
        found = validation_examples(self.base, n)
        overlap = test_overlap(self.base, found)
        if overlap:
            raise ValueError(f"the validation split overlaps the test split ({len(overlap)} prompt(s), e.g. "
                             f"{overlap[0][:60]!r}): the train and test records share prompts; remove them")
        return found

    def reward(self, response: str, example: Example) -> float:
        return self.base.reward(response, example)

    def __getattr__(self, name: str) -> Any:  # steps, baseline, baseline_policy, ...: the base task's
        if name == "base":  # not yet set (copying, unpickling): no recursion
            raise AttributeError(name)
        return getattr(self.base, name)
