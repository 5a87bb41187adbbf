"""One spelling for the parameters of a registered thing in a suite: `params:`, under a task
(`task: {name: sort, params: {max_len: 3}}`), an objective (`{name: grpo, params: {dual_clip: 3.0}}`)
and a correction (`correction: {kind: icepop, params: {low: 0.5, high: 5.0}}`).

Suites written before read as they did: an objective's `kwargs:` and a correction's parameters beside
its `kind:` are the old spellings, rewritten to the one spelling with a one-line note
(`SpellingNote`, a FutureWarning); so are dotted paths that spell them (`--set`, `sweep:`), and the
keys of a run's recorded config.yaml when `--resume` or the report compares it
(`gspo_bench.config.changes`).
"""

from __future__ import annotations

import re
import warnings
from typing import Any

OLD_PATHS = (
    # an objective's (or a run's own) kwargs -> params
    (re.compile(r"^(?P<head>(?:suite\.)?objectives\.\d+|run)\.kwargs(?=\.|$)"), r"\g<head>.params"),
    # a correction's parameter beside its kind -> under params
    (re.compile(r"^(?P<head>(?:(?:suite\.)?objectives\.\d+|run)\.correction)\.(?!kind$|params(?:\.|$))"),
     r"\g<head>.params."),
)


class SpellingNote(FutureWarning):
    """A suite spells a registered thing's parameters the old way: read, and noted in one line."""


def note(where: str, old: str, new: str) -> None:
    warnings.warn(f"{where}: `{old}` is the old spelling of `{new}` (it still reads; new suite files write "
                  f"`{new}`: docs/suites.md)", SpellingNote, stacklevel=2)


def respell_path(path: str) -> str:
    """Dotted `path` in the one spelling (`objectives.0.kwargs.delta` -> `objectives.0.params.delta`,
    `run.correction.high` -> `run.correction.params.high`); other paths as given."""
    for pattern, replacement in OLD_PATHS:
        path = pattern.sub(replacement, path)
    return path


def respell_entry(entry: Any, where: str = "objectives") -> Any:
    """An objective entry (as a suite file holds it) in the one spelling, noting each old spelling;
    anything but a mapping as given (the schema refuses it). Both spellings at once are refused."""
    if not isinstance(entry, dict):
        return entry
    entry = dict(entry)
    if "kwargs" in entry:
        if "params" in entry:
            raise ValueError("kwargs and params: the same parameters spelled twice; write params only")
        note(where, "kwargs:", "params:")
        entry["params"] = entry.pop("kwargs")
    correction = entry.get("correction")
    if isinstance(correction, dict):
        inline = {k: v for k, v in correction.items() if k not in ("kind", "params")}
        if inline:
            if "params" in correction:
                raise ValueError(f"correction: {', '.join(inline)} beside params: write every parameter under params")
            note(f"{where}.correction", f"{', '.join(inline)} beside kind:", "params:")
            entry["correction"] = {"kind": correction.get("kind"), "params": inline}
    return entry


def respell_paths(paths: dict[str, Any], where: str) -> dict[str, Any]:
    """`paths` ({dotted path: value}: `--set` values, `sweep:` axes) with each path in the one spelling,
    noting each old one; an axis of several paths (`a,b`) is respelled path by path."""
    out = {}
    for key, value in paths.items():
        new = ",".join(part.replace(part.strip(), respell_path(part.strip())) for part in key.split(","))
        if new != key:
            note(where, key, new)
        out[new] = value
    return out
