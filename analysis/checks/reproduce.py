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
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import pandas as pd

from analysis.data.load import RunFileError, find_run_dirs, is_run_dir, kernels_text, read_file
from analysis.data.plugins import plugin_difference
from gspo_bench.rundir.folder import status_problem
from gspo_bench.rundir.records import ProvenanceRecord, StatusRecord, as_provenance

TABLES = ("metrics.parquet", "layers.parquet", "eval.parquet")
IGNORED = ("time/", "perf/", "gpu/")  # column prefixes: the machine's speed, not the run's results


@dataclass(frozen=True)
class RunReproduction:
    run: str
    identical: bool
    difference: str  # the first difference ("" where identical)
    kernels: tuple[str | None, str | None]  # (reference, fresh): what computed each
    added: tuple[str, ...] = ()  # "table: column" the fresh run records and the reference does not (newer measurements)


def compared_columns(frame: pd.DataFrame) -> list[str]:
    return [c for c in frame.columns if not c.startswith(IGNORED)]


def first_difference(reference: pd.DataFrame, fresh: pd.DataFrame, table: str) -> str:
    """Where two versions of one table first differ ("" where they are equal): its shape, a column the
    reference records and the fresh one lacks, or the first (row, column) of the reference's columns whose
    values differ (NaN equals NaN). Columns only the fresh table has (measurements added since the reference
    was made) are not compared: `added_columns` names them."""
    ref, new = reference[compared_columns(reference)], fresh[compared_columns(fresh)]
    missing = sorted(set(ref.columns) - set(new.columns))
    if missing:
        return f"{table}: columns differ (missing {missing})"
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


def added_columns(reference: pd.DataFrame, fresh: pd.DataFrame, table: str) -> list[str]:
    """The compared columns only `fresh` records, as "table: column"."""
    return [f"{table}: {c}" for c in compared_columns(fresh) if c not in set(reference.columns)]


def _plain(value: object) -> object:
    """A numpy scalar as the Python value it holds (for messages)."""
    return value.item() if isinstance(value, np.generic) else value


def _status(run_dir: Path) -> tuple[str | None, int | None]:
    """(status, step) of a run's status.json, read as `analysis.data.load` reads it: RunFileError (a
    ValueError) naming the file, and so the run, where it is damaged."""
    path = run_dir / "status.json"
    status: StatusRecord | dict = read_file(path, _json, dict)
    problem = status_problem(status)
    if problem:
        raise RunFileError(f"{path}: {problem}")
    return status.get("status"), status.get("step")


def _provenance(run_dir: Path) -> dict:
    path = run_dir / "provenance.json"
    return json.loads(path.read_text()) if path.is_file() else {}


def _kernels(run_dir: Path) -> str | None:
    found = read_file(run_dir / "provenance.json", _json, dict, optional=True)
    prov: ProvenanceRecord | None = as_provenance(found) if found is not None else None
    return kernels_text(prov.get("kernels")) if prov is not None else None


def _json(path: Path) -> object:
    return json.loads(path.read_text())


def _table(path: Path) -> pd.DataFrame:
    return read_file(path, pd.read_parquet)


def compare_run(reference: Path, fresh: Path) -> RunReproduction:
    """One run of `reference` against the run of the same name in `fresh`."""
    kernels = (_kernels(reference), _kernels(fresh))
    plugin = plugin_difference(_provenance(reference), _provenance(fresh))
    if plugin:  # other code ran: that is the difference to name
        return RunReproduction(reference.name, False, plugin, kernels)
    added: list[str] = []
    for table in TABLES:
        have = (reference / table).is_file(), (fresh / table).is_file()
        if have != (True, True):
            if have == (False, False):
                continue
            return RunReproduction(reference.name, False, f"{table}: only in {'the reference' if have[0] else 'the fresh run'}",
                                   kernels)
        ref_table, fresh_table = _table(reference / table), _table(fresh / table)
        difference = first_difference(ref_table, fresh_table, table)
        if difference:
            return RunReproduction(reference.name, False, difference, kernels)
        added += added_columns(ref_table, fresh_table, table)
    if _status(reference) != _status(fresh):
        return RunReproduction(reference.name, False, f"status.json: {_status(fresh)}, the reference {_status(reference)}",
                               kernels, tuple(added))
    return RunReproduction(reference.name, True, "", kernels, tuple(added))


def compare_results(reference: Path, fresh: Path) -> list[RunReproduction]:
    """Every run of `reference` (a suite folder) against `fresh`'s run of the same name; a run missing
    from `fresh` is a difference. A tuned suite's trial runs (`tuning/<trial>`) and its choice
    (`tuning/chosen.json`) are compared too. ValueError where `reference` holds no runs."""
    runs = {p.name: p for p in find_run_dirs(Path(reference))} | trial_runs(Path(reference))
    if not runs:
        raise ValueError(f"{reference}: no run folders (a suite's results folder, e.g. results/quickstart)")
    found = {p.name: p for p in find_run_dirs(Path(fresh))} | trial_runs(Path(fresh))
    compared = [replace(compare_run(run, found[name]), run=name) if name in found
                else RunReproduction(name, False, f"no run {name} in {fresh}", (_kernels(run), None))
                for name, run in runs.items()]
    return compared + compare_choice(Path(reference), Path(fresh))


def trial_runs(suite_dir: Path) -> dict[str, Path]:
    """`tuning/<trial>-s<seed>` -> folder of each trial run of a tuned suite's results folder ({} for others)."""
    from gspo_bench.config.tuning import TRIALS_FOLDER

    trials = suite_dir / TRIALS_FOLDER
    if not (suite_dir / "suite.yaml").is_file() or not trials.is_dir():
        return {}
    return {f"{TRIALS_FOLDER}/{p.name}": p for p in sorted(trials.iterdir()) if p.is_dir() and is_run_dir(p)}


def compare_choice(reference: Path, fresh: Path) -> list[RunReproduction]:
    """chosen.json of a tuned suite's reference against the fresh one's (the same trials chose the same
    settings), its first difference named by key and both values; a chosen.json in one of them alone
    is a difference too."""
    from gspo_bench.config.tuning import TRIALS_FOLDER

    name = f"{TRIALS_FOLDER}/chosen.json"
    have = (reference / name).is_file(), (fresh / name).is_file()
    if have == (False, False):
        return []
    if have != (True, True):
        where = fresh if have[0] else reference
        return [RunReproduction(name, False, f"no {name} in {where}", (None, None))]
    difference = json_difference(read_file(reference / name, _json, dict), read_file(fresh / name, _json, dict))
    return [RunReproduction(name, not difference, f"{name}: {difference}" if difference else "", (None, None))]


def json_difference(reference: dict, fresh: dict) -> str:
    """The first key (dotted: `chosen.gspo.settings.lr`, `trials.3.score`) whose value differs between two
    JSON records, with both values; "" where they are equal."""
    from gspo_bench.config.changes import flatten

    ref, new = flatten(reference), flatten(fresh)
    for key in dict.fromkeys([*ref, *new]):
        if key not in ref or key not in new or ref[key] != new[key]:
            shown = {side: repr(values[key]) if key in values else "absent" for side, values in (("ref", ref), ("new", new))}
            return f"{key}: {shown['new']}, the reference {shown['ref']}"
    return ""
