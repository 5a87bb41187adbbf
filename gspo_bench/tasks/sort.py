"""Sort a list of digits: "sort:5,3,9=" -> "3,5,9". Response length grows with the list."""

from __future__ import annotations

import random
from dataclasses import dataclass

from gspo_bench.tasks.base import Example, GeneratedTask, exact_match
from gspo_bench.tasks.registry import register_task

MAX_LEN = 10_000  # numbers a list may have


@dataclass(frozen=True)
class SortProblems:
    min_len: int = 2
    max_len: int = 8
    max_value: int = 9

    def __post_init__(self) -> None:
        if not 1 <= self.min_len <= self.max_len:
            raise ValueError("sort: need 1 <= min_len <= max_len")
        if self.max_len > MAX_LEN:
            raise ValueError(f"sort: max_len must be at most {MAX_LEN} (got {self.max_len})")
        if self.max_value < 1:
            raise ValueError("sort: max_value must be >= 1")

    def __call__(self, rng: random.Random) -> Example:
        values = [rng.randint(0, self.max_value) for _ in range(rng.randint(self.min_len, self.max_len))]
        return Example(
            prompt=f"sort:{','.join(map(str, values))}=",
            answer=",".join(map(str, sorted(values))),
            meta={"length": len(values)},
        )


@register_task("sort", "sort a list of min_len..max_len numbers; answer length grows with the list")
def make_sort(min_len: int = 2, max_len: int = 8, max_value: int = 9, seed: int = 0) -> GeneratedTask:
    return GeneratedTask("sort", SortProblems(min_len, max_len, max_value), exact_match, seed)
