"""Sort a list of digits: "sort:5,3,9=" -> "3,5,9". Response length grows with the list."""

from __future__ import annotations

import random
from dataclasses import dataclass

from gspo_bench.tasks.base import Example, exact_match, sample_split, unique_test_set
from gspo_bench.tasks.registry import register_task


@dataclass(frozen=True)
class Sort:
    min_len: int = 2
    max_len: int = 8
    max_value: int = 9
    seed: int = 0
    name: str = "sort"

    def __post_init__(self):
        if not 1 <= self.min_len <= self.max_len:
            raise ValueError("sort: need 1 <= min_len <= max_len")
        if self.max_value < 1:
            raise ValueError("sort: max_value must be >= 1")

    def _make(self, rng: random.Random) -> Example:
        values = [rng.randint(0, self.max_value) for _ in range(rng.randint(self.min_len, self.max_len))]
        return Example(
            prompt=f"sort:{','.join(map(str, values))}=",
            answer=",".join(map(str, sorted(values))),
            meta={"length": len(values)},
        )

    def train_example(self, rng: random.Random) -> Example:
        return sample_split(self._make, rng, test=False)

    def test_examples(self, n: int) -> list[Example]:
        return unique_test_set(self._make, n, self.seed)

    def reward(self, response: str, example: Example) -> float:
        return exact_match(response, example)


@register_task("sort", "sort a list of min_len..max_len numbers; answer length grows with the list")
def make_sort(min_len: int = 2, max_len: int = 8, max_value: int = 9, seed: int = 0) -> Sort:
    return Sort(min_len=min_len, max_len=max_len, max_value=max_value, seed=seed)
