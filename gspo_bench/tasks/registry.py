"""Task registry: `gspo-bench ls` lists these; suites name them with their params."""

from __future__ import annotations

import inspect
import json
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from gspo_bench.registry import Registry, origin_of
from gspo_bench.tasks.base import Baseline, Task


@dataclass(frozen=True)
class TaskSpec:
    name: str
    factory: Callable[..., Task]
    description: str
    needs_params: bool = False  # built from the user's data (a file, a dataset): no default instance
    paths: tuple[str, ...] = ()  # params naming a local file or folder: a suite file's are read from its folder


_TASKS: Registry[TaskSpec] = Registry("task")


def register_task(
    name: str, description: str, needs_params: bool = False, paths: tuple[str, ...] = ()
) -> Callable[[Callable[..., Task]], Callable[..., Task]]:
    """Decorator registering the task factory `name`; `paths`: its params that name a local file or
    folder, which a suite file's relative values are read from its folder for (`config.load`)."""

    def decorate(factory: Callable[..., Task]) -> Callable[..., Task]:
        origin = origin_of("task", name, factory)
        _TASKS.add(name, TaskSpec(name, factory, description, needs_params, tuple(paths)), origin)
        return factory

    return decorate


def list_tasks() -> list[str]:
    return _TASKS.names()


def generated_tasks() -> list[str]:
    """Tasks that build with their default params (not from the user's data)."""
    return [name for name in list_tasks() if not _TASKS[name].needs_params]


def is_package_task(name: str) -> bool:
    """Whether `name` is one of the package's own tasks (not a plugin's, nor unknown)."""
    return _TASKS.by_package(name)


def task_spec(name: str) -> TaskSpec:
    return _TASKS.lookup(name)


def task_params(name: str) -> dict[str, object]:
    """The params a task accepts, with their defaults."""
    sig = inspect.signature(task_spec(name).factory)
    return {p.name: (None if p.default is inspect.Parameter.empty else p.default) for p in sig.parameters.values()}


def make_task(name: str, **params: Any) -> Task:
    """Build task `name` with `params`; unknown params are an error naming the valid ones. The param
    `held_out: validation` (any task; `tasks.validation`) builds the task with its validation split in
    place of its test split, as a tuning trial trains and is scored on it."""
    from gspo_bench.tasks.validation import HELD_OUT_PARAM, HELD_OUT_SPLITS, ValidationHeldOut

    held_out = params.pop(HELD_OUT_PARAM, "test")
    if held_out not in HELD_OUT_SPLITS:
        raise ValueError(f"task {name!r}: {HELD_OUT_PARAM} must be one of {', '.join(HELD_OUT_SPLITS)}, got {held_out!r}")
    valid = task_params(name)
    unknown = set(params) - set(valid)
    if unknown:
        raise ValueError(f"task {name!r} has no params {sorted(unknown)}; valid: {sorted(valid)}")
    task = task_spec(name).factory(**params)
    return ValidationHeldOut(task) if held_out == "validation" else task


def task_baseline(name: str, params: dict[str, Any] | None = None) -> Baseline | None:
    """The chance baseline of task `name` built with `params` (simulated once per setting), or None for
    a task that declares none or is built from the user's data."""
    if task_spec(name).needs_params:
        return None
    return _baseline(name, json.dumps(params or {}, sort_keys=True))


@lru_cache(maxsize=64)
def _baseline(name: str, params: str) -> Baseline | None:
    baseline = getattr(make_task(name, **json.loads(params)), "baseline", None)
    return baseline() if baseline is not None else None
