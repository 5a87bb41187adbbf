"""Sweeps: a suite's `sweep:` section crosses lists of values of any suite fields, by dotted path.

    sweep:
      train.lr: [1.0e-4, 3.0e-4]
      model.num_experts: [8, 64]

expands to 4 sweep points; every objective x seed runs at each point, labelled e.g.
`grpo@lr=0.0001,num_experts=64` (a path's last name, or the whole path where two would clash).
Paths joined by commas move together (zipped, not crossed), each value a list of one per path:

      model.num_experts,model.top_k: [[8, 2], [64, 8]]

Each point is a complete suite, validated like one; compute is matched within a point (a facet).
Inside the free-form mappings (`FREE_FORM`: rollout.engine_options, task.params, an objective's
params and its correction's) a path may name a key the suite does not set yet
(`rollout.engine_options.router_noise: [0.0, 0.3]`); what checks those mappings checks the value.
"""

from __future__ import annotations

import fnmatch
import itertools
from typing import Any

from pydantic import BaseModel

from gspo_bench.config.shown import clip, shown

# suite fields holding free-form mappings: a sweep or `--set` may add a key to them
FREE_FORM = ("rollout.engine_options", "task.params", "objectives.*.params", "objectives.*.correction.params")
_ABSENT = object()


def split_path(path: str) -> list[str]:
    return path.split(".")


def is_free_form(path: str) -> bool:
    """Whether dotted `path` names a free-form mapping of the suite (`FREE_FORM`)."""
    return any(fnmatch.fnmatchcase(path, pattern) for pattern in FREE_FORM)


def field_of(data: Any, path: str) -> Any:
    """The value at dotted `path` of a dumped suite (a key a free-form mapping does not hold yet: absent);
    KeyError naming the first missing part."""
    node = data
    parts = split_path(path)
    for i, part in enumerate(parts):
        if isinstance(node, dict) and part not in node and i == len(parts) - 1 and is_free_form(".".join(parts[:i])):
            return _ABSENT
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            where = ".".join(split_path(path)[:i]) or "the suite"
            keys = sorted(node) if isinstance(node, dict) else f"indices 0..{len(node) - 1}" if isinstance(node, list) else []
            raise KeyError(f"{where} has no field {shown(part)} (it has: {keys})")
    return node


def set_field(data: dict[str, Any], path: str, value: Any) -> None:
    *parents, last = split_path(path)
    node = data
    for part in parents:
        node = node[int(part)] if isinstance(node, list) else node[part]
    if isinstance(node, list):
        node[int(last)] = value
    else:
        node[last] = value


def short_names(paths: list[str]) -> dict[str, str]:
    """Each path's last name, or the whole path where two paths end alike."""
    last = [split_path(p)[-1] for p in paths]
    return {p: (name if last.count(name) == 1 else p) for p, name in zip(paths, last, strict=True)}


def format_value(value: Any) -> str:
    return format(value, "g") if isinstance(value, float) else str(value)


def axis_paths(key: str) -> list[str]:
    """The paths of a sweep key: one, or several joined by commas (zipped)."""
    return [p.strip() for p in key.split(",")]


def points(sweep: dict[str, list[Any]]) -> list[dict[str, Any]]:
    """Every combination of the swept values, {path: value}, in the order the sweep lists them."""
    axes = []
    for key, values in sweep.items():
        paths = axis_paths(key)
        axes.append([dict(zip(paths, value if len(paths) > 1 else [value], strict=True)) for value in values])
    return [{k: v for part in combination for k, v in part.items()} for combination in itertools.product(*axes)]


def facet(point: dict[str, Any]) -> str:
    """A point's name: `lr=0.0003,num_experts=64` ("" without a sweep)."""
    names = short_names(list(point))
    return ",".join(f"{names[p]}={format_value(v)}" for p, v in point.items())


def run_label(label: str, point: dict[str, Any]) -> str:
    """An objective entry's label at a sweep point: `grpo@lr=0.0003` (the label itself without a sweep)."""
    return f"{label}@{facet(point)}" if point else label


def describe(point: dict[str, Any]) -> str:
    """A point with every value as written (full float precision): `train.lr=0.0001000000001`; a long
    value clipped (`shown.clip`), as in every error."""
    return ", ".join(f"{p}={v!r}" if isinstance(v, float) else f"{p}={clip(str(v))}" for p, v in point.items())


def apply(suite: BaseModel, point: dict[str, Any]) -> dict[str, Any]:
    """The suite's data with the point's values set and no sweep left, so no adaptive placement along it
    either (validate it as a suite)."""
    data = suite.model_dump(mode="json")
    data["sweep"] = {}
    if "adaptive" in data:
        data["adaptive"] = None
    for path, value in point.items():
        set_field(data, path, value)
    return data
