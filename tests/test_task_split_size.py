"""A generated task's distinct test problems (gspo_bench.tasks.base.unique_test_set): a split smaller
than the number asked for is known to be so after a streak of draws without a new problem, not after
200 x n draws (`eval.limit: 65536` on the sort task's 102 test problems never answered validate)."""

from __future__ import annotations

import pytest

from gspo_bench.tasks import make_task
from gspo_bench.tasks.base import unique_test_set


def counted(task):
    """The task's generator, counting its draws."""
    calls = [0]

    def make(rng):
        calls[0] += 1
        return task.make(rng)
    return make, calls


@pytest.mark.parametrize("limit", [4096, 65536])
def test_a_small_split_is_refused_after_a_streak_not_200_draws_per_problem_asked(limit):
    task = make_task("sort", max_len=3)
    make, calls = counted(task)
    with pytest.raises(ValueError, match=rf"fewer than {limit} distinct problems \(102 found\)"):
        unique_test_set(make, limit, task.seed)
    # every problem found, then 50 x 102 + 1000 draws of the test split without a new one; each such
    # draw takes about 1 / TEST_SHARE = 10 generator calls: far under the 200 x limit + 1000 split
    # draws (8e5 and 1.3e7) the search made before
    assert calls[0] < 200_000


def test_the_problems_found_are_the_same_whatever_the_number_asked():
    """The search order is the seed's: asking for fewer gives the first of them (a suite's evaluation
    set does not change with the stopping rule)."""
    task = make_task("sort", max_len=3)
    every = [e.prompt for e in task.test_examples(102)]
    assert len(set(every)) == 102 and [e.prompt for e in task.test_examples(40)] == every[:40]
