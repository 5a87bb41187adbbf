"""An import plan -> OUT/<name>/, a suite of run folders the analysis reads like the harness's own.

Every run's files are read and checked before anything is written; the suite is written into a hidden
stage folder beside OUT/<name> (OUT/.<name>.import-*, locked while the import lives) and renamed into
place whole, so a refused or failed import leaves nothing behind; one killed outright leaves its stage,
which the next import into OUT removes (the report never reads hidden folders). Each run folder holds metrics.parquet (every column of a run folder: the mapped ones as logged,
the rest NaN, i.e. not measured), config.yaml (arm, seed, objective; the suite with its `steps` budget
and declared family), status.json (`done`) and provenance.json (`imported`: the library, the mapping
file and its sha256, every source file with its sha256, which column each key filled, the columns not
measured, the keys the mapping did not know, the compute rule)."""

from __future__ import annotations

import fcntl
import hashlib
import os
import platform
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import yaml

from gspo_bench.imports.mapping import MAPPABLE_COLUMNS, Mapping, load_mapping
from gspo_bench.imports.plan import Compute, ImportedRun, Plan, load_plan
from gspo_bench.imports.series import Series, SeriesError, build_series, tokens_per_step
from gspo_bench.imports.sources import Record, SourceError, read_path, sha256
from gspo_bench.rundir.folder import (
    REQUIRED_COLUMNS,
    SCHEMA_VERSION,
    RunDir,
    atomic_write_parquet,
    git_state,
    now,
    package_versions,
    share,
)
from gspo_bench.rundir.names import run_folder_name


class ImportError_(ValueError):
    """An import that cannot be done; the message says which run and file."""


@dataclass(frozen=True)
class ReadRun:
    run: ImportedRun
    metrics: pd.DataFrame
    sources: list[dict[str, Any]]  # {"path", "sha256", "bytes"}
    unknown: tuple[str, ...]
    not_measured: list[str]  # the columns the mapping leaves out, and those it maps that the files never logged

    def summary(self) -> str:
        """What `gspo-bench import` says of the run: its steps, the files they came from, keys left unmapped."""
        unknown = f"; keys not in the mapping: {', '.join(self.unknown)}" if self.unknown else ""
        return (f"{self.run.arm} seed {self.run.seed}: {len(self.metrics)} steps from "
                f"{', '.join(Path(s['path']).name for s in self.sources)}{unknown}")


def read_run(run: ImportedRun, mapping: Mapping, compute: Compute, base: Path) -> ReadRun:
    """One run's files -> its metrics table; ImportError_ naming the run and the file."""
    who = f"run {run.arm!r} seed {run.seed}"
    try:
        files: list[Path] = []
        records: list[Record] = []
        for name in run.files:
            found, logged = read_path(base / name)
            files += found
            records += logged
        series = build_series(records, mapping, run.resumed)
        metrics = metrics_table(series, mapping, compute, run)
    except (SourceError, SeriesError) as err:
        raise ImportError_(f"{who}: {err}") from None
    sources = [{"path": str(f.resolve()), "sha256": sha256(f), "bytes": f.stat().st_size} for f in files]
    not_measured = [c for c in mapping.not_measured() + list(series.absent) if c in metrics.columns]
    return ReadRun(run, metrics, sources, series.unknown, sorted(not_measured, key=list(metrics.columns).index))


def metrics_table(series: Series, mapping: Mapping, compute: Compute, run: ImportedRun) -> pd.DataFrame:
    """The run's rows: identity, the mapped columns as logged, tokens and FLOPs per step and so far."""
    table = series.table
    if compute.tokens_per_step is not None:
        tokens = np.full(len(table), compute.tokens_per_step)
    elif compute.flops_per_token is not None or (mapping.tokens is not None and not series.tokens.empty):
        tokens = tokens_per_step(series, mapping, table.index)
    else:
        tokens = np.full(len(table), np.nan)
    with np.errstate(over="ignore"):  # an overflow is refused below, naming its step
        flops = tokens * compute.flops_per_token if compute.flops_per_token is not None else \
            np.full(len(table), compute.flops_per_step)
        cum_tokens, cum_flops = np.cumsum(tokens), np.cumsum(flops)
    if np.isnan(flops).any():  # the x-axis of every figure: a gap would cut every curve there
        missing = table.index[np.isnan(flops)].tolist()
        raise SeriesError(f"no tokens logged at step {missing[0]} ({len(missing)} steps in all) to charge "
                          "flops_per_token to: give compute.tokens_per_step or compute.flops_per_step")
    for name, so_far, each in (("tokens", cum_tokens, tokens), ("FLOPs", cum_flops, flops)):
        if np.isinf(so_far).any():  # an overflow: a figure this large is a wrong one, not compute
            at = int(np.argmax(np.isinf(so_far)))
            raise SeriesError(f"compute reaches {so_far[at]:g} {name} at step {table.index[at]} ({each[at]:g} in that "
                              "step): check the plan's compute and the tokens logged")
    frame = table.reset_index()
    frame.insert(1, "objective", run.objective or run.arm)
    frame.insert(2, "label", run.arm)
    frame.insert(3, "seed", run.seed)
    frame.insert(4, "replay", False)
    frame["compute/tokens"] = tokens
    frame["compute/cum_tokens"] = cum_tokens
    frame["compute/flops"] = flops
    frame["compute/cum_flops"] = cum_flops
    return frame.reindex(columns=list(dict.fromkeys([*REQUIRED_COLUMNS, *MAPPABLE_COLUMNS, *frame.columns])))


