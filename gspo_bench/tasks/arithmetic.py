"""Multi-digit addition and subtraction: "47+385=" -> "432"."""

from __future__ import annotations

import random
from dataclasses import dataclass

from gspo_bench.tasks.base import Example, exact_match, sample_split, unique_test_set
from gspo_bench.tasks.registry import register_task


@dataclass(frozen=True)
class Arithmetic:
    digits: int = 2
    ops: str = "+-"
    seed: int = 0
    name: str = "arithmetic"

    def __post_init__(self):
        if self.digits < 1:
            raise ValueError("arithmetic: digits must be >= 1")
        if not self.ops or set(self.ops) - set("+-"):
            raise ValueError("arithmetic: ops must be a non-empty subset of '+-'")

    def _make(self, rng: random.Random) -> Example:
        hi = 10**self.digits - 1
        a, b = rng.randint(0, hi), rng.randint(0, hi)
        op = rng.choice(self.ops)
        value = a + b if op == "+" else a - b
        return Example(prompt=f"{a}{op}{b}=", answer=str(value))

    def train_example(self, rng: random.Random) -> Example:
        return sample_split(self._make, rng, test=False)

    def test_examples(self, n: int) -> list[Example]:
        return unique_test_set(self._make, n, self.seed)

    def reward(self, response: str, example: Example) -> float:
        return exact_match(response, example)


@register_task("arithmetic", "add/subtract two numbers of up to `digits` digits; exact-match reward")
def make_arithmetic(digits: int = 2, ops: str = "+-", seed: int = 0) -> Arithmetic:
    return Arithmetic(digits=digits, ops=ops, seed=seed)
