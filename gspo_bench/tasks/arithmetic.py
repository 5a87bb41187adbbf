"""Multi-digit addition and subtraction: "47+385=" -> "432"."""

from __future__ import annotations

import random
from dataclasses import dataclass

from gspo_bench.tasks.base import Example, GeneratedTask, exact_match
from gspo_bench.tasks.registry import register_task

MAX_DIGITS = 10_000


@dataclass(frozen=True)
class ArithmeticProblems:
    digits: int = 2
    ops: str = "+-"

    def __post_init__(self) -> None:
        if not 1 <= self.digits <= MAX_DIGITS:
            raise ValueError(f"arithmetic: digits must be in 1..{MAX_DIGITS} (got {self.digits})")
        if not self.ops or set(self.ops) - set("+-"):
            raise ValueError("arithmetic: ops must be a non-empty subset of '+-'")

    def __call__(self, rng: random.Random) -> Example:
        hi = 10**self.digits - 1
        a, b = rng.randint(0, hi), rng.randint(0, hi)
        op = rng.choice(self.ops)
        value = a + b if op == "+" else a - b
        return Example(prompt=f"{a}{op}{b}=", answer=str(value))


@register_task("arithmetic", "add/subtract two numbers of up to `digits` digits; exact-match reward")
def make_arithmetic(digits: int = 2, ops: str = "+-", seed: int = 0) -> GeneratedTask:
    return GeneratedTask("arithmetic", ArithmeticProblems(digits, ops), exact_match, seed)
