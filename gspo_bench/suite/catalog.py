"""What is registered, as tables for `gspo-bench ls`: objectives, algorithms, tasks, off-policy
corrections and MoE families. Each table is built from its registry; nothing is printed here."""

from __future__ import annotations

from collections.abc import Sequence

from rich.markup import escape
from rich.table import Table


def _table(title: str, columns: tuple[str, ...], rows: Sequence[tuple[str, ...]]) -> Table:
    table = Table(title=title)
    for col in columns:
        table.add_column(col)
    for row in rows:
        table.add_row(*(escape(cell) for cell in row))
    return table


def _number(value: float | None) -> str:
    return "-" if value is None else f"{value:g}"


def objectives_table() -> Table:
    from gspo_bench.objectives import list_objectives, objective_spec

    rows = []
    for name in list_objectives():
        spec = objective_spec(name)
        extra = ", ".join([f"{k}={v!r}" for k, v in spec.params().items()] + sorted(spec.inputs))
        rows.append((name, spec.advantages, _number(spec.clip_low), _number(spec.clip_high), extra, spec.description))
    return _table("objectives (other params: objectives[].params; inputs: passed by the loop)",
                  ("name", "advantages", "clip_low", "clip_high", "other params (defaults), inputs", "description"),
                  rows)


def algorithms_table() -> Table:
    from gspo_bench.config import ALGORITHMS

    rows = [(name, ", ".join(f"{k}={v}" for k, v in parts.items())) for name, parts in ALGORITHMS.items()]
    return _table("algorithms (suite entries beyond the objectives)", ("name", "is"), rows)


def tasks_table() -> Table:
    from gspo_bench.tasks import list_tasks, task_params, task_spec

    rows = [(name, ", ".join(f"{k}={v!r}" for k, v in task_params(name).items()), task_spec(name).description)
            for name in list_tasks()]
    return _table("tasks", ("name", "params (defaults)", "description"), rows)


def corrections_table() -> Table:
    from gspo_bench.objectives.corrections import correction_spec, list_corrections

    rows = [(name, ", ".join(f"{k}={v!r}" for k, v in correction_spec(name).params().items()),
             correction_spec(name).description) for name in list_corrections()]
    return _table("corrections (objectives[].correction: {kind: ..., params: {...}})", ("kind", "params (defaults)",
                                                                                   "description"), rows)


def families_table() -> Table:
    from gspo_bench.models.families import SUPPORTED_FAMILIES
    from gspo_bench.moe.routers import gate_rule

    rows = [(family, architecture, gate_rule(family)) for family, architecture in SUPPORTED_FAMILIES.items()]
    return _table("MoE families (model.family, or a checkpoint's model_type)",
                  ("model_type", "architecture", "gate rule (replay rebuilds it)"), rows)


def registry_tables() -> list[Table | str]:
    """Everything `gspo-bench ls` prints, in order."""
    from gspo_bench.rollout import list_engines

    return [objectives_table(), algorithms_table(), tasks_table(), corrections_table(), families_table(),
            f"rollout engines: {', '.join(list_engines())}"]
