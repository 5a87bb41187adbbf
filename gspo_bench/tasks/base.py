"""What every task provides: examples with a deterministic generator and disjoint splits, and a reward.

A task is any object with these members (composition: tasks differ by registry name and params):

    name: str
    train_example(rng: random.Random) -> Example     # one training problem (never in the test split)
    test_examples(n: int) -> list[Example]           # the held-out split, deterministic
    reward(response: str, example: Example) -> float # in [0, 1]

A generated task may declare a chance baseline: a `baseline_policy(example, rng) -> response` that
writes well-formed responses with random choices (for `chain`: right arithmetic, random operations),
whose mean reward `GeneratedTask.baseline()` estimates by simulation. A reward at that level is
what a policy gets without solving anything.

Generated tasks split their problem space by a hash of the prompt: a prompt belongs to the test
split iff `in_test_split(prompt)`, so the splits are disjoint whatever the seed.
"""

from __future__ import annotations

import hashlib
import random
import statistics
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

TEST_SHARE = 0.1  # share of a generated task's problem space held out for testing
BASELINE_SAMPLES = 4000  # simulated responses behind a baseline: standard error about std / 63


@dataclass(frozen=True)
class Example:
    prompt: str
    answer: str  # the reference solution text (warm-start target and reward reference)
    meta: dict[str, Any] = field(default_factory=dict, compare=False)
    origin: str = field(default="", compare=False)  # where a record came from ("data.jsonl:12"), for messages


class Task(Protocol):
    @property
    def name(self) -> str: ...  # read-only: a frozen dataclass's field satisfies it

    def train_example(self, rng: random.Random) -> Example: ...

    def test_examples(self, n: int) -> list[Example]: ...

    def reward(self, response: str, example: Example) -> float: ...

    # optional: `steps(response, example) -> [(start, end, right), ...]` for step-level credit


def stable_hash(text: str) -> int:
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "big")


def in_test_split(prompt: str, share: float = TEST_SHARE) -> bool:
    return stable_hash(prompt) % 10_000 < share * 10_000


def sample_split(make: Callable[[random.Random], Example], rng: random.Random, test: bool, max_tries: int = 10_000) -> Example:
    """Draw from `make` until the example falls in the wanted split."""
    for _ in range(max_tries):
        example = make(rng)
        if in_test_split(example.prompt) == test:
            return example
    raise RuntimeError("could not draw an example of the wanted split: the problem space is too small")


STALE_DRAWS = 50  # per distinct problem found: draws in a row without a new one that end the search


def unique_test_set(make: Callable[[random.Random], Example], n: int, seed: int) -> list[Example]:
    """n distinct test-split examples, deterministic for `seed` (an error if the space is too small).
    The search gives up once STALE_DRAWS x (problems found) + 1000 draws in a row found no new problem
    (the split is exhausted: with k of N problems found, each draw finds a new one with probability
    about (N - k) / N, so a split with problems left ends such a streak almost surely), or after
    200 n + 1000 draws in all. A small split is known to be small in a few thousand draws, not
    200 x n (`eval.limit: 65536` on a split of 102 problems never answered)."""
    rng = random.Random(seed)
    seen: dict[str, Example] = {}
    stale = 0
    for _ in range(200 * n + 1000):
        example = sample_split(make, rng, test=True)
        stale = 0 if example.prompt not in seen else stale + 1
        seen.setdefault(example.prompt, example)
        if len(seen) == n:
            return list(seen.values())
        if stale >= STALE_DRAWS * len(seen) + 1000:
            break
    raise ValueError(f"the task's test split has fewer than {n} distinct problems ({len(seen)} found)")


def exact_match(response: str, example: Example) -> float:
    return 1.0 if response.strip() == example.answer else 0.0


@dataclass(frozen=True)
class GeneratedTask:
    """A task whose problems come from a generator: train and test splits by prompt hash (disjoint
    whatever the seed), a fixed test set per `seed`, and a verifier as the reward. Generated tasks
    differ by their generator and verifier, not by subclassing."""

    name: str
    make: Callable[[random.Random], Example]  # one problem from a generator's draws
    verify: Callable[[str, Example], float]  # reward of a response, in [0, 1]
    seed: int = 0  # of the test set
    # (start, end, right) character spans of a response's steps, for tasks that can check steps
    steps: Callable[[str, Example], list[tuple[int, int, bool]]] | None = None
    # a response with random choices but the right format, for the chance baseline (see `baseline`)
    baseline_policy: Callable[[Example, random.Random], str] | None = None
    baseline_text: str = ""  # what `baseline_policy` writes, in words

    def train_example(self, rng: random.Random) -> Example:
        return sample_split(self.make, rng, test=False)

    def test_examples(self, n: int) -> list[Example]:
        return unique_test_set(self.make, n, self.seed)

    def reward(self, response: str, example: Example) -> float:
        return self.verify(response, example)

    def baseline(self, samples: int = BASELINE_SAMPLES, seed: int = 0) -> Baseline | None:
        """The mean and per-response standard deviation of the reward of `baseline_policy` over `samples`
        problems of the generator (seeded); None for a task that declares no baseline policy."""
        if self.baseline_policy is None:
            return None
        rng = random.Random(seed)
        rewards = []
        for _ in range(samples):
            example = self.make(rng)
            rewards.append(self.verify(self.baseline_policy(example, rng), example))
        return Baseline(statistics.fmean(rewards), statistics.pstdev(rewards), samples, self.baseline_text)


@dataclass(frozen=True)
class Baseline:
    """A task's chance level: the reward of a policy that writes well-formed responses with random
    choices (`policy` says which), simulated over `samples` problems."""

    mean: float
    std: float  # per response
    samples: int
    policy: str
