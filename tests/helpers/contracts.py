"""The subjects of the contract tests, read from the registries (every task and objective the package
registers, so that one registered later is tested without a list to edit), and what a test file's contract
tests were parametrized with, so that the file can assert they cover every registered name."""

from __future__ import annotations

from typing import Any

from gspo_bench.objectives import list_objectives
from gspo_bench.objectives.registry import _REGISTRY as OBJECTIVES
from gspo_bench.tasks import list_tasks
from gspo_bench.tasks.registry import is_package_task


def package_tasks() -> list[str]:
    """Every task the package registers (a plugin's left out), sorted."""
    return [name for name in list_tasks() if is_package_task(name)]


def package_objectives() -> list[str]:
    """Every objective the package registers (a plugin's left out), sorted."""
    return [name for name in list_objectives() if OBJECTIVES.by_package(name)]


def parametrized(namespace: dict[str, Any], argname: str = "name") -> dict[str, list[Any]]:
    """{test: the values it is parametrized with for `argname`} for every test function of a test module
    (`namespace`: its globals()) that a `pytest.mark.parametrize` over `argname` decorates."""
    found = {}
    for key, test in namespace.items():
        if not (key.startswith("test_") and callable(test)):
            continue
        for mark in getattr(test, "pytestmark", []):
            if mark.name == "parametrize" and mark.args[0] == argname:
                found[key] = list(mark.args[1])
    return found
