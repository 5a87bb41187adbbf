"""Verifiable tasks: deterministic generators, disjoint splits, rewards in [0, 1]."""

from gspo_bench.tasks import arithmetic, chain, countdown, hf_dataset, jsonl, sort  # noqa: F401  (registers)
from gspo_bench.tasks.base import Baseline, Example, Task, in_test_split
from gspo_bench.tasks.registry import (
                                       generated_tasks,
                                       list_tasks,
                                       make_task,
                                       task_baseline,
                                       task_params,
                                       task_spec,
)

__all__ = ["Baseline", "Example", "Task", "generated_tasks", "in_test_split", "list_tasks", "make_task",
           "task_baseline", "task_params", "task_spec"]
