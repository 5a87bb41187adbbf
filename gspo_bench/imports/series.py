"""Records of a run's files -> one row per logged step of the columns a mapping fills, and the compute of
each step. A key logged at a step not after its previous one (steps out of order, or repeated: a run
resumed from a checkpoint logs again the steps after it) is refused, naming the key, the steps and the
file, unless the run is declared `resumed`: then the values logged after the restart replace those from
the checkpoint on (what TensorBoard shows too). Keys the mapping neither uses nor ignores are listed."""

from __future__ import annotations

import bisect
from dataclasses import dataclass

import numpy as np
import pandas as pd

from gspo_bench.imports.mapping import Mapping
from gspo_bench.imports.sources import Record


class SeriesError(ValueError):
    """A run's steps that cannot be put in order; the message names the key and the file."""


@dataclass(frozen=True)
class Series:
    table: pd.DataFrame  # index: step (ascending); one column per mapped column, NaN where not logged
    tokens: pd.Series  # the mapping's tokens key by step (NaN where not logged); empty without one
    unknown: tuple[str, ...]  # keys of the files the mapping neither uses nor ignores
    absent: tuple[str, ...]  # mapped columns whose key the files never logged (TRL's `kl` with beta = 0)


def by_key(records: list[Record], mapping: Mapping, resumed: bool) -> tuple[dict[str, dict[int, float]], list[str]]:
    """{key: {step: value}} of the keys the mapping uses, and the keys it does not know. Linear in the
    records: each key's steps are kept in ascending order as they are logged, so its last step is the end
    of its list, and a restart cuts the list at the restarted step (found by bisection)."""
    used = set(mapping.columns.values()) | ({mapping.tokens.key} if mapping.tokens else set())
    steps: dict[str, list[int]] = {}
    values: dict[str, list[float]] = {}
    unknown: dict[str, None] = {}
    for record in records:
        key = mapping.key_of(record.key)
        if key not in used:
            if not mapping.known(key):
                unknown[key] = None
            continue
        logged, logged_values = steps.setdefault(key, []), values.setdefault(key, [])
        if logged and record.step <= logged[-1]:
            if not resumed:
                raise SeriesError(f"{record.where}: {key} logged at step {record.step} after step {logged[-1]} (steps "
                                  "out of order or repeated: a resumed run? declare it `resumed: true` to keep the "
                                  "values logged after the restart)")
            cut = bisect.bisect_left(logged, record.step)
            del logged[cut:], logged_values[cut:]
        logged.append(record.step)
        logged_values.append(record.value)
    return {key: dict(zip(steps[key], values[key])) for key in steps}, sorted(unknown)


def build_series(records: list[Record], mapping: Mapping, resumed: bool = False) -> Series:
    """One row per step at which some mapped column was logged; with `mapping.rows`, one row per step at
    which that column's key was logged, each other column the mean of what its key logged from that step
    up to the next row's (TRL logs the reward once per generation and the clip fraction once per
    optimizer step: a row is one RL step, its clip fraction over all its updates). A NaN or inf logged
    stays in its row's mean."""
    values, unknown = by_key(records, mapping, resumed)
    columns = {column: pd.Series(values.get(key, {}), dtype=float) for column, key in mapping.columns.items()}
    if mapping.rows is not None:
        steps = sorted(columns[mapping.rows].index)
        logged = sorted(key for key in set(mapping.columns.values()) if values.get(key))
        if not steps and logged:
            raise SeriesError(f"{mapping.columns[mapping.rows]} was never logged, though {', '.join(logged)} "
                              f"{'was' if len(logged) == 1 else 'were'}: a row "
                              f"is a step that logs it (the mapping's `rows: {mapping.rows}`), so there is none to "
                              "import; where the library logs it under another name, a mapping file of your own can "
                              "name that key (docs/import.md, Mappings)")
        columns = {column: by_row(logged, steps) for column, logged in columns.items()}
    else:
        steps = sorted(set().union(*(set(s.index) for s in columns.values())))
    if not steps:
        raise SeriesError(f"none of the mapping's keys was logged ({', '.join(sorted(set(mapping.columns.values())))})")
    table = pd.DataFrame({c: s.reindex(steps) for c, s in columns.items()}, index=pd.Index(steps, name="step"))
    tokens = pd.Series(values.get(mapping.tokens.key, {}), dtype=float) if mapping.tokens else pd.Series(dtype=float)
    absent = tuple(column for column, key in mapping.columns.items() if not values.get(key))
    return Series(table, tokens, tuple(unknown), absent)


def by_row(logged: pd.Series, steps: list[int]) -> pd.Series:
    """`logged` (by step) folded onto the row steps: each value to the last row step at or before it (values
    before the first row are left out), the mean of each row's values (NaN and inf propagate)."""
    if logged.empty or not steps:
        return pd.Series(dtype=float)
    row = np.asarray(steps)[np.maximum(np.searchsorted(steps, logged.index, side="right") - 1, 0)]
    kept = logged.index >= steps[0]
    return logged[kept].groupby(row[kept]).agg(lambda v: float(np.mean(v.to_numpy())))


def tokens_per_step(series: Series, mapping: Mapping, steps: pd.Index) -> np.ndarray:
    """Tokens of each step of `steps` from the logged tokens key: its value, or for a cumulative key the
    growth since the previous row (the first row: its value, counted from zero)."""
    if mapping.tokens is None or series.tokens.empty:
        raise SeriesError("no tokens were logged" + (f" (key {mapping.tokens.key})" if mapping.tokens else
                                                     " (the mapping names no tokens key)"))
    check_tokens(series.tokens, mapping.tokens.key, mapping.tokens.cumulative)
    logged = series.tokens.reindex(steps.union(series.tokens.index)).sort_index()
    if not mapping.tokens.cumulative:
        return logged.reindex(steps).to_numpy(dtype=float)
    so_far = logged.ffill().fillna(0.0).reindex(steps).to_numpy(dtype=float)
    return np.diff(so_far, prepend=0.0)


def check_tokens(tokens: pd.Series, key: str, cumulative: bool) -> None:
    """SeriesError naming the key, the step and the value where the logged tokens (by step) cannot be
    compute: infinite or negative, or, for a count so far, lower than the count before it (a count that
    restarted: two runs logged into one place). NaN (a step that logged none) is left to the caller."""
    values = tokens.to_numpy(dtype=float)
    bad = np.isinf(values) | (values < 0)
    if bad.any():
        at = int(np.argmax(bad))
        raise SeriesError(f"{key} is {values[at]:g} at step {tokens.index[at]}: tokens must be a finite number, 0 or "
                          "more (give compute.tokens_per_step to set the tokens of a step without them)")
    if cumulative:
        logged = values[~np.isnan(values)]
        steps = tokens.index[~np.isnan(values)]
        falls = np.flatnonzero(np.diff(logged) < 0)
        if len(falls):
            at = int(falls[0]) + 1
            raise SeriesError(f"{key} falls from {logged[at - 1]:g} to {logged[at]:g} at step {steps[at]}: a count of "
                              "tokens so far never falls (did the count restart? import each run on its own, or give "
                              "compute.tokens_per_step)")
