"""Reading a suite's YAML (the file, and each `--set` value): PyYAML's safe loader, with two changes.

- A number with an exponent and no dot (`1e-3`, `2e12`) is a float, as in YAML 1.2 and on a command
  line; YAML 1.1 reads it as a string.
- A key repeated in one mapping is refused (YAML lets the last one win silently); a key that a merge
  (`<<: *base`) brings in and the mapping sets again is an override, not a repeat.
- Aliases are bounded: a document whose values, aliases expanded, number more than MAX_VALUES or
  hold more than MAX_TEXT characters of text is refused (an "alias bomb": 1.3 KB of anchors that
  expand to 10^9 values for whatever walks them, or 99,000 aliases of one 100 KB string: 9.9 GB once
  a sweep or a dump writes them out), and so is an alias that contains itself. Counting walks each
  distinct value once.

Problems are ValueError in one line: what, and where (line and column)."""

from __future__ import annotations

import re
from typing import Any

import yaml

from gspo_bench.config.shown import shown

MAX_VALUES = 100_000  # values of a suite, aliases expanded (a suite file has a few hundred)
MAX_TEXT = 1_000_000  # characters of its keys and strings, aliases expanded (a suite file has a few thousand)


class _SuiteLoader(yaml.SafeLoader):
    """The safe loader, reading `1e-3` as a float and refusing a repeated key."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        check_no_repeated_key(node)
        return super().construct_mapping(node, deep=deep)


def check_no_repeated_key(node: yaml.MappingNode) -> None:
    """ConstructorError at the second of two equal scalar keys of `node` (its own keys: a merge's are
    not among them), saying where the first is."""
    if not isinstance(node, yaml.MappingNode):  # the constructor names that problem itself
        return
    first_line: dict[tuple[str, str], int] = {}
    for key_node, _value in node.value:
        if not isinstance(key_node, yaml.ScalarNode) or key_node.tag == "tag:yaml.org,2002:merge":
            continue
        key = (key_node.tag, key_node.value)
        if key in first_line:
            raise yaml.constructor.ConstructorError(
                None, None, f"key {shown(key_node.value)} repeated (first at line {first_line[key]})", key_node.start_mark)
        first_line[key] = key_node.start_mark.line + 1


_SuiteLoader.add_implicit_resolver("tag:yaml.org,2002:float", re.compile(r"^[-+]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)[eE][-+]?[0-9]+$"),
                                   list("-+.0123456789"))


def read_yaml(text: str) -> Any:
    """`text` as YAML data; ValueError (one line) for invalid YAML or too many values once aliases are
    expanded."""
    try:
        data = yaml.load(text, Loader=_SuiteLoader)  # a SafeLoader
    except yaml.YAMLError as err:
        raise ValueError(f"not valid YAML: {yaml_problem(err, text)}") from None
    except RecursionError:
        raise ValueError("not valid YAML: nested too deeply") from None
    count, characters = expanded_size(data, {}, set())
    if count > MAX_VALUES:
        raise ValueError(f"YAML aliases expand to more than {MAX_VALUES} values ({count}): write the values out "
                         "instead of nesting aliases")
    if characters > MAX_TEXT:
        raise ValueError(f"YAML aliases expand to more than {MAX_TEXT:,} characters of text ({characters:,}): write the "
                         "values out instead of repeating a long one through aliases")
    return data


def expanded_size(node: Any, sizes: dict[int, tuple[int, int]], open_: set[int]) -> tuple[int, int]:
    """(values, characters of text) that `node` holds with its aliases expanded (each distinct list or
    dict is counted once and its count reused: `sizes`); ValueError for a list or dict that contains
    itself."""
    if not isinstance(node, list | dict):
        return 1, len(node) if isinstance(node, str) else 0
    key = id(node)
    if key in sizes:
        return sizes[key]
    if key in open_:
        raise ValueError("a YAML alias refers to a value that contains it (a cycle): write the values out")
    open_.add(key)
    items = [v for pair in node.items() for v in pair] if isinstance(node, dict) else node
    counts = [expanded_size(item, sizes, open_) for item in items]
    sizes[key] = 1 + sum(c for c, _ in counts), sum(t for _, t in counts)
    open_.discard(key)
    return sizes[key]


def yaml_problem(err: yaml.YAMLError, text: str) -> str:
    """A YAML error in one line: the problem, at line and column."""
    if isinstance(err, yaml.MarkedYAMLError) and err.problem_mark is not None:  # the scanner's, parser's, ...
        mark = err.problem_mark
        return f"{err.problem} (line {mark.line + 1}, column {mark.column + 1})"
    if isinstance(err, yaml.reader.ReaderError):  # a character YAML does not allow: no mark, a position
        line = text.count("\n", 0, err.position) + 1
        column = err.position - (text.rfind("\n", 0, err.position) + 1) + 1
        return f"{err.reason} #x{ord(err.character) if isinstance(err.character, str) else err.character:04x} " \
               f"(line {line}, column {column})"
    return " ".join(str(err).split())
