"""Do fresh results reproduce reference results bit for bit? (`gspo-bench reproduce`)

Run by run (matched by folder name, `<label>-s<seed>`), every table a run writes is compared value
for value: metrics.parquet, layers.parquet and eval.parquet, less what measures the machine rather
than the run (wall times, throughput, GPU memory: `IGNORED`), and the final status. With the CPU
kernels pinned (gspo_bench.runtime.kernels) and the same `train.threads`, a run reproduces exactly on
any x86-64 CPU with AVX2; where it does not, the first difference is named: the table, the column, the
step and both values. Never imports torch.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from analysis.data.load import find_run_dirs, kernels_text
from gspo_bench.rundir.records import ProvenanceRecord, StatusRecord, as_provenance

TABLES = ("metrics.parquet", "layers.parquet", "eval.parquet")
IGNORED = ("time/", "perf/", "gpu/")  # column prefixes: the machine's speed, not the run's results


@dataclass(frozen=True)
class RunReproduction:
    run: str
    identical: bool
    difference: str  # the first difference ("" where identical)
    kernels: tuple[str | None, str | None]  # (reference, fresh): what computed each


def compared_columns(frame: pd.DataFrame) -> list[str]:
    return [c for c in frame.columns if not c.startswith(IGNORED)]


def first_difference(reference: pd.DataFrame, fresh: pd.DataFrame, table: str) -> str:
    """Where two versions of one table first differ ("" where they are equal): its shape, its columns,
    or the first (row, column) whose values differ (NaN equals NaN)."""
    ref, new = reference[compared_columns(reference)], fresh[compared_columns(fresh)]
    if list(ref.columns) != list(new.columns):
        missing, extra = sorted(set(ref.columns) - set(new.columns)), sorted(set(new.columns) - set(ref.columns))
        return f"{table}: columns differ (missing {missing}, extra {extra})"
    if len(ref) != len(new):
        return f"{table}: {len(new)} rows, the reference {len(ref)}"
    for column in ref.columns:
        a, b = ref[column].to_numpy(), new[column].to_numpy()
        same = (pd.isna(a) & pd.isna(b)) | (a == b)
        bad = np.flatnonzero(~np.asarray(same, dtype=bool))
        if len(bad):
            row = int(bad[0])
            where = f"step {ref['step'].iloc[row]}" if "step" in ref else f"row {row}"
            return (f"{table}: {column} at {where}: {_plain(b[row])!r}, the reference {_plain(a[row])!r} "
                    f"({len(bad)} of {len(a)} differ)")
    return ""


def _plain(value: object) -> object:
    """A numpy scalar as the Python value it holds (for messages)."""
    return value.item() if isinstance(value, np.generic) else value


def _status(run_dir: Path) -> tuple[str | None, int | None]:
    path = run_dir / "status.json"
    status: StatusRecord | dict = json.loads(path.read_text()) if path.is_file() else {}
    return status.get("status"), status.get("step")


def _kernels(run_dir: Path) -> str | None:
    path = run_dir / "provenance.json"
    prov: ProvenanceRecord | None = as_provenance(json.loads(path.read_text())) if path.is_file() else None
    return None if prov is None else kernels_text(prov.get("kernels"))


def compare_run(reference: Path, fresh: Path) -> RunReproduction:
    """One run of `reference` against the run of the same name in `fresh`."""
    kernels = (_kernels(reference), _kernels(fresh))
    for table in TABLES:
        have = (reference / table).is_file(), (fresh / table).is_file()
        if have != (True, True):
            if have == (False, False):
                continue
            return RunReproduction(reference.name, False, f"{table}: only in {'the reference' if have[0] else 'the fresh run'}",
                                   kernels)
        difference = first_difference(pd.read_parquet(reference / table), pd.read_parquet(fresh / table), table)
        if difference:
            return RunReproduction(reference.name, False, difference, kernels)
    if _status(reference) != _status(fresh):
        return RunReproduction(reference.name, False, f"status.json: {_status(fresh)}, the reference {_status(reference)}",
                               kernels)
    return RunReproduction(reference.name, True, "", kernels)


def compare_results(reference: Path, fresh: Path) -> list[RunReproduction]:
    """Every run of `reference` (a suite folder) against `fresh`'s run of the same name; a run missing
    from `fresh` is a difference. ValueError where `reference` holds no runs."""
    runs = find_run_dirs(Path(reference))
    if not runs:
        raise ValueError(f"{reference}: no run folders (a suite's results folder, e.g. results/quickstart)")
    found = {p.name: p for p in find_run_dirs(Path(fresh))}
    return [compare_run(run, found[run.name]) if run.name in found
            else RunReproduction(run.name, False, f"no run {run.name} in {fresh}", (_kernels(run), None)) for run in runs]
