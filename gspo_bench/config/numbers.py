"""A boolean is never a number. YAML 1.1 reads `yes`, `no`, `on`, `off`, `true` and `false` as
booleans, and Python (so pydantic's lax mode, and any function) takes True for 1: `lr: yes` would
train at lr 1.0. The rule goes by type, wherever a value meets one: every int or float of a suite
section (nested in tuples, lists, dicts and optional fields too, in fields added later as well: the
`Strict` base of the schema applies it to all), and the free-form settings (task params, objective
objective and correction params) by the type hints of the function that takes them. Everything else is
pydantic's: ints stay accepted for floats, and YAML's `1e-3` is read as a float
(`gspo_bench.config.yamlread`)."""

from __future__ import annotations

import types
import typing
from collections.abc import Callable, Mapping, Sequence
from typing import Annotated, Any, Union, get_args, get_origin

_NUMBERS = (int, float)
_SEQUENCES = (list, tuple, set, frozenset, Sequence)
_MAPPINGS = (dict, Mapping)


def _join(where: str, key: object) -> str:
    return f"{where}.{key}" if where else str(key)


def _bare(annotation: Any) -> Any:
    """`annotation` without its Annotated[...] wrapper."""
    while get_origin(annotation) is Annotated:
        annotation = get_args(annotation)[0]
    return annotation


def boolean_numbers(annotation: Any, value: Any, where: str = "") -> list[str]:
    """Where (dotted keys and indices, "" for `value` itself) `value` holds a boolean that `annotation`
    expects to be an int or a float."""
    annotation = _bare(annotation)
    if annotation in _NUMBERS:
        return [where] if isinstance(value, bool) else []
    origin, args = get_origin(annotation), get_args(annotation)
    if origin in (Union, types.UnionType):
        return _union_booleans(args, value, where)
    if origin in _SEQUENCES and isinstance(value, list | tuple):
        fixed = origin is tuple and args and args[-1] is not Ellipsis
        types_ = args if fixed else [args[0] if args else Any] * len(value)
        return [p for i, (kind, item) in enumerate(zip(types_, value, strict=False))
                for p in boolean_numbers(kind, item, _join(where, i))]
    if origin in _MAPPINGS and isinstance(value, dict) and len(args) == 2:
        return [p for key, item in value.items() for p in boolean_numbers(args[1], item, _join(where, key))]
    return []


def _union_booleans(members: tuple[Any, ...], value: Any, where: str) -> list[str]:
    """A union takes a boolean where one of its members is bool (or Any); a container goes to the
    member of its kind."""
    members = tuple(_bare(m) for m in members)
    if isinstance(value, bool):
        takes = bool in members or Any in members or not any(m in _NUMBERS for m in members)
        return [] if takes else [where]
    for member in members:
        origin = get_origin(member)
        if (origin in _SEQUENCES and isinstance(value, list | tuple)) or (origin in _MAPPINGS and isinstance(value, dict)):
            return boolean_numbers(member, value, where)
    return []


def boolean_message(places: list[str]) -> str:
    """The one line that says a boolean was given for a number, at `places` ("" for the value itself)."""
    at = ", ".join(p for p in places if p)
    return (f"expected a number, got a boolean{f' at {at}' if at else ''} (YAML reads yes, no, on, off, true and "
            "false as booleans)")


def setting_booleans(function: Callable[..., object], settings: Mapping[str, Any]) -> list[str]:
    """The keys of free-form `settings` (for `function`'s keyword arguments) holding a boolean where
    `function`'s type hints expect a number."""
    hints = typing.get_type_hints(function)
    return [p for key, value in settings.items() for p in boolean_numbers(hints.get(key, Any), value, key)]


def check_settings(function: Callable[..., object], settings: Mapping[str, Any], what: str = "") -> None:
    """ValueError naming the keys of `settings` (`what`, when given) that hold a boolean for a number."""
    places = setting_booleans(function, settings)
    if places:
        raise ValueError(f"{what}: {boolean_message(places)}" if what else boolean_message(places))