def suite_section(plan: Plan, mapping: Mapping, steps: int) -> dict[str, Any]:
    """The suite as every run's config.yaml records it (the same in each: analysis.data.suites compares them)."""
    section: dict[str, Any] = {"name": plan.name, "budget": {"kind": "steps", "value": steps},
                               "imported": {"library": mapping.library, "mapping": plan.mapping}}
    if plan.analysis is not None:
        section["analysis"] = plan.analysis.model_dump(mode="json")
    return section


def provenance(read: ReadRun, mapping: Mapping, mapping_file: Path, mapping_sha: str, plan: Plan) -> dict[str, Any]:
    return {
        "schema_version": SCHEMA_VERSION,
        "imported": {"library": mapping.library, "mapping": str(mapping_file), "mapping_sha256": mapping_sha,
                     "sources": read.sources, "columns": dict(mapping.columns),
                     "tokens": mapping.tokens.model_dump() if mapping.tokens else None,
                     "not_measured": read.not_measured, "unknown_keys": list(read.unknown),
                     "compute": plan.compute.model_dump(), "resumed": read.run.resumed, "at": now()},
        "git": git_state(Path(__file__).resolve().parent.parent.parent),
        "packages": package_versions(("gspo-bench", "pandas", "pyarrow", "tensorboard")),
        "python": platform.python_version(),
        "device": f"imported from {mapping.library}",
        "start": None,
        "end": None,
    }


def write_run(folder: Path, read: ReadRun, suite: dict[str, Any], prov: dict[str, Any]) -> None:
    run_dir = RunDir(folder)
    run = read.run
    config = {"run": {"label": run.arm, "arm": run.arm, "objective": run.objective or run.arm,
                      "seed": run.seed, "replay": False}, "suite": suite}
    run_dir.write_text("config.yaml", yaml.safe_dump(config, sort_keys=False))
    run_dir.write_json("provenance.json", prov)
    atomic_write_parquet(folder / "metrics.parquet", read.metrics)  # every column of a run folder (metrics_table)
    run_dir.write_status("done", f"imported from {prov['imported']['library']}", step=int(read.metrics["step"].max()))


def import_plan(plan_file: Path, out: Path) -> tuple[Path, list[ReadRun]]:
    """Read every run of the plan, then write OUT/<name>/ whole; ImportError_ (or PlanError, MappingError)
    in one line, with nothing written."""
    plan_file = Path(plan_file)
    plan = load_plan(plan_file)
    mapping, mapping_file, mapping_sha = load_mapping(plan.mapping, base=plan_file.parent)
    target = Path(out) / plan.name
    if target.exists():
        raise ImportError_(f"{target} already exists: import under another name, or move it away")
    reads = [read_run(run, mapping, plan.compute, plan_file.parent) for run in plan.runs]
    suite = suite_section(plan, mapping, max(len(r.metrics) for r in reads))
    target.parent.mkdir(parents=True, exist_ok=True)
    stage, held = new_stage(target.parent, plan.name)
    described = {"name": plan.name, "objectives": [{"name": arm} for arm in plan.arms()], "imported": suite["imported"]}
    if plan.analysis is not None:
        described["analysis"] = suite["analysis"]
    suite_text = yaml.safe_dump(described, sort_keys=False)
    try:
        for read in reads:
            prov = provenance(read, mapping, mapping_file, mapping_sha, plan)
            prov["suite_sha256"] = hashlib.sha256(suite_text.encode()).hexdigest()  # as `run` records its suite file
            write_run(stage / run_folder_name(read.run.arm, read.run.seed), read, suite, prov)
        (stage / "suite.yaml").write_text(suite_text)
        share(stage)
        stage.rename(target)
    except BaseException:
        shutil.rmtree(stage, ignore_errors=True)
        raise
    finally:
        os.close(held)  # the lock of the stage (now the suite folder) is released with it
    return target, reads


STAGE = ".import-"  # in the name of a stage folder: OUT/.<name>.import-XXXXXXXX


def _lock(folder: Path, wait: bool = False) -> int | None:
    """An open descriptor of `folder` holding its exclusive flock (the OS releases it when the process dies,
    kill -9 included), or None where another process holds it and `wait` is False."""
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
    except BlockingIOError:
        os.close(fd)
        return None
    return fd


def new_stage(root: Path, name: str) -> tuple[Path, int]:
    """A new stage folder under `root` and the descriptor holding its lock, after removing every stage folder
    there that no live import holds (an import killed before its rename leaves its stage behind). `root`
    itself is locked meanwhile, so no import can see another's stage before that one holds it."""
    guard = _lock(root, wait=True)
    assert guard is not None
    try:
        for old in sorted(root.glob(f".*{STAGE}*")):
            if old.is_dir() and not old.is_symlink() and (fd := _lock(old)) is not None:
                try:
                    shutil.rmtree(old)
                finally:
                    os.close(fd)
        stage = Path(tempfile.mkdtemp(prefix=f".{name}{STAGE}", dir=root))
        held = _lock(stage)
        assert held is not None  # nobody else knows it yet
        return stage, held
    finally:
        os.close(guard)
