"""The keywords `gspo-bench check NAME --param KEY=VALUE` checks an objective with, read as a suite entry
gives them (its params and clip range): each value of the type the objective's function takes."""

from __future__ import annotations

import inspect
import typing
from typing import Any

from pydantic import PydanticSchemaGenerationError, TypeAdapter, ValidationError

from gspo_bench.config.schema import LOOP_INPUTS, nonfinite_numbers
from gspo_bench.config.yamlread import read_yaml


def kit_settings(name: str, items: list[str]) -> dict[str, Any]:
    """`KEY=VALUE` items (`check --param`) as the keywords objective `name` is checked with: the same
    settings a suite entry gives it (its params and clip range, which `validate` checks it with); one
    error line for an item without `=`, a key given twice or a keyword the objective does not take."""
    from gspo_bench.objectives import objective_spec

    spec = objective_spec(name)
    takes = sorted(set(inspect.signature(spec.fn).parameters) - {*LOOP_INPUTS, *spec.inputs, "weights"})
    settings: dict[str, Any] = {}
    for item in items:
        key, equals, text = (part.strip() for part in item.partition("="))
        if not equals or not key:
            raise ValueError(f"--param {item}: expected KEY=VALUE, e.g. --param clip_high=0.3")
        if key in settings:
            raise ValueError(f"--param {key}: given twice")
        if key not in takes:
            raise ValueError(f"--param {key}: objective {name} takes no keyword {key!r}; it takes: {', '.join(takes) or 'none'}")
        try:
            settings[key] = param_value(spec.fn, key, read_yaml(text))
        except ValueError as err:
            raise ValueError(f"--param {key}: {err}") from None
    return settings


def param_value(function: Any, key: str, value: Any) -> Any:
    """`value` (read as YAML) as `function`'s keyword `key` takes it: of the type its hint names, or its
    default's type where it has no hint (an int is taken for a float, a boolean for no number), and
    finite; ValueError naming the type expected and the value given."""
    try:
        hints = typing.get_type_hints(function)
    except Exception:  # a hint naming what its module does not define: go by the default
        hints = {}
    default = inspect.signature(function).parameters[key].default
    expected = hints.get(key, type(default) if isinstance(default, bool | int | float | str) else Any)
    try:
        adapter: TypeAdapter[Any] = TypeAdapter(expected)
    except PydanticSchemaGenerationError:  # a type pydantic cannot check (a tensor): the objective's to check
        adapter = TypeAdapter(Any)
    try:
        value = adapter.validate_python(value, strict=True)
    except ValidationError as err:
        kind = getattr(expected, "__name__", str(expected))
        raise ValueError(f"expected {kind} (the objective's type for it), got {value!r} ({type(value).__name__}): "
                         f"{err.errors()[0]['msg'][:1].lower()}{err.errors()[0]['msg'][1:]}") from None
    if nonfinite_numbers({key: value}):
        raise ValueError(f"expected a finite number, got {value!r}")
    return value
